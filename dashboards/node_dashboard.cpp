// The node dashboard: one node's own samples (job 0), a row per DashboardRow; the host a
// variable, or fixed (FrUCToSA's one dashboard per host).
#include "dashboard_builder.h"

namespace fructosa::dashboards {

DashboardName add_node_dashboard(DashboardBuilder& builder, const Settings& settings, const std::string& fixed_host) {
  bool graphite = settings.datasource == Datasource::graphite;
  std::string prefix = graphite_prefix_text(settings);
  std::string ds_word = uid_word(settings.datasource);
  json& variables = builder.variables();
  std::string title;
  std::string uid_text;
  if (fixed_host.empty()) {
    // Every top-level node but "jobs" (per-job samples live under jobs.<id>.<host>).
    // Prometheus: the hosts of lagent's own sensor, which every agent runs (not the master's).
    variables.push_back(query_variable(settings, "host", "Host",
                                       {.graphite = prefix + "*",
                                        .graphite_regex = "/^(?!jobs$).*/",
                                        .elasticsearch = R"({"find": "terms", "field": "host", "query": "job:0"})",
                                        .prometheus = R"(label_values({__name__=~"fructosa_lagent_.+"}, host))"},
                                       false));
    title = "fructosa node";
    uid_text = "fructosa-node-" + ds_word;
  } else {
    std::string host = graphite ? short_host(fixed_host) : fixed_host;
    variables.push_back({{"type", "constant"}, {"name", "host"}, {"hide", 2}, {"query", host}});
    title = "fructosa " + host;
    uid_text = "fructosa-" + ds_word + "-" + host;
  }
  add_sensor_rows(builder, settings.sensors, Scope::node, "", false);
  return {title, uid_text};
}

}  // namespace fructosa::dashboards
