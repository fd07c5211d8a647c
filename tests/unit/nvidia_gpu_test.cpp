// NvidiaGPU against a fake libnvidia-ml (tests/fakes/fake_nvml.c: two GPUs, the second in MIG
// mode with two MIG devices, processes from $FAKE_NVML_PIDS).
#include "sensor_round_support.h"

using namespace fructosa;
using namespace fructosa::sensors;
using namespace fructosa::test::sensor_rounds;
using fructosa::test::TempDir;

namespace {

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

}  // namespace
