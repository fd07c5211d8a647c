// [lmaster] memory_max's guard on this process's real resident memory: a mapping, touched and
// then unmapped, takes the process over a bound and back under 90 % of it.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "memory_guard.h"

using namespace fructosa::master;
using Clock = MemoryGuard::Clock;

namespace {

constexpr std::size_t kMiB = 1 << 20;

}  // namespace

TEST(MemoryGuard, HoldsOverTheBoundAndReleasesUnderNinetyPercent) {
  const std::uint64_t before = MemoryGuard::resident_bytes();
  ASSERT_GT(before, 0u);
  // A bound whose 90 % is still above what the process uses now (the whole suite under ASan
  // uses hundreds of MiB), and a mapping that goes over it.
  const std::uint64_t bound = before + before / 8 + 16 * kMiB;
  const std::size_t size = static_cast<std::size_t>(bound - before) + 16 * kMiB;
  MemoryGuard guard(bound);
  Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(guard.check(t0));
  EXPECT_EQ(guard.holds(), 0u);

  void* block = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(block, MAP_FAILED);
  std::memset(block, 1, size);  // resident now
  EXPECT_TRUE(guard.check(t0 + std::chrono::milliseconds(150)));
  EXPECT_TRUE(guard.holding());
  EXPECT_EQ(guard.holds(), 1u);
  EXPECT_GT(guard.rss(), bound);
  EXPECT_FALSE(guard.take_released());

  ::munmap(block, size);
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

// Without a bound too, what was freed goes back to the system every 10 s: heap memory freed
// between blocks still in use (as a burst leaves it) stays resident until malloc_trim.
TEST(MemoryGuard, GivesFreedHeapMemoryBackEveryTenSeconds) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator keeps freed memory in its quarantine, not glibc's heap";
#endif
  MemoryGuard guard(0);
  Clock::time_point t0 = Clock::now();
  guard.check(t0);  // the first look trims
  constexpr std::size_t kBlocks = 512, kBlock = 64 * 1024;  // under glibc's mmap threshold: heap
  auto fragment = [&] {
    std::vector<void*> freed, kept;
    for (std::size_t i = 0; i < kBlocks; ++i) {
      freed.push_back(std::malloc(kBlock));
      std::memset(freed.back(), 1, kBlock);
      // Keeps each freed block from joining the top of the heap (which free() gives back at
      // once). As large as a block, so that it is carved after it: a small one came from the
      // free lists that earlier tests left (then the blocks joined the top, and nothing was
      // left for the trim to give back). Never written: a page of it resident at most.
      kept.push_back(std::malloc(kBlock));
    }
    for (void* block : freed) std::free(block);
    return kept;
  };
  auto kept = fragment();
  const std::uint64_t fragmented = MemoryGuard::resident_bytes();
  guard.check(t0 + std::chrono::seconds(5));  // not yet
  EXPECT_GT(MemoryGuard::resident_bytes() + 16 * kMiB, fragmented);
  guard.check(t0 + std::chrono::seconds(11));
  const std::uint64_t trimmed = MemoryGuard::resident_bytes();
  EXPECT_LT(trimmed + 16 * kMiB, fragmented) << "resident " << fragmented / kMiB << " MiB, then " << trimmed / kMiB;
  EXPECT_FALSE(guard.holding());
  for (void* block : kept) std::free(block);
}
