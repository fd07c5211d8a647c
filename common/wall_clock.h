// The instant a sample is taken at: nanoseconds since the epoch, the wall clock's (what the wire,
// the spool, the journal and every output carry).
#pragma once

#include <chrono>
#include <cstdint>

namespace fructosa {

inline std::int64_t wall_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace fructosa
