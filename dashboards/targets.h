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
// the panel over ("" for none).
struct PanelTargets {
  nlohmann::ordered_json targets = nlohmann::ordered_json::array();
  std::string repeat;
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

}  // namespace fructosa::dashboards
