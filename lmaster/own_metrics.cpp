#include "own_metrics.h"

#include <string_view>

#include "agent_registry.h"
#include "journal.h"
#include "master_catalog.h"
#include "memory_guard.h"
#include "metrics_endpoint.h"
#include "metrics_exposition.h"
#include "output.h"
#include "output_runner.h"
#include "zap_handler.h"

namespace fructosa::master {

void describe_master_metrics(MetricInfoStore& infos, const std::vector<std::string>& output_names) {
  constexpr std::string_view kAgentPrefix = "agent.*.";
  for (const auto& entry : master_catalog().entries()) {
    MetricInfo info{std::string(to_string(entry.unit)), entry.kind, entry.description};
    if (entry.pattern.starts_with(kAgentPrefix)) {  // rows of their own in HDF5 (hdf5_output.cpp)
      infos.remember(kAgentsTableName, entry.pattern.substr(kAgentPrefix.size()), info);
    } else if (!entry.pattern.starts_with("*.")) {
      infos.remember(kMasterSensorName, entry.pattern, info);
    } else {
      for (const auto& output : output_names) infos.remember(kMasterSensorName, output + entry.pattern.substr(1), info);
    }
  }
}

Sample master_metrics_sample(const std::string& host, const std::string& sensor,
                             std::chrono::system_clock::time_point when, const MasterMetricSources& from) {
  Sample sample;
  sample.host = host;
  sample.sensor = sensor;
  sample.time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
  add_master_metrics(sample, from);
  return sample;
}

std::chrono::system_clock::time_point next_multiple_of(double interval_seconds) {
  auto interval = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(interval_seconds));
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>((now / interval + 1) * interval));
}

void add_master_metrics(Sample& sample, const MasterMetricSources& from) {
  auto add = [&](std::string key, double value) { sample.metrics.push_back({std::move(key), value}); };
  add("received", static_cast<double>(from.received_points));
  add("batches", static_cast<double>(from.received_batches));
  add("agents", static_cast<double>(from.agents));
  from.registry->add_metrics(sample);
  if (from.curve) {
    CurveCounters counters = from.curve->counters();
    add("curve.accepted", static_cast<double>(counters.accepted));
    add("curve.rejected", static_cast<double>(counters.rejected));
    add("curve.failed_handshakes", static_cast<double>(counters.failed_handshakes));
  }
  for (const auto& runner : *from.runners) {
    RunnerStats stats = runner->stats();
    add(runner->name() + ".sent", static_cast<double>(stats.sent));
    add(runner->name() + ".retried", static_cast<double>(stats.retried));
    add(runner->name() + ".dropped", static_cast<double>(stats.dropped));
    add(runner->name() + ".queued", static_cast<double>(stats.queued_points));
  }
  if (from.journal) add("journal.bytes", static_cast<double>(from.journal->bytes()));
  add("memory.rss", static_cast<double>(MemoryGuard::resident_bytes()));
  add("memory.holding", from.memory->holding() ? 1 : 0);
  add("memory.holds", static_cast<double>(from.memory->holds()));
  add("memory.turned_away", static_cast<double>(from.turned_away_batches));
}

OwnStats::OwnStats(std::string host, double interval, const std::string& metrics_listen)
    : host_(std::move(host)), interval_(interval), next_(next_multiple_of(interval)) {
  if (!metrics_listen.empty()) endpoint_ = std::make_unique<MetricsEndpoint>(metrics_listen);
}

OwnStats::~OwnStats() = default;

Sample OwnStats::reading(std::chrono::system_clock::time_point when, const MasterMetricSources& from) const {
  return master_metrics_sample(host_, std::string(kMasterSensorName), when, from);
}

Sample OwnStats::take(const MasterMetricSources& from) {
  Sample sample = reading(next_, from);
  if (endpoint_) endpoint_->publish(metrics_exposition(sample));
  // The next multiple after now, and after this one when it is taken early.
  auto after = next_multiple_of(interval_);
  next_ = after > next_ ? after
                        : next_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                      std::chrono::duration<double>(interval_));
  return sample;
}

void OwnStats::publish(const MasterMetricSources& from) {
  if (endpoint_) endpoint_->publish(metrics_exposition(reading(std::chrono::system_clock::now(), from)));
}

std::string OwnStats::metrics_url() const { return endpoint_ ? endpoint_->url() : std::string(); }

}  // namespace fructosa::master
