// make-dashboard: hints declared by every sensor, the structure of every generated dashboard,
// units, rates, FrUCToSA's HOSTS files, and golden JSON for fixed configurations.
//
// Regenerate the golden files (tests/fixtures/dashboards/golden/) after a deliberate change:
//   FRUCTOSA_UPDATE_GOLDENS=1 build/tests/unit_tests --gtest_filter='DashboardGolden*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "agent_registry.h"
#include "dashboard.h"
#include "dashboard_test_support.h"
#include "graphite_output.h"
#include "master_catalog.h"
#include "output.h"
#include "sensor.h"

namespace fructosa::dashboards {
namespace {

using json = nlohmann::ordered_json;
using test_helpers::kFixtures;
using test_helpers::joined;

std::vector<std::string> all_targets(const json& dashboard) {
  std::vector<std::string> targets;
  for (const auto& panel : dashboard["panels"])
    for (const auto& target : panel.value("targets", json::array()))
      if (target.contains("target")) targets.push_back(target["target"]);
  return targets;
}

const json* panel_titled(const json& dashboard, std::string_view title) {
  for (const auto& panel : dashboard["panels"])
    if (panel["title"] == title) return &panel;
  return nullptr;
}

TEST(DashboardHints, EverySensorDeclaresARowAndHintsThatExist) {
  for (const auto* sensor : sensors::all_sensors()) {
    const auto& hints = sensor->dashboard;
    EXPECT_NE(hints.row, sensors::DashboardRow::unassigned) << sensor->name << " declares no dashboard row";
    auto option = [&](std::string_view name) -> const OptionSpec* {
      for (const auto& spec : *sensor->options)
        if (spec.name == name) return &spec;
      return nullptr;
    };
    if (!hints.per_item_option.empty()) {
      const auto* spec = option(hints.per_item_option);
      ASSERT_TRUE(spec) << sensor->name << ": no option " << hints.per_item_option;
      // A bool switch, or a list whose item count decides (DiskUsage's paths).
      EXPECT_TRUE(spec->type == OptionType::boolean || spec->type == OptionType::list) << sensor->name;
    }
    if (!hints.key_list_option.empty()) {
      const auto* spec = option(hints.key_list_option);
      ASSERT_TRUE(spec) << sensor->name << ": no option " << hints.key_list_option;
      EXPECT_EQ(spec->type, OptionType::list) << sensor->name;
    }
    for (std::string_view list : {hints.node_keys, hints.job_keys}) {
      if (list == "*") continue;
      std::stringstream items{std::string(list)};
      for (std::string pattern; std::getline(items, pattern, ',');) {
        bool found = false;
        for (const auto& entry : sensor->catalog->entries()) found = found || entry.pattern == pattern;
        EXPECT_TRUE(found) << sensor->name << ": hint names '" << pattern << "', no catalog pattern";
      }
    }
  }
}

TEST(DashboardUnits, EveryCatalogUnitHasAGrafanaUnitAsValueAndAsRate) {
  EXPECT_EQ(grafana_unit(Unit::hertz_mega, Kind::gauge), "rotmhz");  // FrUCToSA labelled MHz as Hz
  EXPECT_EQ(grafana_unit(Unit::bytes, Kind::counter), "binBps");
  EXPECT_EQ(grafana_unit(Unit::joules, Kind::counter), "watt");
  EXPECT_EQ(grafana_unit(Unit::seconds, Kind::counter), "percentunit");
  EXPECT_EQ(grafana_unit(Unit::celsius, Kind::gauge), "celsius");
  for (int unit = 0; unit <= static_cast<int>(Unit::amperes); ++unit)
    for (Kind kind : {Kind::gauge, Kind::counter})
      EXPECT_TRUE(is_grafana_unit(grafana_unit(static_cast<Unit>(unit), kind))) << unit;
}

TEST(DashboardStructure, EveryDashboardOfEverySensorIsValid) {
  for (Datasource datasource : {Datasource::graphite, Datasource::elasticsearch, Datasource::prometheus}) {
    for (std::string prefix : {"", "cluster.a"}) {
      Settings settings;
      settings.datasource = datasource;
      settings.prefix = prefix;
      settings.sensors = all_sensors_with_defaults();
      for (DashboardKind kind : {DashboardKind::node, DashboardKind::job, DashboardKind::cluster}) {
        json dashboard = make_dashboard(kind, settings);
        EXPECT_EQ(joined(validate_dashboard(dashboard, settings)), "")
            << to_string(datasource) << " " << to_string(kind) << " prefix '" << prefix << "'";
        EXPECT_GT(dashboard["panels"].size(), 5u);
      }
      json fixed = make_dashboard(DashboardKind::node, settings, "node07.cluster.example");
      EXPECT_EQ(joined(validate_dashboard(fixed, settings)), "");
    }
  }
}

TEST(DashboardStructure, ValidatorFindsWhatIsWrong) {
  Settings settings;
  settings.sensors = all_sensors_with_defaults();
  json good = make_dashboard(DashboardKind::node, settings);
  ASSERT_EQ(joined(validate_dashboard(good, settings)), "");

  json broken = good;
  broken["panels"][2]["id"] = broken["panels"][1]["id"];
  EXPECT_NE(joined(validate_dashboard(broken, settings)).find("is used twice"), std::string::npos);

  broken = good;
  broken["panels"][2]["gridPos"] = broken["panels"][1]["gridPos"];
  EXPECT_NE(joined(validate_dashboard(broken, settings)).find("overlap"), std::string::npos);

  broken = good;
  broken["panels"][1]["fieldConfig"]["defaults"]["unit"] = "hertz_mega";
  EXPECT_NE(joined(validate_dashboard(broken, settings)).find("unknown unit"), std::string::npos);

  broken = good;
  broken["panels"][1]["targets"][0]["target"] = "alias($host.VirtualMemory.no_such_key, 'x')";
  EXPECT_NE(joined(validate_dashboard(broken, settings)).find("no catalog entry of VirtualMemory"), std::string::npos);

  broken = good;
  broken["panels"][1]["targets"][0]["target"] = "$host.NoSuchSensor.total";
  EXPECT_NE(joined(validate_dashboard(broken, settings)).find("no sensor 'NoSuchSensor'"), std::string::npos);

  broken = good;
  broken["panels"][1]["datasource"]["uid"] = "my-graphite";
  EXPECT_NE(joined(validate_dashboard(broken, settings)).find("datasource variable"), std::string::npos);
}

TEST(DashboardGraphite, CountersAreRatesAndOptionsPickTheKeys) {
  Settings settings;
  settings.sensors = sensors_of_agent_config(kFixtures + "/lagent.conf");
  json node = make_dashboard(DashboardKind::node, settings);
  auto targets = all_targets(node);
  auto has = [&](std::string_view target) { return std::find(targets.begin(), targets.end(), target) != targets.end(); };
  // percpu = false: the machine's one value, a scalar path.
  EXPECT_TRUE(has("alias($host.CPUPercent, 'CPUPercent')")) << joined(targets);
  // percpu = true: per CPU, the CPU in the legend; seconds per second.
  EXPECT_TRUE(has("aliasByNode(perSecond($host.CPUTimes.*.user), 2)")) << joined(targets);
  // pernic = true: per NIC, bytes per second.
  EXPECT_TRUE(has("aliasByNode(perSecond($host.NetIOCounters.*.bytes_sent), 2)")) << joined(targets);
  EXPECT_FALSE(has("alias(perSecond($host.NetIOCounters.bytes_sent), 'bytes_sent')"));
  // A timestamp in seconds becomes Grafana's milliseconds.
  EXPECT_TRUE(has("alias(scale($host.BootTime, 1000), 'BootTime')")) << joined(targets);
  // Per-job sensors show their node keys on the node dashboard; PerfHW's listed events per job.
  EXPECT_TRUE(has("alias($host.JobCgroup.jobs, 'jobs')")) << joined(targets);
  EXPECT_EQ(std::count_if(targets.begin(), targets.end(), [](const std::string& t) { return t.find("cpu.usage") != std::string::npos; }), 0);

  const json* freq = panel_titled(node, "CPUFreq current, min, max");
  ASSERT_TRUE(freq);
  EXPECT_EQ((*freq)["fieldConfig"]["defaults"]["unit"], "rotmhz");
  const json* times = panel_titled(node, "CPUTimes *.user");
  ASSERT_TRUE(times);
  EXPECT_EQ((*times)["fieldConfig"]["defaults"]["unit"], "percentunit");

  json job = make_dashboard(DashboardKind::job, settings);
  auto job_targets = all_targets(job);
  auto job_has = [&](std::string_view target) {
    return std::find(job_targets.begin(), job_targets.end(), target) != job_targets.end();
  };
  EXPECT_TRUE(job_has("aliasByNode(perSecond(jobs.$job.$jobhost.PerfHW.cache_ll_read_miss), 2, 4)")) << joined(job_targets);
  EXPECT_TRUE(job_has("aliasByNode(perSecond(jobs.$job.$jobhost.JobCgroup.cpu.usage), 2, 4, 5)")) << joined(job_targets);
  EXPECT_TRUE(job_has("aliasByNode($jobhost.VirtualMemory.percent, 0)")) << joined(job_targets);
}

TEST(DashboardGraphite, PathsFollowTheOutputsNamingWithPrefix) {
  Settings settings;
  settings.prefix = ".cluster a.";
  settings.sensors = sensors_of_agent_config(kFixtures + "/lagent.conf");
  auto targets = all_targets(make_dashboard(DashboardKind::node, settings, "node07.cluster.example"));
  // The prefix sanitised as lmaster's Graphite output does it; the host shortened.
  EXPECT_NE(std::find(targets.begin(), targets.end(), "alias(cluster_a.$host.VirtualMemory.percent, 'percent')"),
            targets.end())
      << joined(targets);
  json fixed = make_dashboard(DashboardKind::node, settings, "node07.cluster.example");
  EXPECT_EQ(fixed["templating"]["list"][1]["type"], "constant");
  EXPECT_EQ(fixed["templating"]["list"][1]["query"], "node07");
  EXPECT_EQ(fixed["uid"], "fructosa-graphite-node07");
}

// A fixed-host dashboard asks Graphite for exactly the paths lmaster's Graphite output sends,
// whatever bytes the prefix and the host hold.
TEST(DashboardGraphite, FixedHostTargetsAreThePathsTheOutputSends) {
  for (std::string host : {"node07.cluster.example", "10.1.2.3", "node(7)@x"}) {
    Settings settings;
    settings.prefix = "site(1).a=b+c.";
    settings.sensors = sensors_of_agent_config(kFixtures + "/lagent.conf");
    json dashboard = make_dashboard(DashboardKind::node, settings, host);
    ASSERT_EQ(dashboard["templating"]["list"][1]["name"], "host");
    const std::string constant = dashboard["templating"]["list"][1]["query"];
    master::CarbonEncoder encoder(master::CarbonProtocol::pickle, settings.prefix, 500);
    const std::string sent = encoder.path(Sample{host, "VirtualMemory", 0, 0, {}, {}}, "percent");
    std::string target;
    for (const auto& candidate : all_targets(dashboard))
      if (candidate.find(".VirtualMemory.percent") != std::string::npos) target = candidate;
    ASSERT_FALSE(target.empty()) << joined(all_targets(dashboard));
    auto paths = graphite_paths(target);
    ASSERT_EQ(paths.size(), 1u) << target;
    std::string asked = paths[0];
    asked.replace(asked.find("$host"), 5, constant);
    EXPECT_EQ(asked, sent) << host;
    EXPECT_EQ(asked.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-:#."),
              std::string::npos)
        << asked;
    EXPECT_TRUE(validate_dashboard(dashboard, settings).empty()) << host;
  }
}

TEST(DashboardGraphite, GraphitePathsOfATarget) {
  EXPECT_EQ(graphite_paths("aliasByNode(perSecond(a.b.*), 2)"), std::vector<std::string>{"a.b.*"});
  EXPECT_EQ(graphite_paths("diffSeries(countSeries(x.{a,b}.up), sumSeries(y.z))"),
            (std::vector<std::string>{"x.{a,b}.up", "y.z"}));
  EXPECT_EQ(graphite_paths("groupByNode(scale(p.q, 0.001), 1, 'sum')"), std::vector<std::string>{"p.q"});
}

TEST(DashboardElasticsearch, FieldsQueriesAndRates) {
  Settings settings;
  settings.datasource = Datasource::elasticsearch;
  settings.sensors = sensors_of_agent_config(kFixtures + "/lagent.conf");
  json node = make_dashboard(DashboardKind::node, settings);
  const json* boot = panel_titled(node, "BootTime");
  ASSERT_TRUE(boot);
  const auto& target = (*boot)["targets"][0];
  EXPECT_EQ(target["query"], "sensor:\"BootTime\" AND host:\"$host\" AND job:0");
  EXPECT_EQ(target["metrics"][0]["field"], "metrics.value");
  // Counters: a derivative per second of the largest value in each interval.
  const json* nic = panel_titled(node, "NetIOCounters *.bytes_sent");
  ASSERT_TRUE(nic);
  EXPECT_EQ((*nic)["targets"][0]["metrics"][1]["type"], "derivative");
  EXPECT_EQ((*nic)["targets"][0]["metrics"][1]["settings"]["unit"], "1s");
  // Per-NIC fields come from a variable listing the index's matching fields; the panel repeats.
  std::string repeat = (*nic)["repeat"];
  EXPECT_EQ((*nic)["targets"][0]["metrics"][0]["field"], "metrics.${" + repeat + "}");
  bool found = false;
  for (const auto& variable : node["templating"]["list"])
    if (variable["name"] == repeat) {
      found = true;
      EXPECT_EQ(variable["regex"], "/^metrics\\.([^.]+\\.bytes_sent)$/");
    }
  EXPECT_TRUE(found);
}

TEST(DashboardHosts, FrucToSaHostsFile) {
  EXPECT_EQ(read_hosts_file(kFixtures + "/hosts.ini"),
            (std::vector<std::string>{"node01.cluster.example", "node02", "node03.cluster.example"}));
  EXPECT_EQ(short_host("node01.cluster.example"), "node01");
  // As lmaster's Graphite output names the host: an IPv4 address whole, its dots '_'.
  EXPECT_EQ(short_host("10.1.2.3"), "10_1_2_3");
  EXPECT_EQ(short_host("node(7)+a.cluster"), "node_7__a");
  EXPECT_THROW(read_hosts_file(kFixtures + "/lagent.conf"), ConfigError);
  EXPECT_THROW(read_hosts_file(kFixtures + "/no-such-file"), ConfigError);
}

TEST(DashboardMaster, CatalogDescribesWhatTheAgentRegistryReports) {
  master::MetricInfoStore infos;
  master::AgentRegistry::describe(infos, master::kMasterSensorName, "node07");
  auto keys = infos.keys_of(master::kMasterSensorName);
  ASSERT_FALSE(keys.empty());
  for (const auto& [key, info] : keys) {
    const CatalogEntry* entry = master::master_catalog().find(key);
    ASSERT_TRUE(entry) << key;
    EXPECT_EQ(std::string(to_string(entry->unit)), info.unit) << key;
    EXPECT_EQ(entry->kind, info.kind) << key;
  }
}

// Golden files: the generator's whole output for fixed configurations.
struct GoldenCase {
  std::string file;
  Datasource datasource;
  DashboardKind kind;
  std::string prefix;
  std::string host;
};

TEST(DashboardGolden, MatchesTheFiles) {
  const std::vector<GoldenCase> cases{
      {"graphite-node.json", Datasource::graphite, DashboardKind::node, "", ""},
      {"graphite-job.json", Datasource::graphite, DashboardKind::job, "", ""},
      {"graphite-cluster.json", Datasource::graphite, DashboardKind::cluster, "", ""},
      {"graphite-prefix-node01.json", Datasource::graphite, DashboardKind::node, "site.a", "node01.cluster.example"},
      {"elasticsearch-node.json", Datasource::elasticsearch, DashboardKind::node, "", ""},
      {"elasticsearch-cluster.json", Datasource::elasticsearch, DashboardKind::cluster, "", ""},
      {"prometheus-node.json", Datasource::prometheus, DashboardKind::node, "", ""},
      {"prometheus-job.json", Datasource::prometheus, DashboardKind::job, "", ""},
      {"prometheus-cluster.json", Datasource::prometheus, DashboardKind::cluster, "", ""},
  };
  bool update = std::getenv("FRUCTOSA_UPDATE_GOLDENS") != nullptr;
  for (const auto& golden : cases) {
    Settings settings;
    settings.datasource = golden.datasource;
    settings.prefix = golden.prefix;
    settings.sensors = sensors_of_agent_config(kFixtures + "/lagent.conf");
    std::string text = make_dashboard(golden.kind, settings, golden.host).dump(2) + "\n";
    std::string path = kFixtures + "/golden/" + golden.file;
    if (update) {
      std::ofstream(path) << text;
      continue;
    }
    std::ifstream in(path);
    ASSERT_TRUE(in) << path << " is missing: FRUCTOSA_UPDATE_GOLDENS=1 unit_tests --gtest_filter='DashboardGolden*'";
    std::stringstream expected;
    expected << in.rdbuf();
    EXPECT_EQ(text, expected.str()) << golden.file << " differs (regenerate after a deliberate change)";
  }
}

}  // namespace
}  // namespace fructosa::dashboards
