// [lmaster] memory_max's guard on lmaster's real resident memory: a mapping of 64 MiB, touched
// and then unmapped, takes the process over a bound and back under it.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

#include "memory_guard.h"

using namespace fructosa::master;
using Clock = MemoryGuard::Clock;

namespace {

constexpr std::size_t kMiB = 1 << 20;

}  // namespace

TEST(MemoryGuard, HoldsOverTheBoundAndReleasesUnderNinetyPercent) {
  const std::uint64_t before = MemoryGuard::resident_bytes();
  ASSERT_GT(before, 0u);
  MemoryGuard guard(before + 32 * kMiB);
  Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(guard.check(t0));
  EXPECT_EQ(guard.holds(), 0u);

  void* block = ::mmap(nullptr, 64 * kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(block, MAP_FAILED);
  std::memset(block, 1, 64 * kMiB);  // resident now
  EXPECT_TRUE(guard.check(t0 + std::chrono::milliseconds(150)));
  EXPECT_TRUE(guard.holding());
  EXPECT_EQ(guard.holds(), 1u);
  EXPECT_GT(guard.rss(), before + 32 * kMiB);
  EXPECT_FALSE(guard.take_released());

  ::munmap(block, 64 * kMiB);
  // Not looked at again within 100 ms of the last look.
  EXPECT_TRUE(guard.check(t0 + std::chrono::milliseconds(200)));
  EXPECT_FALSE(guard.check(t0 + std::chrono::milliseconds(300)));
  EXPECT_TRUE(guard.take_released());
  EXPECT_FALSE(guard.take_released());  // once
  EXPECT_EQ(guard.holds(), 1u);
}

TEST(MemoryGuard, NoBoundNeverHolds) {
  MemoryGuard guard(0);
  EXPECT_FALSE(guard.check(Clock::now()));
  EXPECT_FALSE(guard.holding());
  EXPECT_EQ(guard.rss(), 0u);  // never looked
}
