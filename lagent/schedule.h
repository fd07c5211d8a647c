// Reading times on multiples of a sensor's interval, counted from the Unix epoch, so that
// every node samples at the same instants and a gap in the data is countable. Pure
// arithmetic on nanoseconds: the scheduler feeds it the clock, tests feed it a fake one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace fructosa::agent {

class AlignedSchedule {
 public:
  explicit AlignedSchedule(std::int64_t interval_ns) : interval_(interval_ns > 0 ? interval_ns : 1) {}

  std::int64_t interval() const { return interval_; }

  // The first multiple of the interval strictly after `now`.
  std::int64_t first(std::int64_t now) const { return (floor_div(now, interval_) + 1) * interval_; }

  // The deadline after `previous`. Deadlines are never shifted by a late wake-up; ones that
  // are already past at `now` are skipped (and counted in `missed`) rather than run in a burst.
  std::int64_t next(std::int64_t previous, std::int64_t now, std::uint64_t& missed) const {
    std::int64_t deadline = previous + interval_;
    if (deadline <= now) {
      std::int64_t skip = floor_div(now - deadline, interval_) + 1;
      missed += static_cast<std::uint64_t>(skip);
      deadline += skip * interval_;
    }
    return deadline;
  }

 private:
  static std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    std::int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
  }
  std::int64_t interval_;
};

// When a sensor whose readings fail is tried again: after 1, 2, 4, ... intervals, at most
// `most` apart (or one interval, when that is longer), so that an unavailable sensor (no
// battery, no GPU library) does not rescan sysfs every second on every node. A job starting or
// ending cuts the wait short: a per-job sensor that could count none of the jobs may count a
// new one, and waiting up to a minute would miss the start of it (or all of a short job).
class RetryBackoff {
 public:
  explicit RetryBackoff(std::int64_t most_ns) : most_(most_ns) {}

  // True when the reading due at `deadline` is skipped. `failures`: readings that failed in a
  // row; `last_try`: the reading time of the last one tried; `running_jobs()`: the jobs running
  // now (any string that changes when they do), asked only while backing off.
  template <class RunningJobs>
  bool skip(std::int64_t deadline, std::int64_t interval, std::uint32_t failures, std::int64_t last_try,
            RunningJobs&& running_jobs) {
    if (failures < 2) {
      backing_off_ = false;
      return false;
    }
    std::string jobs = running_jobs();
    if (!backing_off_) {  // the jobs at the failed try just before
      backing_off_ = true;
      jobs_at_last_try_ = jobs;
    } else if (jobs != jobs_at_last_try_) {
      jobs_at_last_try_ = std::move(jobs);
      return false;
    }
    const std::int64_t most = std::max(most_, interval);
    std::int64_t wait = interval;
    for (std::uint32_t i = 1; i < failures && wait < most; ++i) wait *= 2;
    if (deadline < last_try + std::min(wait, most)) return true;
    jobs_at_last_try_ = std::move(jobs);
    return false;
  }

 private:
  std::int64_t most_;
  bool backing_off_ = false;
  std::string jobs_at_last_try_;
};

}  // namespace fructosa::agent
