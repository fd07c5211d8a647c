// Prometheus targets (docs/prometheus.md: the series lmaster's [prometheus] output writes):
// PromQL on the names prometheus_metric_name() gives, `host` and `job_id` labels, rate() of
// counters, the unit's scale, and exact regexes for catalog patterns with `*`.
#include <fmt/format.h>

#include <map>
#include <mutex>
#include <regex>

#include "master_catalog.h"
#include "prometheus_name.h"
#include "sensor.h"
#include "targets.h"

namespace fructosa::dashboards {

namespace {

// Stands for an item (`*`) while the name is made: lower-case letters and digits only, so that
// prometheus_metric_name keeps it as it is.
constexpr std::string_view kItem = "fructosaitem0";

std::vector<std::string> split_at_items(const std::string& name) {
  std::vector<std::string> parts;
  std::size_t from = 0;
  for (auto at = name.find(kItem); at != std::string::npos; at = name.find(kItem, from)) {
    parts.push_back(name.substr(from, at - from));
    from = at + kItem.size();
  }
  parts.push_back(name.substr(from));
  return parts;
}

struct CatalogName {
  std::string sensor, pattern;
  PrometheusName name;
  std::string probe;  // the name with every item "x"
  std::string shape;
};

// The names of every catalog entry of every sensor and of lmaster: the candidates a wildcard
// regex must not match.
const std::vector<CatalogName>& every_catalog_name() {
  static const std::vector<CatalogName> names = [] {
    std::vector<CatalogName> all;
    auto add = [&](const std::string& sensor, const Catalog& catalog) {
      for (const auto& entry : catalog.entries()) {
        PrometheusName name = prometheus_name_parts(sensor, entry.pattern, entry.unit, entry.kind);
        std::string probe = name.parts.front();
        for (std::size_t i = 1; i < name.parts.size(); ++i) probe += "x" + name.parts[i];
        std::string shape = prometheus_name_shape(name);
        all.push_back({sensor, entry.pattern, std::move(name), std::move(probe), std::move(shape)});
      }
    };
    for (const auto* sensor : sensors::all_sensors()) add(sensor->name, *sensor->catalog);
    add(master::kMasterSensorName, master::master_catalog());
    return all;
  }();
  return names;
}

}  // namespace

PrometheusName prometheus_name_parts(const std::string& sensor, const std::string& pattern, Unit unit, Kind kind) {
  std::string key;
  for (char c : pattern) c == '*' ? key += kItem : key += c;
  PrometheusName name;
  name.parts = split_at_items(prometheus_metric_name(sensor, key, to_string(unit), kind));
  if (name.parts.size() == 1) return name;
  // Names hold only [A-Za-z0-9_]: nothing to escape. One group spans the items and what lies
  // between them (a label_replace legend, a repeat variable's value).
  std::string inner = ".+";
  for (std::size_t i = 1; i + 1 < name.parts.size(); ++i) inner += name.parts[i] + ".+";
  name.regex = name.parts.front() + "(" + inner + ")" + name.parts.back();
  return name;
}

// The name with its items as `*`, consecutive items joined by '_' taken as one: the names of
// two patterns with the same shape (RAPL's `*.energy` and `*.*.energy`) cannot be told apart,
// as an item may hold '_' itself ("package-0" is "package_0").
std::string prometheus_name_shape(const PrometheusName& name) {
  if (name.parts.size() == 1) return name.parts.front();
  std::string shape = name.parts.front() + "*";
  for (std::size_t i = 1; i + 1 < name.parts.size(); ++i)
    if (name.parts[i] != "_") shape += name.parts[i] + "*";
  return shape + name.parts.back();
}

// A name regex of a pattern also matches the names of other entries whose items would hold the
// pattern's own words: CPUTimes `*.nice` matches `*.guest_nice` (item "0_guest"). Those names
// are the other entry's (the more specific one): they are excluded.
std::string prometheus_exclusions(const PrometheusName& name, const std::string& sensor, const std::string& pattern) {
  if (name.regex.empty()) return {};
  static std::mutex lock;
  static std::map<std::string, std::string> cache;
  std::lock_guard guard(lock);
  auto [found, added] = cache.try_emplace(name.regex);
  if (!added) return found->second;
  std::regex regex(name.regex);
  std::string shape = prometheus_name_shape(name);
  std::string excluded;
  for (const auto& other : every_catalog_name()) {
    if (other.sensor == sensor && other.pattern == pattern) continue;
    // Names of the same shape are indistinguishable: they share one panel (first_of_shape).
    if (other.shape == shape || !std::regex_match(other.probe, regex)) continue;
    const std::string& text = other.name.regex.empty() ? other.name.parts.front() : other.name.regex;
    if (excluded.find(text) == std::string::npos) excluded += (excluded.empty() ? "" : "|") + text;
  }
  found->second = excluded;
  return excluded;
}

bool prometheus_first_of_shape(const std::string& sensor, const std::string& pattern, bool& shared) {
  shared = false;
  const CatalogName* first = nullptr;
  const CatalogName* self = nullptr;
  for (const auto& other : every_catalog_name()) {
    if (other.sensor != sensor) continue;
    if (other.pattern == pattern) self = &other;
  }
  if (!self || self->name.regex.empty()) return true;
  for (const auto& other : every_catalog_name()) {
    if (other.sensor != sensor || other.shape != self->shape) continue;
    if (!first) first = &other;
    if (&other != self) shared = true;
  }
  return first == self;
}

std::string promql_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

namespace {

struct Place {
  std::string matchers;     // host and job labels
  bool host_varies = false;  // a series per host: the host in the legend
};

std::string selector(const PrometheusName& name, const std::string& exclusions, const std::string& matchers) {
  if (name.regex.empty()) return name.parts.front() + "{" + matchers + "}";
  std::string text = "{__name__=~" + promql_string(name.regex);
  if (!exclusions.empty()) text += ", __name__!~" + promql_string(exclusions);
  return text + ", " + matchers + "}";
}

// Counters are rates: over $__rate_interval, with a step (the target's min interval) of at
// least two readings, so that every window holds two points whatever the data source's scrape
// interval setting is.
std::string min_step(const Metric& metric) {
  return fmt::format("{}s", 2 * std::max<long>(1, std::lround(std::ceil(metric.interval - 1e-9))));
}

std::string scaled(std::string expression, const Metric& metric) {
  UnitPlan plan = unit_plan(metric.unit, metric.kind);
  if (plan.scale == 1) return expression;
  return expression + " * " + number_text(plan.scale);
}

class PrometheusTargets final : public TargetBuilder {
 public:
  explicit PrometheusTargets(const Settings& settings) : settings_(settings) {}

  PanelTargets panel_targets(const PanelSpec& panel, Scope scope, const std::string& host, json& variables) override {
    PanelTargets out;
    Place place = place_of(scope, host);
    for (const auto& metric : panel.metrics) {
      bool shared = false;
      bool first = prometheus_first_of_shape(metric.sensor, metric.pattern, shared);
      // Patterns whose names are indistinguishable show on the first one's panel; a top-N of
      // one of them would add up all (RAPL's zones and their subzones): left out.
      if (!first || (shared && !panel.top_aggregate.empty())) continue;
      PrometheusName name = prometheus_name_parts(metric.sensor, metric.pattern, metric.unit, metric.kind);
      std::string exclusions = prometheus_exclusions(name, metric.sensor, metric.pattern);
      std::string legend = metric.pattern.empty() ? metric.sensor : metric.pattern;
      std::string expression;
      std::string step;
      if (!panel.promql_template.empty()) {
        expression = panel.promql_template;
        std::string sel = selector(name, exclusions, place.matchers);
        for (auto at = expression.find("{selector}"); at != std::string::npos; at = expression.find("{selector}", at))
          expression.replace(at, 10, sel), at += sel.size();
        legend = panel.legend;
      } else if (!panel.top_aggregate.empty()) {
        expression = top_expression(panel, metric, name, exclusions, place);
        if (metric.kind == Kind::counter) step = min_step(metric);
        legend = "{{host}}";
      } else if (name.regex.empty() || metric.kind == Kind::gauge) {
        expression = selector(name, exclusions, place.matchers);
        if (!name.regex.empty()) {
          // The item in a label of its own, for the legend (the name says it only in part).
          expression = fmt::format("label_replace({}, \"item\", \"$1\", \"__name__\", {})", expression,
                                   promql_string(name.regex));
          legend = "{{item}}";
        }
        if (metric.kind == Kind::counter) {
          expression = "rate(" + expression + "[$__rate_interval])";
          step = min_step(metric);
        }
        expression = scaled(expression, metric);
        if (place.host_varies) legend = "{{host}}" + (panel.metrics.size() > 1 || !name.regex.empty() ? " " + legend : "");
      } else {
        // A counter's rate drops the name, and the items of a pattern differ only by their
        // names: rate() over several would give series with equal labels, which PromQL refuses.
        // So the panel repeats, one item each, over a variable listing the pattern's items.
        std::string variable = item_variable(metric, name, exclusions, scope, place, variables);
        out.repeat = variable;
        out.title_suffix = " ($" + variable + ")";
        expression = fmt::format("rate({}${{{}}}{}{{{}}}[$__rate_interval])", name.parts.front(), variable,
                                 name.parts.back(), place.matchers);
        expression = scaled(expression, metric);
        step = min_step(metric);
        legend = place.host_varies ? "{{host}}" : "$" + variable;
      }
      json target = {{"refId", ref_id(out.targets.size())},
                     {"datasource", datasource_ref(settings_.datasource)},
                     {"editorMode", "code"},
                     {"expr", expression},
                     {"legendFormat", legend},
                     {"range", true}};
      if (!step.empty()) target["interval"] = step;
      out.targets.push_back(std::move(target));
    }
    return out;
  }

 private:
  Place place_of(Scope scope, const std::string& host) const {
    switch (scope) {
      case Scope::node: return {"host=" + promql_string(host.empty() ? "$host" : host) + ", job_id=\"\"", false};
      case Scope::job: return {"host=~\"$host\", job_id=\"$job_id\"", true};
      case Scope::job_node: return {"host=~\"$host\", job_id=\"\"", true};
      case Scope::cluster: return {"job_id=\"\"", true};
    }
    return {};
  }

  // Cluster overview: each host's series combined, the `top` highest.
  std::string top_expression(const PanelSpec& panel, const Metric& metric, const PrometheusName& name,
                             const std::string& exclusions, const Place& place) const {
    std::string expression = selector(name, exclusions, place.matchers);
    std::string aggregate = panel.top_aggregate == "average" ? "avg" : "sum";
    if (metric.kind == Kind::counter) {
      if (name.regex.empty()) {
        expression = "rate(" + expression + "[$__rate_interval])";
      } else {
        // Several items of one host: each keeps its name in a label through a subquery at the
        // sensor's interval before rate() drops the name (an approximation of the rate at that
        // resolution, enough to rank hosts).
        expression = fmt::format("rate(label_replace({}, \"item\", \"$1\", \"__name__\", {})[$__rate_interval:{}s])",
                                 expression, promql_string(name.regex),
                                 std::max<long>(1, std::lround(std::ceil(metric.interval - 1e-9))));
      }
    }
    return fmt::format("topk({}, {} by (host) ({}))", settings_.top, aggregate, scaled(expression, metric));
  }

  // The hidden multi-value variable listing the items of a pattern where the panel's samples
  // are (its regex's group: the item part of the name).
  std::string item_variable(const Metric& metric, const PrometheusName& name, const std::string& exclusions,
                            Scope scope, const Place& place, json& variables) {
    std::string key = fmt::format("{}\n{}\n{}", metric.sensor, metric.pattern, static_cast<int>(scope));
    if (auto found = item_variables_.find(key); found != item_variables_.end()) return found->second;
    std::string variable = fmt::format("items_{}_{}", prometheus_sensor_part(metric.sensor), item_variables_.size());
    item_variables_.emplace(key, variable);
    std::string query = fmt::format("label_values({}, __name__)", selector(name, exclusions, place.matchers));
    variables.push_back({{"type", "query"},
                         {"name", variable},
                         {"label", metric.sensor + " " + metric.pattern},
                         {"hide", 2},
                         {"datasource", datasource_ref(settings_.datasource)},
                         {"definition", query},
                         {"query", {{"query", query}, {"refId", "PrometheusVariableQueryEditor-VariableQuery"}}},
                         {"regex", "/^" + name.regex + "$/"},
                         {"multi", true},
                         {"includeAll", true},
                         {"current", {{"text", json::array({"All"})}, {"value", json::array({"$__all"})}}},
                         {"refresh", 2},
                         {"sort", 3}});
    return variable;
  }

  const Settings& settings_;
  std::map<std::string, std::string> item_variables_;
};

}  // namespace

std::unique_ptr<TargetBuilder> make_prometheus_targets(const Settings& settings) {
  return std::make_unique<PrometheusTargets>(settings);
}

}  // namespace fructosa::dashboards
