// A job's CPU from its processes (sensors/job_process_cpu.*) when its cgroups account none, and
// which processes are a job's: Slurm's slurmstepd is not (sensors/cgroup_process_tree.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "job_process_cpu.h"
#include "jobs.h"
#include "sensor.h"
#include "test_support.h"

using namespace fructosa;
using namespace fructosa::sensors;
namespace fs = std::filesystem;

namespace {

const std::string kTrees = std::string(FRUCTOSA_FIXTURES) + "/cgroups";

JobSettings slurm() { return job_settings(parse_pairs(job_options(), {"scheduler=slurm"}, "test")); }

Roots tree(const std::string& name) { return Roots{kTrees + "/" + name + "/proc", kTrees + "/" + name + "/sys"}; }

ProcessStat stat(int ppid, CpuTicks self, CpuTicks children, std::uint64_t start = 100) {
  return ProcessStat{ppid, self, children, start};
}

TEST(ProcessStat, ParsesPastACommandNameWithSpacesAndParentheses) {
  // A real line's shape: negative priority and nice (fields 18, 19) must not stop the parse.
  std::string line =
      "4242 (my (odd) job) R 4240 4242 4200 0 -1 4194304 1234 0 0 0 250 30 7 2 -2 -5 1 0 98765 "
      "1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
  ProcessStat out;
  ASSERT_TRUE(parse_process_stat(line, out));
  EXPECT_EQ(out.ppid, 4240);
  EXPECT_EQ(out.self.user, 250u);
  EXPECT_EQ(out.self.system, 30u);
  EXPECT_EQ(out.children.user, 7u);
  EXPECT_EQ(out.children.system, 2u);
  EXPECT_EQ(out.start, 98765u);
  EXPECT_FALSE(parse_process_stat("4242 (cut short) R 1 2 3", out));
  EXPECT_FALSE(parse_process_stat("no parenthesis at all", out));
}

TEST(ProcessCpuTime, AReapedChildIsCountedOnceThroughItsParent) {
  ProcessCpuTime cpu;
  // The batch script (10, its parent slurmstepd is not the job's) and its child 11.
  cpu.update({{10, stat(1, {100, 10}, {0, 0})}, {11, stat(10, {50, 5}, {0, 0})}});
  EXPECT_EQ(cpu.total().user, 150u);
  EXPECT_EQ(cpu.total().system, 15u);
  // 11 ended with 70+8 and 10 reaped it: 10's children counters carry all of it, of which
  // 50+5 were already counted.
  cpu.update({{10, stat(1, {120, 12}, {70, 8})}});
  EXPECT_EQ(cpu.total().user, 120u + 70u);
  EXPECT_EQ(cpu.total().system, 12u + 8u);
  // A later child, started and reaped between two readings, is all new.
  cpu.update({{10, stat(1, {120, 12}, {100, 9})}});
  EXPECT_EQ(cpu.total().user, 120u + 100u);
  EXPECT_EQ(cpu.total().system, 12u + 9u);
}

TEST(ProcessCpuTime, AChildReapedAfterItLeftTheListingIsStillCountedOnce) {
  ProcessCpuTime cpu;
  cpu.update({{10, stat(1, {0, 0}, {0, 0})}, {11, stat(10, {40, 0}, {0, 0})}});
  cpu.update({{10, stat(1, {0, 0}, {0, 0})}});  // 11 exited; 10 has not waited for it yet
  EXPECT_EQ(cpu.total().user, 40u);
  cpu.update({{10, stat(1, {0, 0}, {45, 0})}});  // now it has: 5 more than last seen
  EXPECT_EQ(cpu.total().user, 45u);
}

TEST(ProcessCpuTime, WhatAProcessReapedOutsideTheJobUsedIsKept) {
  ProcessCpuTime cpu;
  cpu.update({{10, stat(1, {300, 20}, {0, 0})}, {12, stat(1, {10, 1}, {0, 0})}});
  cpu.update({{12, stat(1, {11, 1}, {0, 0})}});  // 10's parent (slurmstepd) reaped it
  EXPECT_EQ(cpu.total().user, 311u);
  EXPECT_EQ(cpu.total().system, 21u);
}

TEST(ProcessCpuTime, AReusedPidIsAnotherProcess) {
  ProcessCpuTime cpu;
  cpu.update({{10, stat(1, {300, 0}, {0, 0}, 100)}});
  cpu.update({{10, stat(1, {5, 0}, {0, 0}, 900)}});  // the same pid, started later
  EXPECT_EQ(cpu.total().user, 305u);
}

TEST(ProcessCpuTime, ReadsProcPidStat) {
  test::TempDir dir;
  auto write_stat = [&](int pid, int ppid, int utime, int cutime) {
    fs::create_directories(dir.file(std::to_string(pid)));
    std::ofstream(dir.file(std::to_string(pid) + "/stat"))
        << pid << " (python3) R " << ppid << " 1 1 0 -1 0 0 0 0 0 " << utime << " 3 " << cutime
        << " 0 20 0 1 0 5000 0 0\n";
  };
  write_stat(20, 1, 100, 0);
  write_stat(21, 20, 40, 0);
  ProcessCpuTime cpu;
  cpu.update(dir.path(), {20, 21, 22});  // 22 is not there: ended before it was read
  EXPECT_EQ(cpu.total().user, 140u);
  EXPECT_EQ(cpu.total().system, 6u);
}

// Slurm on cgroup v1: each step's slurmstepd sits in the freezer job directory itself, the
// job's processes in freezer's step_* (tests/fixtures/cgroups/slurm-v1: 4100 is slurmstepd).
TEST(JobProcesses, OnCgroupV1ComeFromTheFreezerStepsWithoutSlurmstepd) {
  JobDirectory jobs(slurm(), tree("slurm-v1"));
  auto snapshot = jobs.snapshot();
  const JobCgroup* job = snapshot->find(1234);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->process_dir(), kTrees + "/slurm-v1/sys/fs/cgroup/freezer/slurm/uid_1000/job_1234");
  EXPECT_EQ(JobDirectory::pids(*job), (std::vector<int>{4242, 4243}));
  EXPECT_EQ(jobs.processes(*job, 1), (std::vector<int>{4242, 4243}));
}

// Slurm on cgroup v2: slurmstepd in job_<id>/step_*/slurm, the tasks in step_*/user/task_*.
TEST(JobProcesses, OnCgroupV2LeaveOutEachStepsSlurmCgroup) {
  JobDirectory jobs(slurm(), tree("slurm-v2"));
  auto snapshot = jobs.snapshot();
  const JobCgroup* job = snapshot->find(1234);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(JobDirectory::pids(*job), (std::vector<int>{4242, 4243}));
  EXPECT_EQ(jobs.processes(*job, 1), (std::vector<int>{4242, 4243}));
}

// A site's own layout (scheduler = regex) has no scheduler cgroups: every process counts.
TEST(JobProcesses, OtherLayoutsListEveryProcessOfTheJobDirectory) {
  JobDirectory jobs(slurm(), tree("slurm-v1"));
  JobCgroup job = *jobs.snapshot()->find(1234);
  job.scheduler_cgroups.clear();
  EXPECT_EQ(JobDirectory::pids(job), (std::vector<int>{4100, 4242, 4243}));
}

}  // namespace
