// The CPU sensors (CPUPercent, CPUTimes, CPUTimesPercent, CPUCount, CPUStats, CPUFreq, BootTime,
// Users) on fixture trees. Expected values come from psutil 5.9.4 pointed at the same files:
// psutil.PROCFS_PATH for procfs, and, for what psutil reads from a hard-coded /sys or utmp, psutil
// run in a private mount namespace (`unshare -m`) with the fixture bind-mounted over
// /sys/devices/system/cpu or copied to a tmpfs /run/utmp. Where the two differ on purpose the
// test says why.
#include <gtest/gtest.h>
#include <unistd.h>
#include <utmp.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>

#include "procfs.h"
#include "sensor.h"
#include "test_support.h"

using namespace fructosa;
using namespace fructosa::sensors;

namespace {

const std::string kFixtures = FRUCTOSA_FIXTURES;
const std::string kNodeProc = kFixtures + "/node-exporter/proc";
const std::string kNodeSys = kFixtures + "/node-exporter/sys";
const std::string kCpu = kFixtures + "/cpu";

std::unique_ptr<Sensor> make(const std::string& name, const std::string& proc, const std::string& sys,
                             const std::vector<std::string>& pairs = {}) {
  static std::list<Options> options;  // outlive the sensors that refer to them
  const SensorDefinition* definition = find_sensor(name);
  if (!definition) throw std::runtime_error("no sensor " + name);
  options.push_back(parse_pairs(*definition->options, pairs, "test"));
  return definition->make(SensorContext{Roots{proc, sys}, options.back()});
}

struct Reading {
  std::map<std::string, double> values;
  std::map<std::string, std::string> labels;
};

Reading read(Sensor& sensor, bool expect_values = true) {
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "test", test::next_reading_time());
  EXPECT_EQ(sensor.sample(out), expect_values);
  Reading reading;
  for (const auto& sample : samples) {
    for (const auto& metric : sample.metrics) reading.values[metric.key] = metric.value;
    for (const auto& label : sample.labels) reading.labels[label.key] = label.value;
  }
  return reading;
}

std::string unavailable_reason(Sensor& sensor) {
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "test", test::next_reading_time());
  try {
    sensor.sample(out);
  } catch (const SensorUnavailable& why) {
    return why.what();
  }
  return "";
}

// Every key the sensor reports is in its catalog.
void expect_catalogued(const std::string& name, const std::map<std::string, double>& values) {
  for (const auto& [key, value] : values)
    EXPECT_NE(find_sensor(name)->catalog->find(key), nullptr) << name << " key '" << key << "'";
}

// A proc root holding one stat file that the test rewrites between readings (the sensor keeps
// the file open and re-reads it).
class TwoSnapshots {
 public:
  TwoSnapshots() {
    char pattern[] = "/tmp/fructosa-cpu-XXXXXX";
    dir_ = ::mkdtemp(pattern);
  }
  ~TwoSnapshots() { std::filesystem::remove_all(dir_); }
  void install(const std::string& snapshot) {
    std::ifstream in(kFixtures + "/cpu-percent/" + snapshot + "/stat");
    std::ofstream(dir_ / "stat", std::ios::trunc) << in.rdbuf();
  }
  std::string proc() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

const std::vector<std::string> kFields{"user", "nice", "system", "idle", "iowait",
                                       "irq",  "softirq", "steal", "guest", "guest_nice"};

std::map<std::string, double> fields(const std::string& prefix, const std::vector<double>& values) {
  std::map<std::string, double> out;
  for (std::size_t i = 0; i < values.size(); ++i) out[prefix + kFields[i]] = values[i];
  return out;
}

}  // namespace

TEST(CPUSensors, AreRegisteredWithOptionsThatDefaultAsPsutil) {
  for (const char* name : {"CPUPercent", "CPUTimes", "CPUTimesPercent", "CPUCount", "CPUStats", "CPUFreq",
                           "BootTime", "Users"}) {
    const SensorDefinition* sensor = find_sensor(name);
    ASSERT_NE(sensor, nullptr) << name;
    EXPECT_FALSE(sensor->description.empty()) << name;
    EXPECT_FALSE(sensor->catalog->entries().empty()) << name;
  }
  auto defaults = [](const char* name) { return parse_pairs(*find_sensor(name)->options, {}, "test"); };
  EXPECT_TRUE(defaults("CPUPercent").get_bool("percpu"));  // as FrUCToSA sent it
  EXPECT_FALSE(defaults("CPUTimes").get_bool("percpu"));
  EXPECT_FALSE(defaults("CPUTimesPercent").get_bool("percpu"));
  EXPECT_FALSE(defaults("CPUFreq").get_bool("percpu"));
  EXPECT_TRUE(defaults("CPUCount").get_bool("logical"));
  EXPECT_EQ(defaults("Users").get_text("utmp_path"), "/var/run/utmp");
  EXPECT_EQ(metric_info("BootTime", "").unit, "timestamp");
  EXPECT_EQ(metric_info("CPUStats", "ctx_switches").kind, Kind::counter);
  EXPECT_EQ(metric_info("CPUTimes", "3.idle").kind, Kind::counter);
  EXPECT_EQ(metric_info("CPUFreq", "2.max").unit, to_string(Unit::hertz_mega));
}

TEST(CPUTimes, PerCpuMatchesPsutilOnTheCapture) {
  auto sensor = make("CPUTimes", kNodeProc, kNodeSys, {"percpu=true"});
  auto values = read(*sensor).values;
  EXPECT_EQ(values.size(), 80u);  // 8 CPUs, 10 fields
  expect_catalogued("CPUTimes", values);
  // psutil.cpu_times(percpu=True) with PROCFS_PATH at the capture, CPUs 0, 3 and 7:
  auto expected = fields("0.", {444.9, 0.19, 210.45, 10870.69, 2.2, 0.01, 34.1, 0.0, 0.02, 0.01});
  auto cpu3 = fields("3.", {470.54, 1.02, 156.83, 11132.3, 5.33, 0.0, 0.6, 0.0, 0.05, 0.04});
  auto cpu7 = fields("7.", {290.98, 2.68, 101.64, 11392.82, 5.55, 0.0, 0.31, 0.0, 0.09, 0.08});
  expected.insert(cpu3.begin(), cpu3.end());
  expected.insert(cpu7.begin(), cpu7.end());
  for (const auto& [key, value] : expected) EXPECT_EQ(values[key], value) << key;
}

TEST(CPUPercent, SystemWideIsTheScalarKeyAsPsutil) {
  TwoSnapshots proc;
  proc.install("1");
  auto sensor = make("CPUPercent", proc.proc(), kNodeSys, {"percpu=false"});
  EXPECT_TRUE(read(*sensor, false).values.empty());
  proc.install("2");
  // psutil.cpu_percent() across the two files:
  EXPECT_EQ(read(*sensor).values, (std::map<std::string, double>{{"", 34.7}}));
  expect_catalogued("CPUPercent", {{"", 0}});
}

TEST(CPUTimesPercent, SystemWideMatchesPsutilOnTwoSnapshots) {
  TwoSnapshots proc;
  proc.install("1");
  auto sensor = make("CPUTimesPercent", proc.proc(), kNodeSys);
  EXPECT_TRUE(read(*sensor, false).values.empty());
  proc.install("2");
  auto values = read(*sensor).values;
  // psutil.cpu_times_percent() across the two files (its last reading set to the first):
  EXPECT_EQ(values, fields("", {24.7, 2.8, 7.2, 56.5, 8.8, 0.0, 0.0, 0.0, 3.5, 1.8}));
  expect_catalogued("CPUTimesPercent", values);
}

TEST(CPUTimesPercent, PerCpuMatchesPsutilIncludingItsOneSecondFloor) {
  TwoSnapshots proc;
  proc.install("1");
  auto sensor = make("CPUTimesPercent", proc.proc(), kNodeSys, {"percpu=true"});
  EXPECT_TRUE(read(*sensor, false).values.empty());
  proc.install("2");
  auto values = read(*sensor).values;
  EXPECT_EQ(values.size(), 80u);
  expect_catalogued("CPUTimesPercent", values);
  // psutil.cpu_times_percent(percpu=True) across the two files. psutil scales by
  // 100 / max(1, total seconds): CPU 4 moved 1.00 s (shares of it), CPU 7 only 0.10 s, which
  // psutil still divides by 1 s (7 + 3 = 10 %, not 100 %). CPU 6 did not move: all 0. CPU 3's
  // guest time is outside the total but has its own share; CPU 2's softirq went backwards: 0.
  std::map<std::string, double> expected;
  for (const auto& cpu : {fields("0.", {50.0, 0.0, 25.0, 25.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}),
                          fields("1.", {0.0, 0.0, 0.0, 100.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}),
                          fields("2.", {10.0, 5.0, 5.0, 30.0, 50.0, 0.0, 0.0, 0.0, 0.0, 0.0}),
                          fields("3.", {40.0, 10.0, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 20.0, 10.0}),
                          fields("4.", {1.0, 1.0, 1.0, 97.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}),
                          fields("5.", {33.0, 0.0, 0.0, 67.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}),
                          fields("6.", {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}),
                          fields("7.", {7.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0})})
    expected.insert(cpu.begin(), cpu.end());
  EXPECT_EQ(values, expected);
}

TEST(CPUStats, MatchesPsutilAndNodeExporterOnTheCapture) {
  auto sensor = make("CPUStats", kNodeProc, kNodeSys);
  auto values = read(*sensor).values;
  // psutil.cpu_stats(); e2e-output.txt: node_context_switches_total 3.8014093e+07,
  // node_intr_total 8.885917e+06.
  const std::map<std::string, double> expected{
      {"ctx_switches", 38014093}, {"interrupts", 8885917}, {"soft_interrupts", 5057579}, {"syscalls", 0}};
  EXPECT_EQ(values, expected);
  expect_catalogued("CPUStats", values);
  EXPECT_NE(unavailable_reason(*make("CPUStats", "/nonexistent-proc", kNodeSys)).find("/nonexistent-proc/stat"),
            std::string::npos);
}

TEST(BootTime, IsBtimeAsPsutilAndNodeExporter) {
  auto sensor = make("BootTime", kNodeProc, kNodeSys);
  // psutil.boot_time() = 1418183276.0; e2e-output.txt: node_boot_time_seconds 1.418183276e+09.
  EXPECT_EQ(read(*sensor).values, (std::map<std::string, double>{{"", 1418183276}}));
}

TEST(CPUCount, LogicalFollowsGlibcThroughTheRoots) {
  // psutil calls sysconf(_SC_NPROCESSORS_ONLN); glibc reads /sys/devices/system/cpu/online
  // (psutil in a namespace with these trees over /sys/devices/system/cpu agrees: 4 and 5).
  EXPECT_EQ(read(*make("CPUCount", kNodeProc, kNodeSys)).values[""], 4);  // "0-3"
  EXPECT_EQ(read(*make("CPUCount", kNodeProc, kCpu + "/topology/sys")).values[""], 5);  // "0-3,6"
  // No online file: glibc counts the cpuN lines of /proc/stat (8 in the capture).
  EXPECT_EQ(read(*make("CPUCount", kNodeProc, kCpu + "/topology-old/sys")).values[""], 8);
  // Neither: sched_getaffinity, this machine's CPUs.
  EXPECT_GE(read(*make("CPUCount", "/nonexistent-proc", "/nonexistent-sys")).values[""], 1);
}

TEST(CPUCount, PhysicalMatchesPsutilOnEachMethod) {
  auto physical = [](const std::string& proc, const std::string& sys) {
    return read(*make("CPUCount", proc, sys, {"logical=false"})).values;
  };
  // core_cpus_list "0-1", "0-1", "2-3", "2-3", "6": 3 cores (thread_siblings_list "0-7" ignored).
  EXPECT_EQ(physical(kNodeProc, kCpu + "/topology/sys"), (std::map<std::string, double>{{"", 3}}));
  // Only thread_siblings_list: "0,2", "1,3", "0,2", "1,3": 2 cores.
  EXPECT_EQ(physical(kNodeProc, kCpu + "/topology-old/sys")[""], 2);
  // No topology files: "cpu cores" per "physical id" of cpuinfo: the capture's one package of 4,
  // and the synthesized 4 + 4 (a section without "cpu cores" and a last one without a closing
  // blank line do not count, as in psutil).
  EXPECT_EQ(physical(kNodeProc, kNodeSys)[""], 4);
  EXPECT_EQ(physical(kCpu + "/topology/proc", "/nonexistent-sys")[""], 8);
  // Nothing to count from: psutil returns None.
  EXPECT_NE(unavailable_reason(*make("CPUCount", "/nonexistent-proc", "/nonexistent-sys", {"logical=false"})), "");
}

TEST(CPUFreq, PerCpuEqualsNodeExporterScalingFrequencies) {
  // The capture has 4 cpufreq directories and 8 "cpu MHz" lines: psutil reads scaling_cur_freq.
  auto values = read(*make("CPUFreq", kNodeProc, kNodeSys, {"percpu=true"})).values;
  // e2e-output.txt node_cpu_scaling_frequency{,_min,_max}_hertz / 1e6:
  const std::map<std::string, double> expected{
      {"0.current", 1.699981e+09 / 1e6}, {"0.min", 8e+08 / 1e6}, {"0.max", 3.7e+09 / 1e6},
      {"1.current", 1.699981e+09 / 1e6}, {"1.min", 8e+08 / 1e6}, {"1.max", 3.7e+09 / 1e6},
      {"2.current", 8e+06 / 1e6},        {"2.min", 1e+06 / 1e6}, {"2.max", 4.2e+09 / 1e6},
      {"3.current", 8e+06 / 1e6},        {"3.min", 1e+06 / 1e6}, {"3.max", 4.2e+09 / 1e6}};
  EXPECT_EQ(values, expected);
  expect_catalogued("CPUFreq", values);
  EXPECT_EQ(values["0.current"], 1699.981);
}

TEST(CPUFreq, AverageMatchesPsutilOnTheCapture) {
  auto values = read(*make("CPUFreq", kNodeProc, kNodeSys)).values;
  // psutil.cpu_freq() (namespace with the capture over /sys/devices/system/cpu):
  const std::map<std::string, double> expected{{"current", 853.9905}, {"min", 400.5}, {"max", 3950.0}};
  EXPECT_EQ(values, expected);
  expect_catalogued("CPUFreq", values);
}

TEST(CPUFreq, TakesCpuinfoWhenItCountsAsManyCpusAsPolicies) {
  // policy0, policy2, policy10 (numeric order; cpu0/cpufreq is not looked at) and 3 cpu MHz lines:
  // current = int(MHz * 1000) / 1000, as psutil.
  const std::string sys = kCpu + "/freq/sys";
  auto values = read(*make("CPUFreq", kCpu + "/freq/proc-three", sys, {"percpu=true"})).values;
  const std::map<std::string, double> expected{
      {"0.current", 799.998},  {"0.min", 1200.0}, {"0.max", 3500.0}, {"1.current", 2400.017}, {"1.min", 1200.0},
      {"1.max", 3500.0},       {"2.current", 3499.999}, {"2.min", 800.0}, {"2.max", 2600.0}};
  EXPECT_EQ(values, expected);
  // psutil.cpu_freq(): scpufreq(current=2233.3379999999997, min=1066.6666666666667, max=3200.0)
  auto average = read(*make("CPUFreq", kCpu + "/freq/proc-three", sys)).values;
  EXPECT_EQ(average, (std::map<std::string, double>{{"current", 2233.3379999999997}, {"min", 1066.6666666666667},
                                                    {"max", 3200.0}}));
}

TEST(CPUFreq, FallsBackToCpuinfoCurFreqThenToCpuinfoAlone) {
  // 2 cpu MHz lines for 3 policies: scaling_cur_freq, and policy2's cpuinfo_cur_freq (it has no
  // scaling_cur_freq).
  const std::string sys = kCpu + "/freq/sys";
  auto values = read(*make("CPUFreq", kCpu + "/freq/proc-two", sys, {"percpu=true"})).values;
  EXPECT_EQ(values["0.current"], 2400.0);
  EXPECT_EQ(values["1.current"], 1800.0);
  EXPECT_EQ(values["2.current"], 999.999);
  // psutil.cpu_freq(): scpufreq(current=1733.3329999999999, min=1066.6666666666667, max=3200.0)
  EXPECT_EQ(read(*make("CPUFreq", kCpu + "/freq/proc-two", sys)).values["current"], 1733.3329999999999);
  // No cpufreq at all (this build VM): cpuinfo's MHz with min and max 0, as psutil.
  auto alone = read(*make("CPUFreq", kCpu + "/freq/proc-two", "/nonexistent-sys", {"percpu=true"})).values;
  EXPECT_EQ(alone, (std::map<std::string, double>{{"0.current", 1000.5}, {"0.min", 0}, {"0.max", 0},
                                                  {"1.current", 2000.25}, {"1.min", 0}, {"1.max", 0}}));
  EXPECT_EQ(read(*make("CPUFreq", kCpu + "/freq/proc-two", "/nonexistent-sys")).values,
            (std::map<std::string, double>{{"current", 1500.375}, {"min", 0}, {"max", 0}}));
  // Neither: unavailable (psutil raises or returns None).
  EXPECT_NE(unavailable_reason(*make("CPUFreq", "/nonexistent-proc", "/nonexistent-sys")), "");
  EXPECT_NE(unavailable_reason(*make("CPUFreq", kCpu + "/topology/proc", "/nonexistent-sys")), "");
}

TEST(Users, ReportsUserProcessRecordsAsPsutil) {
  auto sensor = make("Users", "/nonexistent-proc", "/nonexistent-sys", {"utmp_path=" + kCpu + "/utmp"});
  auto reading = read(*sensor);
  // psutil.users() with the fixture as /run/utmp: alice pts/0 10.0.0.5 pid 1001; bob tty2 pid
  // 1002; alice pts/1 localhost (":0") pid 1003; j.doe pts/2 login.example.org pid 1004; and the
  // 32-byte name pid 1005. Boot, run level, LOGIN and DEAD records and the partial trailing
  // record are not sessions.
  const std::map<std::string, double> values{
      {"count", 5},       {"alice.sessions", 2}, {"bob.sessions", 1}, {"j_doe.sessions", 1},
      {"abcdefghijklmnopqrstuvwxyz012345.sessions", 1},
      {"0.pid", 1001},    {"1.pid", 1002},       {"2.pid", 1003},     {"3.pid", 1004}, {"4.pid", 1005}};
  EXPECT_EQ(reading.values, values);
  expect_catalogued("Users", reading.values);
  // Started is the exact second: psutil 5.9.4 passes it through a C float and shows
  // 1700000000.0, 1700000256.0, ... (multiples of 128 s). psutil reads the unterminated
  // 32-byte name on into ut_host ("...012345h"); the name stops at 32 bytes here.
  const std::map<std::string, std::string> labels{
      {"0.user", "alice"}, {"0.terminal", "pts/0"}, {"0.host", "10.0.0.5"}, {"0.started", "1700000001"},
      {"1.user", "bob"},   {"1.terminal", "tty2"},  {"1.started", "1700000300"},
      {"2.user", "alice"}, {"2.terminal", "pts/1"}, {"2.host", "localhost"}, {"2.started", "1700000555"},
      {"3.user", "j.doe"}, {"3.terminal", "pts/2"}, {"3.host", "login.example.org"}, {"3.started", "1700001000"},
      {"4.user", "abcdefghijklmnopqrstuvwxyz012345"}, {"4.host", "h"}, {"4.started", "1700002000"}};
  EXPECT_EQ(reading.labels, labels);
}

TEST(Users, NoUtmpOrAnEmptyOneMeansNoOneLoggedIn) {
  auto absent = make("Users", "/nonexistent-proc", "/nonexistent-sys", {"utmp_path=/nonexistent/utmp"});
  EXPECT_EQ(read(*absent).values, (std::map<std::string, double>{{"count", 0}}));
  char pattern[] = "/tmp/fructosa-utmp-XXXXXX";
  std::filesystem::path dir = ::mkdtemp(pattern);
  std::ofstream(dir / "utmp").close();
  auto empty = make("Users", "/nonexistent-proc", "/nonexistent-sys", {"utmp_path=" + (dir / "utmp").string()});
  EXPECT_EQ(read(*empty).values, (std::map<std::string, double>{{"count", 0}}));
  // The file is read afresh each time: a login shows at the next reading.
  std::filesystem::copy_file(kCpu + "/utmp", dir / "utmp", std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(read(*empty).values["count"], 5);
  std::filesystem::remove_all(dir);
}

TEST(Users, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  char pattern[] = "/tmp/fructosa-utmp-XXXXXX";
  std::filesystem::path dir = ::mkdtemp(pattern);
  utmp record{};
  record.ut_type = USER_PROCESS;
  record.ut_pid = 42;
  std::strcpy(record.ut_user, "caf\xc3\xa9\xff");  // "café" then a stray byte
  std::strcpy(record.ut_line, "pts/\xed\xa0\x80");  // an encoded surrogate: not UTF-8
  std::ofstream(dir / "utmp", std::ios::binary).write(reinterpret_cast<const char*>(&record), sizeof record);
  auto sensor = make("Users", "/nonexistent-proc", "/nonexistent-sys", {"utmp_path=" + (dir / "utmp").string()});
  auto reading = read(*sensor);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(reading.values["caf\xc3\xa9\xef\xbf\xbd.sessions"], 1);
  EXPECT_EQ(reading.labels["0.user"], "caf\xc3\xa9\xef\xbf\xbd");
  EXPECT_EQ(reading.labels["0.terminal"], "pts/\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(reading.labels["0.started"], "0");
}

// The sensors reading /proc/stat at one reading time share one read of it (procfs.h,
// SharedReading): what the first read is what the others get, whatever the file says by then;
// a new reading time reads it again; a failed read is tried again by the next to ask.
TEST(SharedReading, OneReadPerReadingTimeForEverySensorOfThePath) {
  TwoSnapshots proc;
  auto install = [&](int user, int ctxt) {
    std::ofstream(proc.proc() + "/stat", std::ios::trunc)
        << "cpu  " << user << " 0 0 0 0 0 0 0 0 0\ncpu0 " << user << " 0 0 0 0 0 0 0 0 0\nctxt " << ctxt << "\n";
  };
  install(100, 5);
  auto times = make("CPUTimes", proc.proc(), kNodeSys, {});
  auto stats = make("CPUStats", proc.proc(), kNodeSys, {});
  auto sample = [](Sensor& sensor, std::int64_t at_ns) {
    std::vector<Sample> samples;
    SampleWriter out(samples, "node", "test", at_ns);
    sensor.sample(out);
    std::map<std::string, double> values;
    for (const auto& metric : samples.at(0).metrics) values[metric.key] = metric.value;
    return values;
  };
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  EXPECT_EQ(sample(*times, 100).at("user"), 100 / ticks);
  install(200, 9);
  EXPECT_EQ(sample(*stats, 100).at("ctx_switches"), 5);  // the same reading time: read at it
  EXPECT_EQ(sample(*times, 100).at("user"), 100 / ticks);
  EXPECT_EQ(sample(*times, 101).at("user"), 200 / ticks);  // a new reading time reads anew
  EXPECT_EQ(sample(*stats, 101).at("ctx_switches"), 9);

  SharedReading missing(proc.proc() + "/no-such-file");
  EXPECT_THROW(missing.read(102), SensorUnavailable);
  std::ofstream(proc.proc() + "/no-such-file") << "here\n";
  EXPECT_EQ(missing.read(102), "here\n");  // the failed read did not stand for the time
}
