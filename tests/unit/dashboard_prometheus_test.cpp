// make-dashboard --datasource prometheus: PromQL on the names lmaster's [prometheus] output
// sends (common/prometheus_name.h), rate() of counters, $host and $job_id from label_values(),
// and name regexes for wildcard patterns that select exactly their own pattern's series.
// Prometheus's side is tests/integration/test_dashboard_prometheus.py.
#include <gtest/gtest.h>

#include <regex>

#include "dashboard.h"
#include "dashboard_test_support.h"
#include "master_catalog.h"
#include "prometheus_name.h"
#include "sensor.h"
#include "targets.h"

namespace fructosa::dashboards {
namespace {

using json = nlohmann::ordered_json;
using test_helpers::kFixtures;
using test_helpers::contains;
using test_helpers::joined;

Settings prometheus_settings() {
  Settings settings;
  settings.datasource = Datasource::prometheus;
  settings.sensors = sensors_of_agent_config(kFixtures + "/lagent.conf");
  return settings;
}

std::vector<std::string> expressions(const json& dashboard) {
  std::vector<std::string> out;
  for (const auto& panel : dashboard["panels"])
    for (const auto& target : panel.value("targets", json::array())) out.push_back(target["expr"]);
  return out;
}

const json* variable(const json& dashboard, std::string_view name) {
  for (const auto& v : dashboard["templating"]["list"])
    if (v["name"] == name) return &v;
  return nullptr;
}

// What a PromQL selector {__name__=~R, __name__!~E} picks among names (RE2 matches whole names).
bool selects(const PrometheusName& name, const std::string& exclusions, const std::string& metric) {
  if (name.regex.empty()) return metric == name.parts.front();
  if (!std::regex_match(metric, std::regex(name.regex))) return false;
  return exclusions.empty() || !std::regex_match(metric, std::regex(exclusions));
}

TEST(DashboardPrometheus, NamesAreTheOutputsCountersAreRatesVariablesComeFromLabelValues) {
  Settings settings = prometheus_settings();
  json node = make_dashboard(DashboardKind::node, settings);
  EXPECT_EQ(node["uid"], "fructosa-node-prometheus");
  auto exprs = expressions(node);
  EXPECT_TRUE(contains(exprs, R"(fructosa_virtual_memory_percent{host="$host", job_id=""})")) << joined(exprs);
  // A timestamp: seconds since the epoch, Grafana wants milliseconds.
  EXPECT_TRUE(contains(exprs, R"(fructosa_boot_time_timestamp_seconds{host="$host", job_id=""} * 1000)"));
  EXPECT_TRUE(contains(exprs, R"(rate(fructosa_lagent_batches_sent_total{host="$host", job_id=""}[$__rate_interval]))"));
  const json* host = variable(node, "host");
  ASSERT_TRUE(host);
  EXPECT_EQ(host->at("definition"), R"(label_values({__name__=~"fructosa_lagent_.+"}, host))");
  EXPECT_EQ(node["__inputs"][0]["pluginId"], "prometheus");
  EXPECT_EQ(node["panels"][1]["datasource"]["type"], "prometheus");

  // The names are prometheus_metric_name's, for every target of a plain key.
  EXPECT_TRUE(contains(exprs, prometheus_metric_name("VirtualMemory", "used", "bytes", Kind::gauge) +
                                  R"({host="$host", job_id=""})"));

  // Per-CPU counters: rate() drops the name, so the panel repeats over the CPUs.
  const json* user = nullptr;
  for (const auto& panel : node["panels"])
    if (panel["title"].get<std::string>().starts_with("CPUTimes *.user")) user = &panel;
  ASSERT_TRUE(user);
  std::string repeat = (*user)["repeat"];
  EXPECT_EQ((*user)["targets"][0]["expr"],
            "rate(fructosa_cpu_times_${" + repeat + R"(}_user_seconds_total{host="$host", job_id=""}[$__rate_interval]))");
  EXPECT_EQ((*user)["targets"][0]["interval"], "2s");  // two readings of a 1 s sensor per window
  const json* items = variable(node, repeat);
  ASSERT_TRUE(items);
  EXPECT_EQ(items->at("regex"), "/^fructosa_cpu_times_(.+)_user_seconds_total$/");
  EXPECT_NE(items->at("definition").get<std::string>().find(R"(host="$host")"), std::string::npos);

  json job = make_dashboard(DashboardKind::job, settings);
  ASSERT_TRUE(variable(job, "job_id"));
  EXPECT_EQ(variable(job, "job_id")->at("definition"), R"(label_values({__name__=~"fructosa_.+", job_id!=""}, job_id))");
  ASSERT_TRUE(variable(job, "host"));
  EXPECT_TRUE(variable(job, "host")->at("multi").get<bool>());
  auto job_exprs = expressions(job);
  EXPECT_TRUE(contains(job_exprs, R"(rate(fructosa_perf_hw_instructions_total{host=~"$host", job_id="$job_id"}[$__rate_interval]))"))
      << joined(job_exprs);
  EXPECT_TRUE(contains(job_exprs, R"(fructosa_virtual_memory_percent{host=~"$host", job_id=""})")) << joined(job_exprs);

  json cluster = make_dashboard(DashboardKind::cluster, settings);
  auto cluster_exprs = expressions(cluster);
  EXPECT_TRUE(contains(cluster_exprs, R"(topk(10, avg by (host) (fructosa_virtual_memory_percent{job_id=""})))"))
      << joined(cluster_exprs);
  EXPECT_TRUE(contains(cluster_exprs, R"(sum({__name__=~"fructosa_lmaster_agent_(.+)_up", job_id=""}))"));
}

// CPUTimes `*.nice` as a plain regex also matches `*.guest_nice` (item "0_guest") and the
// totals' `guest_nice` (item "guest"): the selector excludes them.
TEST(DashboardPrometheus, NiceDoesNotMatchGuestNice) {
  PrometheusName nice = prometheus_name_parts("CPUTimes", "*.nice", Unit::seconds, Kind::counter);
  std::string excluded = prometheus_exclusions(nice, "CPUTimes", "*.nice");
  EXPECT_EQ(nice.regex, "fructosa_cpu_times_(.+)_nice_seconds_total");
  EXPECT_TRUE(selects(nice, excluded, prometheus_metric_name("CPUTimes", "0.nice", "seconds", Kind::counter)));
  EXPECT_TRUE(selects(nice, excluded, prometheus_metric_name("CPUTimes", "17.nice", "seconds", Kind::counter)));
  EXPECT_FALSE(selects(nice, excluded, prometheus_metric_name("CPUTimes", "0.guest_nice", "seconds", Kind::counter)));
  EXPECT_FALSE(selects(nice, excluded, prometheus_metric_name("CPUTimes", "guest_nice", "seconds", Kind::counter)));
  EXPECT_FALSE(selects(nice, excluded, prometheus_metric_name("CPUTimes", "nice", "seconds", Kind::counter)));

  // The same in the dashboard: the variable listing the CPUs of `*.nice` excludes them.
  Settings settings = prometheus_settings();
  json node = make_dashboard(DashboardKind::node, settings);
  for (const auto& panel : node["panels"]) {
    if (!panel["title"].get<std::string>().starts_with("CPUTimes *.nice")) continue;
    const json* items = variable(node, panel["repeat"].get<std::string>());
    ASSERT_TRUE(items);
    EXPECT_NE(items->at("definition").get<std::string>().find("__name__!~"), std::string::npos);
    EXPECT_NE(items->at("definition").get<std::string>().find("_guest_nice_seconds_total"), std::string::npos);
  }
}

// Every wildcard pattern of every sensor and of lmaster selects its own names and no name of
// another pattern (items without '_', as CPUs, most NICs and disks are named). Patterns whose
// names have the same shape (RAPL's zones and subzones: "package-0" is "package_0") cannot be
// told apart and share one panel.
TEST(DashboardPrometheus, EveryWildcardSelectorSelectsExactlyItsOwnPattern) {
  struct Entry {
    std::string sensor;
    const CatalogEntry* entry;
  };
  std::vector<Entry> entries;
  for (const auto* sensor : sensors::all_sensors())
    for (const auto& entry : sensor->catalog->entries()) entries.push_back({sensor->name, &entry});
  for (const auto& entry : master::master_catalog().entries()) entries.push_back({master::kMasterSensorName, &entry});
  auto name_of = [](const Entry& e, const std::string& item) {
    std::string key;
    for (char c : e.entry->pattern) c == '*' ? key += item : key += c;
    return prometheus_metric_name(e.sensor, key, to_string(e.entry->unit), e.entry->kind);
  };
  int checked = 0;
  for (const auto& own : entries) {
    if (!has_wildcard(own.entry->pattern)) continue;
    PrometheusName name = prometheus_name_parts(own.sensor, own.entry->pattern, own.entry->unit, own.entry->kind);
    std::string excluded = prometheus_exclusions(name, own.sensor, own.entry->pattern);
    for (std::string item : {"0", "eth0", "sda"})
      EXPECT_TRUE(selects(name, excluded, name_of(own, item))) << own.sensor << " " << own.entry->pattern;
    std::string shape = prometheus_name_shape(name);
    for (const auto& other : entries) {
      if (&other == &own) continue;
      bool same_shape =
          other.sensor == own.sensor &&
          prometheus_name_shape(prometheus_name_parts(other.sensor, other.entry->pattern, other.entry->unit,
                                                      other.entry->kind)) == shape;
      if (same_shape) continue;
      std::string metric = name_of(other, "x0");
      if (metric == name_of(own, "x0")) continue;  // one name for two patterns: not a selector's fault
      EXPECT_FALSE(selects(name, excluded, metric))
          << own.sensor << " " << own.entry->pattern << " selects " << other.sensor << " " << other.entry->pattern
          << " (" << metric << ")";
      ++checked;
    }
  }
  EXPECT_GT(checked, 10000);
}

TEST(DashboardPrometheus, RaplZonesShareOnePanelAndHaveNoTopPanel) {
  Settings settings = prometheus_settings();
  json node = make_dashboard(DashboardKind::node, settings);
  int rapl = 0;
  for (const auto& panel : node["panels"]) rapl += panel["title"].get<std::string>().starts_with("RAPL");
  EXPECT_EQ(rapl, 1);
  json cluster = make_dashboard(DashboardKind::cluster, settings);
  for (const auto& panel : cluster["panels"]) EXPECT_EQ(panel["title"].get<std::string>().find("RAPL"), std::string::npos);
}

TEST(DashboardPrometheus, ValidatorFindsNamesThatAreNotSent) {
  Settings settings = prometheus_settings();
  json good = make_dashboard(DashboardKind::node, settings);
  ASSERT_EQ(joined(validate_dashboard(good, settings)), "");
  json broken = good;
  broken["panels"][1]["targets"][0]["expr"] = R"(fructosa_virtual_memory_percentage{host="$host"})";
  EXPECT_NE(joined(validate_dashboard(broken, settings)).find("fructosa_virtual_memory_percentage"), std::string::npos);
  broken = good;
  broken["panels"][1]["targets"][0]["expr"] = R"({__name__=~"fructosa_cpu_times_.+_nice_seconds_total"})";
  EXPECT_NE(joined(validate_dashboard(broken, settings)).find("no catalog pattern's"), std::string::npos);
  broken = good;
  broken["panels"][1]["targets"][0]["expr"] = "sum(up)";
  EXPECT_NE(joined(validate_dashboard(broken, settings)).find("names no metric"), std::string::npos);
}

}  // namespace
}  // namespace fructosa::dashboards
