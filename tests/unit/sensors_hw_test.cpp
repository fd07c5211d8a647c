// SensorsTemperatures, SensorsFans and SensorsBattery on node_exporter's sysfs capture
// (tests/fixtures/node-exporter/sys: class/hwmon and class/thermal link into devices/, as on a
// real system) and on synthesized trees (tests/fixtures/hw, README there). Expected values come
// from psutil 5.9.4 reading the same tree bind-mounted over /sys (psutil hard-codes /sys; see
// tests/integration/test_psutil_hw.py) and from node_exporter's e2e-output.txt.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "hwmon.h"
#include "sensor.h"
#include "sensor_probe.h"

using namespace fructosa;
using namespace fructosa::sensors;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = FRUCTOSA_FIXTURES;
const std::string kCapture = kFixtures + "/node-exporter/sys";

using Probe = test::SensorProbe;

Probe make(const std::string& name, const std::string& sys_root,
           std::vector<std::string> pairs = {}) {
  return test::make_probe(name, Roots{"/nonexistent-proc", sys_root}, pairs);
}

using Values = std::map<std::string, double>;

Values read(Probe& probe, std::map<std::string, std::string>* labels = nullptr) {
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "test", 1);
  EXPECT_TRUE(probe.sensor->sample(out));
  Values values;
  for (const auto& sample : samples) {
    for (const auto& metric : sample.metrics) {
      EXPECT_EQ(values.count(metric.key), 0u) << "duplicate key " << metric.key;
      values[metric.key] = metric.value;
    }
    if (labels)
      for (const auto& label : sample.labels) (*labels)[label.key] = label.value;
  }
  return values;
}

// The reason given by SensorUnavailable, or "" when the sensor reported values.
std::string unavailable(Probe& probe) {
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "test", 1);
  try {
    probe.sensor->sample(out);
  } catch (const SensorUnavailable& why) {
    return why.what();
  }
  return "";
}

// A scratch sysfs tree, removed at the end of the test.
class SensorsHwTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/fructosa-hw-XXXXXX";
    root_ = ::mkdtemp(pattern);
  }
  void TearDown() override { fs::remove_all(root_); }
  // Writes (or rewrites in place, keeping the inode the sensor has open) root/relative.
  void write(const std::string& relative, const std::string& text) {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << text << "\n";  // O_TRUNC: an existing file keeps its inode
  }
  void link(const std::string& relative, const std::string& target) {
    fs::create_directories((root_ / relative).parent_path());
    fs::create_directory_symlink(target, root_ / relative);
  }
  std::string sys() const { return root_.string(); }
  fs::path root_;
};

}  // namespace

TEST(HwmonHelpers, PythonNumberParsing) {
  EXPECT_EQ(python_float("55000\n"), 55000.0);
  EXPECT_EQ(python_float(" -1_000 "), -1000.0);
  EXPECT_EQ(python_float("+12.5"), 12.5);
  EXPECT_FALSE(python_float("1__0"));
  EXPECT_FALSE(python_float(""));
  EXPECT_FALSE(python_float("--1"));
  EXPECT_FALSE(python_float("nan(1)"));
  EXPECT_TRUE(std::isinf(*python_float("-Infinity")));
  EXPECT_EQ(python_int("1098\n"), 1098);
  EXPECT_EQ(python_int("+7"), 7);
  EXPECT_EQ(python_int("-3"), -3);
  EXPECT_FALSE(python_int("1.0"));
  EXPECT_FALSE(python_int("Charging"));
  EXPECT_EQ(strip(" \tCore 0\n"), "Core 0");
}

TEST(HwmonHelpers, KeysStayUniqueForEmptyAndRepeatedLabels) {
  SensorKeys keys;
  EXPECT_EQ(keys.add("coretemp", "Core 0"), "coretemp.Core 0");
  EXPECT_EQ(keys.add("coretemp", "Core 1"), "coretemp.Core 1");
  EXPECT_EQ(keys.add("coretemp", "Core 0"), "coretemp.Core 0#2");
  EXPECT_EQ(keys.add("acpitz", ""), "acpitz.#0");
  EXPECT_EQ(keys.add("acpitz", ""), "acpitz.#1");
  EXPECT_EQ(keys.add("acpitz", "#1"), "acpitz.#1#2");  // a real label that looks like ours
  EXPECT_EQ(keys.add("a.b", "x.y"), "a_b.x_y");        // dots would split the component
  EXPECT_EQ(keys.add("a_b", "x_y"), "a_b.x_y#1");
}

TEST(SensorsTemperatures, MatchesPsutilAndNodeExporterOnTheCapture) {
  auto probe = make("SensorsTemperatures", kCapture);
  auto values = read(probe);
  // psutil.sensors_temperatures() on this tree: both coretemp chips (hwmon0, hwmon1) form one
  // "coretemp" list of 10, so the second package's labels get "#<index>"; the mt7996 chips have
  // no label and no thresholds. hwmon4 has no `name` file: psutil (and so this sensor) leaves
  // its temp1/temp2 out, while node_exporter names the chip "hwmon4".
  Values expected;
  const char* labels[] = {"Physical id 0", "Core 0", "Core 1", "Core 2", "Core 3"};
  const double current[] = {55, 54, 52, 53, 50};
  for (int i = 0; i < 10; ++i) {
    std::string key =
        std::string("coretemp.") + labels[i % 5] + (i < 5 ? "" : "#" + std::to_string(i));
    expected[key + ".current"] = current[i % 5];
    expected[key + ".high"] = 84;
    expected[key + ".critical"] = 100;
  }
  expected["mt7996_phy0_0.#0.current"] = 55;
  expected["mt7996_phy0_1.#0.current"] = 56;
  expected["mt7996_phy0_2.#0.current"] = 57;
  EXPECT_EQ(values, expected);
  // e2e-output.txt: node_hwmon_temp_celsius / _max_celsius / _crit_celsius.
  EXPECT_EQ(values["coretemp.Core 2.current"], 53);        // platform_coretemp_0 temp4
  EXPECT_EQ(values["coretemp.Core 3#9.current"], 50);      // platform_coretemp_1 temp5
  EXPECT_EQ(values["coretemp.Physical id 0#5.high"], 84);  // platform_coretemp_1 temp1 max
  EXPECT_EQ(values["coretemp.Core 0.critical"], 100);      // platform_coretemp_0 temp2 crit
  EXPECT_EQ(values["mt7996_phy0_2.#0.current"], 57);       // ieee80211_phy0_mt7996_phy0_2 temp1
  EXPECT_EQ(metric_info("SensorsTemperatures", "coretemp.Core 0#6.critical").unit, "celsius");
}

TEST(SensorsTemperatures, ThermalZonesWhenHwmonHasNoTemperature) {
  auto probe = make("SensorsTemperatures", kFixtures + "/hw/thermal-only/sys");
  // psutil.sensors_temperatures() on the tree (PYTHONHASHSEED=0). Zones in psutil's sorted
  // order: 0, 1, 10, 2, 3 (no temp: left out), 4. thermal_zone0 has a critical and a passive
  // trip point: psutil gives 105 or, for some hash seeds (3, 5), 0.105 (it divides by 1000
  // again when it visits the passive one last); 105 is the trip point's value.
  const Values expected{{"acpitz.#0.current", 27.8},       {"acpitz.#0.high", 105},
                        {"acpitz.#0.critical", 105},       {"x86_pkg_temp.#0.current", 45},
                        {"acpitz.#1.current", 31},         {"acpitz.#1.high", 90},
                        {"acpitz.#1.critical", 90},        {"acpitz.#2.current", 29.8},
                        {"acpitz.#2.high", 110},           {"acpitz.#2.critical", 110},
                        {"INT3400 Thermal.#0.current", -1}};
  EXPECT_EQ(read(probe), expected);
}

TEST_F(SensorsHwTree, SensorsTemperaturesReadsNodeExportersThermalZone) {
  link("class/thermal", kCapture + "/class/thermal");
  auto probe = make("SensorsTemperatures", sys());
  // e2e-output.txt: node_thermal_zone_temp{type="cpu-thermal",zone="0"} 12.376; no trip points.
  EXPECT_EQ(read(probe), (Values{{"cpu-thermal.#0.current", 12.376}}));
}

TEST_F(SensorsHwTree, SensorsTemperaturesUnavailableWithoutHwmonOrZones) {
  auto probe = make("SensorsTemperatures", sys());
  EXPECT_EQ(unavailable(probe),
            "no hwmon temperature inputs or thermal zones under " + sys() + "/class");
  // Temperature files without a chip name: psutil returns {} and does not fall back to the
  // thermal zones (it falls back only when no temp*_* file exists).
  write("class/hwmon/hwmon0/temp1_input", "40000");
  write("class/thermal/thermal_zone0/temp", "30000");
  write("class/thermal/thermal_zone0/type", "acpitz");
  auto nameless = make("SensorsTemperatures", sys());
  EXPECT_NE(unavailable(nameless).find("none of the 1 hwmon temperature inputs"), std::string::npos)
      << unavailable(nameless);
}

TEST_F(SensorsHwTree, SensorsTemperaturesRereadsInputsAndRescansWhenHwmonChanges) {
  write("class/hwmon/hwmon0/name", "k10temp");
  write("class/hwmon/hwmon0/temp1_input", "40000");
  write("class/hwmon/hwmon0/temp1_label", "Tctl");
  write("class/hwmon/hwmon0/temp1_crit", "0");
  write("class/hwmon/hwmon0/temp1_max", "70000");
  auto probe = make("SensorsTemperatures", sys());
  auto every_round = make("SensorsTemperatures", sys(), {"rescan_interval=0"});
  // A 0 critical is false to psutil's `if high and not critical`: it takes high's value.
  EXPECT_EQ(read(probe), (Values{{"k10temp.Tctl.current", 40},
                                 {"k10temp.Tctl.high", 70},
                                 {"k10temp.Tctl.critical", 70}}));
  read(every_round);
  write("class/hwmon/hwmon0/temp1_input", "41500");
  write("class/hwmon/hwmon0/temp1_max", "75000");
  // The input is re-read every reading; thresholds at a rescan (every reading with 0).
  EXPECT_EQ(read(probe)["k10temp.Tctl.current"], 41.5);
  EXPECT_EQ(read(probe)["k10temp.Tctl.high"], 70);
  EXPECT_EQ(read(every_round)["k10temp.Tctl.high"], 75);
  // A new hwmon directory (module loaded) triggers a rescan at once, which rereads thresholds.
  write("class/hwmon/hwmon1/name", "nvme");
  write("class/hwmon/hwmon1/temp1_input", "35850");
  write("class/hwmon/hwmon1/temp1_label", "Composite");
  auto values = read(probe);
  EXPECT_EQ(values["nvme.Composite.current"], 35.85);
  EXPECT_EQ(values["k10temp.Tctl.high"], 75);
  EXPECT_EQ(values.size(), 4u);
  // An input that stops reading drops its keys for that reading only.
  write("class/hwmon/hwmon1/temp1_input", "not a number");
  EXPECT_EQ(read(probe).count("nvme.Composite.current"), 0u);
}

TEST(SensorsFans, MatchesPsutilAndNodeExporterOnTheCapture) {
  auto probe = make("SensorsFans", kCapture);
  // psutil.sensors_fans(): hwmon3 (nct6779) has fan2_* directly, so psutil does not look in
  // hwmon*/device/, where applesmc's fans are. e2e-output.txt:
  // node_hwmon_fan_rpm{chip="nct6779",sensor="fan2"} 1098.
  EXPECT_EQ(read(probe), (Values{{"nct6779.#0.current", 1098}}));
  EXPECT_EQ(metric_info("SensorsFans", "nct6779.#0.current").unit, "rpm");
}

TEST_F(SensorsHwTree, SensorsFansLookInDeviceOnlyWithoutDirectFans) {
  link("class/hwmon/hwmon2", kCapture + "/devices/platform/applesmc.768/hwmon/hwmon2");
  auto probe = make("SensorsFans", sys());
  // e2e-output.txt: node_hwmon_fan_rpm{chip="platform_applesmc_768",sensor="fan1"} 0 and fan2
  // 1998, labelled "Left side" and "Right side"; the chip name is device/name.
  EXPECT_EQ(read(probe),
            (Values{{"applesmc.Left side.current", 0}, {"applesmc.Right side.current", 1998}}));
  // The thermal-only tree has one direct fan.
  auto direct = make("SensorsFans", kFixtures + "/hw/thermal-only/sys");
  EXPECT_EQ(read(direct), (Values{{"nct6779.CPU fan.current", 900}}));
}

TEST_F(SensorsHwTree, SensorsFansUnavailableWithoutFans) {
  auto probe = make("SensorsFans", sys());
  EXPECT_EQ(unavailable(probe), "no hwmon fan inputs under " + sys() + "/class/hwmon");
}

TEST(SensorsBattery, MatchesPsutilOnTheCapture) {
  auto probe = make("SensorsBattery", kCapture);
  std::map<std::string, std::string> labels;
  auto values = read(probe, &labels);
  // psutil.sensors_battery(): sbattery(percent=81.16263589971156, secsleft=26327,
  // power_plugged=False). It prefers energy_now / energy_full (36580000 / 45070000) to the
  // capacity file, which holds the truncated 81 that node_exporter reports
  // (node_power_supply_capacity{power_supply="BAT0"} 81). secsleft = int(36580000 / 5002000 *
  // 3600); AC/online is 0 (node_power_supply_online{power_supply="AC"} 0).
  EXPECT_EQ(values, (Values{{"percent", 100.0 * 36580000 / 45070000},
                            {"secsleft", 26327},
                            {"power_plugged", 0}}));
  EXPECT_EQ(values["percent"], 81.16263589971156);
  EXPECT_EQ(std::floor(values["percent"]), 81);
  EXPECT_EQ(labels, (std::map<std::string, std::string>{{"battery", "BAT0"}}));
}

TEST(SensorsBattery, MatchesPsutilOnSynthesizedSupplies) {
  // psutil.sensors_battery() on each tree (tests/fixtures/hw/README.md).
  auto charging = make("SensorsBattery", kFixtures + "/hw/battery-charging/sys");
  // sbattery(percent=50.0, secsleft=POWER_TIME_UNLIMITED, power_plugged=True)
  EXPECT_EQ(read(charging), (Values{{"percent", 50}, {"secsleft", -2}, {"power_plugged", 1}}));
  auto capacity = make("SensorsBattery", kFixtures + "/hw/battery-capacity/sys");
  std::map<std::string, std::string> labels;
  // sbattery(percent=77, secsleft=5400, power_plugged=None)
  EXPECT_EQ(read(capacity, &labels),
            (Values{{"percent", 77}, {"secsleft", 5400}, {"power_plugged", -1}}));
  EXPECT_EQ(labels["battery"], "hidpp_battery_0");
  auto no_power = make("SensorsBattery", kFixtures + "/hw/battery-no-power/sys");
  // sbattery(percent=0.0, secsleft=POWER_TIME_UNKNOWN, power_plugged=False)
  EXPECT_EQ(read(no_power), (Values{{"percent", 0}, {"secsleft", -1}, {"power_plugged", 0}}));
  auto none = make("SensorsBattery", kFixtures + "/hw/battery-none/sys");  // psutil: None
  EXPECT_NE(unavailable(none).find("BAT0 has neither energy_now and energy_full"),
            std::string::npos);
}

TEST_F(SensorsHwTree, SensorsBatteryFollowsChangesBetweenReadings) {
  auto probe = make("SensorsBattery", sys());
  EXPECT_EQ(unavailable(probe),
            "no battery (BAT* or *battery*) under " + sys() + "/class/power_supply");
  write("class/power_supply/BAT0/energy_now", "30000000");
  write("class/power_supply/BAT0/energy_full", "40000000");
  write("class/power_supply/BAT0/power_now", "-7000000");  // some firmware reports it negative
  write("class/power_supply/BAT0/status", "Discharging");
  // int(30000000 / -7000000 * 3600) = int(-15428.57...) = -15428, as psutil (not clamped).
  EXPECT_EQ(read(probe), (Values{{"percent", 75}, {"secsleft", -15428}, {"power_plugged", 0}}));
  // Rewritten in place: the sensor keeps the files open.
  write("class/power_supply/BAT0/energy_now", "40000000");
  write("class/power_supply/BAT0/status", "Full");
  EXPECT_EQ(read(probe), (Values{{"percent", 100}, {"secsleft", -2}, {"power_plugged", 1}}));
  write("class/power_supply/AC/online", "0");  // AC/online outranks the status
  EXPECT_EQ(read(probe)["power_plugged"], 0);
  // A first battery in sorted order appears: psutil switches to it.
  write("class/power_supply/BAT-1/capacity", "12");
  EXPECT_EQ(read(probe), (Values{{"percent", 12}, {"secsleft", -1}, {"power_plugged", 0}}));
}
