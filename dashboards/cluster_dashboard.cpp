// The cluster overview: hosts reporting and missing, top-N hosts by CPU, memory and power, and
// lmaster's own health.
#include <fmt/format.h>

#include <optional>

#include "dashboard_builder.h"

namespace fructosa::dashboards {

using sensors::DashboardRow;

namespace {

const ShownSensor* find_shown(const std::vector<ShownSensor>& sensors, std::string_view name) {
  for (const auto& sensor : sensors)
    if (sensor.name == name) return &sensor;
  return nullptr;
}

// Cluster overview: top-N hosts by CPU, memory and power, from whichever of these sensors the
// agents run (the first metric each shows of the named catalog patterns).
struct TopPanel {
  std::string_view title;
  std::string_view sensor;
  std::vector<std::string_view> patterns;  // the first one the configuration shows is used
  std::string_view aggregate;              // how one host's series combine
};

const std::vector<TopPanel>& top_panels() {
  static const std::vector<TopPanel> panels{
      {"Top hosts by CPU busy", "CPUPercent", {"", "*"}, "average"},
      {"Top hosts by memory used", "VirtualMemory", {"percent"}, "average"},
      {"Top hosts by node power (IPMI)", "IPMIPower", {"power"}, "sum"},
      {"Top hosts by RAPL power (top-level zones)", "RAPL", {"*.energy"}, "sum"},
      {"Top hosts by GPU power", "NvidiaGPU", {"*.power"}, "sum"},
  };
  return panels;
}

}  // namespace

DashboardName add_cluster_dashboard(DashboardBuilder& builder, const Settings& settings) {
  bool graphite = settings.datasource == Datasource::graphite;
  bool prometheus = settings.datasource == Datasource::prometheus;
  builder.add_row("Global");
  // Hosts reporting or missing, from lmaster's own agent.<host>.up (1 while an agent
  // reports, 0 once silent; lmaster keeps every agent it has heard of).
  ShownSensor master = master_sensor();
  auto master_metric = [&](std::string_view pattern) {
    const CatalogEntry* entry = master.catalog->find(pattern);
    return Metric{master.name, std::string(pattern), entry->unit, entry->kind, entry->description, master.interval};
  };
  PanelSpec reporting;
  reporting.type = "stat";
  reporting.title = "Hosts reporting";
  if (graphite || prometheus) {
    reporting.description = "agents whose lmaster agent.<host>.up is 1";
    reporting.metrics.push_back(master_metric("agent.*.up"));
    reporting.graphite_template = "alias(sumSeries({path}), 'reporting')";
    reporting.promql_template = "sum({selector})";
    reporting.legend = "reporting";
    reporting.unit = "short";
    PanelSpec missing = reporting;
    missing.title = "Hosts missing";
    missing.description = "agents lmaster knows whose agent.<host>.up is 0 (silent longer than agent_timeout)";
    missing.graphite_template = "alias(diffSeries(countSeries({path}), sumSeries({path})), 'missing')";
    missing.promql_template = "count({selector}) - sum({selector})";
    missing.legend = "missing";
    builder.add_panel(reporting, Scope::cluster, "");
    builder.add_panel(missing, Scope::cluster, "");
  } else {
    // Elasticsearch keeps agent.<host>.up as one field per host: the count lmaster makes.
    reporting.description = "agents lmaster heard from during its last stats interval";
    reporting.metrics.push_back(master_metric("agents"));
    builder.add_panel(reporting, Scope::cluster, "");
  }
  for (const auto& top : top_panels()) {
    const ShownSensor* sensor = find_shown(settings.sensors, top.sensor);
    if (!sensor) continue;
    auto metrics = shown_metrics(*sensor, false);
    std::optional<Metric> chosen;
    for (auto pattern : top.patterns) {
      for (const auto& metric : metrics)
        if (metric.pattern == pattern) chosen = metric;
      if (chosen) break;
    }
    if (!chosen) continue;
    PanelSpec panel;
    panel.title = fmt::format("{} (top {})", top.title, settings.top);
    panel.description = fmt::format("{} {}: {}", chosen->sensor, chosen->pattern, chosen->description);
    panel.metrics.push_back(*chosen);
    panel.top_aggregate = top.aggregate;
    builder.add_panel(panel, Scope::cluster, "");
  }
  builder.add_row(sensors::to_string(DashboardRow::lmaster));
  for (const auto& panel : sensor_panels(master, shown_metrics(master, false)))
    builder.add_panel(panel, Scope::cluster, "");
  return {"fructosa cluster", "fructosa-cluster-" + uid_word(settings.datasource)};
}

}  // namespace fructosa::dashboards
