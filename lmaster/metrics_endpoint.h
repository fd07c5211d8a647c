// [lmaster] metrics_listen: an HTTP endpoint serving GET /metrics (metrics_exposition.h) for a
// Prometheus scrape, on its own thread, so that a slow or hostile client never delays the
// master's loop. The master publishes the text at every stats_interval; a scrape gets the last
// one. Requests are bounded (8 KiB of headers, no body), idle connections closed after 30 s,
// at most 64 at once. Boost.Beast stays in metrics_endpoint.cpp.
#pragma once

#include <memory>
#include <string>

namespace fructosa::master {

class MetricsEndpoint {
 public:
  // Listens on `listen` (HOST:PORT; a host name is resolved, port 0 picks a free port). Throws
  // std::runtime_error naming the address when it cannot.
  explicit MetricsEndpoint(const std::string& listen);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // http://ADDRESS:PORT/metrics, the port the one bound.
  std::string url() const;
  // What the next scrapes get.
  void publish(std::string exposition);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fructosa::master
