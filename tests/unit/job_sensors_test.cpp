// Taskstats and JobProc, the per-job sensors that read each job's processes.
//
// JobProc is checked exactly on a synthesized procfs + cgroup tree (tests/fixtures/jobs-proc,
// README there), including processes that end, pids that are reused and io that cannot be
// read. Both sensors are then checked live on real child processes placed in a job-like
// cgroup v1 directory made for the test (root only; skipped with the reason otherwise):
// the child's write() I/O and CPU time must show up in its job, and a job's totals must not
// go down when one of its processes ends. Taskstats also needs CAP_NET_ADMIN, and its
// message without it is checked by dropping the capability from this thread.
// The files JobProc, JobCgroup and the cgroup walk keep open between rounds (HeldFiles,
// FdBudget) are checked on regular files, on real /proc entries of processes that end while
// still listed, on the live cgroup, and with no budget at all.
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

using namespace fructosa;
using namespace fructosa::sensors;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(FRUCTOSA_FIXTURES) + "/jobs-proc";

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

Reading read(Rig& rig) {
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

JobCgroup unified_job(std::uint64_t id, const std::string& dir) {
  JobCgroup job;
  job.id = id;
  job.name = fs::path(dir).filename();
  job.unified = dir;
  return job;
}

void write_file(const std::string& path, const std::string& text) {
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

// ---------------------------------------------------------------------------------------
// JobProc on the fixture

TEST(JobProcFixture, SumsEachJobsProcesses) {
  Rig rig("JobProc",
          {unified_job(2, kFixture + "/cgroup/job_2"), unified_job(1, kFixture + "/cgroup/job_1")},
          Roots{kFixture + "/proc", "/nonexistent-sys"});
  Reading r = read(rig);
  ASSERT_EQ(r.unavailable, "");
  EXPECT_EQ(r.at(0, "jobs"), 2);
  EXPECT_TRUE(r.node_labels.empty());  // involved_jobs is the agent's label, not the sensor's

  const std::map<std::string, double> job1{
      {"processes", 3},         {"unreadable_processes", 1}, {"rchar", 1300},
      {"wchar", 2400},          {"syscr", 13},               {"syscw", 24},
      {"read_bytes", 4096},     {"write_bytes", 12288},      {"cancelled_write_bytes", 4096},
      {"vm_rss", 6400 * 1024.}, {"rss_shmem", 300 * 1024.},  {"vm_size", 31000 * 1024.},
      {"vm_hwm", 8500 * 1024.}, {"vm_swap", 16 * 1024.}};
  EXPECT_EQ(r.values.at(1), job1);
  const std::map<std::string, double> job2{
      {"processes", 2},       {"unreadable_processes", 0}, {"rchar", 57},
      {"wchar", 68},          {"syscr", 6},                {"syscw", 7},
      {"read_bytes", 0},      {"write_bytes", 0},          {"cancelled_write_bytes", 0},
      {"vm_rss", 80 * 1024.}, {"rss_shmem", 0},            {"vm_size", 500 * 1024.},
      {"vm_hwm", 100 * 1024.}, {"vm_swap", 0}};
  EXPECT_EQ(r.values.at(2), job2);
}

TEST(JobProcFixture, TotalsDoNotGoDownWhenAProcessEnds) {
  FixtureCopy copy;
  Rig rig("JobProc", copy.jobs(), Roots{copy.proc(), "/nonexistent-sys"});
  Rig plain("JobProc", copy.jobs(), Roots{copy.proc(), "/nonexistent-sys"}, {"monotonic=false"});
  Reading first = read(rig);
  ASSERT_EQ(first.unavailable, "");
  ASSERT_EQ(first.at(1, "rchar"), 1300);
  ASSERT_EQ(read(plain).at(1, "rchar"), 1300);

  // 101 (the job step's process) ends; 100 reads 500 more bytes.
  fs::remove_all(copy.proc() + "/101");
  write_file(copy.dir.path() + "/cgroup/job_1/step_0/cgroup.procs", "");
  write_file(copy.proc() + "/100/io",
             "rchar: 1500\nwchar: 2000\nsyscr: 12\nsyscw: 20\nread_bytes: 4096\nwrite_bytes: 8192\n"
             "cancelled_write_bytes: 0\n");
  Reading second = read(rig);
  EXPECT_EQ(second.at(1, "processes"), 2);
  EXPECT_EQ(second.at(1, "rchar"), 1800);         // 1300 + 500: 101's 300 stays
  EXPECT_EQ(second.at(1, "wchar"), 2400);         // unchanged, not 2000
  EXPECT_EQ(second.at(1, "syscr"), 15);
  EXPECT_EQ(second.at(1, "write_bytes"), 12288);
  EXPECT_EQ(second.at(1, "cancelled_write_bytes"), 4096);
  EXPECT_EQ(second.at(1, "vm_rss"), 2400 * 1024.);  // memory is a gauge: 101's is gone
  for (const auto& [key, value] : first.values.at(1)) {
    const auto* entry = rig.definition->catalog->find(key);
    ASSERT_NE(entry, nullptr);
    if (entry->kind == Kind::counter) { EXPECT_GE(second.at(1, key), value) << key; }
  }
  // monotonic = false: colmet's sums over the processes running now.
  Reading now = read(plain);
  EXPECT_EQ(now.at(1, "rchar"), 1500);
  EXPECT_EQ(now.at(1, "wchar"), 2000);

  // pid 100 is reused by a new process (another start time) that has read 10 bytes so far:
  // it counts from zero, not from the old process's 1500.
  std::string stat;
  {
    std::ifstream in(copy.proc() + "/100/stat");
    std::getline(in, stat);
  }
  auto at = stat.find(" 5000 ");
  ASSERT_NE(at, std::string::npos);
  stat.replace(at, 6, " 9000 ");
  write_file(copy.proc() + "/100/stat", stat + "\n");
  write_file(copy.proc() + "/100/io",
             "rchar: 10\nwchar: 0\nsyscr: 1\nsyscw: 0\nread_bytes: 0\nwrite_bytes: 0\n"
             "cancelled_write_bytes: 0\n");
  Reading third = read(rig);
  EXPECT_EQ(third.at(1, "rchar"), 1810);
  EXPECT_EQ(third.at(1, "wchar"), 2400);
  EXPECT_EQ(third.at(1, "syscr"), 16);

  // The whole job ends: no sample for it, and job 2 goes on.
  fs::remove_all(copy.dir.path() + "/cgroup/job_1");
  Reading fourth = read(rig);
  EXPECT_EQ(fourth.at(1, "processes"), 0);  // the fixed directory still lists it
  EXPECT_EQ(fourth.at(1, "rchar"), 1810);
  EXPECT_EQ(fourth.at(2, "rchar"), 57);
}

// The label `commands` of each job's sample in one JobProc reading (job -> value).
std::map<std::uint64_t, std::string> commands_labels(Rig& rig) {
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", rig.definition->name, test::next_reading_time());
  EXPECT_TRUE(rig.sensor->sample(out));
  std::map<std::uint64_t, std::string> labels;
  for (const auto& sample : samples)
    for (const auto& label : sample.labels)
      if (label.key == "commands") labels[sample.job] = label.value;
  return labels;
}

// A process of the fixture copy named `comm` that used utime + stime clock ticks.
void write_process(const std::string& proc, int pid, const std::string& comm, int utime, int stime,
                   int start = 5000) {
  const std::string dir = proc + "/" + std::to_string(pid);
  fs::create_directories(dir);
  write_file(dir + "/stat", fmt::format("{0} ({1}) S 1 {0} {0} 0 -1 4194560 1000 0 2 0 {2} {3} 0 0 20 0 1 0 {4} "
                                        "10240000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n",
                                        pid, comm, utime, stime, start));
  write_file(dir + "/status", fmt::format("Name:\t{}\nVmRSS:\t4 kB\n", comm));
}

TEST(JobProcFixture, CommandsLabelNamesTheProcessesMostCpuFirst) {
  FixtureCopy copy;
  Rig rig("JobProc", copy.jobs(), Roots{copy.proc(), "/nonexistent-sys"});
  // Every fixture process used 50 + 10 ticks: ties go to more processes, then byte order.
  auto labels = commands_labels(rig);
  EXPECT_EQ(labels[1], "my (odd) name,python3,setuid-tool");  // 103 is listed but has no /proc entry
  EXPECT_EQ(labels[2], "bash,defunct");

  // 102 works (its stat is read again each round on a fixture tree); 101 ends: its 60 ticks stay.
  write_process(copy.proc(), 102, "setuid-tool", 400, 100, 7000);
  write_process(copy.proc(), 100, "python3", 70, 10);
  fs::remove_all(copy.proc() + "/101");
  write_file(copy.dir.path() + "/cgroup/job_1/step_0/cgroup.procs", "");
  EXPECT_EQ(commands_labels(rig)[1], "setuid-tool,python3,my (odd) name");

  // pid 100 goes to another process (another start time): python3 keeps its 80 ticks.
  write_process(copy.proc(), 100, "gmx_mpi", 900, 100, 9000);
  EXPECT_EQ(commands_labels(rig)[1], "gmx_mpi,setuid-tool,python3,my (odd) name");

  // Job 2: seven names, the five that used most, summed per name; a ',' in a name reads '_'.
  std::string procs = "200\n201\n";
  const std::vector<std::tuple<int, std::string, int>> more{
      {210, "lmp", 300}, {211, "lmp", 300}, {212, "a,b", 500}, {213, "srun", 1},
      {214, "sleep", 0}, {215, "python3", 200}, {216, "tee", 0}};
  for (const auto& [pid, comm, ticks] : more) {
    write_process(copy.proc(), pid, comm, ticks, 0);
    procs += std::to_string(pid) + "\n";
  }
  write_file(copy.dir.path() + "/cgroup/job_2/cgroup.procs", procs);
  EXPECT_EQ(commands_labels(rig)[2], "lmp,a_b,python3,bash,defunct");

  // Once every process of a job ended, the label names what they used.
  write_file(copy.dir.path() + "/cgroup/job_2/cgroup.procs", "");
  write_file(copy.dir.path() + "/cgroup/job_1/cgroup.procs", "");
  labels = commands_labels(rig);
  EXPECT_EQ(labels[1], "gmx_mpi,setuid-tool,python3,my (odd) name");
  EXPECT_EQ(labels[2], "lmp,a_b,python3,bash,defunct");

  // A job that never had a process has no label.
  test::TempDir empty;
  write_file(empty.file("cgroup.procs"), "");
  Rig none("JobProc", {unified_job(3, empty.path())}, Roots{copy.proc(), "/nonexistent-sys"});
  EXPECT_EQ(commands_labels(none).count(3), 0u);
}

TEST(JobSensors, WithoutJobDiscoveryTheyAreUnavailable) {
  for (const char* name : {"JobProc", "Taskstats"}) {
    const SensorDefinition* definition = find_sensor(name);
    ASSERT_NE(definition, nullptr) << name;
    Options options = parse_pairs(*definition->options, {}, "test");
    auto sensor = definition->make(SensorContext{Roots{}, options});
    std::vector<Sample> samples;
    SampleWriter out(samples, "node", name, 1);
    try {
      sensor->sample(out);
      ADD_FAILURE() << name << " read without a job directory";
    } catch (const SensorUnavailable& why) {
      EXPECT_NE(std::string(why.what()).find("no job discovery"), std::string::npos) << why.what();
    }
  }
}

// ---------------------------------------------------------------------------------------
// Live: real processes in a job-like cgroup

// The thread's effective capabilities without CAP_NET_ADMIN, for the life of the object.
class WithoutNetAdmin {
 public:
  WithoutNetAdmin() {
    header_.version = _LINUX_CAPABILITY_VERSION_3;
    header_.pid = 0;
    if (::syscall(SYS_capget, &header_, saved_) != 0) return;
    __user_cap_data_struct lowered[2] = {saved_[0], saved_[1]};
    lowered[CAP_TO_INDEX(CAP_NET_ADMIN)].effective &= ~CAP_TO_MASK(CAP_NET_ADMIN);
    ok_ = ::syscall(SYS_capset, &header_, lowered) == 0;
  }
  ~WithoutNetAdmin() {
    if (ok_) ::syscall(SYS_capset, &header_, saved_);
  }
  bool ok() const { return ok_; }

 private:
  __user_cap_header_struct header_{};
  __user_cap_data_struct saved_[2]{};
  bool ok_ = false;
};

// Moves `pid` into the cgroup directory `dir`.
bool add_to_cgroup(const std::string& dir, pid_t pid) {
  std::ofstream procs(dir + "/cgroup.procs");
  procs << pid << "\n";
  procs.flush();
  return procs.good();
}

// Moves what is still in the cgroup `dir` to `root` (its hierarchy's root), then removes `dir`.
void remove_cgroup(const std::string& dir, const std::string& root) {
  std::ifstream procs(dir + "/cgroup.procs");
  for (long pid; procs >> pid;) std::ofstream(root + "/cgroup.procs") << pid << "\n";
  ::rmdir(dir.c_str());
}

// A job-like cgroup v1 directory: <sys>/fs/cgroup/cpuacct/fructosa-test-<pid>-<n>/job_4242.
class TestCgroup {
 public:
  TestCgroup() {
    static std::atomic<int> counter{0};
    if (::geteuid() != 0) {
      why_ = "not root: cannot make a cgroup";
      return;
    }
    hierarchy_ = "/sys/fs/cgroup/cpuacct";
    if (!fs::exists(hierarchy_ + "/cgroup.procs")) {
      why_ = "no cgroup v1 cpuacct hierarchy at " + hierarchy_;
      return;
    }
    parent_ = hierarchy_ + "/fructosa-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    if (::mkdir(parent_.c_str(), 0755) != 0) {
      why_ = "mkdir " + parent_ + ": " + std::strerror(errno);
      parent_.clear();
      return;
    }
    dir_ = parent_ + "/job_4242";
    if (::mkdir(dir_.c_str(), 0755) != 0) {
      why_ = "mkdir " + dir_ + ": " + std::strerror(errno);
      dir_.clear();
    }
  }
  ~TestCgroup() {
    if (!dir_.empty()) remove_cgroup(dir_, hierarchy_);
    if (!parent_.empty()) ::rmdir(parent_.c_str());
  }
  bool ok() const { return !dir_.empty(); }
  const std::string& why() const { return why_; }
  const std::string& dir() const { return dir_; }
  bool add(pid_t pid) { return add_to_cgroup(dir_, pid); }
  JobCgroup job() const {
    JobCgroup job;
    job.id = 4242;
    job.name = "job_4242";
    job.v1 = {{"cpuacct", dir_}};
    return job;
  }

 private:
  std::string hierarchy_, parent_, dir_, why_;
};

constexpr int kWrites = 1024;  // of 1 KiB each: taskstats rounds counts down to multiples of 1024
constexpr std::uint64_t kWritten = kWrites * 1024;

double thread_cpu_seconds() {
  timespec now;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

// A child process that, once told to go, writes kWritten bytes to `path` in 1 KiB write()s,
// burns 50 ms of CPU, says it is done and then waits to be killed. It uses only system calls
// after fork().
class Child {
 public:
  explicit Child(const std::string& path) {
    if (::pipe2(go_, O_CLOEXEC) != 0 || ::pipe2(done_, O_CLOEXEC) != 0) return;
    static char block[1024];
    std::memset(block, 'x', sizeof block);
    pid_ = ::fork();
    if (pid_ == 0) {
      char byte;
      if (::read(go_[0], &byte, 1) != 1) ::_exit(1);
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0) ::_exit(2);
      for (int i = 0; i < kWrites; ++i)
        if (::write(fd, block, sizeof block) != static_cast<ssize_t>(sizeof block)) ::_exit(3);
      ::close(fd);
      double start = thread_cpu_seconds();
      volatile std::uint64_t sink = 0;
      while (thread_cpu_seconds() - start < 0.05)
        for (int i = 0; i < 100000; ++i) sink = sink + static_cast<std::uint64_t>(i);
      if (::write(done_[1], "d", 1) != 1) ::_exit(4);
      for (;;) ::pause();
    }
  }
  ~Child() {
    stop();
    for (int fd : {go_[0], go_[1], done_[0], done_[1]})
      if (fd >= 0) ::close(fd);
  }
  pid_t pid() const { return pid_; }
  bool go() { return ::write(go_[1], "g", 1) == 1; }
  // Waits (up to 30 s) for the child to finish its work.
  bool wait_done() {
    pollfd poll_fd{done_[0], POLLIN, 0};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now())
                                      .count());
      int ready = ::poll(&poll_fd, 1, std::max(left, 1));
      if (ready > 0) {
        char byte;
        return ::read(done_[0], &byte, 1) == 1;
      }
      if (ready < 0 && errno != EINTR) return false;
    }
    return false;
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int go_[2] = {-1, -1};
  int done_[2] = {-1, -1};
};

bool on_tmpfs(const std::string& path) {
  struct statfs info;
  return ::statfs(path.c_str(), &info) == 0 && info.f_type == TMPFS_MAGIC;
}

// Skips the test when Taskstats cannot work here (no CAP_NET_ADMIN, no family).
#define SKIP_IF_TASKSTATS_REFUSED(reading)                                                 \
  if (!(reading).unavailable.empty()) GTEST_SKIP() << "Taskstats unavailable: " << (reading).unavailable

TEST(TaskstatsLive, SocketAnswersForThisThreadAndNotForAnEndedTask) {
  std::unique_ptr<TaskstatsSocket> socket;
  taskstats stats{};
  try {
    socket = std::make_unique<TaskstatsSocket>();
    int self = static_cast<int>(::syscall(SYS_gettid));
    ASSERT_EQ(socket->query(self, stats), TaskstatsSocket::Result::ok);
  } catch (const SensorUnavailable& why) {
    GTEST_SKIP() << why.what();
  }
  EXPECT_GE(stats.version, 1);
  EXPECT_EQ(stats.ac_pid, static_cast<std::uint32_t>(::getpid()));  // the main thread: tid == pid
  EXPECT_GE(socket->payload_size(), offsetof(taskstats, nivcsw) + sizeof stats.nivcsw);
  RecordProperty("taskstats_version", stats.version);
  RecordProperty("payload_bytes", static_cast<int>(socket->payload_size()));

  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(socket->query(child, stats), TaskstatsSocket::Result::gone);
}

TEST(TaskstatsLive, WithoutCapNetAdminTheReasonSaysSo) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot test dropping CAP_NET_ADMIN";
  std::string reason;
  {
    WithoutNetAdmin lowered;
    if (!lowered.ok()) GTEST_SKIP() << "capset failed: " << std::strerror(errno);
    auto jobs = JobDirectory::fixed({}, Roots{});
    Options options = parse_pairs(*find_sensor("Taskstats")->options, {}, "test");
    auto sensor = find_sensor("Taskstats")->make(SensorContext{Roots{}, options, jobs.get()});
    std::vector<Sample> samples;
    SampleWriter out(samples, "node", "Taskstats", 1);
    try {
      sensor->sample(out);
    } catch (const SensorUnavailable& why) {
      reason = why.what();
    }
  }
  if (reason.find("not found") != std::string::npos) GTEST_SKIP() << reason;
  EXPECT_NE(reason.find("needs CAP_NET_ADMIN"), std::string::npos) << "reason: '" << reason << "'";
  EXPECT_NE(reason.find("Operation not permitted"), std::string::npos) << reason;
}

TEST(JobSensorsLive, ChildInAJobCgroupIsAttributedToTheJob) {
  TestCgroup cgroup;
  if (!cgroup.ok()) GTEST_SKIP() << cgroup.why();
  test::TempDir dir;
  Child child(dir.file("out"));
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(cgroup.add(child.pid())) << "cannot write to " << cgroup.dir() << "/cgroup.procs";
  ASSERT_TRUE(child.go());
  ASSERT_TRUE(child.wait_done()) << "the child did not finish its writes";

  Rig proc("JobProc", {cgroup.job()}, Roots{});
  Reading p = read(proc);
  ASSERT_EQ(p.unavailable, "");
  EXPECT_EQ(p.at(0, "jobs"), 1);
  EXPECT_EQ(p.at(4242, "processes"), 1);
  EXPECT_EQ(p.at(4242, "unreadable_processes"), 0);
  EXPECT_GE(p.at(4242, "wchar"), kWritten);
  EXPECT_GE(p.at(4242, "syscw"), kWrites);
  EXPECT_GT(p.at(4242, "vm_rss"), 0);
  EXPECT_GE(p.at(4242, "vm_size"), p.at(4242, "vm_rss"));
  if (!on_tmpfs(dir.path())) { EXPECT_GE(p.at(4242, "write_bytes"), kWritten); }

  Rig stats("Taskstats", {cgroup.job()}, Roots{});
  Reading t = read(stats);
  child.stop();
  SKIP_IF_TASKSTATS_REFUSED(t);
  EXPECT_EQ(t.at(0, "jobs"), 1);
  EXPECT_EQ(t.at(4242, "tasks"), 1);
  EXPECT_EQ(t.at(4242, "processes"), 1);
  EXPECT_GE(t.at(4242, "write_char"), kWritten);
  EXPECT_GE(t.at(4242, "write_syscalls"), kWrites);
  EXPECT_GT(t.at(4242, "ac_utime") + t.at(4242, "ac_stime"), 0);
  EXPECT_GT(t.at(4242, "ac_etime"), 0);
  EXPECT_GT(t.at(4242, "nvcsw") + t.at(4242, "nivcsw"), 0);
  EXPECT_GT(t.at(4242, "hiwater_rss"), 0);
  EXPECT_GT(t.at(4242, "ac_minflt"), 0);
  if (!on_tmpfs(dir.path())) { EXPECT_GE(t.at(4242, "write_bytes"), kWritten); }
  RecordProperty("ac_utime_plus_stime_ms",
                 static_cast<int>(1000 * (t.at(4242, "ac_utime") + t.at(4242, "ac_stime"))));
}

TEST(JobSensorsLive, JobTotalsDoNotGoDownWhenAProcessEnds) {
  TestCgroup cgroup;
  if (!cgroup.ok()) GTEST_SKIP() << cgroup.why();
  test::TempDir dir;
  Child first(dir.file("first")), second(dir.file("second"));
  ASSERT_GT(first.pid(), 0);
  ASSERT_GT(second.pid(), 0);
  ASSERT_TRUE(cgroup.add(first.pid()));
  ASSERT_TRUE(cgroup.add(second.pid()));
  ASSERT_TRUE(first.go());
  ASSERT_TRUE(second.go());
  ASSERT_TRUE(first.wait_done());
  ASSERT_TRUE(second.wait_done());

  Rig stats("Taskstats", {cgroup.job()}, Roots{});
  Rig proc("JobProc", {cgroup.job()}, Roots{});
  Reading t1 = read(stats), p1 = read(proc);
  ASSERT_EQ(p1.unavailable, "");
  EXPECT_EQ(p1.at(4242, "processes"), 2);
  EXPECT_GE(p1.at(4242, "wchar"), 2 * kWritten);

  second.stop();  // killed and reaped: gone from the cgroup and from /proc
  Reading t2 = read(stats), p2 = read(proc);
  first.stop();
  EXPECT_EQ(p2.at(4242, "processes"), 1);
  EXPECT_GE(p2.at(4242, "wchar"), 2 * kWritten);
  for (const auto& [key, value] : p1.values.at(4242))
    if (proc.definition->catalog->find(key)->kind == Kind::counter) { EXPECT_GE(p2.at(4242, key), value) << key; }

  SKIP_IF_TASKSTATS_REFUSED(t1);
  EXPECT_EQ(t1.at(4242, "tasks"), 2);
  EXPECT_EQ(t2.at(4242, "tasks"), 1);
  EXPECT_GE(t2.at(4242, "write_char"), 2 * kWritten);
  EXPECT_GE(t2.at(4242, "write_syscalls"), 2 * kWrites);
  for (const auto& [key, value] : t1.values.at(4242))
    if (stats.definition->catalog->find(key)->kind == Kind::counter) { EXPECT_GE(t2.at(4242, key), value) << key; }
}

// ---------------------------------------------------------------------------------------
// Held files

// Sets the FdBudget's limit for the life of the object.
class BudgetLimit {
 public:
  explicit BudgetLimit(std::size_t limit) { FdBudget::set_limit(limit); }
  ~BudgetLimit() { FdBudget::set_limit(1024); }
};

TEST(HeldFiles, RereadsInPlaceFollowsReplacedFilesAndClosesWhatNoRoundRead) {
  test::TempDir dir;
  const std::string a = dir.file("a"), b = dir.file("b");
  write_file(a, "1\n");
  write_file(b, "x\n");
  const std::size_t before = FdBudget::held();
  {
    HeldFiles files;
    EXPECT_EQ(files.read(a).value_or("?"), "1\n");
    EXPECT_EQ(files.read(b).value_or("?"), "x\n");
    EXPECT_EQ(FdBudget::held(), before + 2);
    write_file(a, "22\n");  // rewritten in place
    EXPECT_EQ(files.read(a).value_or("?"), "22\n");
    // Replaced by another file at the same path (as a job's cgroup made again): the new one.
    write_file(dir.file("a.new"), "333\n");
    fs::rename(dir.file("a.new"), a);
    EXPECT_EQ(files.read(a).value_or("?"), "333\n");
    fs::remove(b);
    EXPECT_FALSE(files.read(b).has_value());
    EXPECT_EQ(FdBudget::held(), before + 1);  // b's descriptor went
    EXPECT_FALSE(files.read(dir.file("later")).has_value());
    files.sweep();  // read since the start: kept (b and `later` as absent)
    EXPECT_EQ(files.size(), 3u);
    // An absent file is looked for again only every kAbsentRounds sweeps.
    write_file(dir.file("later"), "4\n");
    for (int round = 1; round < HeldFiles::kAbsentRounds; ++round) {
      EXPECT_FALSE(files.read(dir.file("later")).has_value()) << "round " << round;
      files.sweep();
    }
    EXPECT_EQ(files.read(dir.file("later")).value_or("?"), "4\n");
    files.sweep();
    EXPECT_EQ(files.size(), 1u);  // `later`: a and b went at the first sweep that found them unread
    files.sweep();
    EXPECT_EQ(files.size(), 0u);
    EXPECT_EQ(FdBudget::held(), before);
    // A big file, read whole.
    std::string big(100000, 'z');
    write_file(a, big);
    EXPECT_EQ(files.read(a).value_or("?"), big);
    {
      BudgetLimit none(0);  // nothing may be held: read each time, the same content
      HeldFiles unheld;
      EXPECT_EQ(unheld.read(b).has_value(), false);
      write_file(b, "y\n");
      EXPECT_EQ(unheld.read(b).value_or("?"), "y\n");
      EXPECT_EQ(unheld.size(), 0u);
    }
  }
  EXPECT_EQ(FdBudget::held(), before);
}

// A child process that only waits to be killed.
pid_t sleeping_child() {
  pid_t pid = ::fork();
  if (pid == 0)
    for (;;) ::pause();
  return pid;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

TEST(JobProcLive, HeldFilesOfAProcessThatEndedWhileStillListedCountNothing) {
  // The job's cgroup.procs is a regular file naming two real processes, read under /proc.
  test::TempDir dir;
  fs::create_directories(dir.file("job_7"));
  pid_t first = sleeping_child(), second = sleeping_child();
  ASSERT_GT(first, 0);
  ASSERT_GT(second, 0);
  write_file(dir.file("job_7/cgroup.procs"), std::to_string(first) + "\n" + std::to_string(second) + "\n");
  const std::size_t before = FdBudget::held();
  for (std::size_t limit : {std::size_t{1024}, std::size_t{0}}) {
    SCOPED_TRACE("budget " + std::to_string(limit));
    BudgetLimit budget(limit);
    Rig proc("JobProc", {unified_job(7, dir.file("job_7"))}, Roots{});
    Reading r1 = read(proc);
    ASSERT_EQ(r1.unavailable, "");
    EXPECT_EQ(r1.at(7, "processes"), 2);
    EXPECT_GT(r1.at(7, "vm_rss"), 0);
    EXPECT_EQ(FdBudget::held(), before + (limit ? 4 : 0));  // status and io of each
    Reading r2 = read(proc);
    EXPECT_EQ(r2.at(7, "processes"), 2);
    EXPECT_GT(r2.at(7, "vm_rss"), 0);
  }
  // The first process ends but cgroup.procs still names it (the cgroup not read again yet):
  // its held files answer ESRCH, its /proc directory is gone, and it is not counted.
  Rig proc("JobProc", {unified_job(7, dir.file("job_7"))}, Roots{});
  EXPECT_EQ(read(proc).at(7, "processes"), 2);
  kill_and_reap(first);
  Reading r3 = read(proc);
  EXPECT_EQ(r3.at(7, "processes"), 1);
  EXPECT_EQ(FdBudget::held(), before + 2);
  kill_and_reap(second);
  EXPECT_EQ(read(proc).at(7, "processes"), 0);
  EXPECT_EQ(FdBudget::held(), before);
}

TEST(JobProcLive, CommandsFollowTheCpuOfHeldProcessesWithinTenRounds) {
  // Two real processes named by prctl: "aidle" waits, "burner" uses CPU once told to. Their
  // files are held, so stat is read again only in one round out of ten per process.
  test::TempDir dir;
  fs::create_directories(dir.file("job_9"));
  int go[2], done[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(done), 0);
  pid_t idle = ::fork();
  if (idle == 0) {
    ::prctl(PR_SET_NAME, "aidle");
    for (;;) ::pause();
  }
  pid_t burner = ::fork();
  if (burner == 0) {
    ::prctl(PR_SET_NAME, "burner");
    char byte;
    if (::read(go[0], &byte, 1) != 1) ::_exit(1);
    timespec start{}, now{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    do ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);  // 200 ms of CPU: 20 clock ticks
    while ((now.tv_sec - start.tv_sec) * 1'000'000'000L + (now.tv_nsec - start.tv_nsec) < 200'000'000L);
    if (::write(done[1], "x", 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  ASSERT_GT(idle, 0);
  ASSERT_GT(burner, 0);
  // Each has its name once /proc says so (prctl runs after fork returns).
  for (int tries = 0; tries < 200; ++tries) {
    std::string a, b;
    std::ifstream(fmt::format("/proc/{}/comm", idle)) >> a;
    std::ifstream(fmt::format("/proc/{}/comm", burner)) >> b;
    if (a == "aidle" && b == "burner") break;
    ::usleep(5000);
  }
  write_file(dir.file("job_9/cgroup.procs"), fmt::format("{}\n{}\n", idle, burner));
  {
    const std::size_t before = FdBudget::held();
    Rig proc("JobProc", {unified_job(9, dir.file("job_9"))}, Roots{});
    EXPECT_EQ(commands_labels(proc)[9], "aidle,burner");  // no CPU yet: byte order
    EXPECT_EQ(FdBudget::held(), before + 4);               // status and io of each, no stat
    char byte;
    ASSERT_EQ(::write(go[1], "x", 1), 1);
    ASSERT_EQ(::read(done[0], &byte, 1), 1);
    int rounds = 0;
    while (commands_labels(proc)[9] != "burner,aidle" && rounds < 12) ++rounds;
    EXPECT_LT(rounds, 10) << "the burner's CPU was not seen within ten rounds";
  }
  kill_and_reap(idle);
  kill_and_reap(burner);
  for (int fd : {go[0], go[1], done[0], done[1]}) ::close(fd);
}

void* pause_forever(void*) {
  for (;;) ::pause();
}

TEST(TaskstatsLive, EveryThreadOfAProcessIsReadRoundAfterRound) {
  // A process of three threads; the second round lists its held task directory again.
  test::TempDir dir;
  fs::create_directories(dir.file("job_8"));
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    pthread_t thread;
    for (int i = 0; i < 2; ++i)
      if (::pthread_create(&thread, nullptr, pause_forever, nullptr) != 0) ::_exit(1);
    if (::write(ready[1], "x", 1) != 1) ::_exit(1);
    pause_forever(nullptr);
  }
  ASSERT_GT(child, 0);
  char byte;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ::close(ready[1]);
  write_file(dir.file("job_8/cgroup.procs"), std::to_string(child) + "\n");
  Rig stats("Taskstats", {unified_job(8, dir.file("job_8"))}, Roots{});
  Reading r1 = read(stats);
  if (!r1.unavailable.empty()) kill_and_reap(child);
  SKIP_IF_TASKSTATS_REFUSED(r1);
  EXPECT_EQ(r1.at(8, "processes"), 1);
  EXPECT_EQ(r1.at(8, "tasks"), 3);
  Reading r2 = read(stats);
  EXPECT_EQ(r2.at(8, "tasks"), 3);
  EXPECT_GE(r2.at(8, "nvcsw"), r1.at(8, "nvcsw"));
  kill_and_reap(child);  // still listed by cgroup.procs: its held directory counts no thread now
  Reading r3 = read(stats);
  EXPECT_EQ(r3.at(8, "processes"), 0);
  EXPECT_EQ(r3.at(8, "tasks"), 0);
}

// A cgroup v2 hierarchy mounted for the test in a temporary directory, with a job directory.
class TestCgroup2 {
 public:
  TestCgroup2() {
    if (::geteuid() != 0) {
      why_ = "not root: cannot mount cgroup2";
      return;
    }
    if (::mount("none", mount_.path().c_str(), "cgroup2", 0, nullptr) != 0) {
      why_ = std::string("mount -t cgroup2: ") + std::strerror(errno);
      return;
    }
    mounted_ = true;
    // Every cgroup2 mount shows the one hierarchy: a name of this process's own.
    static std::atomic<int> counter{0};
    dir_ = mount_.path() + "/fructosa-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    if (::mkdir(dir_.c_str(), 0755) != 0) {
      why_ = "mkdir " + dir_ + ": " + std::strerror(errno);
      dir_.clear();
    }
  }
  ~TestCgroup2() {
    if (!dir_.empty()) remove_cgroup(dir_, mount_.path());
    if (mounted_) ::umount2(mount_.path().c_str(), MNT_DETACH);
  }
  bool ok() const { return !dir_.empty(); }
  const std::string& why() const { return why_; }
  bool add(pid_t pid) { return add_to_cgroup(dir_, pid); }
  JobCgroup job() const { return unified_job(4343, dir_); }
  const std::string& dir() const { return dir_; }
  const std::string& root() const { return mount_.path(); }

 private:
  test::TempDir mount_;
  bool mounted_ = false;
  std::string dir_, why_;
};

// The walk of a job's cgroups on cgroup v2 holds each directory and learns from inotify which
// gained or lost a subdirectory: child cgroups that come, go, or go as another comes (the same
// link count), and grandchildren, are all found at the next instant.
TEST(JobSensorsLive, ProcessesFollowChildCgroupsThatComeAndGoOnCgroupV2) {
  TestCgroup2 cgroup;
  if (!cgroup.ok()) GTEST_SKIP() << cgroup.why();
  std::vector<pid_t> children;
  struct Reap {
    std::vector<pid_t>& pids;
    ~Reap() {
      for (pid_t pid : pids) kill_and_reap(pid);
    }
  } reap{children};
  auto start_in = [&](const std::string& dir) {
    pid_t pid = sleeping_child();
    children.push_back(pid);
    return pid > 0 && add_to_cgroup(dir, pid) ? pid : -1;
  };
  const std::string job = cgroup.dir();
  struct Removal {  // deepest first, once their processes are gone
    std::vector<std::string> dirs;
    std::string root;
    ~Removal() {
      for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) remove_cgroup(*it, root);
    }
  } removal{{}, cgroup.root()};
  auto make = [&](const std::string& dir) {
    removal.dirs.push_back(dir);
    return ::mkdir(dir.c_str(), 0755) == 0;
  };
  auto sorted = [](std::vector<int> pids) {
    std::sort(pids.begin(), pids.end());
    return pids;
  };
  auto jobs = JobDirectory::fixed({cgroup.job()}, Roots{});
  const JobCgroup& listed = jobs->snapshot()->jobs.at(0);

  ASSERT_TRUE(make(job + "/step_0"));
  int a = start_in(job + "/step_0");
  ASSERT_GT(a, 0);
  EXPECT_EQ(jobs->processes(listed, 1), (std::vector<int>{a}));
  EXPECT_EQ(jobs->processes(listed, 2), (std::vector<int>{a}));  // nothing changed

  ASSERT_TRUE(make(job + "/step_1"));  // a new child
  int b = start_in(job + "/step_1");
  ASSERT_GT(b, 0);
  EXPECT_EQ(jobs->processes(listed, 3), sorted({a, b}));

  ASSERT_TRUE(add_to_cgroup(job + "/step_1", a));  // step_0 goes as step_2 comes
  ASSERT_EQ(::rmdir((job + "/step_0").c_str()), 0) << std::strerror(errno);
  ASSERT_TRUE(make(job + "/step_2"));
  int c = start_in(job + "/step_2");
  ASSERT_GT(c, 0);
  EXPECT_EQ(jobs->processes(listed, 4), sorted({a, b, c}));

  ASSERT_TRUE(make(job + "/step_2/task_0"));  // a grandchild under a leaf
  int d = start_in(job + "/step_2/task_0");
  ASSERT_GT(d, 0);
  EXPECT_EQ(jobs->processes(listed, 5), sorted({a, b, c, d}));
}

// JobProc and JobCgroup on a live job of two processes, one of which ends, with and without
// descriptors in the budget. `walk_held`: descriptors the cgroup walk holds for the job.
template <class Cgroup>
void held_files_follow_the_job(Cgroup& cgroup, std::size_t walk_held) {
  const std::uint64_t id = cgroup.job().id;
  pid_t first = sleeping_child(), second = sleeping_child();
  ASSERT_GT(first, 0);
  ASSERT_GT(second, 0);
  ASSERT_TRUE(cgroup.add(first));
  ASSERT_TRUE(cgroup.add(second));
  const std::size_t before = FdBudget::held();
  {
    BudgetLimit none(0);
    Rig proc("JobProc", {cgroup.job()}, Roots{});
    Rig accounting("JobCgroup", {cgroup.job()}, Roots{});
    EXPECT_EQ(read(proc).at(id, "processes"), 2);
    EXPECT_EQ(read(accounting).at(id, "tasks"), 2);
    EXPECT_EQ(FdBudget::held(), before);
  }
  {
    Rig proc("JobProc", {cgroup.job()}, Roots{});
    Rig accounting("JobCgroup", {cgroup.job()}, Roots{});
    EXPECT_EQ(read(proc).at(id, "processes"), 2);
    const std::size_t with_proc = FdBudget::held();
    EXPECT_EQ(with_proc, before + 2 * 2 + walk_held);  // status and io of each process
    Reading a1 = read(accounting);
    EXPECT_EQ(a1.at(id, "tasks"), 2);
    EXPECT_GT(FdBudget::held(), with_proc);  // the job's accounting files
    kill_and_reap(second);
    Reading p2 = read(proc), a2 = read(accounting);
    EXPECT_EQ(p2.at(id, "processes"), 1);
    EXPECT_EQ(a2.at(id, "tasks"), 1);
    EXPECT_GE(a2.at(id, "cpu.usage"), a1.at(id, "cpu.usage"));
    kill_and_reap(first);
    EXPECT_EQ(read(proc).at(id, "processes"), 0);
    EXPECT_EQ(read(accounting).at(id, "tasks"), 0);
  }
  EXPECT_EQ(FdBudget::held(), before);
}

TEST(JobSensorsLive, HeldFilesFollowAJobOnCgroupV1) {
  TestCgroup cgroup;
  if (!cgroup.ok()) GTEST_SKIP() << cgroup.why();
  held_files_follow_the_job(cgroup, 0);  // v1 caches a held cgroup.procs's list: not held
}

TEST(JobSensorsLive, HeldFilesFollowAJobOnCgroupV2) {
  TestCgroup2 cgroup;
  if (!cgroup.ok()) GTEST_SKIP() << cgroup.why();
  held_files_follow_the_job(cgroup, 2);  // the job's directory and its cgroup.procs
}

}  // namespace
