// CgroupEntryWatch (sensors/cgroup_entry_watch.h), on ordinary directories: inotify reports
// their subdirectories coming and going as it does for cgroups.
#include "cgroup_entry_watch.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "test_support.h"

using fructosa::sensors::CgroupEntryWatch;

TEST(CgroupEntryWatch, ReportsSubdirectoriesThatComeAndGoOncePerChange) {
  fructosa::test::TempDir dir;
  CgroupEntryWatch watches;
  int watch = watches.add(dir.path());
  ASSERT_GE(watch, 0);
  std::uint64_t seen = watches.overflows();
  watches.drain();
  EXPECT_FALSE(watches.take_change(watch, seen));

  ASSERT_EQ(::mkdir(dir.file("step_0").c_str(), 0755), 0);
  EXPECT_FALSE(watches.take_change(watch, seen));  // not drained yet
  watches.drain();
  EXPECT_TRUE(watches.take_change(watch, seen));
  EXPECT_FALSE(watches.take_change(watch, seen));  // taken

  ASSERT_EQ(::rmdir(dir.file("step_0").c_str()), 0);
  watches.drain();
  EXPECT_TRUE(watches.take_change(watch, seen));
}

TEST(CgroupEntryWatch, AWatchNotHeldIsAlwaysAskedAgain) {
  fructosa::test::TempDir dir;
  CgroupEntryWatch watches;
  int watch = watches.add(dir.path());
  ASSERT_GE(watch, 0);
  std::uint64_t seen = watches.overflows();
  watches.remove(watch);
  watches.drain();
  EXPECT_TRUE(watches.take_change(watch, seen));
}

TEST(CgroupEntryWatch, RemovedWatchesLeaveNothingBehind) {
  // Jobs come and go for as long as the agent runs: the news of watches it gave back (the
  // IN_IGNORED of inotify_rm_watch, the deletion of their directories) must not pile up.
  fructosa::test::TempDir dir;
  CgroupEntryWatch watches;
  int parent = watches.add(dir.path());
  ASSERT_GE(parent, 0);
  for (int i = 0; i < 50; ++i) {
    std::string job = dir.file("job_" + std::to_string(i));
    ASSERT_EQ(::mkdir(job.c_str(), 0755), 0);
    int watch = watches.add(job);
    ASSERT_GE(watch, 0);
    watches.remove(watch);  // the job ended: its tree is let go ...
    ASSERT_EQ(::rmdir(job.c_str()), 0);  // ... and then its cgroup removed
    watches.drain();
  }
  EXPECT_EQ(watches.held(), 1u);  // the parent only
  std::uint64_t seen = watches.overflows();
  EXPECT_TRUE(watches.take_change(parent, seen));
  EXPECT_FALSE(watches.take_change(parent, seen));
}
