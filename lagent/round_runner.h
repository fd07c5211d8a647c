// When lagent reads its sensors, and on which thread. The sensors due at one instant are read
// in turn by the thread that waited for that instant, and what it read goes to the sender from
// that same thread (Sender::deliver): a round wakes one thread of lagent's, not a timer thread
// that wakes a reader that wakes the sender (docs/performance.md, "The fixed cost of a round").
// A watchdog timer armed for each round wakes a second thread only when the round is slow
// (20 ms): it takes the readings not started yet and waits for the next instant in the
// slow thread's place, so a read that blocks holds back neither the other sensors nor later
// rounds. A thread whose slow read ends waits on the watchdog in turn, or sleeps as a spare.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "metric.h"
#include "schedule.h"

namespace fructosa::agent {

// One sensor as the runner sees it. The agent's SensorTask (agent.cpp) says how to read it.
struct RoundTask {
  RoundTask(std::string name_in, double interval_seconds);
  virtual ~RoundTask() = default;
  RoundTask(const RoundTask&) = delete;
  RoundTask& operator=(const RoundTask&) = delete;

  // Reads the sensor for reading time `deadline` (ns since the epoch), appending its samples,
  // and counts a failure in failures_in_a_row. Never called twice at once for one task.
  virtual void read(std::int64_t deadline, std::vector<Sample>& out) = 0;
  // The jobs running now, as any string that changes when they do (RetryBackoff).
  virtual std::string running_jobs() = 0;

  const std::string name;
  std::atomic<bool> stopped{false};
  // Readings that failed in a row (set by read()): an unavailable sensor is tried again less
  // and less often.
  std::atomic<std::uint32_t> failures_in_a_row{0};

  // The runner's, under its mutex.
  AlignedSchedule schedule;
  std::int64_t deadline = 0;   // the next reading time; 0 until the runner first sees the task
  std::int64_t last_read = 0;  // the reading time of the last one started
  RetryBackoff retry;
  std::atomic<bool> busy{false};  // a reading is running
};

class RoundRunner {
 public:
  // Called on a reading thread with what one round (or the part of it this thread read) gave,
  // and when the next round starts (steady clock).
  using Deliver = std::function<void(std::vector<Sample>&& samples, std::chrono::steady_clock::time_point next_round)>;

  // `help_after`: how long a round may run before another thread takes what it has not read.
  explicit RoundRunner(Deliver deliver, std::chrono::milliseconds help_after = std::chrono::milliseconds(20));
  ~RoundRunner();  // stop()
  RoundRunner(const RoundRunner&) = delete;
  RoundRunner& operator=(const RoundRunner&) = delete;

  // The sensors to read from now on. Tasks read before keep their next reading time (a reload
  // loses no reading); new ones start at their interval's next multiple. The caller marks the
  // tasks it drops `stopped`.
  void set_tasks(std::vector<std::shared_ptr<RoundTask>> tasks);
  // Reads `task` every `interval_seconds` from its next multiple on (`lmaster ctl interval`).
  void set_interval(const std::shared_ptr<RoundTask>& task, double interval_seconds);
  // Ends the threads once the readings running now are over.
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fructosa::agent
