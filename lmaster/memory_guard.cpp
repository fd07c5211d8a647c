#include "memory_guard.h"

#include <fcntl.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>

namespace fructosa::master {
namespace {

constexpr auto kCheckEvery = std::chrono::milliseconds(100);
constexpr auto kTrimEvery = std::chrono::seconds(1);       // while holding
constexpr auto kIdleTrimEvery = std::chrono::seconds(10);  // otherwise, bound or not
// Taking batches again below this share of the bound: no flapping at its edge.
constexpr double kResumeShare = 0.9;

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

MemoryGuard::MemoryGuard(std::uint64_t max_bytes) : max_bytes_(max_bytes) {}

std::uint64_t MemoryGuard::resident_bytes() {
  int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[128] = {};
  ssize_t size = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  unsigned long long pages = 0, resident = 0;
  if (size <= 0 || std::sscanf(text, "%llu %llu", &pages, &resident) != 2) return 0;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

void MemoryGuard::set_max_bytes(std::uint64_t max_bytes) {
  max_bytes_ = max_bytes;
  next_check_ = {};  // looked at on the next check
}

void MemoryGuard::release(Clock::time_point now) {
  holding_ = false;
  released_ = true;
  spdlog::info("memory_max: lmaster uses {:.1f} MiB ([lmaster] memory_max = {:.1f} MiB): taking batches again after "
               "{:.1f} s; the agents turned away are asked to resend",
               mib(rss_), mib(max_bytes_), std::chrono::duration<double>(now - held_since_).count());
}

bool MemoryGuard::check(Clock::time_point now) {
  if (now < next_check_) return holding_;
  next_check_ = now + kCheckEvery;
  if (now >= next_trim_) trim(now);
  if (max_bytes_ == 0) {
    if (holding_) release(now);  // a reload took the bound away
    return false;
  }
  rss_ = resident_bytes();
  if (!holding_ && rss_ > max_bytes_) {
    ::malloc_trim(0);
    rss_ = resident_bytes();
    if (rss_ <= max_bytes_) return false;
    holding_ = true;
    ++holds_;
    held_since_ = now;
    next_trim_ = now + kTrimEvery;
    spdlog::warn("memory_max: lmaster uses {:.1f} MiB, more than [lmaster] memory_max = {:.1f} MiB: new batches "
                 "are turned away (the agents keep them in their spools) until it is under {:.1f} MiB",
                 mib(rss_), mib(max_bytes_), kResumeShare * mib(max_bytes_));
  } else if (holding_ && static_cast<double>(rss_) < kResumeShare * static_cast<double>(max_bytes_)) {
    release(now);
  }
  return holding_;
}

void MemoryGuard::trim(Clock::time_point now) {
  // What the outputs delivered was freed, but glibc keeps freed pages for later use, in every
  // thread's arena: after a burst (outputs that fell behind and caught up) lmaster would stay at
  // its peak. 1000 agents after a 25 s stall: 262 MiB, 192 MiB once trimmed (129 before the stall).
  auto start = Clock::now();
  ::malloc_trim(0);
  auto took = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (took > 5) spdlog::debug("memory: malloc_trim took {:.1f} ms", took);
  next_trim_ = now + (holding_ ? kTrimEvery : kIdleTrimEvery);
}

bool MemoryGuard::take_released() {
  bool released = released_;
  released_ = false;
  return released;
}

}  // namespace fructosa::master
