// [lmaster] memory_max: lmaster's resident memory kept under a bound by back-pressure rather
// than by growing (docs/performance.md, "Bounded memory"). Over the bound, lmaster takes no new
// batch: it neither stores nor acknowledges them, so each agent's window of unacknowledged
// batches fills and the agent keeps its readings in its spool. Heartbeats are still answered
// (no agent fails over). Once the outputs have worked their queues down and the memory is under
// 90 % of the bound, the agents whose batches were turned away are asked to resend them.
#pragma once

#include <chrono>
#include <cstdint>

namespace fructosa::master {

class MemoryGuard {
 public:
  using Clock = std::chrono::steady_clock;

  // 0: no bound (holding() is false).
  explicit MemoryGuard(std::uint64_t max_bytes);

  // Looks at the memory now and then (every 100 ms), and asks glibc to give back its free pages
  // every 10 s (once a second while holding), bound or not. True while batches must be turned away.
  bool check(Clock::time_point now);
  bool holding() const { return holding_; }
  // True once after a hold ended: the agents turned away must be asked to resend.
  bool take_released();
  // A reload's new bound (0: none), looked at on the next check.
  void set_max_bytes(std::uint64_t max_bytes);

  std::uint64_t rss() const { return rss_; }
  std::uint64_t holds() const { return holds_; }  // times the bound was reached
  std::uint64_t max_bytes() const { return max_bytes_; }

  // lmaster's resident set size (bytes) from /proc/self/statm; 0 when it cannot be read.
  static std::uint64_t resident_bytes();

 private:
  void release(Clock::time_point now);
  void trim(Clock::time_point now);

  std::uint64_t max_bytes_;
  std::uint64_t rss_ = 0;
  bool holding_ = false;
  bool released_ = false;
  std::uint64_t holds_ = 0;
  Clock::time_point next_check_{};
  Clock::time_point next_trim_{};
  Clock::time_point held_since_{};
};

}  // namespace fructosa::master
