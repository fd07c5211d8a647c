// PerfHW (sensors/perf_hw.cpp): the event-name table and its encodings (no perf needed), and
// live readings with software events per node, per job cgroup (a busy child process moved into
// a scratch cgroup v2 directory) and across a release. The live tests skip, with the reason,
// where perf_event_open or cgroups are refused (no root, perf_event_paranoid, containers).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "jobs.h"
#include "perf_events.h"
#include "sensor.h"
#include "test_support.h"

using namespace fructosa;
using namespace fructosa::sensors;
namespace fs = std::filesystem;

namespace {

struct Probe {
  Options options;
  std::unique_ptr<JobDirectory> jobs;
  std::unique_ptr<Sensor> sensor;
};

// PerfHW with `pairs` (release_file empty unless given: the default path is the machine's).
std::unique_ptr<Probe> make(std::vector<std::string> pairs, std::vector<JobCgroup> jobs = {},
                            bool with_jobs = false) {
  const SensorDefinition* definition = find_sensor("PerfHW");
  if (!definition) throw std::runtime_error("no sensor PerfHW");
  bool release_given = false;
  for (const auto& pair : pairs) release_given |= pair.rfind("release_file=", 0) == 0;
  if (!release_given) pairs.push_back("release_file=");
  auto probe = std::make_unique<Probe>();
  probe->options = parse_pairs(*definition->options, pairs, "test");
  Roots roots;
  if (with_jobs) probe->jobs = JobDirectory::fixed(std::move(jobs), roots);
  probe->sensor = definition->make(SensorContext{roots, probe->options, probe->jobs.get()});
  return probe;
}

// job id -> key -> value, and the node sample's labels.
struct Reading {
  bool reported = false;
  std::map<std::uint64_t, std::map<std::string, double>> values;
  std::map<std::string, std::string> labels;
  double at(std::uint64_t job, const std::string& key) const {
    auto sample = values.find(job);
    if (sample == values.end()) return -1;
    auto value = sample->second.find(key);
    return value == sample->second.end() ? -1 : value->second;
  }
};

Reading read(Probe& probe) {
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "PerfHW", 1);
  Reading reading;
  reading.reported = probe.sensor->sample(out);
  for (const auto& sample : samples) {
    auto& values = reading.values[sample.job];
    for (const auto& metric : sample.metrics) {
      EXPECT_EQ(values.count(metric.key), 0u) << "duplicate key " << metric.key;
      values[metric.key] = metric.value;
    }
    if (sample.job == 0)
      for (const auto& label : sample.labels) reading.labels[label.key] = label.value;
  }
  return reading;
}

// The first reading only starts the counters (nothing reported); then a real one.
Reading start_and_read(Probe& probe) {
  Reading priming = read(probe);
  EXPECT_FALSE(priming.reported);
  EXPECT_TRUE(priming.values.empty());
  return read(probe);
}

// Why this process may not count system-wide (the privilege cgroup mode needs too); "" if it may.
std::string perf_refusal() {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_TASK_CLOCK;
  attr.disabled = 1;
  int fd = static_cast<int>(::syscall(SYS_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) return std::string("perf_event_open(task_clock, cpu 0): ") + std::strerror(errno);
  ::close(fd);
  return "";
}

// This process's open perf event fds.
int perf_fds() {
  int count = 0;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd", error)) {
    std::error_code link_error;
    auto target = fs::read_symlink(entry.path(), link_error);
    if (!link_error && target.string() == "anon_inode:[perf_event]") ++count;
  }
  return count;
}

// Work that makes page faults and context switches on this CPU.
void make_work() {
  std::vector<char> pages(1 << 20);
  for (std::size_t i = 0; i < pages.size(); i += 4096) pages[i] = 1;
  std::this_thread::yield();
}

// Reads until `done` says the reading is what it waits for (or 20 s pass).
Reading read_until(Probe& probe, const std::function<bool(const Reading&)>& done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  Reading reading;
  do {
    make_work();
    reading = read(probe);
  } while (!done(reading) && std::chrono::steady_clock::now() < deadline);
  return reading;
}

// ---------------------------------------------------------------- the name table

const std::vector<std::string> kColmetNames{
    "cpu_cycles",        "instructions",        "cache_references",
    "cache_misses",      "branch_instructions", "branch_misses",
    "bus_cycles",        "ref_cpu_cycles",      "cache_l1d",
    "cache_ll",          "cache_dtlb",          "cache_itlb",
    "cache_bpu",         "cache_node",          "cache_op_read",
    "cache_op_prefetch", "cache_result_access", "cpu_clock",
    "task_clock",        "page_faults",         "context_switches",
    "cpu_migrations",    "page_faults_min",     "page_faults_maj",
    "alignment_faults",  "emulation_faults",    "dummy",
    "bpf_output"};

TEST(PerfHwEvents, AcceptsEveryColmetName) {
  ASSERT_EQ(perf::colmet_event_names().size(), 28u);
  std::vector<std::string> names(perf::colmet_event_names().begin(),
                                 perf::colmet_event_names().end());
  EXPECT_EQ(names, kColmetNames);
  const Catalog& catalog = *find_sensor("PerfHW")->catalog;
  for (const auto& name : kColmetNames) {
    EXPECT_TRUE(perf::find_event(name)) << name;
    // Each has its own catalog line (its meaning), not only the cache_* wildcard.
    const CatalogEntry* entry = catalog.find(name);
    ASSERT_NE(entry, nullptr) << name;
    EXPECT_EQ(entry->pattern, name);
    EXPECT_EQ(entry->kind, Kind::counter);
  }
  // A sensor with all 28 at once is accepted (no cap on the number of events).
  std::string all;
  for (const auto& name : kColmetNames) all += (all.empty() ? "" : ",") + name;
  EXPECT_NO_THROW(make({"scope=node", "events=" + all}));
}

// Numbers from linux/perf_event.h, written out so the table is checked against the ABI.
TEST(PerfHwEvents, ColmetNamesEncodeAsThePerfAbi) {
  constexpr std::uint32_t hw = 0, sw = 1, hw_cache = 3;
  const std::map<std::string, std::tuple<std::uint32_t, std::uint64_t, bool>> expected{
      {"cpu_cycles", {hw, 0, false}},
      {"instructions", {hw, 1, false}},
      {"cache_references", {hw, 2, false}},
      {"cache_misses", {hw, 3, false}},
      {"branch_instructions", {hw, 4, false}},
      {"branch_misses", {hw, 5, false}},
      {"bus_cycles", {hw, 6, false}},
      {"ref_cpu_cycles", {hw, 9, false}},
      // (cache, op, result): (id, read = 0, access = 0) as colmet's bare enum values meant.
      {"cache_l1d", {hw_cache, 0x0, false}},
      {"cache_ll", {hw_cache, 0x2, false}},
      {"cache_dtlb", {hw_cache, 0x3, false}},
      {"cache_itlb", {hw_cache, 0x4, false}},
      {"cache_bpu", {hw_cache, 0x5, false}},
      {"cache_node", {hw_cache, 0x6, false}},
      {"cache_op_read", {hw_cache, 0x0, false}},        // L1D read access
      {"cache_op_prefetch", {hw_cache, 0x200, false}},  // L1D prefetch access (colmet: 0x2)
      {"cache_result_access", {hw_cache, 0x0, false}},  // L1D read access
      {"cpu_clock", {sw, 0, true}},
      {"task_clock", {sw, 1, true}},
      {"page_faults", {sw, 2, false}},
      {"context_switches", {sw, 3, false}},
      {"cpu_migrations", {sw, 4, false}},
      {"page_faults_min", {sw, 5, false}},
      {"page_faults_maj", {sw, 6, false}},
      {"alignment_faults", {sw, 7, false}},
      {"emulation_faults", {sw, 8, false}},
      {"dummy", {sw, 9, false}},
      {"bpf_output", {sw, 10, false}},
  };
  ASSERT_EQ(expected.size(), 28u);
  for (const auto& [name, code] : expected) {
    auto event = perf::find_event(name);
    ASSERT_TRUE(event) << name;
    EXPECT_EQ(event->type, std::get<0>(code)) << name;
    EXPECT_EQ(event->config, std::get<1>(code)) << name;
    EXPECT_EQ(event->nanoseconds, std::get<2>(code)) << name;
  }
}

TEST(PerfHwEvents, ComposedCacheNamesEncodeCacheOpResult) {
  const std::vector<std::pair<std::string, std::uint64_t>> caches{
      {"l1d", 0}, {"l1i", 1}, {"ll", 2}, {"dtlb", 3}, {"itlb", 4}, {"bpu", 5}, {"node", 6}};
  const std::vector<std::pair<std::string, std::uint64_t>> ops{
      {"read", 0}, {"write", 1}, {"prefetch", 2}};
  const std::vector<std::pair<std::string, std::uint64_t>> results{{"access", 0}, {"miss", 1}};
  const Catalog& catalog = *find_sensor("PerfHW")->catalog;
  std::size_t count = 0;
  for (const auto& [cache, id] : caches)
    for (const auto& [op, op_id] : ops)
      for (const auto& [result, result_id] : results) {
        std::string name = "cache_" + cache + "_" + op + "_" + result;
        auto event = perf::find_event(name);
        ASSERT_TRUE(event) << name;
        EXPECT_EQ(event->type, 3u) << name;
        EXPECT_EQ(event->config, id | op_id << 8 | result_id << 16) << name;
        EXPECT_EQ(event->config, perf::cache_config(id, op_id, result_id));
        ASSERT_NE(catalog.find(name), nullptr) << name;
        EXPECT_EQ(catalog.find(name)->pattern, "cache_*");
        ++count;
      }
  EXPECT_EQ(count, 42u);
  // A few by hand.
  EXPECT_EQ(perf::find_event("cache_ll_read_miss")->config, 0x10002u);
  EXPECT_EQ(perf::find_event("cache_dtlb_write_miss")->config, 0x10103u);
  EXPECT_EQ(perf::find_event("cache_l1d_prefetch_access")->config, 0x200u);
  EXPECT_EQ(perf::find_event("cache_op_prefetch"), perf::find_event("cache_l1d_prefetch_access"));
  EXPECT_EQ(perf::find_event("cache_l1d"), perf::find_event("cache_l1d_read_access"));
  EXPECT_EQ(perf::event_names().size(), 28u + 42u);
  for (const auto& name : perf::event_names()) EXPECT_TRUE(perf::find_event(name)) << name;
  // The scaling keys have their own catalog line.
  EXPECT_EQ(catalog.find("scaling.cache_ll_read_miss")->pattern, "scaling.*");
  EXPECT_EQ(catalog.find("scaling.task_clock")->pattern, "scaling.*");
}

TEST(PerfHwEvents, UnknownNamesAreNotEvents) {
  for (const char* name :
       {"", "cycles", "cache_", "cache_l2_read_miss", "cache_l1d_read", "cache_l1d_read_miss_x",
        "cache_l1d_load_miss", "cache_l1d__miss", "Task_clock", "task_clock "})
    EXPECT_FALSE(perf::find_event(name)) << '"' << name << '"';
}

TEST(PerfHwEvents, UnknownEventIsAConfigErrorNamingIt) {
  try {
    make({"scope=node", "events=task_clock,bogus,cache_l9_read_miss"});
    FAIL() << "no ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("bogus"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("cache_l9_read_miss"), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("events"), std::string::npos) << error.what();
  }
  EXPECT_THROW(make({"scope=node", "events="}), ConfigError);
  EXPECT_THROW(make({"scope=cluster"}), ConfigError);  // scope's choices
}

TEST(PerfHwEvents, ParsesCpuLists) {
  using List = std::vector<int>;
  EXPECT_EQ(perf::parse_cpu_list("0-3,8,10-11\n"), (List{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(perf::parse_cpu_list("0\n"), (List{0}));
  EXPECT_EQ(perf::parse_cpu_list("5-5"), (List{5}));
  EXPECT_EQ(perf::parse_cpu_list("\n"), (List{}));
  EXPECT_FALSE(perf::parse_cpu_list("a-b"));
  EXPECT_FALSE(perf::parse_cpu_list("3-1"));
  EXPECT_FALSE(perf::parse_cpu_list("1,,2"));
  EXPECT_FALSE(perf::parse_cpu_list("1-"));
}

TEST(PerfHw, JobScopeWithoutJobDiscoveryIsUnavailable) {
  auto probe = make({"scope=job", "events=task_clock"});
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "PerfHW", 1);
  try {
    probe->sensor->sample(out);
    FAIL() << "no SensorUnavailable";
  } catch (const SensorUnavailable& why) {
    EXPECT_NE(std::string(why.what()).find("job discovery"), std::string::npos) << why.what();
  }
}

// ---------------------------------------------------------------- live, per node

TEST(PerfHw, NodeSoftwareEventsCountAndNeverGoBack) {
  if (auto why = perf_refusal(); !why.empty()) GTEST_SKIP() << why;
  auto probe =
      make({"scope=node", "events=task_clock,context_switches,page_faults", "scaling=true"});
  Reading first = start_and_read(*probe);
  ASSERT_TRUE(first.reported);
  ASSERT_EQ(first.values.size(), 1u);  // the node's sample only
  for (const char* key : {"task_clock", "context_switches", "page_faults"})
    EXPECT_GE(first.at(0, key), 0) << key;
  Reading second = read_until(*probe, [&](const Reading& reading) {
    for (const char* key : {"task_clock", "context_switches", "page_faults"})
      if (!(reading.at(0, key) > 0 && reading.at(0, key) > first.at(0, key))) return false;
    return true;
  });
  for (const char* key : {"task_clock", "context_switches", "page_faults"}) {
    EXPECT_GT(second.at(0, key), 0) << key;
    EXPECT_GE(second.at(0, key), first.at(0, key)) << key;
    // Software events are never multiplexed: enabled == running.
    EXPECT_DOUBLE_EQ(second.at(0, "scaling." + std::string(key)), 1.0) << key;
  }
  Reading third = read(*probe);
  for (const char* key : {"task_clock", "context_switches", "page_faults"})
    EXPECT_GE(third.at(0, key), second.at(0, key)) << key;
}

TEST(PerfHw, RefusedEventsAreLeftOutOrTheSensorIsUnavailable) {
  if (auto why = perf_refusal(); !why.empty()) GTEST_SKIP() << why;
  // With task_clock, the sensor works whether or not the CPU has cycles and instructions
  // counters (VMs often have none: ENOENT); the refused ones are simply not reported.
  auto mixed = make({"scope=node", "events=cpu_cycles,task_clock,instructions"});
  Reading reading = start_and_read(*mixed);
  ASSERT_TRUE(reading.reported);
  EXPECT_GE(reading.at(0, "task_clock"), 0);
  bool pmu = reading.values[0].count("cpu_cycles") > 0;
  // Hardware events alone: counted where there is a PMU, else unavailable naming each.
  auto hardware = make({"scope=node", "events=cpu_cycles,instructions"});
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "PerfHW", 1);
  try {
    EXPECT_FALSE(hardware->sensor->sample(out));  // starts them
    EXPECT_TRUE(hardware->sensor->sample(out));
    EXPECT_TRUE(pmu) << "cpu_cycles counted alone but not with task_clock";
  } catch (const SensorUnavailable& why) {
    EXPECT_FALSE(pmu);
    std::string text = why.what();
    EXPECT_NE(text.find("cpu_cycles: perf_event_open: "), std::string::npos) << text;
    EXPECT_NE(text.find("instructions: perf_event_open: "), std::string::npos) << text;
  }
}

TEST(PerfHw, ReleaseFileClosesTheCountersUntilItIsGone) {
  if (auto why = perf_refusal(); !why.empty()) GTEST_SKIP() << why;
  test::TempDir dir;
  const std::string release = dir.file("perf-release");
  int fds_before = perf_fds();
  auto probe =
      make({"scope=node", "events=task_clock,context_switches", "release_file=" + release});
  EXPECT_FALSE(read(*probe).reported);  // starts the counters
  Reading first = read_until(*probe, [](const Reading& r) { return r.at(0, "task_clock") > 0; });
  ASSERT_GT(first.at(0, "task_clock"), 0);
  EXPECT_GT(perf_fds(), fds_before);

  std::ofstream(release).put('\n');
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "PerfHW", 1);
  EXPECT_FALSE(probe->sensor->sample(out));  // released: nothing to report
  EXPECT_TRUE(samples.empty());
  EXPECT_EQ(perf_fds(), fds_before);  // every counter closed
  EXPECT_FALSE(probe->sensor->sample(out));
  EXPECT_TRUE(samples.empty());

  fs::remove(release);
  Reading again = start_and_read(*probe);  // opened again: the first reading only starts them
  ASSERT_TRUE(again.reported);
  EXPECT_GT(perf_fds(), fds_before);
  // Counts carry on from where they were before the release.
  EXPECT_GE(again.at(0, "task_clock"), first.at(0, "task_clock"));
  EXPECT_GE(again.at(0, "context_switches"), first.at(0, "context_switches"));
  Reading later = read_until(
      *probe, [&](const Reading& r) { return r.at(0, "task_clock") > first.at(0, "task_clock"); });
  EXPECT_GT(later.at(0, "task_clock"), first.at(0, "task_clock"));
  probe.reset();
  EXPECT_EQ(perf_fds(), fds_before);
}

// ---------------------------------------------------------------- live, per job

TEST(PerfHw, JobWithoutPerfEventCgroupOrGoneIsNotCounted) {
  if (auto why = perf_refusal(); !why.empty()) GTEST_SKIP() << why;
  // A job only in v1 hierarchies other than perf_event: it cannot be counted.
  JobCgroup v1_only{
      .id = 7, .name = "job_7", .unified = "", .v1 = {{"cpuset", "/nonexistent/cpuset/job_7"}}};
  auto refused = make({"scope=job", "events=task_clock"}, {v1_only}, true);
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "PerfHW", 1);
  try {
    refused->sensor->sample(out);
    FAIL() << "no SensorUnavailable";
  } catch (const SensorUnavailable& why) {
    EXPECT_NE(std::string(why.what()).find("job 7: no perf_event cgroup"), std::string::npos)
        << why.what();
  }
  // A job whose directory is gone (it just ended): skipped silently.
  JobCgroup gone{.id = 8, .name = "job_8", .unified = "/nonexistent/unified/job_8", .v1 = {}};
  auto probe = make({"scope=job", "events=task_clock"}, {gone}, true);
  Reading reading = start_and_read(*probe);
  ASSERT_TRUE(reading.reported);
  EXPECT_EQ(reading.values.count(8), 0u);
  EXPECT_EQ(reading.at(0, "jobs_counted"), 0);
}

// The cgroup v2 mount ("" when none).
std::string cgroup2_mount() {
  std::ifstream mounts("/proc/self/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string device, path, type;
    fields >> device >> path >> type;
    if (type == "cgroup2") return path;
  }
  return "";
}

// A scratch cgroup with a busy child process in it; both gone at the end.
class BusyCgroup {
 public:
  // Empty reason(): ready.
  BusyCgroup() {
    std::string mount = cgroup2_mount();
    if (mount.empty()) {
      reason_ = "no cgroup2 mount in /proc/self/mounts";
      return;
    }
    dir_ = mount + "/fructosa-perf-test-" + std::to_string(::getpid());
    if (::mkdir(dir_.c_str(), 0755) != 0) {
      reason_ = "mkdir " + dir_ + ": " + std::strerror(errno);
      dir_.clear();
      return;
    }
    child_ = ::fork();
    if (child_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      volatile unsigned spin = 0;
      for (;;) spin = spin + 1;
    }
    if (child_ < 0) {
      reason_ = std::string("fork: ") + std::strerror(errno);
      return;
    }
    std::ofstream procs(dir_ + "/cgroup.procs");
    procs << child_ << "\n";
    procs.flush();
    if (!procs) reason_ = "cannot move a process into " + dir_ + "/cgroup.procs";
  }
  ~BusyCgroup() {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
    if (dir_.empty()) return;
    // The cgroup empties when the killed child is reaped; rmdir says EBUSY until then.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (::rmdir(dir_.c_str()) != 0 && errno == EBUSY &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
  }
  const std::string& reason() const { return reason_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::string reason_;
  pid_t child_ = -1;
};

TEST(PerfHw, JobCgroupCountsItsBusyProcess) {
  if (auto why = perf_refusal(); !why.empty()) GTEST_SKIP() << why;
  BusyCgroup cgroup;
  if (!cgroup.reason().empty()) GTEST_SKIP() << cgroup.reason();
  JobCgroup job{.id = 4242, .name = "job_4242", .unified = cgroup.dir(), .v1 = {}};
  {
    auto probe =
        make({"scope=job", "events=task_clock,context_switches", "scaling=true"}, {job}, true);
    try {
      EXPECT_FALSE(read(*probe).reported);  // opens the job's counters
    } catch (const SensorUnavailable& why) {
      GTEST_SKIP() << "perf cgroup mode refused: " << why.what();
    }
    Reading first = read(*probe);
    ASSERT_TRUE(first.reported);
    ASSERT_EQ(first.values.count(4242), 1u);
    EXPECT_EQ(first.at(0, "jobs_counted"), 1);
    Reading second = read_until(*probe, [&](const Reading& r) {
      return r.at(4242, "task_clock") > first.at(4242, "task_clock");
    });
    EXPECT_GT(second.at(4242, "task_clock"), first.at(4242, "task_clock"));
    EXPECT_GE(second.at(4242, "context_switches"), first.at(4242, "context_switches"));
    EXPECT_DOUBLE_EQ(second.at(4242, "scaling.task_clock"), 1.0);
    EXPECT_EQ(second.values[4242].size(), 4u);  // two events and their scaling
  }
}

// Too few file descriptors: the jobs that fit are counted, the others are tried again at the
// next round. Runs in a child process (a death test): it lowers the hard RLIMIT_NOFILE (which
// defeats the sensor's raise of the soft limit), and that cannot be undone without
// CAP_SYS_RESOURCE. Fds taken by /dev/null handles stand for other jobs' counters; closing
// them (as those jobs end) makes room.
TEST(PerfHw, JobsThatDoNotFitInTheFdLimitAreCountedLater) {
  if (auto why = perf_refusal(); !why.empty()) GTEST_SKIP() << why;
  std::string root = cgroup2_mount();
  if (root.empty()) GTEST_SKIP() << "no cgroup2 mount";
  // Two jobs on the same (root) cgroup: each needs a directory fd and one counter per CPU.
  std::vector<JobCgroup> jobs{JobCgroup{.id = 1, .name = "job_1", .unified = root, .v1 = {}},
                              JobCgroup{.id = 2, .name = "job_2", .unified = root, .v1 = {}}};
  try {
    auto probe = make({"scope=job", "events=task_clock"}, jobs, true);
    read(*probe);
  } catch (const SensorUnavailable& why) {
    GTEST_SKIP() << "perf cgroup mode on " << root << " refused: " << why.what();
  }
  auto scenario = [&]() -> std::string {
    std::ifstream online("/sys/devices/system/cpu/online");
    std::string text;
    std::getline(online, text);
    online.close();
    auto cpus = perf::parse_cpu_list(text);
    if (!cpus || cpus->empty()) return "no online CPU list";
    auto probe = make({"scope=job", "events=task_clock"}, jobs, true);
    std::set<int> used;
    DIR* dir = ::opendir("/proc/self/fd");
    if (!dir) return "opendir /proc/self/fd failed";
    while (dirent* entry = ::readdir(dir))
      if (entry->d_name[0] != '.' && std::atoi(entry->d_name) != ::dirfd(dir))
        used.insert(std::atoi(entry->d_name));
    ::closedir(dir);
    // Room under the limit for: the sensor's handle on .../cpu/online and two jobs' directory
    // fd and counters; the blockers take the second job's share.
    const std::size_t per_job = 1 + cpus->size(), wanted = 1 + 2 * per_job;
    int limit = 0;
    for (std::size_t free = 0; free < wanted; ++limit)
      if (!used.count(limit)) ++free;
    rlimit tight{static_cast<rlim_t>(limit), static_cast<rlim_t>(limit)};
    if (::setrlimit(RLIMIT_NOFILE, &tight) != 0)
      return std::string("setrlimit: ") + std::strerror(errno);
    std::vector<int> blockers;
    for (std::size_t i = 0; i < per_job; ++i) blockers.push_back(::open("/dev/null", O_RDONLY));
    if (std::count(blockers.begin(), blockers.end(), -1)) return "cannot open /dev/null";
    read(*probe);  // opens what fits
    Reading first = read(*probe);
    if (first.values.count(1) != 1) return "job 1 not counted";
    if (first.values.count(2) != 0) return "job 2 counted although its fds did not fit";
    if (first.at(0, "jobs_counted") != 1) return "jobs_counted is not 1";
    for (int fd : blockers) ::close(fd);
    Reading second = read(*probe);
    if (second.values.count(1) != 1) return "job 1 not counted after room was made";
    if (second.values.count(2) != 1) return "job 2 not counted after room was made";
    if (second.at(0, "jobs_counted") != 2) return "jobs_counted is not 2";
    if (second.at(1, "task_clock") < first.at(1, "task_clock")) return "job 1 went backwards";
    return "";
  };
  EXPECT_EXIT(
      {
        std::string why = scenario();
        std::fprintf(stderr, "%s\n", why.empty() ? "scenario passed" : why.c_str());
        std::_Exit(why.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "scenario passed");
}

}  // namespace
