// One output on its own thread behind its own queue.
//
// The master's loop submits every committed journal record to each runner and never waits: a
// runner keeps what its output has not taken yet in memory (queue_max_points); past that it
// stops queueing and reads the records back from the journal once its output catches up. Its
// thread hands batches to Output::write, retries failures with exponential backoff (0.5 s
// doubling to retry_max_interval; cut short by stop), calls flush() every flush_period(), and
// reopen() after SIGHUP. After a flush, the id of the last record written is saved as the
// output's journal position: a restart (even after kill -9) resumes after it. At stop it
// delivers what it can within a grace period; the rest waits in the journal.
// Without a journal ([lmaster] journal_max_bytes = 0) points past the memory queue are dropped.
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

class Journal;

using SharedSamples = std::shared_ptr<const std::vector<Sample>>;

struct RunnerSettings {
  std::size_t queue_max_points = 1000000;
  double retry_min_interval = 0.5;
  double retry_max_interval = 30;
  Journal* journal = nullptr;  // null: nothing on disk, drop past the memory queue
  double stop_grace = 5;       // seconds to keep delivering at stop (the rest stays in the journal)
};

// What the `lmaster` sensor reports for one output.
struct RunnerStats {
  std::uint64_t sent = 0, retried = 0, dropped = 0;
  std::uint64_t queued_points = 0;  // in memory, and in the journal when it is behind
};

class OutputRunner {
 public:
  OutputRunner(std::unique_ptr<Output> output, RunnerSettings settings);
  ~OutputRunner();  // stop()
  OutputRunner(const OutputRunner&) = delete;
  OutputRunner& operator=(const OutputRunner&) = delete;

  const std::string& name() const { return name_; }
  // Never blocks on the output. `id`: the journal record holding the samples (0 without one).
  void submit(std::uint64_t id, SharedSamples samples);
  // The last journal record this output has delivered (and saved as its position).
  std::uint64_t delivered() const { return delivered_; }
  void request_reopen();
  // Starts the grace period: deliver what it can within stop_grace, flush.
  void begin_stop();
  // begin_stop(), then waits for the thread.
  void stop();
  RunnerStats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Queued;
  struct JournalReaderHolder;

  void run();
  bool attempt(std::span<const Sample> samples, std::vector<Sample>& retry);
  void refill_from_journal(std::unique_lock<std::mutex>& lock);
  void flush_output(std::uint64_t written_through);

  std::string name_;
  std::unique_ptr<Output> output_;
  RunnerSettings settings_;
  std::unique_ptr<JournalReaderHolder> reader_;

  mutable std::mutex mutex_;  // guards everything below but the atomics and the thread's own
  std::condition_variable wake_;
  std::deque<Queued> memory_;  // oldest first
  std::size_t memory_points_ = 0;
  std::size_t memory_samples_ = 0;
  // Behind: memory was full, so newer records are not queued; they are read from the journal,
  // from next_id_ on, once memory is empty. next_id_: the first record not yet taken.
  bool behind_ = false;
  std::uint64_t next_id_ = 0;
  std::atomic<std::uint64_t> delivered_{0};
  bool reopen_ = false;
  bool stop_ = false;
  Clock::time_point stop_deadline_;
  Clock::time_point last_drop_log_;
  std::atomic<std::uint64_t> queue_dropped_{0};
  std::atomic<std::uint64_t> retry_points_{0};
  // The runner thread's own.
  Clock::time_point last_failure_log_, last_flush_log_;
  std::optional<Clock::time_point> failing_since_;
  std::uint64_t saved_position_ = 0;
  // The last record the journal held at start (0 without one); once it is written, the output
  // hears journal_replayed() (before any newer record).
  std::uint64_t replay_end_ = 0;
  bool replay_told_ = false;
  std::thread thread_;
};

}  // namespace fructosa::master
