// Internal to make-dashboard: the queries of a panel, one TargetBuilder per datasource
// (graphite_targets.cpp, elasticsearch_targets.cpp). A new datasource is one more builder and
// one more case in make_target_builder() (dashboard_builder.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "panel_spec.h"

namespace fructosa::dashboards {

using json = nlohmann::ordered_json;

// What a datasource puts in a panel: a target per metric, and the name of a variable to repeat
// the panel over ("" for none). No target: the datasource cannot show it, the panel is left out.
struct PanelTargets {
  nlohmann::ordered_json targets = nlohmann::ordered_json::array();
  std::string repeat;
  std::string title_suffix;  // naming the repeated item (" ($items_cpu_times_0)")
};

// One per dashboard: a builder may keep state across panels and add the variables its targets
// use to `variables` (the dashboard's templating list).
class TargetBuilder {
 public:
  virtual ~TargetBuilder() = default;
  // `host`: a fixed host for Scope::node ("" for the $host variable).
  virtual PanelTargets panel_targets(const PanelSpec& panel, Scope scope, const std::string& host,
                                     nlohmann::ordered_json& variables) = 0;
};

std::unique_ptr<TargetBuilder> make_graphite_targets(const Settings& settings);
std::unique_ptr<TargetBuilder> make_elasticsearch_targets(const Settings& settings);
std::unique_ptr<TargetBuilder> make_prometheus_targets(const Settings& settings);
std::unique_ptr<TargetBuilder> make_target_builder(const Settings& settings);

// Panels and targets name the datasource by this variable (validate_dashboard checks it).
inline constexpr const char* kDatasourceVariable = "${datasource}";
nlohmann::ordered_json datasource_ref(Datasource datasource);
// A target's refId: A, B, ..., Z, AA, ...
std::string ref_id(std::size_t index);

// Graphite naming, shared with storage_schemas.cpp and validate_dashboard.cpp.
std::vector<std::string> split_dots(std::string_view text);
std::vector<std::string> prefix_components(std::string_view prefix);
std::string key_path(std::string_view pattern);

// Elasticsearch, shared with validate_dashboard.cpp.
std::string es_key_regex(std::string_view pattern);
std::string es_lucene_value(std::string_view text);

// Prometheus (prometheus_targets.cpp), shared with validate_dashboard.cpp.
// The metric name of a catalog entry (prometheus_metric_name) cut at its items: one part for a
// pattern without `*`; otherwise the name is parts[0] + item + parts[1] + item + ..., and
// `regex` matches it, one group spanning the items ("fructosa_cpu_times_(.+)_nice_seconds_total").
struct PrometheusName {
  std::vector<std::string> parts;
  std::string regex;
};
PrometheusName prometheus_name_parts(const std::string& sensor, const std::string& pattern, Unit unit, Kind kind);
// The names and regexes ("a|b") of the other catalog entries (of every sensor and lmaster) whose
// names `name.regex` would match too: a selector excludes them with __name__!~.
std::string prometheus_exclusions(const PrometheusName& name, const std::string& sensor, const std::string& pattern);
// The name with its items as `*`, consecutive items taken as one ("fructosa_rapl_*_energy_joules_total"
// for `*.energy` and `*.*.energy`): names of one shape cannot be told apart.
std::string prometheus_name_shape(const PrometheusName& name);
// Whether a pattern is the first of its sensor's catalog whose names have their shape (`shared`:
// another pattern's names look the same: RAPL's `*.energy`, `*.*.energy`: an item may hold '_').
bool prometheus_first_of_shape(const std::string& sensor, const std::string& pattern, bool& shared);
// A PromQL string literal.
std::string promql_string(std::string_view text);

}  // namespace fructosa::dashboards
