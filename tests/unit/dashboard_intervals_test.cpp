// make-dashboard and the sensors' intervals: counter rates that survive a carbon step finer
// than the interval, the carbon storage schemas it prints, and DiskUsage's keys following its
// `path` option. Graphite's side of both is tested in tests/integration/test_dashboard_rates.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "dashboard.h"
#include "dashboard_test_support.h"
#include "master_config.h"
#include "sensor.h"
#include "test_support.h"

namespace fructosa::dashboards {
namespace {

using json = nlohmann::ordered_json;
using test_helpers::contains;
using test_helpers::joined;

std::vector<std::string> graphite_targets(const json& dashboard) {
  std::vector<std::string> targets;
  for (const auto& panel : dashboard["panels"])
    for (const auto& target : panel.value("targets", json::array()))
      if (target.contains("target")) targets.push_back(target["target"]);
  return targets;
}

// The sensors of an lagent.conf written for the test.
std::vector<ShownSensor> sensors_of(const std::string& text) {
  test::TempDir dir;
  std::ofstream(dir.file("lagent.conf")) << "[lmaster]\nhost = master01\n" << text;
  return sensors_of_agent_config(dir.file("lagent.conf"));
}

const ShownSensor& shown(const std::vector<ShownSensor>& sensors, std::string_view name) {
  for (const auto& sensor : sensors)
    if (sensor.name == name) return sensor;
  throw std::runtime_error("not shown: " + std::string(name));
}

TEST(DashboardIntervals, TheAgentConfigGivesEachSensorsInterval) {
  auto sensors = sensors_of("[sensor:NetIOCounters]\ntime_interval = 10\n[sensor:CPUPercent]\n");
  EXPECT_EQ(shown(sensors, "NetIOCounters").interval, 10);
  EXPECT_EQ(shown(sensors, "CPUPercent").interval, 1);
  EXPECT_EQ(shown(sensors, "lagent").interval, 10);  // always there, every 10 s by default
  // Without an lagent.conf: the same defaults.
  auto defaults = all_sensors_with_defaults();
  EXPECT_EQ(shown(defaults, "lagent").interval, 10);
  EXPECT_EQ(shown(defaults, "CPUPercent").interval, 1);
  // lmaster's own sensor: lmaster's default stats_interval.
  IniFile none = IniFile::parse("", "(defaults)");
  EXPECT_EQ(master_sensor().interval,
            parse_section(master::master_options(), none, nullptr).get_real("stats_interval"));
}

// Carbon keeping 1 s points of a counter read every 10 s holds 9 empty points between two
// readings, and perSecond() gives no rate next to an empty point: the gap is interpolated.
TEST(DashboardIntervals, CounterRatesBridgeTheStepsBetweenTwoReadings) {
  Settings settings;
  settings.sensors = sensors_of(
      "[sensor:NetIOCounters]\ntime_interval = 10\n[sensor:DiskIOCounters]\n"
      "[sensor:CPUTimes]\ntime_interval = 2.5\npercpu = true\n[sensor:SwapMemory]\ntime_interval = "
      "0.2\n"
      "[sensor:VirtualMemory]\ntime_interval = 10\n");
  auto targets = graphite_targets(make_dashboard(DashboardKind::node, settings));
  EXPECT_TRUE(contains(targets,
                       "aliasByNode(perSecond(interpolate($host.NetIOCounters.bytes_sent, 9)), 2)"))
      << joined(targets);
  EXPECT_TRUE(contains(targets, "aliasByNode(perSecond(interpolate($host.CPUTimes.*.user, 2)), 2)"))
      << joined(targets);
  // A reading every second (or more often) leaves no gap at a 1 s step.
  EXPECT_TRUE(contains(targets, "aliasByNode(perSecond($host.DiskIOCounters.read_bytes), 2)"))
      << joined(targets);
  EXPECT_TRUE(contains(targets, "aliasByNode(perSecond($host.SwapMemory.sin), 2)"))
      << joined(targets);
  // Scaled after the rate; gauges are shown as they are.
  EXPECT_TRUE(
      contains(targets, "aliasByNode(scale(perSecond($host.DiskIOCounters.read_time), 0.001), 2)"))
      << joined(targets);
  EXPECT_TRUE(contains(targets, "alias($host.VirtualMemory.percent, 'percent')"))
      << joined(targets);
  // lagent's own counters (every 10 s) too.
  bool lagent_rate = false;
  for (const auto& target : targets)
    lagent_rate =
        lagent_rate || (target.find("perSecond(interpolate($host.lagent.") != std::string::npos &&
                        target.find(", 9)") != std::string::npos);
  EXPECT_TRUE(lagent_rate) << joined(targets);

  // The cluster overview's top-N and lmaster's counters (every 10 s by default).
  settings.sensors.push_back(shown(all_sensors_with_defaults(), "RAPL"));
  settings.sensors.back().interval = 5;
  auto cluster = graphite_targets(make_dashboard(DashboardKind::cluster, settings));
  EXPECT_TRUE(contains(cluster, "aliasByNode(perSecond(interpolate(*.lmaster.received, 9)), 0, 2)"))
      << joined(cluster);
  bool rapl = false;
  for (const auto& target : cluster)
    rapl = rapl || target.find("perSecond(interpolate(*.RAPL.*.energy, 4))") != std::string::npos;
  EXPECT_TRUE(rapl) << joined(cluster);
  for (auto kind : {DashboardKind::node, DashboardKind::job, DashboardKind::cluster})
    EXPECT_EQ(joined(validate_dashboard(make_dashboard(kind, settings), settings)), "")
        << to_string(kind);
}

TEST(DashboardIntervals, StorageStepIsAWholeNumberOfIntervals) {
  EXPECT_EQ(storage_step(1), 1);
  EXPECT_EQ(storage_step(10), 10);
  EXPECT_EQ(storage_step(60), 60);
  EXPECT_EQ(storage_step(7), 7);
  EXPECT_EQ(storage_step(0.2), 1);
  EXPECT_EQ(storage_step(0.01), 1);
  EXPECT_EQ(storage_step(2.5), 5);
  EXPECT_EQ(storage_step(1.5), 3);
  EXPECT_EQ(storage_step(0.3), 3);
}

// A section of a storage-schemas.conf text: pattern and retentions.
std::pair<std::string, std::string> schema_rule(const std::string& text,
                                                const std::string& section) {
  auto at = text.find("\n[" + section + "]\n");
  if (at == std::string::npos) return {};
  std::istringstream lines(text.substr(at + section.size() + 4));
  std::string pattern, retentions;
  for (std::string line; std::getline(lines, line) && !line.empty() && line[0] != '[';) {
    if (line.rfind("pattern = ", 0) == 0) pattern = line.substr(10);
    if (line.rfind("retentions = ", 0) == 0) retentions = line.substr(13);
  }
  return {pattern, retentions};
}

TEST(DashboardIntervals, StorageSchemasStoreEachSensorAtItsInterval) {
  Settings settings;
  settings.prefix = ".site.a.";
  settings.sensors = sensors_of(
      "[sensor:NetIOCounters]\ntime_interval = "
      "10\n[sensor:CPUPercent]\n[sensor:SwapMemory]\ntime_interval = 0.5\n"
      "[sensor:DiskUsage]\ntime_interval = 30\n[sensor:BootTime]\ntime_interval = "
      "7\n[sensor:JobCgroup]\ntime_interval = 10\n");
  std::string text = storage_schemas(settings);
  // One rule per step; lagent (10 s by default) and lmaster's sensor share the 10 s one.
  auto [one, one_retention] = schema_rule(text, "fructosa_1s");
  EXPECT_EQ(one, R"(^site\.a\.(jobs\.[0-9]+\.)?[^.]+\.(CPUPercent|SwapMemory)(\.|$))") << text;
  EXPECT_EQ(one_retention, "1s:1d,60s:30d,3600s:2y");
  auto [ten, ten_retention] = schema_rule(text, "fructosa_10s");
  EXPECT_EQ(ten,
            R"(^site\.a\.(jobs\.[0-9]+\.)?[^.]+\.(JobCgroup|NetIOCounters|lagent|lmaster)(\.|$))")
      << text;
  EXPECT_EQ(ten_retention, "10s:1d,60s:30d,3600s:2y");
  EXPECT_EQ(schema_rule(text, "fructosa_30s").second, "30s:1d,60s:30d,3600s:2y");
  // Whisper wants every precision a multiple of the finer ones.
  EXPECT_EQ(schema_rule(text, "fructosa_7s").second, "7s:1d,63s:30d,3654s:2y");
  std::regex ten_regex(ten);
  for (const char* path :
       {"site.a.node07.NetIOCounters.bytes_sent", "site.a.jobs.1234.node07.JobCgroup.cpu.usage",
        "site.a.node07.lagent.CPUPercent.duration", "site.a.master01.lmaster.received"})
    EXPECT_TRUE(std::regex_search(path, ten_regex)) << path;
  for (const char* path : {"node07.NetIOCounters.bytes_sent", "site.a.node07.CPUPercent",
                           "site.a.node07.NetIOCountersX.a", "site.a.jobs.node07.x.NetIOCounters.a",
                           "site.a.node07.x.NetIOCounters.a"})
    EXPECT_FALSE(std::regex_search(path, ten_regex)) << path;
  std::regex seven(schema_rule(text, "fructosa_7s").first);
  EXPECT_TRUE(std::regex_search("site.a.node07.BootTime", seven));  // a scalar: no key
  // Without a prefix.
  settings.prefix.clear();
  EXPECT_EQ(schema_rule(storage_schemas(settings), "fructosa_1s").first,
            R"(^(jobs\.[0-9]+\.)?[^.]+\.(CPUPercent|SwapMemory)(\.|$))");
}

// FrUCToSA's <host>.DiskUsage.percent with one path; a series per path with several.
TEST(DashboardIntervals, DiskUsagePanelsFollowThePathOption) {
  for (Datasource datasource : {Datasource::graphite, Datasource::elasticsearch}) {
    Settings settings;
    settings.datasource = datasource;
    settings.sensors = sensors_of("[sensor:DiskUsage]\n");
    json one = make_dashboard(DashboardKind::node, settings);
    EXPECT_EQ(joined(validate_dashboard(one, settings)), "");
    std::string text = one.dump();
    settings.sensors = sensors_of("[sensor:DiskUsage]\npath = /, /home\n");
    json several = make_dashboard(DashboardKind::node, settings);
    EXPECT_EQ(joined(validate_dashboard(several, settings)), "");
    std::string several_text = several.dump();
    if (datasource == Datasource::graphite) {
      auto targets = graphite_targets(one);
      EXPECT_TRUE(contains(targets, "alias($host.DiskUsage.percent, 'percent')"))
          << joined(targets);
      EXPECT_EQ(text.find("DiskUsage.*."), std::string::npos);
      auto per_path = graphite_targets(several);
      EXPECT_TRUE(contains(per_path, "aliasByNode($host.DiskUsage.*.percent, 2)"))
          << joined(per_path);
      EXPECT_FALSE(contains(per_path, "alias($host.DiskUsage.percent, 'percent')"));
    } else {
      EXPECT_NE(text.find(R"("field":"metrics.percent")"), std::string::npos);
      EXPECT_NE(several_text.find(R"(metrics\\.([^.]+\\.percent))"), std::string::npos)
          << several_text;
      EXPECT_EQ(several_text.find(R"("field":"metrics.percent")"), std::string::npos);
    }
  }
  // The same path twice is one path, as the sensor counts it.
  Settings settings;
  settings.sensors = sensors_of("[sensor:DiskUsage]\npath = /data, /data\n");
  EXPECT_TRUE(contains(graphite_targets(make_dashboard(DashboardKind::node, settings)),
                       "alias($host.DiskUsage.percent, 'percent')"));
}

}  // namespace
}  // namespace fructosa::dashboards
