// What lagent knows about itself, shared between the scheduler (which records every read) and
// the `lagent` sensor (which reports it, like node_exporter's scrape_collector_duration_seconds
// and _success). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace fructosa::sensors {

struct SensorReadStats {
  double last_duration = 0;     // seconds the last read took (wall clock)
  double last_cpu = 0;          // CPU seconds the last read took (its thread's)
  bool last_success = false;    // false: unavailable or failed
  std::uint64_t reads = 0;
  std::uint64_t failures = 0;
  std::uint64_t missed = 0;     // reading times skipped (the previous read still ran, or the agent was late)
};

struct SenderStats {
  std::uint64_t batches_sent = 0;
  std::uint64_t sends = 0;            // times batches were handed over, one or several back to back
  std::uint64_t batches_acked = 0;
  std::uint64_t batches_dropped = 0;  // unacknowledged, dropped from the spool (or never kept)
  std::uint64_t samples_dropped = 0;  // the samples in those batches
  std::uint64_t resyncs = 0;
  std::uint64_t failovers = 0;        // moves to the next lmaster of [lmaster] host
  std::uint64_t unacked = 0;          // batches in the spool
  std::uint64_t spool_bytes = 0;
};

class AgentStats {
 public:
  static AgentStats& instance();

  void record_read(const std::string& sensor, double duration, double cpu, bool success);
  void record_missed(const std::string& sensor, std::uint64_t count);
  void set_sender(const SenderStats& stats);
  // Forgets a sensor that is no longer configured (after a reload).
  void forget_sensor(const std::string& sensor);

  std::map<std::string, SensorReadStats> sensors() const;
  SenderStats sender() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, SensorReadStats> sensors_;
  SenderStats sender_;
};

}  // namespace fructosa::sensors
