// NvidiaGPU against a fake libnvidia-ml (tests/fakes/fake_nvml.c: two GPUs, the second in MIG
// mode with two MIG devices, processes from $FAKE_NVML_PIDS), and IPMIPower against fake
// FreeIPMI tools written into a temporary directory (one printing a captured ipmi-dcmi output,
// one that hangs, one printing garbage, ...). Waiting is always polling a condition with a
// deadline; the only sleeps are inside the fake tools.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "jobs.h"
#include "sensor.h"
#include "sensor_probe.h"
#include "test_support.h"

using namespace fructosa;
using namespace fructosa::sensors;
using fructosa::test::TempDir;
namespace fs = std::filesystem;

namespace {

using Values = std::map<std::string, double>;
using Labels = std::map<std::string, std::string>;

using Probe = test::SensorProbe;

Probe make(const std::string& name, const std::vector<std::string>& pairs, JobDirectory* jobs = nullptr,
           Roots roots = Roots{"/nonexistent-proc", "/nonexistent-sys"}) {
  return test::make_probe(name, roots, pairs, jobs);
}

// One sample() call: what it reported, per job, or why it is unavailable.
struct Round {
  bool reported = false;
  std::string unavailable;
  std::map<std::uint64_t, Values> values;  // job -> key -> value
  std::map<std::uint64_t, Labels> labels;
};

Round round(Probe& probe) {
  Round result;
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", probe.definition->name, 1);
  try {
    result.reported = probe.sensor->sample(out);
  } catch (const SensorUnavailable& why) {
    result.unavailable = why.what();
    return result;
  }
  for (const auto& sample : samples) {
    auto& values = result.values[sample.job];
    for (const auto& metric : sample.metrics) {
      EXPECT_EQ(values.count(metric.key), 0u) << "duplicate key " << metric.key;
      values[metric.key] = metric.value;
      EXPECT_NE(probe.definition->catalog->find(metric.key), nullptr) << "no catalog entry for " << metric.key;
    }
    for (const auto& label : sample.labels) result.labels[sample.job][label.key] = label.value;
  }
  return result;
}

// Calls `condition` until it holds or `seconds` pass (with short pauses between the calls, so
// a background run gets the CPU); returns whether it held.
template <class Condition>
bool eventually(Condition condition, double seconds = 20) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

// Rounds until one reports values or says unavailable (a background tool finished).
Round settled(Probe& probe) {
  Round last;
  bool done = eventually([&] {
    last = round(probe);
    return last.reported || !last.unavailable.empty();
  });
  EXPECT_TRUE(done) << "the sensor never reported";
  return last;
}

void write_file(const std::string& path, const std::string& text, bool executable = false) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
  if (executable) ::chmod(path.c_str(), 0755);
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A process that no longer exists, or a zombie nobody reaped yet (a killed grandchild waits
// for init, which in a container may never reap it).
bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

pid_t pid_in(const std::string& path) {
  std::string text = read_text(path);
  return text.empty() ? 0 : static_cast<pid_t>(std::stol(text));
}

// --- NvidiaGPU -------------------------------------------------------------------------------

// The fake NVML: $FRUCTOSA_FAKE_NVML first (a library built by hand), else the test suite's
// target when the build defines it.
std::string fake_nvml() {
  if (const char* path = std::getenv("FRUCTOSA_FAKE_NVML"); path && *path) return path;
#ifdef FRUCTOSA_FAKE_NVML
  return FRUCTOSA_FAKE_NVML;
#else
  return "";
#endif
}

class NvidiaGPU : public ::testing::Test {
 protected:
  void SetUp() override {
    library_ = fake_nvml();
    if (library_.empty())
      GTEST_SKIP() << "no fake NVML: set FRUCTOSA_FAKE_NVML or build with tests/fakes wired in";
    ::setenv("FAKE_NVML_PIDS", "", 1);
    ::unsetenv("FAKE_NVML_INIT");
  }
  void TearDown() override {
    ::unsetenv("FAKE_NVML_PIDS");
    ::unsetenv("FAKE_NVML_INIT");
  }
  Probe gpu(JobDirectory* jobs = nullptr, std::vector<std::string> pairs = {}, Roots roots = {}) {
    pairs.push_back("library=" + library_);
    return make("NvidiaGPU", pairs, jobs, roots);
  }
  std::string library_;
};

TEST_F(NvidiaGPU, ReportsEveryGpuWithTheValuesNvmlGives) {
  auto probe = gpu();
  auto result = round(probe);
  ASSERT_TRUE(result.reported) << result.unavailable;
  ASSERT_EQ(result.values.size(), 1u);  // no job discovery: the node sample only
  const auto& values = result.values[0];
  Values gpu0{{"0.utilization_gpu", 37},
              {"0.utilization_memory", 12},
              {"0.memory_total", 85520809984.0},
              {"0.memory_used", 1048576000.0},
              {"0.memory_free", 85520809984.0 - 1048576000.0},
              {"0.power", 123.456},
              {"0.energy", 987654.321},
              {"0.temperature", 45},
              {"0.clock_graphics", 1980},
              {"0.clock_sm", 1980},
              {"0.clock_memory", 2619},
              {"0.mig_mode", 0},
              {"0.minor", 3},
              {"0.processes", 0},
              {"1.memory_total", 42949672960.0},
              {"1.memory_used", 2147483648.0},
              {"1.memory_free", 42949672960.0 - 2147483648.0},
              {"1.power", 61},
              {"1.energy", 5000},
              {"1.temperature", 33},
              {"1.clock_graphics", 1410},
              {"1.clock_sm", 1410},
              {"1.clock_memory", 1215},
              {"1.mig_mode", 1},
              {"1.minor", 1},
              {"1.processes", 0}};
  for (const auto& [key, value] : gpu0) {
    ASSERT_TRUE(values.count(key)) << key;
    EXPECT_DOUBLE_EQ(values.at(key), value) << key;
  }
  // NOT_SUPPORTED on the MIG GPU: left out, nothing else lost.
  EXPECT_FALSE(values.count("1.utilization_gpu"));
  EXPECT_FALSE(values.count("1.utilization_memory"));
  EXPECT_FALSE(values.count("0.process_memory"));  // no process: nothing to add up
  auto& labels = result.labels[0];
  EXPECT_EQ(labels["0.name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(labels["0.uuid"], "GPU-0a0b0c0d-0000-4000-8000-000000000000");
  EXPECT_EQ(labels["1.name"], "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(labels["1.uuid"], "GPU-1a1b1c1d-1111-4111-8111-111111111111");
}

TEST_F(NvidiaGPU, ReportsTheMigDevicesOfAGpuInMigMode) {
  auto probe = gpu();
  auto result = round(probe);
  ASSERT_TRUE(result.reported) << result.unavailable;
  auto& values = result.values[0];
  EXPECT_EQ(values["1.mig0.memory_total"], 20937965568.0);
  EXPECT_EQ(values["1.mig0.memory_used"], 1073741824.0);
  EXPECT_EQ(values["1.mig0.memory_free"], 20937965568.0 - 1073741824.0);
  EXPECT_EQ(values["1.mig1.memory_total"], 10468982784.0);
  EXPECT_EQ(values["1.mig1.memory_used"], 536870912.0);
  EXPECT_EQ(values["1.mig0.processes"], 0);
  EXPECT_EQ(result.labels[0]["1.mig0.uuid"], "MIG-2a2b2c2d-2222-4222-8222-222222222222");
  EXPECT_EQ(result.labels[0]["1.mig1.name"], "NVIDIA A100-SXM4-40GB MIG 2g.10gb");
  for (const auto& [key, value] : values) {
    EXPECT_EQ(key.find("mig2"), std::string::npos) << key;   // empty slots are no devices
    EXPECT_NE(key.rfind("0.mig0", 0), 0u) << key;             // GPU 0 is not in MIG mode
    if (key.find("utilization") != std::string::npos) {  // not supported in MIG mode
      EXPECT_EQ(key.rfind("0.", 0), 0u) << key;
    }
  }

  auto without = gpu(nullptr, {"mig=false"});
  auto plain = round(without);
  ASSERT_TRUE(plain.reported);
  for (const auto& [key, value] : plain.values[0]) EXPECT_EQ(key.find(".mig0"), std::string::npos) << key;
  EXPECT_EQ(plain.values[0]["1.mig_mode"], 1);
}

// A job's cgroup (v2) and a proc tree whose processes sit in it, or elsewhere.
class NvidiaGPUJobs : public NvidiaGPU {
 protected:
  void SetUp() override {
    NvidiaGPU::SetUp();
    if (IsSkipped()) return;
    std::string cgroup = dir_.file("sys/fs/cgroup");
    std::string scope = cgroup + "/system.slice/slurmstepd.scope";
    for (const auto& path : {cgroup, cgroup + "/system.slice", scope, scope + "/job_42", scope + "/job_42/step_0",
                             scope + "/job_43", cgroup + "/user.slice"})
      write_file(path + "/cgroup.procs", "");
    write_file(cgroup + "/cgroup.controllers", "cpu memory pids\n");
    write_file(dir_.file("proc/4242/cgroup"), "0::/system.slice/slurmstepd.scope/job_42/step_0\n");
    write_file(dir_.file("proc/4243/cgroup"), "0::/system.slice/slurmstepd.scope/job_42/step_0\n");
    write_file(dir_.file("proc/777/cgroup"), "0::/user.slice\n");
    roots_ = Roots{dir_.file("proc"), dir_.file("sys")};
    jobs_ = JobDirectory::fixed({JobCgroup{.id = 42, .name = "job_42", .unified = scope + "/job_42", .v1 = {}},
                                 JobCgroup{.id = 43, .name = "job_43", .unified = scope + "/job_43", .v1 = {}}},
                                roots_);
  }
  TempDir dir_;
  Roots roots_;
  std::unique_ptr<JobDirectory> jobs_;
};

TEST_F(NvidiaGPUJobs, MapsNvmlProcessesToJobsThroughTheirCgroup) {
  // 4242 (job 42) on GPU 0 and on MIG device 1 of GPU 1; 4243 (job 42) on MIG device 0 with
  // its memory unknown to NVML; 777 on GPU 0 belongs to no job; 999 has no /proc entry.
  ::setenv("FAKE_NVML_PIDS", "4242:0:1000000,777:0:5000,4242:1:2000:1,4243:1:-:0,999:0:7", 1);
  auto probe = gpu(jobs_.get(), {}, roots_);
  auto result = round(probe);
  ASSERT_TRUE(result.reported) << result.unavailable;
  auto& node = result.values[0];
  EXPECT_EQ(node["0.processes"], 3);
  EXPECT_EQ(node["0.process_memory"], 1005007);
  EXPECT_EQ(node["1.processes"], 2);
  EXPECT_EQ(node["1.process_memory"], 2000);
  EXPECT_EQ(node["1.mig0.processes"], 1);
  EXPECT_FALSE(node.count("1.mig0.process_memory"));  // NVML_VALUE_NOT_AVAILABLE only
  EXPECT_EQ(node["1.mig1.processes"], 1);
  EXPECT_EQ(node["1.mig1.process_memory"], 2000);

  ASSERT_TRUE(result.values.count(42));
  Values job42{{"processes", 3},           {"process_memory", 1002000}, {"0.processes", 1},
               {"0.process_memory", 1000000}, {"1.processes", 2},         {"1.process_memory", 2000},
               {"1.mig0.processes", 1},    {"1.mig1.processes", 1},     {"1.mig1.process_memory", 2000}};
  EXPECT_EQ(result.values[42], job42);
  // A job with no GPU process still gets its zeros, so its graphs drop to 0.
  EXPECT_EQ(result.values[43], (Values{{"processes", 0}, {"process_memory", 0}}));
  EXPECT_EQ(result.values.size(), 3u);

  // The processes change between readings: the next round follows.
  ::setenv("FAKE_NVML_PIDS", "4243:0:64", 1);
  result = round(probe);
  EXPECT_EQ(result.values[42], (Values{{"processes", 1}, {"process_memory", 64}, {"0.processes", 1},
                                       {"0.process_memory", 64}}));

  auto no_jobs = gpu(jobs_.get(), {"per_job=false"}, roots_);
  EXPECT_EQ(round(no_jobs).values.size(), 1u);
}

TEST(NvidiaGPUWithoutNvml, MissingLibraryIsUnavailableWithTheLoadersReason) {
  auto probe = make("NvidiaGPU", {"library=/nonexistent/libnvidia-ml.so.1"});
  auto result = round(probe);
  EXPECT_FALSE(result.reported);
  EXPECT_EQ(result.unavailable.rfind("cannot load /nonexistent/libnvidia-ml.so.1: ", 0), 0u) << result.unavailable;
  EXPECT_NE(result.unavailable.find("No such file"), std::string::npos) << result.unavailable;

  // A library that is not NVML.
  auto libc = make("NvidiaGPU", {"library=libc.so.6"});
  EXPECT_NE(round(libc).unavailable.find("has no nvmlInit"), std::string::npos);
}

TEST_F(NvidiaGPU, FailingInitIsUnavailableWithNvmlsErrorStringAndIsRetried) {
  ::setenv("FAKE_NVML_INIT", "9", 1);  // NVML_ERROR_DRIVER_NOT_LOADED
  auto probe = gpu();
  auto result = round(probe);
  EXPECT_EQ(result.unavailable, "nvmlInit_v2 failed: Driver Not Loaded (NVML error 9)");
  ::unsetenv("FAKE_NVML_INIT");
  result = round(probe);
  EXPECT_TRUE(result.reported) << result.unavailable;
}

TEST_F(NvidiaGPU, LoadsAndInitialisesOnceAndShutsDownAtTheEnd) {
  void* fake = ::dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);  // the same instance the sensor gets
  ASSERT_NE(fake, nullptr) << ::dlerror();
  auto init_calls = reinterpret_cast<int (*)()>(::dlsym(fake, "fake_nvml_init_calls"));
  auto shutdown_calls = reinterpret_cast<int (*)()>(::dlsym(fake, "fake_nvml_shutdown_calls"));
  ASSERT_TRUE(init_calls && shutdown_calls);
  int inits = init_calls(), shutdowns = shutdown_calls();
  {
    auto probe = gpu();
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(round(probe).reported);
    EXPECT_EQ(init_calls(), inits + 1);
    EXPECT_EQ(shutdown_calls(), shutdowns);
  }
  EXPECT_EQ(shutdown_calls(), shutdowns + 1);
  ::dlclose(fake);
}

// --- IPMIPower -------------------------------------------------------------------------------

// `ipmi-dcmi --get-system-power-statistics` as FreeIPMI prints it (the layout of its
// ipmi-dcmi.c format strings; values from a Dell PowerEdge as quoted in public bug reports).
const char* kDcmiOutput =
    "Current Power                        : 332 Watts\n"
    "Minimum Power over sampling duration : 68 watts\n"
    "Maximum Power over sampling duration : 504 watts\n"
    "Average Power over sampling duration : 348 watts\n"
    "Time Stamp                           : 11/03/2023 - 08:36:29\n"
    "Statistics reporting time period     : 2685198000 milliseconds\n"
    "Power Measurement                    : Active\n";

// `ipmi-sensors --sensor-types=...` default table.
const char* kSensorsOutput =
    "ID  | Name            | Type                     | Reading    | Units | Event\n"
    "3   | Avg Power       | Current                  | 100.00     | W     | 'OK'\n"
    "58  | PS1 Input Power | Power Supply             | 120.00     | W     | 'OK'\n"
    "59  | PS2 Input Power | Power Supply             | 110.50     | W     | 'OK'\n"
    "60  | PS1 Current     | Current                  | 0.60       | A     | 'OK'\n"
    "61  | PS3 Input Power | Power Supply             | N/A        | W     | N/A\n"
    "62  | PS Redundancy   | Power Supply             | N/A        | N/A   | 'Fully Redundant'\n";

class IPMIPower : public ::testing::Test {
 protected:
  // An executable shell script in the temporary directory.
  std::string tool(const std::string& name, const std::string& body) {
    std::string path = dir_.file(name);
    write_file(path, "#!/bin/sh\n" + body, true);
    return path;
  }
  // A script that prints `text` and records its arguments in <name>.args (replaced at once:
  // a probe that reported has its next run going already).
  std::string printing(const std::string& name, const std::string& text) {
    write_file(dir_.file(name + ".txt"), text);
    std::string args = dir_.file(name + ".args");
    return tool(name, "printf '%s\\n' \"$@\" > '" + args + ".$$'; mv '" + args + ".$$' '" + args + "'\ncat '" +
                          dir_.file(name + ".txt") + "'\n");
  }
  Probe dcmi(const std::string& path, std::vector<std::string> pairs = {}) {
    pairs.push_back("ipmi_dcmi=" + path);
    return make("IPMIPower", pairs);
  }
  TempDir dir_;
};

TEST_F(IPMIPower, DcmiReportsCurrentMinMaxAverageOfTheBmc) {
  auto probe = dcmi(printing("ipmi-dcmi", kDcmiOutput));
  auto first = round(probe);  // the run only starts now
  EXPECT_FALSE(first.reported);
  EXPECT_EQ(first.unavailable, "");
  auto result = settled(probe);
  ASSERT_TRUE(result.reported) << result.unavailable;
  auto& values = result.values[0];
  EXPECT_EQ(values["power"], 332);
  EXPECT_EQ(values["power_min"], 68);
  EXPECT_EQ(values["power_max"], 504);
  EXPECT_EQ(values["power_average"], 348);
  EXPECT_EQ(values["sampling_period"], 2685198);
  EXPECT_GE(values["age"], 0);
  EXPECT_GE(values["duration"], 0);
  EXPECT_EQ(values.size(), 7u);
  EXPECT_EQ(read_text(dir_.file("ipmi-dcmi.args")), "--get-system-power-statistics\n");
}

TEST_F(IPMIPower, ReportsTheLastResultWhileARunIsInFlightAndKillsAHungTool) {
  // The first run answers; every later one hangs (writing its pid first).
  write_file(dir_.file("dcmi.txt"), kDcmiOutput);
  std::string hung = dir_.file("hung.pid");
  auto path = tool("ipmi-dcmi", "if [ -e '" + dir_.file("answered") + "' ]; then echo $$ > '" + hung +
                                    ".tmp'; mv '" + hung + ".tmp' '" + hung + "'; exec sleep 1000; fi\n" +
                                    "touch '" + dir_.file("answered") + "'\ncat '" + dir_.file("dcmi.txt") + "'\n");
  auto probe = dcmi(path, {"timeout=2"});
  auto result = settled(probe);  // this round also started the second run
  ASSERT_TRUE(result.reported) << result.unavailable;
  EXPECT_EQ(result.values[0]["power"], 332);

  ASSERT_TRUE(eventually([&] { return fs::exists(hung); }));
  pid_t pid = pid_in(hung);
  ASSERT_GT(pid, 0);
  // While it hangs, a round returns at once with the last completed result.
  result = round(probe);
  ASSERT_TRUE(result.reported) << result.unavailable;
  EXPECT_EQ(result.values[0]["power"], 332);
  EXPECT_EQ(::kill(pid, 0), 0) << "the hung tool should still be running";

  // Past the timeout it is killed, reaped, and reported.
  bool late = eventually([&] {
    result = round(probe);
    return !result.unavailable.empty();
  });
  ASSERT_TRUE(late);
  EXPECT_NE(result.unavailable.find("did not finish within 2 s: killed (pid " + std::to_string(pid) + ")"),
            std::string::npos)
      << result.unavailable;
  EXPECT_TRUE(gone(pid));
  EXPECT_EQ(::kill(pid, 0), -1) << "reaped, not a zombie";
}

TEST_F(IPMIPower, KillsWhatAHungToolStartedAndWhatIsInFlightWhenTheSensorGoes) {
  // The tool's child hangs (not exec'd): the whole process group goes at the timeout.
  std::string grandchild = dir_.file("grandchild.pid");
  auto probe = dcmi(tool("ipmi-dcmi", "sleep 1000 &\necho $! > '" + grandchild + ".tmp'; mv '" + grandchild +
                                          ".tmp' '" + grandchild + "'\nwait\n"),
                    {"timeout=1.5"});
  EXPECT_FALSE(round(probe).reported);
  ASSERT_TRUE(eventually([&] { return fs::exists(grandchild); }));
  pid_t pid = pid_in(grandchild);
  auto result = settled(probe);
  EXPECT_NE(result.unavailable.find("did not finish within 1.5 s: killed"), std::string::npos) << result.unavailable;
  EXPECT_TRUE(eventually([&] { return gone(pid); }));

  // A sensor destroyed mid-run takes its run with it.
  std::string pidfile = dir_.file("tool.pid");
  auto doomed = dcmi(tool("ipmi-dcmi-2", "echo $$ > '" + pidfile + ".tmp'; mv '" + pidfile + ".tmp' '" + pidfile +
                                             "'\nexec sleep 1000\n"),
                     {"timeout=600"});
  EXPECT_FALSE(round(doomed).reported);
  ASSERT_TRUE(eventually([&] { return fs::exists(pidfile); }));
  pid = pid_in(pidfile);
  EXPECT_EQ(::kill(pid, 0), 0);
  doomed.sensor.reset();
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(IPMIPower, GarbageFailuresAndMissingToolsAreClearErrors) {
  auto garbage = dcmi(tool("ipmi-dcmi", "echo 'hello'\necho 'world'\n"));
  EXPECT_EQ(settled(garbage).unavailable,
            "ipmi-dcmi printed no 'Current Power : N Watts' line (output starts with 'hello')");

  auto failing = dcmi(tool("ipmi-dcmi-fails",
                           "echo 'ipmi_cmd_dcmi_get_power_reading: could not find inband device' >&2\nexit 1\n"));
  EXPECT_EQ(settled(failing).unavailable, dir_.file("ipmi-dcmi-fails") +
                                              " exited with status 1: ipmi_cmd_dcmi_get_power_reading: could "
                                              "not find inband device");

  std::string inactive = kDcmiOutput;
  inactive.replace(inactive.find(": Active"), 8, ": Not Available");
  auto off = dcmi(printing("ipmi-dcmi-off", inactive));
  EXPECT_NE(settled(off).unavailable.find("'Power Measurement : Not Available'"), std::string::npos);

  auto missing = dcmi(dir_.file("no-such-ipmi-dcmi"));
  EXPECT_EQ(round(missing).unavailable, dir_.file("no-such-ipmi-dcmi") + " not found: install freeipmi-tools");
  if (find_program("ipmi-dcmi").empty()) {
    auto by_name = make("IPMIPower", {});
    EXPECT_EQ(round(by_name).unavailable, "ipmi-dcmi not found: install freeipmi-tools");
    auto sensors = make("IPMIPower", {"method=sensors"});
    EXPECT_EQ(round(sensors).unavailable, "ipmi-sensors not found: install freeipmi-tools");
  }

  // A configuration mistake, found when the agent starts (exit 78), not at the first reading.
  EXPECT_THROW(make("IPMIPower", {"method=command"}), ConfigError);
}

TEST_F(IPMIPower, SensorsMethodReportsEveryWattSensorAndAddsUpTheSelectedOnes) {
  auto path = printing("ipmi-sensors", kSensorsOutput);
  auto probe = make("IPMIPower", {"method=sensors", "ipmi_sensors=" + path, "sensors_include=PS* Input Power",
                                  "arguments=-D LAN_2_0 -h bmc07 -p 'two words'"});
  auto result = settled(probe);
  ASSERT_TRUE(result.reported) << result.unavailable;
  auto& values = result.values[0];
  EXPECT_EQ(values["power"], 230.5);
  EXPECT_EQ(values["sensors.Avg Power"], 100);
  EXPECT_EQ(values["sensors.PS1 Input Power"], 120);
  EXPECT_EQ(values["sensors.PS2 Input Power"], 110.5);
  EXPECT_FALSE(values.count("sensors.PS1 Current"));     // amperes
  EXPECT_FALSE(values.count("sensors.PS3 Input Power"));  // N/A
  EXPECT_EQ(read_text(dir_.file("ipmi-sensors.args")),
            "--sensor-types=Current,Power_Supply,Power_Unit,Other_Units_Based_Sensor\n"
            "--ignore-not-available-sensors\n-D\nLAN_2_0\n-h\nbmc07\n-p\ntwo words\n");

  // (Each probe its own script: a probe that reported has started its next run already.)
  auto all = make("IPMIPower",
                  {"method=sensors", "ipmi_sensors=" + printing("ipmi-sensors-all", kSensorsOutput), "sensor_types="});
  result = settled(all);
  EXPECT_EQ(result.values[0]["power"], 330.5);
  EXPECT_EQ(read_text(dir_.file("ipmi-sensors-all.args")), "--ignore-not-available-sensors\n");

  auto none = make("IPMIPower", {"method=sensors", "ipmi_sensors=" + path, "sensors_include=Nothing*"});
  EXPECT_EQ(settled(none).unavailable, "none of the 3 watt sensors of ipmi-sensors matches sensors_include");
}

TEST_F(IPMIPower, CommandMethodFindsTheWattsByItsDocumentedRule) {
  auto power_of = [&](const std::string& command, std::vector<std::string> pairs = {}) {
    pairs.push_back("method=command");
    pairs.push_back("command=" + command);
    auto probe = make("IPMIPower", pairs);
    auto result = settled(probe);
    return result.reported ? std::to_string(result.values[0]["power"]) : result.unavailable;
  };
  // ipmi-oem dell power-monitoring-over-interval style, through the shell.
  std::string oem = printing("ipmi-oem", "Interval      : 10 s\nSystem Power  : 216 W\n");
  EXPECT_EQ(power_of(oem + " dell power-monitoring-over-interval 10 systempower"), std::to_string(216.0));
  EXPECT_EQ(read_text(dir_.file("ipmi-oem.args")), "dell\npower-monitoring-over-interval\n10\nsystempower\n");
  EXPECT_EQ(power_of("echo 'Cpu 2: 40 watts; board 5W' | cat"), std::to_string(40.0));
  EXPECT_EQ(power_of("echo ' 187.5 '"), std::to_string(187.5));
  EXPECT_EQ(power_of("printf 'PSU1 : 90 Watts\\nTotal : 180 Watts\\n'", {"match=Total"}), std::to_string(180.0));
  EXPECT_EQ(power_of("echo 'the 5th Wonder'"),
            "the command printed no power ('<number> W' or 'Watts', or one number; output starts with 'the 5th "
            "Wonder')");
  EXPECT_EQ(power_of("echo oops >&2; exit 3"), "the command exited with status 3: oops");
}

TEST(ChildProcess, SplitsCommandLinesAndFindsPrograms) {
  EXPECT_EQ(split_command_line("  -D LAN_2_0  -u 'a b' -p \"c'd\" x''y "),
            (std::vector<std::string>{"-D", "LAN_2_0", "-u", "a b", "-p", "c'd", "xy"}));
  EXPECT_TRUE(split_command_line(" ").empty());
  EXPECT_EQ(find_program("sh").empty(), false);
  EXPECT_EQ(find_program("/bin/sh"), "/bin/sh");
  EXPECT_EQ(find_program("/nonexistent/tool"), "");
  EXPECT_EQ(find_program("fructosa-no-such-tool"), "");
}

TEST(ChildProcess, RunCapturesOutputStatusAndSpawnErrors) {
  auto ok = run_with_timeout({"/bin/sh", "-c", "echo out; echo err >&2; exit 0"}, 10);
  EXPECT_TRUE(ok.succeeded());
  EXPECT_EQ(ok.out, "out\n");
  EXPECT_EQ(ok.err, "err\n");
  auto status = run_with_timeout({"/bin/sh", "-c", "exit 4"}, 10);
  EXPECT_EQ(status.exit_code, 4);
  EXPECT_EQ(status.failure("sh", 10), "sh exited with status 4");
  auto missing = run_with_timeout({"/nonexistent/tool"}, 10);
  if (missing.spawn_error == 0) {
    // posix_spawn done with fork+exec (e.g. under valgrind) can only say "exit status 127".
    EXPECT_EQ(missing.exit_code, 127);
  } else {
    EXPECT_EQ(missing.spawn_error, ENOENT);
    EXPECT_EQ(missing.failure("tool", 10), "tool: cannot run /nonexistent/tool: No such file or directory");
  }
  // Its own process group, stdin from /dev/null, no descriptor of ours beyond 0-2.
  auto setup = run_with_timeout({"/bin/sh", "-c", "cut -d' ' -f5 /proc/$$/stat; echo $$; cat; ls /proc/$$/fd"}, 10);
  std::istringstream lines(setup.out);
  std::string pgid, pid, fds, fd;
  std::getline(lines, pgid);
  std::getline(lines, pid);
  EXPECT_EQ(pgid, pid);
  while (std::getline(lines, fd)) fds += fd + " ";
  EXPECT_EQ(fds, "0 1 2 ") << setup.out;
}

TEST(ChildProcess, ParallelRunsShareOneDeadline) {
  Stragglers stragglers;
  auto results = run_in_parallel({{"/bin/sh", "-c", "echo a; echo b >&2"},
                                  {"/bin/sh", "-c", "exit 3"},
                                  {"/bin/sh", "-c", "echo started; sleep 600 & exec sleep 601"},
                                  {"/nonexistent/tool"},
                                  {"/bin/sh", "-c", "echo left; sleep 602 &"}},
                                 1.0, stragglers);
  ASSERT_EQ(results.size(), 5u);
  EXPECT_TRUE(results[0].succeeded());
  EXPECT_EQ(results[0].out, "a\n");
  EXPECT_EQ(results[0].err, "b\n");
  EXPECT_EQ(results[1].exit_code, 3);
  EXPECT_FALSE(results[1].timed_out);
  // The hung one is killed at the deadline, with what it printed kept.
  EXPECT_TRUE(results[2].timed_out);
  EXPECT_EQ(results[2].out, "started\n");
  EXPECT_EQ(results[2].failure("sh", 1.0).find("sh did not finish within 1 s: killed"), 0u) << results[2].failure("sh", 1.0);
  EXPECT_NE(results[3].spawn_error == ENOENT, results[3].exit_code == 127);  // 127: fork+exec spawn
  // Exited, leaving a process that holds its output: done, not timed out.
  EXPECT_TRUE(results[4].succeeded()) << results[4].failure("sh", 1.0);
  EXPECT_EQ(results[4].out, "left\n");
  // A killed run not dead yet is reaped later, without waiting.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (stragglers.size() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    stragglers.reap();
  }
  EXPECT_EQ(stragglers.size(), 0u);
  EXPECT_EQ(::waitpid(results[2].pid, nullptr, WNOHANG), -1);  // reaped already (ECHILD)
}

}  // namespace
