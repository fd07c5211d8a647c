// One output on its own thread behind its own queue.
//
// The master's loop submits every accepted batch to each runner and never waits: a runner keeps
// what its output has not taken yet in memory (queue_max_points), then in a spool on disk under
// <data_dir>/spool/<output> within the master's disk budget, oldest first, and drops (and counts)
// only past that. Its thread hands batches to Output::write, retries failures with exponential
// backoff (0.5 s doubling to retry_max_interval; cut short by stop), calls flush() every
// flush_period(), and reopen() after SIGHUP. At stop it delivers what it can within a grace
// period and spools the rest, which the next start sends first.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "output.h"

namespace fructosa::master {

class SampleSpool;
class DiskBudget;

using SharedSamples = std::shared_ptr<const std::vector<Sample>>;

struct RunnerSettings {
  std::size_t queue_max_points = 1000000;
  double retry_min_interval = 0.5;
  double retry_max_interval = 30;
  std::filesystem::path spool_dir;  // empty: no spool, drop past the memory queue
  DiskBudget* budget = nullptr;     // shared by every runner's spool; may be null without a spool
  double stop_grace = 5;            // seconds to keep delivering at stop before spooling the rest
};

// What the `lmaster` sensor reports for one output.
struct RunnerStats {
  std::uint64_t sent = 0, retried = 0, dropped = 0;
  std::uint64_t queued_points = 0;  // in memory and in the spool
  std::uint64_t spool_bytes = 0;
};

class OutputRunner {
 public:
  OutputRunner(std::unique_ptr<Output> output, RunnerSettings settings);
  ~OutputRunner();  // stop()
  OutputRunner(const OutputRunner&) = delete;
  OutputRunner& operator=(const OutputRunner&) = delete;

  const std::string& name() const { return name_; }
  // Never blocks on the output; may append to the spool file.
  void submit(SharedSamples samples);
  void request_reopen();
  // Starts the grace period: deliver what it can within stop_grace, flush, spool what is left.
  void begin_stop();
  // begin_stop(), then waits for the thread.
  void stop();
  RunnerStats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Queued;

  void run();
  bool attempt(std::span<const Sample> samples, std::vector<Sample>& retry);
  void refill_from_spool();
  void flush_output();

  std::string name_;
  std::unique_ptr<Output> output_;
  RunnerSettings settings_;
  std::unique_ptr<SampleSpool> spool_;

  mutable std::mutex mutex_;  // guards everything below but the atomics and the thread's own
  std::condition_variable wake_;
  std::deque<Queued> memory_;  // oldest first; the spool (when not empty) holds newer ones
  std::size_t memory_points_ = 0;
  std::size_t memory_samples_ = 0;
  bool spooling_ = false;  // once something is spooled, newer batches follow it there (FIFO)
  bool reopen_ = false;
  bool stop_ = false;
  Clock::time_point stop_deadline_;
  Clock::time_point last_drop_log_;
  std::atomic<std::uint64_t> queue_dropped_{0};
  std::atomic<std::uint64_t> retry_points_{0};
  // The runner thread's own.
  Clock::time_point last_failure_log_, last_flush_log_;
  std::optional<Clock::time_point> failing_since_;
  std::thread thread_;
};

}  // namespace fructosa::master
