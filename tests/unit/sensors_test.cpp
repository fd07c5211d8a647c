// Sensors on real captures (tests/fixtures/node-exporter) and two-snapshot fixtures. Expected
// values come from psutil 5.9.4 pointed at the same files (psutil.PROCFS_PATH) and from
// node_exporter's e2e-output.txt.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <list>
#include <map>

#include "proc_stat.h"
#include "sensor.h"
#include "test_support.h"

using namespace fructosa;
using namespace fructosa::sensors;

namespace {

const std::string kFixtures = FRUCTOSA_FIXTURES;

std::unique_ptr<Sensor> make(const std::string& name, const std::string& proc_root) {
  static std::list<Options> options;  // each sensor's defaults, outliving it
  const SensorDefinition* definition = find_sensor(name);
  if (!definition) throw std::runtime_error("no sensor " + name);
  options.push_back(parse_pairs(*definition->options, {}, "test"));
  return definition->make(SensorContext{Roots{proc_root, kFixtures + "/node-exporter/sys"}, options.back()});
}

std::map<std::string, double> read(Sensor& sensor, bool expect_values = true) {
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "test", test::next_reading_time());
  EXPECT_EQ(sensor.sample(out), expect_values);
  std::map<std::string, double> values;
  for (const auto& sample : samples)
    for (const auto& metric : sample.metrics) values[metric.key] = metric.value;
  return values;
}

}  // namespace

TEST(Registry, TheFirstSensorsAreRegisteredWithCatalogs) {
  for (const char* name : {"CPUPercent", "CPUTimes", "VirtualMemory"}) {
    const SensorDefinition* sensor = find_sensor(name);
    ASSERT_NE(sensor, nullptr) << name;
    EXPECT_FALSE(sensor->description.empty());
    EXPECT_FALSE(sensor->catalog->entries().empty());
  }
  EXPECT_EQ(find_sensor("NoSuchSensor"), nullptr);
  EXPECT_EQ(metric_info("VirtualMemory", "percent").unit, "percent");
  EXPECT_EQ(metric_info("CPUTimes", "user").kind, Kind::counter);
  EXPECT_EQ(metric_info("CPUPercent", "17").unit, "percent");
}

TEST(CPUTimes, MatchesPsutilOnTheCapture) {
  auto sensor = make("CPUTimes", kFixtures + "/node-exporter/proc");
  auto values = read(*sensor);
  // psutil.cpu_times() with PROCFS_PATH at the fixture:
  const std::map<std::string, double> expected{
      {"user", 3018.54}, {"nice", 6.12},    {"system", 1119.22}, {"idle", 89790.04}, {"iowait", 35.52},
      {"irq", 0.02},     {"softirq", 39.44}, {"steal", 0.0},      {"guest", 0.44},     {"guest_nice", 0.36}};
  EXPECT_EQ(values, expected);
}

TEST(VirtualMemory, MatchesPsutilOnTheCaptureIncludingTheZoneinfoFallback) {
  // This meminfo has no MemAvailable: psutil estimates it from /proc/zoneinfo watermarks.
  auto sensor = make("VirtualMemory", kFixtures + "/node-exporter/proc");
  auto values = read(*sensor);
  const std::map<std::string, double> expected{
      {"total", 3831959552}, {"available", 416122880}, {"percent", 89.1},     {"used", 2579431424},
      {"free", 230883328},   {"active", 2287017984},   {"inactive", 1053417472}, {"buffers", 22568960},
      {"cached", 999075840}, {"shared", 608092160},    {"slab", 101306368}};
  EXPECT_EQ(values, expected);
  // node_exporter's e2e-output.txt agrees on the raw fields.
  EXPECT_EQ(values["total"], 3.831959552e+09);
  EXPECT_EQ(values["active"], 2.287017984e+09);
  EXPECT_EQ(values["slab"], 1.01306368e+08);
}

TEST(CPUPercent, FirstReadingPrimesThenMatchesPsutilOnTwoSnapshots) {
  // The sensor keeps /proc/stat open and re-reads it, so the test rewrites that one file in
  // place: first snapshot, reading, second snapshot, reading.
  char pattern[] = "/tmp/fructosa-cpu-XXXXXX";
  std::filesystem::path proc = ::mkdtemp(pattern);
  auto install = [&](const std::string& snapshot) {
    std::ifstream in(kFixtures + "/cpu-percent/" + snapshot + "/stat");
    std::ofstream(proc / "stat", std::ios::trunc) << in.rdbuf();
  };
  install("1");
  auto sensor = make("CPUPercent", proc.string());
  EXPECT_TRUE(read(*sensor, false).empty());
  install("2");
  auto values = read(*sensor);
  std::filesystem::remove_all(proc);
  // psutil.cpu_percent(percpu=True) across the same two files:
  const std::map<std::string, double> expected{{"0", 75.0}, {"1", 0.0}, {"2", 20.0}, {"3", 100.0},
                                               {"4", 3.0},  {"5", 33.0}, {"6", 0.0}, {"7", 70.0}};
  EXPECT_EQ(values, expected);
}

TEST(CPUPercent, BusyShareFollowsPsutilArithmetic) {
  CpuTimes before, after;
  before.fields = after.fields = 10;
  // 1/3 busy: psutil rounds 33.333... to 33.3; guest is not counted twice.
  after.seconds = {1.0, 0, 0, 2.0, 0, 0, 0, 0, 0.5, 0};
  EXPECT_EQ(cpu_busy_percent(before, after), 33.3);
  // 1/8 busy is exactly 12.5 %. Ties round on the exact binary value, as Python does.
  after.seconds = {1.0, 0, 0, 7.0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(cpu_busy_percent(before, after), 12.5);
  EXPECT_EQ(python_round(0.25, 1), 0.2);
  EXPECT_EQ(python_round(0.35, 1), 0.3);  // 0.35 is 0.34999... in binary
  EXPECT_EQ(python_round(2.675, 2), 2.67);
  EXPECT_EQ(cpu_busy_percent(before, before), 0.0);  // no time passed
}

TEST(Sensors, MissingFilesMakeASensorUnavailableWithTheReason) {
  auto sensor = make("VirtualMemory", "/nonexistent-proc");
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "VirtualMemory", 1);
  try {
    sensor->sample(out);
    FAIL() << "expected SensorUnavailable";
  } catch (const SensorUnavailable& why) {
    EXPECT_NE(std::string(why.what()).find("/nonexistent-proc/meminfo"), std::string::npos) << why.what();
  }
}
