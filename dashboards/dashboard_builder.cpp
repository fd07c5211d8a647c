// The grid and panel layout of a dashboard, and the JSON of its panels and variables.
#include "dashboard_builder.h"

#include <algorithm>
#include <optional>

#include "graphite_name.h"

namespace fructosa::dashboards {

using sensors::DashboardRow;

json datasource_ref(Datasource datasource) {
  return {{"type", std::string(to_string(datasource))}, {"uid", kDatasourceVariable}};
}

std::string ref_id(std::size_t index) {
  std::string id;
  do {
    id.insert(id.begin(), static_cast<char>('A' + index % 26));
    index /= 26;
  } while (index-- > 0);
  return id;
}

namespace {

json field_config(const PanelSpec& panel) {
  const Metric& first = panel.metrics.front();
  json defaults = {{"unit", panel.unit.empty() ? std::string(unit_plan(first.unit, first.kind).grafana) : panel.unit}};
  if (panel.type == "gauge") {
    defaults["min"] = 0;
    defaults["max"] = 100;
  }
  if (panel.type == "timeseries")
    defaults["custom"] = {{"drawStyle", "line"}, {"lineWidth", 1}, {"fillOpacity", 0}, {"spanNulls", true},
                          {"showPoints", "never"}};
  return {{"defaults", std::move(defaults)}, {"overrides", json::array()}};
}

json panel_options(const PanelSpec& panel) {
  if (panel.type == "timeseries")
    return {{"legend", {{"displayMode", "list"}, {"placement", "bottom"}, {"showLegend", true}}},
            {"tooltip", {{"mode", "multi"}, {"sort", "none"}}}};
  json options = {{"reduceOptions", {{"calcs", json::array({"lastNotNull"})}, {"fields", ""}, {"values", false}}}};
  if (panel.type == "stat") {
    options["colorMode"] = "none";
    options["graphMode"] = "none";
    options["textMode"] = "value_and_name";
  }
  return options;
}

// Rows in DashboardRow order; within a row, sensors by name.
std::vector<const ShownSensor*> in_row_order(const std::vector<ShownSensor>& sensors) {
  std::vector<const ShownSensor*> ordered;
  for (const auto& sensor : sensors) ordered.push_back(&sensor);
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto* a, const auto* b) {
    if (a->hints.row != b->hints.row) return a->hints.row < b->hints.row;
    return a->name < b->name;
  });
  return ordered;
}

}  // namespace

std::unique_ptr<TargetBuilder> make_target_builder(const Settings& settings) {
  switch (settings.datasource) {
    case Datasource::graphite: return make_graphite_targets(settings);
    case Datasource::elasticsearch: return make_elasticsearch_targets(settings);
    case Datasource::prometheus: return make_prometheus_targets(settings);
  }
  return make_graphite_targets(settings);
}

DashboardBuilder::DashboardBuilder(const Settings& settings)
    : settings_(settings), targets_(make_target_builder(settings)) {}

void DashboardBuilder::add_row(std::string_view title) {
  panels_.push_back({{"type", "row"},
                     {"id", next_id_++},
                     {"title", std::string(title)},
                     {"collapsed", false},
                     {"gridPos", layout_.row()},
                     {"panels", json::array()}});
}

void DashboardBuilder::add_panel(const PanelSpec& panel, Scope scope, const std::string& host) {
  auto [targets, repeat, title_suffix] = targets_->panel_targets(panel, scope, host, variables_);
  if (targets.empty()) return;
  bool stat_like = panel.type != "timeseries";
  json out = {{"type", panel.type},
              {"id", next_id_++},
              {"title", panel.title + title_suffix},
              {"description", panel.description},
              {"datasource", datasource_ref(settings_.datasource)},
              {"gridPos", layout_.place(stat_like ? 6 : 12, panel.type == "stat" ? 4 : stat_like ? 6 : 8)},
              {"fieldConfig", field_config(panel)},
              {"options", panel_options(panel)},
              {"targets", std::move(targets)}};
  if (!repeat.empty()) {
    out["repeat"] = repeat;
    out["repeatDirection"] = "h";
    out["maxPerRow"] = 2;
  }
  panels_.push_back(std::move(out));
}

json datasource_variable(Datasource datasource) {
  std::string plugin(to_string(datasource));
  return {{"type", "datasource"},
          {"name", "datasource"},
          {"label", "Data source"},
          {"query", plugin},
          {"current", {{"text", "${DS_FRUCTOSA}"}, {"value", "${DS_FRUCTOSA}"}}},
          {"hide", 0},
          {"refresh", 1},
          {"regex", ""}};
}

json query_variable(const Settings& settings, std::string name, std::string label, const VariableQueries& queries,
                    bool multi) {
  bool graphite = settings.datasource == Datasource::graphite;
  json query = graphite ? queries.graphite : queries.elasticsearch;
  if (settings.datasource == Datasource::prometheus)
    query = {{"query", queries.prometheus}, {"refId", "PrometheusVariableQueryEditor-VariableQuery"}};
  json variable = {{"type", "query"},
                   {"name", std::move(name)},
                   {"label", std::move(label)},
                   {"datasource", datasource_ref(settings.datasource)},
                   {"query", std::move(query)},
                   {"regex", graphite ? queries.graphite_regex : ""},
                   {"refresh", 2},
                   {"sort", 1},
                   {"multi", multi},
                   {"includeAll", multi}};
  if (settings.datasource == Datasource::prometheus) variable["definition"] = queries.prometheus;
  if (multi) variable["current"] = {{"text", json::array({"All"})}, {"value", json::array({"$__all"})}};
  return variable;
}

std::string graphite_prefix_text(const Settings& settings) { return graphite_prefix(settings.prefix); }

std::string uid_word(Datasource datasource) {
  switch (datasource) {
    case Datasource::graphite: return "graphite";
    case Datasource::elasticsearch: return "es";
    case Datasource::prometheus: return "prometheus";
  }
  return "graphite";
}

void add_sensor_rows(DashboardBuilder& builder, const std::vector<ShownSensor>& sensors, Scope scope,
                     const std::string& host, bool job_samples, std::string_view row_suffix) {
  std::optional<DashboardRow> current;
  for (const auto* sensor : in_row_order(sensors)) {
    auto metrics = shown_metrics(*sensor, job_samples);
    if (metrics.empty()) continue;
    if (current != sensor->hints.row) {
      current = sensor->hints.row;
      builder.add_row(std::string(sensors::to_string(*current)) + std::string(row_suffix));
    }
    for (const auto& panel : sensor_panels(*sensor, metrics)) builder.add_panel(panel, scope, host);
  }
}

}  // namespace fructosa::dashboards
