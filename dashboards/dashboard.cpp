#include "dashboard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "agent_config.h"
#include "graphite_name.h"
#include "master_catalog.h"

namespace fructosa::dashboards {

using json = nlohmann::ordered_json;
using sensors::DashboardRow;

namespace {

// The Grafana schema this generator writes (Grafana 10.x): timeseries/stat/gauge panels,
// datasource references as {type, uid} objects.
constexpr int kSchemaVersion = 39;
constexpr const char* kDatasourceVariable = "${datasource}";

// ---------------------------------------------------------------------------------------------
// What is shown

// One catalog entry (or, for a sensor with a key list option, one listed key) on a panel.
struct Metric {
  std::string sensor;
  std::string pattern;
  Unit unit = Unit::none;
  Kind kind = Kind::gauge;
  std::string description;
  double interval = 1;  // the sensor's seconds between readings
};

// Where the samples of a panel come from.
enum class Scope {
  node,      // one node ($host), its own samples (job 0)
  job,       // per-job samples of $job on every node of the job
  job_node,  // node samples of the nodes running $job
  cluster,   // every node (top-N panels, lmaster health)
};

struct PanelSpec {
  std::string title;
  std::string description;
  std::string type = "timeseries";
  std::vector<Metric> metrics;
  // Cluster top-N panels: how the series of one host are combined ("" otherwise).
  std::string top_aggregate;
  // Graphite: the whole target, "{path}" standing for the metric's path ("" otherwise).
  std::string graphite_template;
  std::string unit;  // Grafana unit when not the metric's (a count of hosts made of 0/1 values)
};

bool in_list(std::string_view list, std::string_view pattern) {
  while (!list.empty()) {
    auto comma = list.find(',');
    if (list.substr(0, comma) == pattern) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

bool per_item(std::string_view pattern) { return !pattern.empty() && pattern.front() == '*'; }

// Whether the sensor reports per-item keys: a bool option says so, a list option does when it
// names several distinct items (DiskUsage's `path`: one path gives the plain keys).
bool per_item_keys(const Options& options, const std::string& option) {
  const auto& value = options.get(option);
  if (const auto* list = std::get_if<std::vector<std::string>>(&value))
    return std::set<std::string>(list->begin(), list->end()).size() > 1;
  return options.get_bool(option);
}
bool has_wildcard(std::string_view pattern) { return pattern.find('*') != std::string_view::npos; }

// The catalog entries a sensor so configured reports in node (job 0) or per-job samples.
std::vector<Metric> shown_metrics(const ShownSensor& sensor, bool job_samples) {
  const auto& hints = sensor.hints;
  std::vector<Metric> metrics;
  auto is_node_key = [&](std::string_view pattern) { return in_list(hints.node_keys, pattern); };
  for (const auto& entry : sensor.catalog->entries()) {
    if (job_samples) {
      if (hints.job_keys.empty()) continue;
      if (hints.job_keys == "*" ? is_node_key(entry.pattern) : !in_list(hints.job_keys, entry.pattern)) continue;
    } else if (!hints.node_keys.empty() && !is_node_key(entry.pattern)) {
      continue;
    }
    if (!hints.per_item_option.empty() && sensor.options.has(std::string(hints.per_item_option)) &&
        !is_node_key(entry.pattern)) {
      bool items = per_item_keys(sensor.options, std::string(hints.per_item_option));
      if (per_item(entry.pattern) != items) continue;
    }
    if (!hints.key_list_option.empty() && !is_node_key(entry.pattern)) continue;  // listed keys below
    metrics.push_back({sensor.name, entry.pattern, entry.unit, entry.kind, entry.description, sensor.interval});
  }
  // A key list (PerfHW's events): each listed key with the entry that describes it, in the
  // list's order, where the samples asked for carry such keys.
  bool data_keys_here = job_samples ? !hints.job_keys.empty() : hints.node_keys.empty();
  if (!hints.key_list_option.empty() && data_keys_here && sensor.options.has(std::string(hints.key_list_option))) {
    std::set<std::string> seen;
    for (const auto& key : sensor.options.get_list(std::string(hints.key_list_option))) {
      const CatalogEntry* entry = sensor.catalog->find(key);
      if (!entry || is_node_key(entry->pattern) || !seen.insert(key).second) continue;
      metrics.push_back({sensor.name, key, entry->unit, entry->kind, entry->description, sensor.interval});
    }
  }
  return metrics;
}

std::string unit_word(Unit unit) {
  std::string_view text = to_string(unit);
  return text.empty() ? "values" : std::string(text);
}

// A sensor's panels: one per pattern with a wildcard (a series per CPU, NIC, ...); the plain
// keys together, one panel per unit and kind.
std::vector<PanelSpec> sensor_panels(const ShownSensor& sensor, const std::vector<Metric>& metrics) {
  std::vector<PanelSpec> panels;
  std::vector<std::pair<std::pair<Unit, Kind>, PanelSpec>> plain;
  for (const auto& metric : metrics) {
    if (has_wildcard(metric.pattern)) {
      PanelSpec panel;
      panel.title = fmt::format("{} {}", sensor.name, metric.pattern);
      panel.description = metric.description;
      panel.metrics.push_back(metric);
      panels.push_back(std::move(panel));
      continue;
    }
    auto group = std::find_if(plain.begin(), plain.end(),
                              [&](const auto& g) { return g.first == std::pair{metric.unit, metric.kind}; });
    if (group == plain.end()) {
      plain.push_back({{metric.unit, metric.kind}, PanelSpec{}});
      group = plain.end() - 1;
    }
    group->second.metrics.push_back(metric);
  }
  std::vector<PanelSpec> grouped;
  for (auto& [unit_kind, panel] : plain) {
    std::string keys;
    std::string description;
    for (const auto& metric : panel.metrics) {
      keys += (keys.empty() ? "" : ", ") + (metric.pattern.empty() ? std::string("value") : metric.pattern);
      description += (description.empty() ? "" : "\n") +
                     (metric.pattern.empty() ? metric.description : metric.pattern + ": " + metric.description);
    }
    if (panel.metrics.size() == 1 && panel.metrics.front().pattern.empty())
      panel.title = sensor.name;
    else if (panel.metrics.size() <= 3)
      panel.title = fmt::format("{} {}", sensor.name, keys);
    else
      panel.title = fmt::format("{} ({}{})", sensor.name, unit_word(unit_kind.first),
                                unit_kind.second == Kind::counter ? " per second" : "");
    panel.description = description;
    grouped.push_back(std::move(panel));
  }
  // Plain keys first: totals read best above the per-item detail.
  grouped.insert(grouped.end(), std::make_move_iterator(panels.begin()), std::make_move_iterator(panels.end()));
  for (auto& panel : grouped) {
    const Metric& first = panel.metrics.front();
    bool single = panel.metrics.size() == 1 && !has_wildcard(first.pattern);
    if (sensor.hints.row == DashboardRow::global || first.unit == Unit::timestamp)
      panel.type = "stat";
    else if (single && first.unit == Unit::percent && first.kind == Kind::gauge)
      panel.type = "gauge";
  }
  return grouped;
}

// ---------------------------------------------------------------------------------------------
// Units

struct UnitPlan {
  std::string_view grafana;
  double scale = 1;  // applied to the value (or rate) before Grafana formats it
};

UnitPlan unit_plan(Unit unit, Kind kind) {
  if (kind == Kind::counter) {
    switch (unit) {
      case Unit::bytes: return {"binBps"};
      case Unit::count: return {"cps"};
      case Unit::seconds: return {"percentunit"};  // seconds per second: share of a CPU or of the time
      case Unit::milliseconds: return {"percentunit", 0.001};
      case Unit::joules: return {"watt"};  // joules per second
      default: return {"none"};
    }
  }
  switch (unit) {
    case Unit::none: return {"none"};
    case Unit::percent: return {"percent"};
    case Unit::bytes: return {"bytes"};
    case Unit::seconds: return {"s"};
    case Unit::count: return {"short"};
    case Unit::hertz_mega: return {"rotmhz"};
    case Unit::celsius: return {"celsius"};
    case Unit::watts: return {"watt"};
    case Unit::joules: return {"joule"};
    case Unit::rpm: return {"rotrpm"};
    case Unit::timestamp: return {"dateTimeAsIso", 1000};  // Grafana dates are in milliseconds
    case Unit::boolean: return {"bool"};
    case Unit::milliseconds: return {"ms"};
    case Unit::megabits_per_second: return {"Mbits"};
    case Unit::volts: return {"volt"};
    case Unit::amperes: return {"amp"};
  }
  return {"none"};
}

std::string number_text(double value) { return fmt::format("{}", value); }

// ---------------------------------------------------------------------------------------------
// Graphite

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

// ---------------------------------------------------------------------------------------------
// Elasticsearch (docs/elasticsearch.md: one document per sample, fields metrics.<key>)

std::string es_field(const Metric& metric) {
  return metric.pattern.empty() ? "metrics.value" : "metrics." + metric.pattern;
}

std::string regex_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::string_view(".^$|?*+()[]{}\\/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// The Grafana variable regex picking the keys a catalog pattern stands for out of the index's
// numeric fields (its one group is the key).
std::string es_key_regex(std::string_view pattern) {
  std::string out = "/^metrics\\.(";
  bool first = true;
  for (const auto& part : split_dots(pattern)) {
    if (!first) out += "\\.";
    first = false;
    out += part == "*" ? std::string("[^.]+") : regex_escape(part);
  }
  return out + ")$/";
}

std::string es_lucene_value(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// ---------------------------------------------------------------------------------------------
// The JSON model

json datasource_ref(Datasource datasource) {
  return {{"type", datasource == Datasource::graphite ? "graphite" : "elasticsearch"}, {"uid", kDatasourceVariable}};
}

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

std::string ref_id(std::size_t index) {
  std::string id;
  do {
    id.insert(id.begin(), static_cast<char>('A' + index % 26));
    index /= 26;
  } while (index-- > 0);
  return id;
}

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

// Places panels of the given sizes left to right, rows below rows.
class GridLayout {
 public:
  json place(int width, int height) {
    if (x_ + width > 24) new_line();
    json position = {{"h", height}, {"w", width}, {"x", x_}, {"y", y_}};
    x_ += width;
    line_height_ = std::max(line_height_, height);
    return position;
  }
  json row() {
    new_line();
    json position = {{"h", 1}, {"w", 24}, {"x", 0}, {"y", y_}};
    y_ += 1;
    return position;
  }

 private:
  void new_line() {
    if (x_ > 0) y_ += line_height_;
    x_ = 0;
    line_height_ = 0;
  }
  int x_ = 0;
  int y_ = 0;
  int line_height_ = 0;
};

class DashboardBuilder {
 public:
  DashboardBuilder(const Settings& settings) : settings_(settings) {}

  void add_row(std::string_view title) {
    panels_.push_back({{"type", "row"},
                       {"id", next_id_++},
                       {"title", std::string(title)},
                       {"collapsed", false},
                       {"gridPos", layout_.row()},
                       {"panels", json::array()}});
  }

  void add_panel(const PanelSpec& panel, Scope scope, const std::string& host) {
    json targets = json::array();
    std::string repeat;
    if (settings_.datasource == Datasource::graphite) {
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
    } else {
      for (const auto& metric : panel.metrics) {
        std::string field = es_field(metric);
        std::string alias = metric.pattern.empty() ? metric.sensor : metric.pattern;
        if (has_wildcard(metric.pattern)) {
          repeat = es_key_variable(metric);
          field = "metrics.${" + repeat + "}";
          alias = "${" + repeat + "}";
        }
        targets.push_back(es_target(panel, metric, scope, host, field, alias, targets.size()));
      }
    }
    bool stat_like = panel.type != "timeseries";
    json out = {{"type", panel.type},
                {"id", next_id_++},
                {"title", panel.title},
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

  json& variables() { return variables_; }
  json panels() { return std::move(panels_); }

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

  // The hidden multi-value variable listing the keys of a wildcard pattern (Elasticsearch maps
  // each key to its own field; a repeated panel shows each).
  std::string es_key_variable(const Metric& metric) {
    std::string regex = es_key_regex(metric.pattern);
    std::string name = fmt::format("keys_{}_{}", graphite_component(metric.sensor), es_key_variables_.size());
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
    auto [it, added] = es_key_variables_.emplace(metric.sensor + "\n" + metric.pattern, name);
    if (!added) return it->second;
    variables_.push_back({{"type", "query"},
                          {"name", name},
                          {"label", metric.sensor + " " + metric.pattern},
                          {"hide", 2},
                          {"datasource", datasource_ref(settings_.datasource)},
                          {"query", R"({"find": "fields", "type": "number"})"},
                          {"regex", regex},
                          {"multi", true},
                          {"includeAll", true},
                          {"current", {{"text", json::array({"All"})}, {"value", json::array({"$__all"})}}},
                          {"refresh", 1},
                          {"sort", 1}});
    return name;
  }

  json es_target(const PanelSpec& panel, const Metric& metric, Scope scope, const std::string& host,
                 const std::string& field, const std::string& alias, std::size_t index) const {
    std::string query = "sensor:" + es_lucene_value(metric.sensor);
    bool by_host = false;
    switch (scope) {
      case Scope::node: query += " AND host:" + es_lucene_value(host.empty() ? "$host" : host) + " AND job:0"; break;
      case Scope::job:
        query += " AND job:$job";
        by_host = true;
        break;
      case Scope::job_node:
        // involved_jobs is "1234,5678": the job as one whole element of that list.
        query += " AND job:0 AND labels.involved_jobs:/(.*,)?$job(,.*)?/";
        by_host = true;
        break;
      case Scope::cluster:
        query += " AND job:0";
        by_host = true;
        break;
    }
    UnitPlan plan = unit_plan(metric.unit, metric.kind);
    json metrics = json::array();
    std::string shown = "1";
    if (metric.kind == Kind::counter) {
      metrics.push_back({{"id", "1"}, {"type", "max"}, {"field", field}, {"hide", true}});
      metrics.push_back({{"id", "2"}, {"type", "derivative"}, {"field", "1"}, {"settings", {{"unit", "1s"}}}});
      shown = "2";
    } else {
      metrics.push_back({{"id", "1"}, {"type", panel.top_aggregate.empty() ? "avg" : "avg"}, {"field", field}});
    }
    if (plan.scale != 1) {
      metrics.back()["hide"] = true;
      metrics.push_back({{"id", "3"},
                         {"type", "bucket_script"},
                         {"pipelineVariables", json::array({{{"name", "value"}, {"pipelineAgg", shown}}})},
                         {"settings", {{"script", "params.value * " + number_text(plan.scale)}}}});
    }
    json buckets = json::array();
    if (by_host) {
      json settings = {{"min_doc_count", "1"}, {"order", "desc"}, {"orderBy", "_term"}, {"size", "0"}};
      if (!panel.top_aggregate.empty()) {
        settings["orderBy"] = metrics.back()["id"];
        settings["size"] = std::to_string(settings_.top);
      }
      buckets.push_back({{"id", "4"}, {"type", "terms"}, {"field", "host"}, {"settings", std::move(settings)}});
    }
    buckets.push_back({{"id", "5"},
                       {"type", "date_histogram"},
                       {"field", "@timestamp"},
                       {"settings", {{"interval", "auto"}, {"min_doc_count", "0"}}}});
    return {{"refId", ref_id(index)},
            {"datasource", datasource_ref(settings_.datasource)},
            {"query", query},
            {"alias", by_host ? "{{term host}} " + alias : alias},
            {"metrics", std::move(metrics)},
            {"bucketAggs", std::move(buckets)},
            {"timeField", "@timestamp"}};
  }

  const Settings& settings_;
  GridLayout layout_;
  json panels_ = json::array();
  json variables_ = json::array();
  std::map<std::string, std::string> es_key_variables_;
  int next_id_ = 1;
};

json datasource_variable(Datasource datasource) {
  std::string plugin = datasource == Datasource::graphite ? "graphite" : "elasticsearch";
  return {{"type", "datasource"},
          {"name", "datasource"},
          {"label", "Data source"},
          {"query", plugin},
          {"current", {{"text", "${DS_FRUCTOSA}"}, {"value", "${DS_FRUCTOSA}"}}},
          {"hide", 0},
          {"refresh", 1},
          {"regex", ""}};
}

json query_variable(const Settings& settings, std::string name, std::string label, std::string graphite_query,
                    std::string graphite_regex, std::string es_query, bool multi) {
  bool graphite = settings.datasource == Datasource::graphite;
  json variable = {{"type", "query"},
                   {"name", std::move(name)},
                   {"label", std::move(label)},
                   {"datasource", datasource_ref(settings.datasource)},
                   {"query", graphite ? graphite_query : es_query},
                   {"regex", graphite ? graphite_regex : ""},
                   {"refresh", 2},
                   {"sort", 1},
                   {"multi", multi},
                   {"includeAll", multi}};
  if (multi) variable["current"] = {{"text", json::array({"All"})}, {"value", json::array({"$__all"})}};
  return variable;
}

std::string graphite_prefix_text(const Settings& settings) { return graphite_prefix(settings.prefix); }

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

void add_sensor_rows(DashboardBuilder& builder, const std::vector<ShownSensor>& sensors, Scope scope,
                     const std::string& host, bool job_samples, std::string_view row_suffix = "") {
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

// ---------------------------------------------------------------------------------------------

std::string_view to_string(Datasource datasource) {
  return datasource == Datasource::graphite ? "graphite" : "elasticsearch";
}

std::string_view to_string(DashboardKind kind) {
  switch (kind) {
    case DashboardKind::node: return "node";
    case DashboardKind::job: return "job";
    case DashboardKind::cluster: return "cluster";
  }
  return "node";
}

std::vector<ShownSensor> all_sensors_with_defaults() {
  std::vector<ShownSensor> shown;
  IniFile none = IniFile::parse("", "(defaults)");
  double interval = parse_section(sensors::common_sensor_options(), none, nullptr).get_real("time_interval");
  for (const auto* definition : sensors::all_sensors())
    shown.push_back({definition->name, definition->catalog, definition->dashboard,
                     parse_section(*definition->options, none, nullptr),
                     // lagent's own sensor runs every 10 s unless configured (agent_config.cpp).
                     definition->name == "lagent" ? 10.0 : interval});
  return shown;
}

std::vector<ShownSensor> sensors_of_agent_config(const std::string& path) {
  agent::AgentConfig config = agent::load_agent_config(path);
  std::vector<ShownSensor> shown;
  for (const auto& sensor : config.sensors)
    shown.push_back({sensor.definition->name, sensor.definition->catalog, sensor.definition->dashboard, sensor.options,
                     sensor.interval});
  return shown;
}

ShownSensor master_sensor() {
  IniFile none = IniFile::parse("", "(defaults)");
  // Every 10 s: the default [lmaster] stats_interval (lmaster/master_config.cpp; a unit test
  // keeps the two equal). make-dashboard does not read lmaster.conf.
  return {master::kMasterSensorName, &master::master_catalog(), {.row = DashboardRow::lmaster},
          parse_section({}, none, nullptr), 10.0};
}

json make_dashboard(DashboardKind kind, const Settings& settings, const std::string& fixed_host) {
  bool graphite = settings.datasource == Datasource::graphite;
  std::string prefix = graphite_prefix_text(settings);
  DashboardBuilder builder(settings);
  json& variables = builder.variables();
  variables.push_back(datasource_variable(settings.datasource));
  std::string title;
  std::string uid_text;
  std::string ds_word = graphite ? "graphite" : "es";
  switch (kind) {
    case DashboardKind::node: {
      if (fixed_host.empty()) {
        // Every top-level node but "jobs" (per-job samples live under jobs.<id>.<host>).
        variables.push_back(query_variable(settings, "host", "Host", prefix + "*", "/^(?!jobs$).*/",
                                           R"({"find": "terms", "field": "host", "query": "job:0"})", false));
        title = "fructosa node";
        uid_text = "fructosa-node-" + ds_word;
      } else {
        std::string host = graphite ? short_host(fixed_host) : fixed_host;
        variables.push_back({{"type", "constant"}, {"name", "host"}, {"hide", 2}, {"query", host}});
        title = "fructosa " + host;
        uid_text = "fructosa-" + ds_word + "-" + host;
      }
      add_sensor_rows(builder, settings.sensors, Scope::node, "", false);
      break;
    }
    case DashboardKind::job: {
      variables.push_back(query_variable(settings, "job", "Job", prefix + "jobs.*", "",
                                         R"({"find": "terms", "field": "job", "query": "job:>0"})", false));
      variables.push_back(query_variable(settings, "jobhost", "Hosts of the job", prefix + "jobs.$job.*", "",
                                         R"({"find": "terms", "field": "host", "query": "job:$job"})", true));
      title = "fructosa job";
      uid_text = "fructosa-job-" + ds_word;
      add_sensor_rows(builder, settings.sensors, Scope::job, "", true, " (job)");
      add_sensor_rows(builder, settings.sensors, Scope::job_node, "", false, " (nodes of the job)");
      break;
    }
    case DashboardKind::cluster: {
      title = "fructosa cluster";
      uid_text = "fructosa-cluster-" + ds_word;
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
      if (graphite) {
        reporting.description = "agents whose lmaster agent.<host>.up is 1";
        reporting.metrics.push_back(master_metric("agent.*.up"));
        reporting.graphite_template = "alias(sumSeries({path}), 'reporting')";
        reporting.unit = "short";
        PanelSpec missing = reporting;
        missing.title = "Hosts missing";
        missing.description = "agents lmaster knows whose agent.<host>.up is 0 (silent longer than agent_timeout)";
        missing.graphite_template = "alias(diffSeries(countSeries({path}), sumSeries({path})), 'missing')";
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
      break;
    }
  }
  json inputs = json::array({{{"name", "DS_FRUCTOSA"},
                              {"label", "fructosa"},
                              {"description", graphite ? "Graphite that lmaster's [Graphite] output writes to"
                                                       : "Elasticsearch over lmaster's indices (fructosa_*, @timestamp)"},
                              {"type", "datasource"},
                              {"pluginId", graphite ? "graphite" : "elasticsearch"},
                              {"pluginName", graphite ? "Graphite" : "Elasticsearch"}}});
  json requirements = json::array({{{"type", "grafana"}, {"id", "grafana"}, {"name", "Grafana"}, {"version", "9.0.0"}},
                               {{"type", "datasource"},
                                {"id", graphite ? "graphite" : "elasticsearch"},
                                {"name", graphite ? "Graphite" : "Elasticsearch"},
                                {"version", "1.0.0"}}});
  for (std::string_view type : {"timeseries", "stat", "gauge"})
    requirements.push_back({{"type", "panel"}, {"id", std::string(type)}, {"name", std::string(type)}, {"version", ""}});
  json panels = builder.panels();
  return {{"__inputs", std::move(inputs)},
          {"__requires", std::move(requirements)},
          {"uid", stable_uid(uid_text)},
          {"title", title},
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

std::string_view grafana_unit(Unit unit, Kind kind) { return unit_plan(unit, kind).grafana; }

bool is_grafana_unit(std::string_view id) {
  static const std::set<std::string_view> known{
      "none",  "short",  "percent", "percentunit", "bytes", "binBps",  "cps",  "s",    "ms",  "rotmhz",
      "celsius", "watt", "joule",   "rotrpm",      "dateTimeAsIso", "bool", "Mbits", "volt", "amp"};
  return known.count(id) > 0;
}

std::string short_host(std::string_view host) { return graphite_host(host); }

std::vector<std::string> read_hosts_file(const std::string& path) {
  // Boost's INI parser needs `key = value`; FrUCToSA's HOSTS files list bare keys, as Python's
  // configparser(allow_no_value=True) reads them: so this small reader.
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the hosts file", path));
  std::vector<std::string> hosts;
  std::string section;
  bool seen_section = false;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    auto last = line.find_last_not_of(" \t\r");
    std::string text = line.substr(first, last - first + 1);
    if (text.front() == '#' || text.front() == ';') continue;
    if (text.front() == '[') {
      if (text.back() != ']') throw ConfigError(fmt::format("{}:{}: malformed section header", path, number));
      section = text.substr(1, text.size() - 2);
      seen_section = seen_section || section == "hosts";
      continue;
    }
    if (section != "hosts") continue;
    std::string host = text.substr(0, text.find_first_of("=:"));
    host.erase(host.find_last_not_of(" \t") + 1);
    if (host.empty()) throw ConfigError(fmt::format("{}:{}: [hosts] empty host name", path, number));
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  if (!seen_section) throw ConfigError(fmt::format("{}: no [hosts] section", path));
  if (hosts.empty()) throw ConfigError(fmt::format("{}: [hosts] lists no host", path));
  return hosts;
}

// ---------------------------------------------------------------------------------------------
// carbon storage schemas

int storage_step(double interval) {
  // Readings fall on multiples of the interval: a step that is a whole number of intervals
  // keeps, in each point, the reading at the same place of the step.
  for (int n = 1; n <= 1000; ++n) {
    double span = n * interval;
    double whole = std::round(span);
    if (whole >= 1 && std::abs(span - whole) < 1e-6 * std::max(1.0, span)) return static_cast<int>(whole);
  }
  return static_cast<int>(std::max(1.0, std::ceil(interval)));
}

namespace {

// The archives after the first: the step for a day, then minutes for 30 days, hours for two
// years (whisper wants each precision a multiple of the one before). Suggestions: the first
// archive is what makes rates exact, the rest a site changes at will.
std::string retentions(int step) {
  struct Tier {
    long precision;  // at least this coarse
    const char* period;
  };
  static const Tier tiers[] = {{1, "1d"}, {60, "30d"}, {3600, "2y"}};
  std::vector<std::pair<long, std::string>> archives;
  for (const auto& tier : tiers) {
    long previous = archives.empty() ? step : archives.back().first;
    long precision = std::max<long>(tier.precision, previous);
    precision = (precision + previous - 1) / previous * previous;
    if (!archives.empty() && archives.back().first == precision)
      archives.back().second = tier.period;  // the same precision kept longer
    else
      archives.push_back({precision, tier.period});
  }
  std::string text;
  for (const auto& [precision, period] : archives)
    text += fmt::format("{}{}s:{}", text.empty() ? "" : ",", precision, period);
  return text;
}

}  // namespace

std::string storage_schemas(const Settings& settings) {
  std::vector<ShownSensor> sensors = settings.sensors;
  sensors.push_back(master_sensor());
  std::map<int, std::set<std::string>> by_step;
  for (const auto& sensor : sensors)
    by_step[storage_step(sensor.interval)].insert(graphite_component(sensor.name));
  // Components hold only [A-Za-z0-9_:#-] (graphite_name.h): literals in carbon's Python regex,
  // and nothing its ConfigParser would take for an interpolation ('%').
  std::string prefix;
  for (const auto& part : prefix_components(settings.prefix)) prefix += part + "\\.";
  std::string text =
      "# carbon storage-schemas.conf rules for fructosa (make-dashboard --storage-schemas): the paths of\n"
      "# each sensor, [prefix.]<host>.<Sensor>[.<key>] and [prefix.]jobs.<job>.<host>.<Sensor>[.<key>],\n"
      "# are stored first at its time_interval (lmaster's own sensor: at the default stats_interval,\n"
      "# 10 s), in whole seconds, so that Graphite's rates are right and coarser archives fill up.\n"
      "# Carbon uses the first rule that matches a new metric: put these above the catch-all rules.\n"
      "# They apply to new whisper files only (whisper-resize.py changes existing ones).\n";
  for (const auto& [step, names] : by_step) {
    std::string alternatives;
    for (const auto& name : names) alternatives += (alternatives.empty() ? "" : "|") + name;
    text += fmt::format("\n[fructosa_{}s]\npattern = ^{}(jobs\\.[0-9]+\\.)?[^.]+\\.({})(\\.|$)\n", step, prefix,
                        alternatives);
    text += fmt::format("retentions = {}\n", retentions(step));
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// Validation

std::vector<std::string> graphite_paths(std::string_view target) {
  std::vector<std::string> paths;
  std::size_t i = 0;
  while (i < target.size()) {
    char c = target[i];
    if (c == '\'' || c == '"') {
      auto end = target.find(c, i + 1);
      i = end == std::string_view::npos ? target.size() : end + 1;
      continue;
    }
    if (c == '(' || c == ')' || c == ',' || c == ' ') {
      ++i;
      continue;
    }
    std::size_t start = i;
    int braces = 0;
    while (i < target.size()) {
      char d = target[i];
      if (d == '{') ++braces;
      if (d == '}') --braces;
      if (braces == 0 && (d == '(' || d == ')' || d == ',' || d == ' ')) break;
      ++i;
    }
    std::string_view token = target.substr(start, i - start);
    bool function = i < target.size() && target[i] == '(';
    bool number = token.find_first_not_of("0123456789.-e") == std::string_view::npos;
    if (!function && !number && token != "true" && token != "false") paths.emplace_back(token);
  }
  return paths;
}

namespace {

// Whether `key` (Graphite components: literals or `*`) is what a catalog entry produces.
bool catalog_has(const ShownSensor& sensor, const std::vector<std::string>& key) {
  std::string joined;
  for (const auto& part : key) joined += (joined.empty() ? "" : ".") + part;
  for (const auto& entry : sensor.catalog->entries())
    if (key_path(entry.pattern) == joined) return true;
  // A listed key (PerfHW events) is a concrete key some entry matches.
  if (!has_wildcard(joined) && !sensor.hints.key_list_option.empty()) return sensor.catalog->find(joined) != nullptr;
  return false;
}

std::optional<std::string> check_graphite_path(const std::string& path, const Settings& settings,
                                               const std::vector<ShownSensor>& known) {
  auto parts = split_dots(path);
  auto prefix = prefix_components(settings.prefix);
  if (parts.size() < prefix.size() + 2 || !std::equal(prefix.begin(), prefix.end(), parts.begin()))
    return fmt::format("'{}' does not start with the prefix '{}'", path, settings.prefix);
  std::size_t at = prefix.size();
  if (parts[at] == "jobs" && parts.size() > at + 3 && parts[at + 1] == "$job") at += 2;
  const std::string& host = parts[at];
  if (host.empty()) return fmt::format("'{}' has no host", path);
  if (at + 1 >= parts.size()) return fmt::format("'{}' has no sensor", path);
  const std::string& sensor_name = parts[at + 1];
  for (const auto& sensor : known) {
    if (graphite_component(sensor.name) != sensor_name) continue;
    std::vector<std::string> key(parts.begin() + static_cast<std::ptrdiff_t>(at + 2), parts.end());
    if (catalog_has(sensor, key)) return std::nullopt;
    return fmt::format("'{}': no catalog entry of {} gives this key", path, sensor.name);
  }
  return fmt::format("'{}': no sensor '{}' is shown", path, sensor_name);
}

struct Box {
  int x, y, w, h;
};

}  // namespace

std::vector<std::string> validate_dashboard(const json& dashboard, const Settings& settings) {
  std::vector<std::string> problems;
  std::vector<ShownSensor> known = settings.sensors;
  known.push_back(master_sensor());
  auto uid = dashboard.value("uid", std::string());
  if (uid.empty() || uid.size() > 40) problems.push_back(fmt::format("uid '{}' is empty or longer than 40", uid));
  if (dashboard.value("schemaVersion", 0) < 36) problems.push_back("schemaVersion below 36");
  std::map<std::string, json> variables;
  for (const auto& variable : dashboard["templating"]["list"]) variables[variable["name"]] = variable;
  if (!variables.count("datasource") || variables["datasource"]["type"] != "datasource")
    problems.push_back("no datasource variable");
  std::set<int> ids;
  std::vector<std::pair<Box, std::string>> boxes;
  for (const auto& panel : dashboard["panels"]) {
    std::string title = panel.value("title", std::string());
    int id = panel.value("id", 0);
    if (!ids.insert(id).second) problems.push_back(fmt::format("panel id {} ('{}') is used twice", id, title));
    const auto& grid = panel["gridPos"];
    Box box{grid.value("x", -1), grid.value("y", -1), grid.value("w", 0), grid.value("h", 0)};
    if (box.x < 0 || box.y < 0 || box.w < 1 || box.h < 1 || box.x + box.w > 24)
      problems.push_back(fmt::format("panel '{}' lies outside the 24-column grid", title));
    for (const auto& [other, other_title] : boxes)
      if (box.x < other.x + other.w && other.x < box.x + box.w && box.y < other.y + other.h && other.y < box.y + box.h)
        problems.push_back(fmt::format("panels '{}' and '{}' overlap", title, other_title));
    boxes.push_back({box, title});
    if (panel["type"] == "row") continue;
    std::string unit = panel["fieldConfig"]["defaults"].value("unit", std::string());
    if (!is_grafana_unit(unit)) problems.push_back(fmt::format("panel '{}': unknown unit '{}'", title, unit));
    if (panel["datasource"].value("uid", std::string()) != kDatasourceVariable)
      problems.push_back(fmt::format("panel '{}' does not use the datasource variable", title));
    if (panel["targets"].empty()) problems.push_back(fmt::format("panel '{}' has no target", title));
    for (const auto& target : panel["targets"]) {
      if (target["datasource"].value("uid", std::string()) != kDatasourceVariable)
        problems.push_back(fmt::format("panel '{}': a target does not use the datasource variable", title));
      if (target.contains("target")) {
        auto paths = graphite_paths(target["target"].get<std::string>());
        if (paths.empty()) problems.push_back(fmt::format("panel '{}': a target names no metric", title));
        for (const auto& path : paths)
          if (auto problem = check_graphite_path(path, settings, known))
            problems.push_back(fmt::format("panel '{}': {}", title, *problem));
        continue;
      }
      // Elasticsearch: sensor:"Name" in the query, metrics.<key> fields.
      std::string query = target.value("query", std::string());
      const ShownSensor* sensor = nullptr;
      for (const auto& candidate : known)
        if (query.rfind("sensor:" + es_lucene_value(candidate.name), 0) == 0) sensor = &candidate;
      if (!sensor) {
        problems.push_back(fmt::format("panel '{}': query '{}' names no shown sensor", title, query));
        continue;
      }
      for (const auto& metric : target["metrics"]) {
        if (!metric.contains("field") || metric["type"] == "derivative") continue;
        std::string field = metric["field"];
        if (field.rfind("metrics.", 0) != 0) {
          problems.push_back(fmt::format("panel '{}': field '{}' is not a metric", title, field));
          continue;
        }
        std::string key = field.substr(8);
        bool found = false;
        if (key.rfind("${", 0) == 0 && key.back() == '}') {
          auto variable = variables.find(key.substr(2, key.size() - 3));
          for (const auto& entry : sensor->catalog->entries())
            found = found || (variable != variables.end() && variable->second["regex"] == es_key_regex(entry.pattern));
        } else {
          if (key == "value") key.clear();
          found = sensor->catalog->find(key) != nullptr;
        }
        if (!found) problems.push_back(fmt::format("panel '{}': field '{}' is in no catalog entry of {}", title, field, sensor->name));
      }
    }
  }
  return problems;
}

}  // namespace fructosa::dashboards
