// Graphite targets: the metric paths lmaster's Graphite output writes, rates of counters, the
// unit's scale and a legend naming what varies.
#include <fmt/format.h>

#include <cmath>

#include "graphite_name.h"
#include "targets.h"

namespace fructosa::dashboards {

std::vector<std::string> split_dots(std::string_view text) {
  std::vector<std::string> parts;
  if (text.empty()) return parts;
  while (true) {
    auto dot = text.find('.');
    parts.emplace_back(text.substr(0, dot));
    if (dot == std::string_view::npos) return parts;
    text.remove_prefix(dot + 1);
  }
}

// Names are mapped as lmaster's Graphite output maps them: the same functions
// (common/graphite_name.h), so a dashboard asks for what carbon stores.
std::vector<std::string> prefix_components(std::string_view prefix) {
  std::string mapped = graphite_prefix(prefix);  // "a.b." or ""
  if (!mapped.empty()) mapped.pop_back();
  return split_dots(mapped);
}

std::string key_path(std::string_view pattern) {
  std::string out;
  for (const auto& part : split_dots(pattern))
    out += (out.empty() ? "" : ".") + (part == "*" ? part : graphite_component(part));
  return out;
}

namespace {

std::string quote(std::string_view text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? '_' : c;
  return out + "'";
}

struct GraphitePlace {
  std::vector<std::string> prefix;
  std::string host;   // "$host", "$jobhost", "*" or a fixed host
  bool job = false;   // under jobs.$job.
  bool host_varies = false;
};

struct GraphitePath {
  std::string text;
  std::size_t host_node = 0;
  std::vector<std::size_t> key_nodes;
  std::vector<std::size_t> wildcard_key_nodes;
};

GraphitePath graphite_path(const GraphitePlace& place, const Metric& metric) {
  GraphitePath path;
  std::vector<std::string> parts = place.prefix;
  if (place.job) {
    parts.push_back("jobs");
    parts.push_back("$job");
  }
  path.host_node = parts.size();
  parts.push_back(place.host);
  parts.push_back(graphite_component(metric.sensor));
  for (const auto& part : split_dots(key_path(metric.pattern))) {
    if (part == "*") path.wildcard_key_nodes.push_back(parts.size());
    path.key_nodes.push_back(parts.size());
    parts.push_back(part);
  }
  for (const auto& part : parts) path.text += (path.text.empty() ? "" : ".") + part;
  return path;
}

std::string fill_template(std::string text, const std::string& path) {
  for (auto at = text.find("{path}"); at != std::string::npos; at = text.find("{path}", at + path.size()))
    text.replace(at, 6, path);
  return text;
}

std::string nodes_text(const std::vector<std::size_t>& nodes) {
  std::string out;
  for (auto node : nodes) out += fmt::format(", {}", node);
  return out;
}

// A counter's rate per second. perSecond() gives no rate next to a missing point, and carbon
// stores nothing between two readings when its step is finer than the sensor's interval (1 s
// points, a reading every 10 s): interpolate() first fills the points between two readings,
// so each step gets the mean rate between them. Its limit bridges no more than one interval
// at a 1 s step, so a reading that never came stays a gap. A reset gives no rate.
std::string graphite_rate(const std::string& path, double interval) {
  long missing = std::lround(std::ceil(interval - 1e-9)) - 1;  // points between two readings
  if (missing < 1) return fmt::format("perSecond({})", path);
  return fmt::format("perSecond(interpolate({}, {}))", path, missing);
}

// A rate for counters, the unit's scale, and a legend naming what varies (host, CPU, NIC, key).
std::string graphite_target(const GraphitePlace& place, const Metric& metric, bool several_metrics) {
  GraphitePath path = graphite_path(place, metric);
  std::string expression = path.text;
  if (metric.kind == Kind::counter) expression = graphite_rate(expression, metric.interval);
  UnitPlan plan = unit_plan(metric.unit, metric.kind);
  if (plan.scale != 1) expression = fmt::format("scale({}, {})", expression, number_text(plan.scale));
  std::vector<std::size_t> alias_nodes;
  if (place.host_varies) alias_nodes.push_back(path.host_node);
  const auto& key_nodes = several_metrics ? path.key_nodes : path.wildcard_key_nodes;
  alias_nodes.insert(alias_nodes.end(), key_nodes.begin(), key_nodes.end());
  if (!alias_nodes.empty()) return fmt::format("aliasByNode({}{})", expression, nodes_text(alias_nodes));
  return fmt::format("alias({}, {})", expression, quote(metric.pattern.empty() ? metric.sensor : metric.pattern));
}

// Cluster overview: one series per host (the metric's series of a host summed or averaged),
// the `top` highest on average.
std::string graphite_top_target(const GraphitePlace& place, const Metric& metric, std::string_view aggregate,
                                std::size_t top) {
  GraphitePath path = graphite_path(place, metric);
  std::string expression = path.text;
  if (metric.kind == Kind::counter) expression = graphite_rate(expression, metric.interval);
  UnitPlan plan = unit_plan(metric.unit, metric.kind);
  if (plan.scale != 1) expression = fmt::format("scale({}, {})", expression, number_text(plan.scale));
  if (has_wildcard(metric.pattern))
    expression = fmt::format("groupByNode({}, {}, {})", expression, path.host_node, quote(aggregate));
  else
    expression = fmt::format("aliasByNode({}, {})", expression, path.host_node);
  return fmt::format("highestAverage({}, {})", expression, top);
}

class GraphiteTargets final : public TargetBuilder {
 public:
  explicit GraphiteTargets(const Settings& settings) : settings_(settings) {}

  PanelTargets panel_targets(const PanelSpec& panel, Scope scope, const std::string& host, json&) override {
    PanelTargets out;
    json& targets = out.targets;
    GraphitePlace place = graphite_place(scope, host);
    for (const auto& metric : panel.metrics) {
      std::string target = !panel.graphite_template.empty()
                               ? fill_template(panel.graphite_template, graphite_path(place, metric).text)
                           : panel.top_aggregate.empty()
                               ? graphite_target(place, metric, panel.metrics.size() > 1)
                               : graphite_top_target(place, metric, panel.top_aggregate, settings_.top);
      targets.push_back({{"refId", ref_id(targets.size())},
                         {"datasource", datasource_ref(settings_.datasource)},
                         {"target", target}});
    }
    return out;
  }

 private:
  GraphitePlace graphite_place(Scope scope, const std::string& host) const {
    GraphitePlace place;
    place.prefix = prefix_components(settings_.prefix);
    switch (scope) {
      case Scope::node: place.host = host.empty() ? "$host" : graphite_host(host); break;
      case Scope::job:
        place.job = true;
        place.host = "$jobhost";
        place.host_varies = true;
        break;
      case Scope::job_node:
        place.host = "$jobhost";
        place.host_varies = true;
        break;
      case Scope::cluster:
        place.host = "*";
        place.host_varies = true;
        break;
    }
    return place;
  }

  const Settings& settings_;
};

}  // namespace

std::unique_ptr<TargetBuilder> make_graphite_targets(const Settings& settings) {
  return std::make_unique<GraphiteTargets>(settings);
}

}  // namespace fructosa::dashboards
