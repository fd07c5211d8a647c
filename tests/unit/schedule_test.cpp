#include <gtest/gtest.h>

#include "schedule.h"

#include <string>

using fructosa::agent::AlignedSchedule;
using fructosa::agent::RetryBackoff;

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

namespace {
// The jobs a test says are running, and how often RetryBackoff asked.
struct Jobs {
  std::string running;
  int asked = 0;
  auto now() {
    return [this] {
      ++asked;
      return running;
    };
  }
};
}  // namespace

TEST(RetryBackoff, ReadsAgainAfterOneTwoFourIntervalsUpToTheMost) {
  RetryBackoff retry(60 * kSecond);
  Jobs jobs;
  // One failure: read at the next reading, without asking for the jobs.
  EXPECT_FALSE(retry.skip(1 * kSecond, kSecond, 1, 0, jobs.now()));
  EXPECT_EQ(jobs.asked, 0);
  // Two in a row: two intervals after the last try; five: sixteen.
  EXPECT_TRUE(retry.skip(1 * kSecond, kSecond, 2, 0, jobs.now()));
  EXPECT_FALSE(retry.skip(2 * kSecond, kSecond, 2, 0, jobs.now()));
  EXPECT_TRUE(retry.skip(15 * kSecond, kSecond, 5, 0, jobs.now()));
  EXPECT_FALSE(retry.skip(16 * kSecond, kSecond, 5, 0, jobs.now()));
  // Never more than the most apart, however many failures.
  EXPECT_TRUE(retry.skip(59 * kSecond, kSecond, 40, 0, jobs.now()));
  EXPECT_FALSE(retry.skip(60 * kSecond, kSecond, 40, 0, jobs.now()));
  // An interval longer than the most: every reading is tried.
  EXPECT_FALSE(retry.skip(120 * kSecond, 120 * kSecond, 9, 0, jobs.now()));
}

TEST(RetryBackoff, AJobStartingOrEndingCutsTheWaitShort) {
  RetryBackoff retry(60 * kSecond);
  Jobs jobs;
  // Failed five times, last at 0 s: next try at 16 s while the jobs stay the same.
  EXPECT_TRUE(retry.skip(1 * kSecond, kSecond, 5, 0, jobs.now()));
  EXPECT_TRUE(retry.skip(2 * kSecond, kSecond, 5, 0, jobs.now()));
  jobs.running = "42";  // a job starts: tried at the next reading
  EXPECT_FALSE(retry.skip(3 * kSecond, kSecond, 5, 0, jobs.now()));
  // That try failed too (six in a row, last at 3 s): waiting again, 32 s from 3 s.
  EXPECT_TRUE(retry.skip(4 * kSecond, kSecond, 6, 3 * kSecond, jobs.now()));
  EXPECT_TRUE(retry.skip(34 * kSecond, kSecond, 6, 3 * kSecond, jobs.now()));
  jobs.running = "";  // the job ends
  EXPECT_FALSE(retry.skip(35 * kSecond, kSecond, 6, 3 * kSecond, jobs.now()));
  // A reading that works ends the backing off; failing again later starts it over.
  EXPECT_FALSE(retry.skip(36 * kSecond, kSecond, 0, 35 * kSecond, jobs.now()));
  EXPECT_TRUE(retry.skip(38 * kSecond, kSecond, 2, 37 * kSecond, jobs.now()));
}
