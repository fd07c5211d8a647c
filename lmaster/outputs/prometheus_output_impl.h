// The Prometheus output's internals (included only by lmaster/outputs/prometheus_*.cpp):
// PrometheusOutput, whose member functions are defined by responsibility:
// prometheus_output.cpp (options, construction, reopen, write: order, requests, what a failure
// leaves undelivered), prometheus_series.cpp (names, the series cache) and
// prometheus_transport.cpp (the libcurl handle and one POST). The encoding (labels, the WriteRequest, snappy) is prometheus_encoding.cpp.
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "flat_hash_map.h"
#include "prometheus_output.h"

namespace fructosa::master::prometheus {

using Clock = std::chrono::steady_clock;

// At most one log line per period for one kind of trouble; the lines held back are counted,
// so that a broken server does not flood the log at the rate of the retries.
class LogLimiter {
 public:
  bool ready(std::uint64_t& held_back) {
    auto now = Clock::now();
    if (written_ && now - last_ < std::chrono::seconds(10)) {
      ++held_back_;
      return false;
    }
    written_ = true;
    last_ = now;
    held_back = held_back_;
    held_back_ = 0;
    return true;
  }

 private:
  bool written_ = false;
  Clock::time_point last_;
  std::uint64_t held_back_ = 0;
};

struct Response {
  long status = 0;
  std::string body;
};

// The server could not be reached or did not answer (connection refused, timeout, TLS).
struct Unreachable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `text` with every invalid UTF-8 sequence replaced by U+FFFD (label values must be UTF-8).
std::string valid_utf8(std::string_view text);

class PrometheusOutput final : public Output {
 public:
  PrometheusOutput(const Options& options, const MetricInfoStore& infos);
  ~PrometheusOutput() override;
  PrometheusOutput(const PrometheusOutput&) = delete;
  PrometheusOutput& operator=(const PrometheusOutput&) = delete;

  std::string name() const override { return "prometheus"; }
  void write(std::span<const Sample> samples) override;
  double flush_period() const override { return flush_interval_; }
  std::size_t batch_samples() const override { return samples_per_request_; }
  void reopen() override;

 private:
  // What the catalog gives a (sensor, key): its metric name, once known.
  struct Name {
    std::string metric;
    bool from_catalog = false;
    bool warned = false;  // logged as sent without the catalog's unit and kind
  };
  // A series (its label set), kept across writes: one cache line, the fields collect_points
  // reads first.
  struct alignas(64) Series {
    std::int64_t sent_ms;          // newest point sent (or given up)
    std::int64_t last_ms;          // newest point taken in write number `write`, or sent_ms
    std::uint32_t layers;          // points taken in that write
    std::uint32_t last_sample;     // the sample of that write that gave the newest point + 1
    std::uint32_t write;
    std::uint32_t labels_size;
    std::uint64_t labels_at;       // its encoded labels in labels_
    std::uint64_t hash;            // of its labels
    bool from_catalog;
  };
  struct Point {
    std::uint32_t sample;
    std::uint32_t series;
    std::uint32_t layer;
    std::int64_t ms;
    double value;
  };
  enum class Sent { done, temporary_failure };
  static constexpr std::uint32_t kNotFinal = 0x80000000u;  // in found_ and by_source_

  // prometheus_output.cpp
  std::size_t collect_points(std::span<const Sample> samples);
  Sent send_points(std::span<const Point> points, std::string& failure);
  void drop(std::span<const Point> points, const std::string& why);

  // prometheus_series.cpp
  Name& name_of(const std::string& sensor, const std::string& key);
  void warn_unknown(const Sample& sample, const std::string& key);
  void find_series(std::span<const Sample> samples);
  std::uint32_t add_series(const Sample& sample, const std::string& key, std::uint64_t source);
  std::string_view labels_of(const Series& series) const {
    return std::string_view(labels_.data() + series.labels_at, series.labels_size);
  }
  std::string shown_labels(const Series& series) const;
  void settle(std::span<const Point> points);
  void forget_old_series();

  // prometheus_transport.cpp
  void open_handle();
  void close_handle();
  Response post(const std::string& body);
  static std::size_t collect(void* data, std::size_t size, std::size_t count, void* self);

  const MetricInfoStore& infos_;
  std::string url_;
  std::string shown_url_;  // without user and password
  std::size_t samples_per_request_;
  double flush_interval_;
  long timeout_ms_;
  std::string credentials_file_, user_, password_;
  std::string bearer_token_file_, bearer_token_;
  std::string ca_file_;
  bool verify_certificates_;
  Clock::time_point catalog_deadline_;

  CURL* curl_ = nullptr;
  curl_slist* headers_ = nullptr;
  char curl_error_[CURL_ERROR_SIZE] = {};
  std::string response_body_;

  std::unordered_map<std::string, Name> names_;  // "<sensor>\x1f<key>"
  std::string name_lookup_;                      // names_'s key being looked up (its memory reused)
  // Every series met (not sent for kForgetAfterMs: forgotten), found by the hash of its labels,
  // and, without building them, by the hash of what gives them (host, sensor, job, the
  // sample's item labels, key): its "source". Several sources may give one series.
  std::vector<Series> series_;
  std::vector<char> labels_;
  FlatHashMap<std::uint32_t> by_labels_;
  FlatHashMap<std::uint32_t> by_source_;
  std::size_t series_after_prune_ = 0;
  std::int64_t newest_ms_ = 0;
  std::uint32_t write_count_ = 0;

  // The current write(): reused from call to call.
  std::vector<std::uint64_t> sources_;  // per point
  std::vector<std::uint32_t> found_;    // per point: its series
  std::vector<Point> points_;
  std::vector<Point> ordered_;
  std::vector<PrometheusLabel> scratch_labels_;
  std::string scratch_bytes_;
  PrometheusRequest request_;

  LogLimiter refused_log_, unknown_log_;
};

}  // namespace fructosa::master::prometheus
