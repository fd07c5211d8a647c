// Reading times on multiples of a sensor's interval, counted from the Unix epoch, so that
// every node samples at the same instants and a gap in the data is countable. Pure
// arithmetic on nanoseconds: the scheduler feeds it the clock, tests feed it a fake one.
#pragma once

#include <cstdint>

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

}  // namespace fructosa::agent
