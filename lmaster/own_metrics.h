// What lmaster tells its outputs of its own sensor `lmaster` (units, kinds, descriptions), from
// the catalog master_catalog.h that make-dashboard reads too.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "metric.h"

namespace fructosa::master {

class AgentRegistry;
class MetricsEndpoint;
class Journal;
class MemoryGuard;
class MetricInfoStore;
class OutputRunner;
class ZapHandler;

// The catalog's fixed keys; its `*.` ones once per output in `output_names`; its `agent.*.` ones
// as the columns of the HDF5 output's lmaster_agents table (the per-host keys themselves are
// AgentRegistry::describe's, once an agent is known).
void describe_master_metrics(MetricInfoStore& infos, const std::vector<std::string>& output_names);

// Where the values of the `lmaster` sensor come from, at one of its readings.
struct MasterMetricSources {
  std::uint64_t received_points = 0;
  std::uint64_t received_batches = 0;
  std::uint64_t agents = 0;  // heard from since the last reading
  std::uint64_t turned_away_batches = 0;
  const AgentRegistry* registry = nullptr;
  const ZapHandler* curve = nullptr;  // null without CURVE
  const std::vector<std::unique_ptr<OutputRunner>>* runners = nullptr;
  const Journal* journal = nullptr;   // null without a journal
  const MemoryGuard* memory = nullptr;
};

// The `lmaster` sensor's values (the catalog's keys) into `sample`.
void add_master_metrics(Sample& sample, const MasterMetricSources& from);
// The `lmaster` sensor's sample of `host` at `when`.
Sample master_metrics_sample(const std::string& host, const std::string& sensor,
                             std::chrono::system_clock::time_point when, const MasterMetricSources& from);
// The `lmaster` sensor's readings, at every multiple of stats_interval on the wall clock: each
// goes to the outputs like an agent's sample and, with [lmaster] metrics_listen, to the
// endpoint a Prometheus scrape reads (metrics_endpoint.h).
class OwnStats {
 public:
  // Serves `metrics_listen` (HOST:PORT) unless it is empty; throws std::runtime_error naming
  // the address when it cannot.
  OwnStats(std::string host, double interval, const std::string& metrics_listen);
  ~OwnStats();
  OwnStats(const OwnStats&) = delete;
  OwnStats& operator=(const OwnStats&) = delete;

  // When the next reading is due.
  std::chrono::system_clock::time_point next() const { return next_; }
  // The reading due at next() (published to the endpoint); the one after is scheduled.
  Sample take(const MasterMetricSources& from);
  // Publishes a reading now without scheduling (at start: a scrape gets an answer at once).
  void publish(const MasterMetricSources& from);
  // The endpoint's URL; empty without metrics_listen.
  std::string metrics_url() const;

 private:
  Sample reading(std::chrono::system_clock::time_point when, const MasterMetricSources& from) const;

  std::string host_;
  double interval_;
  std::chrono::system_clock::time_point next_;
  std::unique_ptr<MetricsEndpoint> endpoint_;  // null without metrics_listen
};

// The next multiple of `interval` seconds of the wall clock: lmaster's stats are timestamped on
// those, like an agent's samples.
std::chrono::system_clock::time_point next_multiple_of(double interval);

}  // namespace fructosa::master
