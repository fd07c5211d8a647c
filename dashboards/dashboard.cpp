// make_dashboard: the dashboard around the rows and panels of its kind (inputs, requirements,
// uid, variables).
#include "dashboard.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdint>

#include "dashboard_builder.h"

namespace fructosa::dashboards {

namespace {

// The Grafana schema this generator writes (Grafana 10.x): timeseries/stat/gauge panels,
// datasource references as {type, uid} objects.
constexpr int kSchemaVersion = 39;

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// Grafana uids: at most 40 characters of [A-Za-z0-9_-]; the same inputs give the same uid.
std::string stable_uid(std::string_view readable) {
  std::string uid;
  for (char c : readable) uid += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  if (uid.size() <= 40) return uid;
  return fmt::format("fructosa-{:016x}", fnv1a(readable));
}

}  // namespace

std::string_view to_string(Datasource datasource) {
  switch (datasource) {
    case Datasource::graphite: return "graphite";
    case Datasource::elasticsearch: return "elasticsearch";
    case Datasource::prometheus: return "prometheus";
  }
  return "graphite";
}

std::string_view to_string(DashboardKind kind) {
  switch (kind) {
    case DashboardKind::node: return "node";
    case DashboardKind::job: return "job";
    case DashboardKind::cluster: return "cluster";
  }
  return "node";
}

json make_dashboard(DashboardKind kind, const Settings& settings, const std::string& fixed_host) {
  DashboardBuilder builder(settings);
  builder.variables().push_back(datasource_variable(settings.datasource));
  DashboardName name;
  switch (kind) {
    case DashboardKind::node: name = add_node_dashboard(builder, settings, fixed_host); break;
    case DashboardKind::job: name = add_job_dashboard(builder, settings); break;
    case DashboardKind::cluster: name = add_cluster_dashboard(builder, settings); break;
  }
  std::string plugin(to_string(settings.datasource));
  std::string plugin_name = settings.datasource == Datasource::graphite        ? "Graphite"
                            : settings.datasource == Datasource::elasticsearch ? "Elasticsearch"
                                                                               : "Prometheus";
  std::string description = settings.datasource == Datasource::graphite
                                ? "Graphite that lmaster's [Graphite] output writes to"
                            : settings.datasource == Datasource::elasticsearch
                                ? "Elasticsearch over lmaster's indices (fructosa_*, @timestamp)"
                                : "Prometheus that lmaster's [prometheus] output writes to (remote_write)";
  json inputs = json::array({{{"name", "DS_FRUCTOSA"},
                              {"label", "fructosa"},
                              {"description", description},
                              {"type", "datasource"},
                              {"pluginId", plugin},
                              {"pluginName", plugin_name}}});
  json requirements = json::array({{{"type", "grafana"}, {"id", "grafana"}, {"name", "Grafana"}, {"version", "9.0.0"}},
                               {{"type", "datasource"}, {"id", plugin}, {"name", plugin_name}, {"version", "1.0.0"}}});
  for (std::string_view type : {"timeseries", "stat", "gauge"})
    requirements.push_back({{"type", "panel"}, {"id", std::string(type)}, {"name", std::string(type)}, {"version", ""}});
  json panels = builder.panels();
  return {{"__inputs", std::move(inputs)},
          {"__requires", std::move(requirements)},
          {"uid", stable_uid(name.uid_text)},
          {"title", name.title},
          {"tags", json::array({"fructosa", std::string(to_string(kind))})},
          {"timezone", "browser"},
          {"editable", true},
          {"graphTooltip", 1},
          {"schemaVersion", kSchemaVersion},
          {"version", 1},
          {"refresh", "30s"},
          {"time", {{"from", "now-1h"}, {"to", "now"}}},
          {"annotations", {{"list", json::array()}}},
          {"links", json::array()},
          {"templating", {{"list", builder.variables()}}},
          {"panels", std::move(panels)}};
}

}  // namespace fructosa::dashboards
