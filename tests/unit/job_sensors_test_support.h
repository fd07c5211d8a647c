// What the per-job sensor tests share (job_sensors_test.cpp: Taskstats and the live cgroup
// tests; job_proc_test.cpp: JobProc and the files it holds): a sensor with a fixed job
// directory, one reading of it, the jobs-proc fixture, and cgroups and child processes made by
// the tests.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "jobs.h"
#include "procfs.h"
#include "sensor.h"
#include "taskstats_netlink.h"
#include "test_support.h"

namespace fructosa::test {

using namespace fructosa::sensors;
namespace fs = std::filesystem;

inline const std::string kFixture = std::string(FRUCTOSA_FIXTURES) + "/jobs-proc";

// A sensor with its own job directory; not movable (the sensor keeps references).
struct Rig {
  Rig(const std::string& name, std::vector<JobCgroup> jobs, const Roots& roots,
      std::vector<std::string> pairs = {})
      : definition(find_sensor(name)),
        directory(JobDirectory::fixed(std::move(jobs), roots)),
        options(parse_pairs(*definition->options, pairs, "test")),
        sensor(definition->make(SensorContext{roots, options, directory.get()})) {}
  const SensorDefinition* definition;
  std::unique_ptr<JobDirectory> directory;
  Options options;
  std::unique_ptr<Sensor> sensor;
};

struct Reading {
  std::map<std::uint64_t, std::map<std::string, double>> values;  // job -> key -> value
  std::map<std::string, std::string> node_labels;
  std::string unavailable;  // SensorUnavailable's reason, "" when it read
  double at(std::uint64_t job, const std::string& key) const {
    auto j = values.find(job);
    if (j == values.end()) throw std::runtime_error("no sample for job " + std::to_string(job));
    auto k = j->second.find(key);
    if (k == j->second.end()) throw std::runtime_error("job " + std::to_string(job) + " has no " + key);
    return k->second;
  }
};

inline Reading read(Rig& rig) {
  Reading reading;
  std::vector<Sample> samples;
  // Each reading at its own instant, as the agent's are (sensors reading at the same instant
  // share one listing of a job's processes).
  static std::int64_t instant = 0;
  SampleWriter out(samples, "node", rig.definition->name, ++instant);
  try {
    EXPECT_TRUE(rig.sensor->sample(out));
  } catch (const SensorUnavailable& why) {
    reading.unavailable = why.what();
    return reading;
  }
  for (const auto& sample : samples) {
    auto& values = reading.values[sample.job];
    for (const auto& metric : sample.metrics) {
      EXPECT_EQ(values.count(metric.key), 0u) << "duplicate key " << metric.key;
      EXPECT_NE(rig.definition->catalog->find(metric.key), nullptr) << "not in the catalog: " << metric.key;
      values[metric.key] = metric.value;
    }
    if (sample.job == 0)
      for (const auto& label : sample.labels) reading.node_labels[label.key] = label.value;
  }
  return reading;
}

inline JobCgroup unified_job(std::uint64_t id, const std::string& dir) {
  JobCgroup job;
  job.id = id;
  job.name = fs::path(dir).filename();
  job.unified = dir;
  return job;
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::trunc);
  file << text;
  ASSERT_TRUE(file.good()) << path;
}

// The fixture in a temporary directory, to change it between readings.
struct FixtureCopy {
  test::TempDir dir;
  FixtureCopy() { fs::copy(kFixture, dir.path(), fs::copy_options::recursive); }
  std::string proc() const { return dir.path() + "/proc"; }
  std::vector<JobCgroup> jobs() const {
    return {unified_job(1, dir.path() + "/cgroup/job_1"), unified_job(2, dir.path() + "/cgroup/job_2")};
  }
};

// Moves `pid` into the cgroup directory `dir`.
inline bool add_to_cgroup(const std::string& dir, pid_t pid) {
  std::ofstream procs(dir + "/cgroup.procs");
  procs << pid << "\n";
  procs.flush();
  return procs.good();
}

// Moves what is still in the cgroup `dir` to `root` (its hierarchy's root), then removes `dir`.
inline void remove_cgroup(const std::string& dir, const std::string& root) {
  std::ifstream procs(dir + "/cgroup.procs");
  for (long pid; procs >> pid;) std::ofstream(root + "/cgroup.procs") << pid << "\n";
  ::rmdir(dir.c_str());
}


// A child process that only waits to be killed.
inline pid_t sleeping_child() {
  pid_t pid = ::fork();
  if (pid == 0)
    for (;;) ::pause();
  return pid;
}

inline void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// Sets the FdBudget's limit for the life of the object.
class BudgetLimit {
 public:
  explicit BudgetLimit(std::size_t limit) { FdBudget::set_limit(limit); }
  ~BudgetLimit() { FdBudget::set_limit(1024); }
};

}  // namespace fructosa::test
