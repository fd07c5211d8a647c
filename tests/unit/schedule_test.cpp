#include <gtest/gtest.h>

#include "schedule.h"

using fructosa::agent::AlignedSchedule;

namespace {
constexpr std::int64_t kMs = 1000000;
constexpr std::int64_t kSecond = 1000 * kMs;
}  // namespace

TEST(AlignedSchedule, FirstDeadlineIsTheNextMultiple) {
  AlignedSchedule every200ms(200 * kMs);
  EXPECT_EQ(every200ms.first(1000 * kSecond + 1), 1000 * kSecond + 200 * kMs);
  EXPECT_EQ(every200ms.first(1000 * kSecond + 199 * kMs), 1000 * kSecond + 200 * kMs);
  // Exactly on a multiple: the next one, never "now" (that reading may already be taken).
  EXPECT_EQ(every200ms.first(1000 * kSecond), 1000 * kSecond + 200 * kMs);
  AlignedSchedule every10s(10 * kSecond);
  EXPECT_EQ(every10s.first(1732190003 * kSecond), 1732190010 * kSecond);
}

TEST(AlignedSchedule, LateWakeUpsDoNotDrift) {
  // A fake clock that always wakes 37 ms late: the deadlines stay on the 1 s grid.
  AlignedSchedule schedule(kSecond);
  std::int64_t deadline = schedule.first(5 * kSecond + 3);
  std::uint64_t missed = 0;
  for (int i = 0; i < 1000; ++i) {
    std::int64_t now = deadline + 37 * kMs;
    deadline = schedule.next(deadline, now, missed);
    EXPECT_EQ(deadline % kSecond, 0);
  }
  EXPECT_EQ(deadline, 1006 * kSecond);
  EXPECT_EQ(missed, 0u);
}

TEST(AlignedSchedule, SkipsPastDeadlinesAndCountsThem) {
  AlignedSchedule schedule(200 * kMs);
  std::uint64_t missed = 0;
  // Woken 650 ms after the 10.0 s deadline: 10.2, 10.4 and 10.6 have passed; next is 10.8.
  EXPECT_EQ(schedule.next(10 * kSecond, 10 * kSecond + 650 * kMs, missed), 10 * kSecond + 800 * kMs);
  EXPECT_EQ(missed, 3u);
  // Woken exactly at a later deadline: that one counts as passed too.
  missed = 0;
  EXPECT_EQ(schedule.next(10 * kSecond, 10 * kSecond + 400 * kMs, missed), 10 * kSecond + 600 * kMs);
  EXPECT_EQ(missed, 2u);
}

TEST(AlignedSchedule, NegativeTimesStillAlign) {
  AlignedSchedule schedule(300 * kMs);
  EXPECT_EQ(schedule.first(-1), 0);
  EXPECT_EQ(schedule.first(-301 * kMs), -300 * kMs);
}
