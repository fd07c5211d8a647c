// Taskstats and JobProc, the per-job sensors that read each job's processes.
//
// Both sensors are checked live on real child processes placed in a job-like cgroup v1
// directory made for the test (root only; skipped with the reason otherwise): the child's
// write() I/O and CPU time must show up in its job, and a job's totals must not go down when one
// of its processes ends. Taskstats also needs CAP_NET_ADMIN, and its message without it is
// checked by dropping the capability from this thread. JobProc's exact figures on a fixture and
// the held files: job_proc_test.cpp.
#include "job_sensors_test_support.h"

using namespace fructosa;
using namespace fructosa::test;

namespace {

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
  // Not its CPU time: ac_utime and ac_stime are sampled at ticks and are both 0 for a child
  // that ran less than one (seen), and cpu_run_real_total needs delay accounting.
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
