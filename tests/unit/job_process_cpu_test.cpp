// A job's CPU from its processes (sensors/job_process_cpu.*) when its cgroups account none, and
// which processes are a job's: Slurm's slurmstepd is not (sensors/cgroup_process_tree.cpp).
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "cgroup_trees.h"
#include "job_process_cpu.h"
#include "jobs.h"
#include "log_capture.h"
#include "sensor.h"
#include "test_support.h"

using namespace fructosa;
using namespace fructosa::sensors;
namespace fs = std::filesystem;

namespace {

using fructosa::test::kTrees;
using fructosa::test::tree;

JobSettings slurm() { return job_settings(parse_pairs(job_options(), {"scheduler=slurm"}, "test")); }

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

// The trees recorded from Debian's Slurm 22.05 (tests/fixtures/cgroups/slurm-v1-debian.md): one
// job with a batch step and step 0; slurmstepd 1001 and 1012 sit in the freezer job directory.
const std::vector<int> kRecordedJobProcesses{1005, 1006, 1007, 1008, 1017};

TEST(RecordedSlurmTree, EitherAccountingSettingGivesTheSameProcessesWithoutSlurmstepd) {
  for (const char* name : {"slurm-v1-debian-linux", "slurm-v1-debian-cgroup"}) {
    SCOPED_TRACE(name);
    JobDirectory jobs(slurm(), tree(name));
    auto snapshot = jobs.snapshot();
    ASSERT_EQ(snapshot->jobs.size(), 1u);
    const JobCgroup& job = snapshot->jobs[0];
    EXPECT_EQ(job.id, 1u);
    EXPECT_EQ(job.scheduler, "slurm");
    EXPECT_EQ(job.process_dir(), kTrees + "/" + name + "/sys/fs/cgroup/freezer/slurm_node1/uid_0/job_1");
    EXPECT_EQ(jobs.processes(job, 1), kRecordedJobProcesses);
    EXPECT_EQ(jobs.job_of_pid(1017), 1u);
  }
}

TEST(RecordedSlurmTree, JobAcctGatherLinuxMakesNoCpuacctCgroupAndCgroupDoes) {
  auto hierarchies = [](const std::string& name) {
    JobDirectory jobs(slurm(), tree(name));
    std::vector<std::string> found;
    for (const auto& [hierarchy, path] : jobs.snapshot()->jobs.at(0).v1) found.push_back(hierarchy);
    std::sort(found.begin(), found.end());
    return found;
  };
  EXPECT_EQ(hierarchies("slurm-v1-debian-linux"), (std::vector<std::string>{"cpuset", "freezer", "memory"}));
  EXPECT_EQ(hierarchies("slurm-v1-debian-cgroup"),
            (std::vector<std::string>{"cpuacct", "cpuset", "freezer", "memory"}));
}

struct JobReading {
  std::map<std::string, double> values;
  std::map<std::string, std::string> labels;
};

std::unique_ptr<Sensor> job_cgroup(JobDirectory& jobs, const Roots& roots) {
  static const Options options;
  return find_sensor("JobCgroup")->make(SensorContext{roots, options, &jobs});
}

JobReading read_job(Sensor& sensor, std::uint64_t id, std::int64_t at) {
  std::vector<Sample> samples;
  SampleWriter writer(samples, "node1", "JobCgroup", at);
  EXPECT_TRUE(sensor.sample(writer));
  JobReading reading;
  for (const auto& sample : samples) {
    if (sample.job != id) continue;
    for (const auto& metric : sample.metrics) reading.values[metric.key] = metric.value;
    for (const auto& label : sample.labels) reading.labels[label.key] = label.value;
  }
  return reading;
}

// Sets utime and stime (fields 14, 15) of a recorded /proc/<pid>/stat.
void set_cpu_ticks(const std::string& proc, int pid, int utime, int stime) {
  std::string path = proc + "/" + std::to_string(pid) + "/stat";
  std::ifstream in(path);
  std::string line((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = line.rfind(')');
  std::istringstream fields(line.substr(close + 2));
  std::vector<std::string> rest;
  for (std::string field; fields >> field;) rest.push_back(field);
  rest.at(11) = std::to_string(utime);  // field 14 is the 12th after the command name
  rest.at(12) = std::to_string(stime);
  std::ofstream out(path);
  out << line.substr(0, close + 2);
  for (const auto& field : rest) out << field << ' ';
  out << '\n';
}

TEST(RecordedSlurmTree, WithoutCpuacctTheCpuComesFromTheJobsProcesses) {
  test::TempDir dir;
  fs::copy(kTrees + "/slurm-v1-debian-linux", dir.path(), fs::copy_options::recursive);
  const Roots roots{dir.file("proc"), dir.file("sys")};
  const std::string proc = dir.file("proc");
  set_cpu_ticks(proc, 1001, 5000, 5000);  // slurmstepd: not the job's
  set_cpu_ticks(proc, 1005, 30, 10);
  set_cpu_ticks(proc, 1017, 200, 20);
  JobDirectory jobs(slurm(), roots);
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  auto sensor = job_cgroup(jobs, roots);
  JobReading first = read_job(*sensor, 1, 1);
  EXPECT_EQ(first.labels["cpu_source"], "processes");
  EXPECT_DOUBLE_EQ(first.values["cpu.user"], 230 / hz);
  EXPECT_DOUBLE_EQ(first.values["cpu.system"], 30 / hz);
  EXPECT_DOUBLE_EQ(first.values["cpu.usage"], 260 / hz);
  EXPECT_EQ(first.values["tasks"], 5);
  EXPECT_EQ(first.values["memory.current"], 6066176);
  EXPECT_EQ(first.values.count("io.read_bytes"), 0u) << "Slurm makes no blkio cgroup on v1";
  // Its allocation: cpuset.cpus "0", memory.limit_in_bytes of --mem=200M; its owner.
  EXPECT_EQ(first.values["cpus"], 1);
  EXPECT_EQ(first.values["memory.limit"], 200 << 20);
  struct stat info;
  ASSERT_EQ(::stat((proc + "/1005").c_str(), &info), 0);
  const passwd* owner = ::getpwuid(info.st_uid);
  EXPECT_EQ(first.labels["user"], owner ? std::string(owner->pw_name) : std::to_string(info.st_uid));

  // Step 0's sleep ends (its parent slurmstepd reaps it, outside the job): the job keeps it.
  std::ofstream(dir.file("sys/fs/cgroup/freezer/slurm_node1/uid_0/job_1/step_0/cgroup.procs"));
  fs::remove_all(proc + "/1017");
  set_cpu_ticks(proc, 1005, 40, 10);
  JobReading second = read_job(*sensor, 1, 2);
  EXPECT_DOUBLE_EQ(second.values["cpu.usage"], 270 / hz);
  EXPECT_EQ(second.values["tasks"], 4);
}

TEST(RecordedSlurmTree, WithCpuacctTheCpuIsTheCgroups) {
  JobDirectory jobs(slurm(), tree("slurm-v1-debian-cgroup"));
  auto sensor = job_cgroup(jobs, tree("slurm-v1-debian-cgroup"));
  JobReading reading = read_job(*sensor, 1, 1);
  EXPECT_EQ(reading.labels["cpu_source"], "cgroup");
  std::ifstream usage(kTrees + "/slurm-v1-debian-cgroup/sys/fs/cgroup/cpuacct/slurm_node1/uid_0/job_1/cpuacct.usage");
  double nanoseconds = 0;
  usage >> nanoseconds;
  EXPECT_DOUBLE_EQ(reading.values["cpu.usage"], nanoseconds / 1e9);
}

// The recorded jobacct_gather/cgroup tree with job 1's cpuacct directory set aside (put back
// with restore_cpuacct()), a JobCgroup sensor on it, and lagent's log.
struct CpuacctSetAside {
  test::TempDir dir;
  Roots roots;
  std::string cpuacct, aside;
  std::unique_ptr<JobDirectory> jobs;
  std::unique_ptr<Sensor> sensor;
  test::LogCapture log;
  CpuacctSetAside() {
    fs::copy(kTrees + "/slurm-v1-debian-cgroup", dir.path(), fs::copy_options::recursive);
    roots = Roots{dir.file("proc"), dir.file("sys")};
    cpuacct = dir.file("sys/fs/cgroup/cpuacct/slurm_node1/uid_0/job_1");
    aside = dir.file("job_1-cpuacct");
    fs::rename(cpuacct, aside);
    jobs = std::make_unique<JobDirectory>(slurm(), roots);
    sensor = job_cgroup(*jobs, roots);
  }
  void restore_cpuacct() { fs::rename(aside, cpuacct); }
  JobReading read(std::int64_t at) { return read_job(*sensor, 1, at); }
};

// slurmstepd makes a job's cgroup directories one after the other: a first sample that finds no
// cpuacct directory yet reads the CPU from the processes, and once the directory is there the
// cgroup's. The log says nothing about cpuacct then; what stays missing (blkio, which Slurm never
// makes on v1) it says once, when it held for two samples.
TEST(RecordedSlurmTree, ACpuacctDirectoryMadeAfterTheFirstSampleIsUsedAndNotCalledMissing) {
  CpuacctSetAside job;

  EXPECT_EQ(job.read(1).labels["cpu_source"], "processes");
  EXPECT_EQ(job.log.take(), "");
  job.restore_cpuacct();
  EXPECT_EQ(job.read(2).labels["cpu_source"], "cgroup");
  EXPECT_EQ(job.log.take(), "");
  EXPECT_EQ(job.read(3).labels["cpu_source"], "cgroup");
  std::string told = job.log.take();
  EXPECT_NE(told.find("JobCgroup: job 1 "), std::string::npos) << told;
  EXPECT_NE(told.find("no blkio cgroup"), std::string::npos) << told;
  EXPECT_EQ(told.find("cpuacct"), std::string::npos) << told;
  job.read(4);
  EXPECT_EQ(job.log.take(), "");
}

// Without cpuacct for good (jobacct_gather/linux) the log says so once; and should the directory
// appear after all, it says that the cgroup gives the CPU now.
TEST(RecordedSlurmTree, AMissingCpuacctIsToldOnceAndItsArrivalToo) {
  CpuacctSetAside job;

  job.read(1);
  EXPECT_EQ(job.log.take(), "");
  job.read(2);
  std::string told = job.log.take();
  EXPECT_NE(told.find("no cpuacct cgroup"), std::string::npos) << told;
  EXPECT_NE(told.find("cpu_source=processes"), std::string::npos) << told;
  EXPECT_NE(told.find("no blkio cgroup"), std::string::npos) << told;
  for (std::int64_t at = 3; at <= 5; ++at) {
    EXPECT_EQ(job.read(at).labels["cpu_source"], "processes");
    EXPECT_EQ(job.log.take(), "");
  }

  job.restore_cpuacct();
  EXPECT_EQ(job.read(6).labels["cpu_source"], "cgroup");
  EXPECT_EQ(job.log.take(), "");
  job.read(7);
  told = job.log.take();
  EXPECT_NE(told.find("cpu.* now from its cgroup"), std::string::npos) << told;
  EXPECT_EQ(told.find("blkio"), std::string::npos) << "said before, unchanged: " << told;
  job.read(8);
  EXPECT_EQ(job.log.take(), "");
}

}  // namespace
