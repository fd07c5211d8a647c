// JobProc, checked exactly on a synthesized procfs + cgroup tree (tests/fixtures/jobs-proc,
// README there), including processes that end, pids that are reused and io that cannot be
// read; and the files JobProc, JobCgroup and the cgroup walk keep open between rounds
// (HeldFiles, FdBudget), on regular files, on real /proc entries of processes that end while
// still listed, and with no budget at all.
#include "job_sensors_test_support.h"

using namespace fructosa;
using namespace fructosa::test;

namespace {

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

// ---------------------------------------------------------------------------------------
// Held files

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

}  // namespace
