// lagent's threads sleep in poll() on eventfds (woken by another thread) and timerfds.
#pragma once

#include <unistd.h>

#include <cstdint>

namespace fructosa::agent {

// Takes an eventfd's or timerfd's count, so that poll() sleeps again; non-blocking, so nothing
// to read is fine.
inline void drain_wakeups(int fd) {
  std::uint64_t ignored;
  [[maybe_unused]] auto n = ::read(fd, &ignored, sizeof ignored);
}

}  // namespace fructosa::agent
