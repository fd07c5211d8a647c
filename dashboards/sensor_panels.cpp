// Which catalog entries a sensor shows, and on which panels (docs/dashboards.md: the sensor's
// DashboardHints and options decide).
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "panel_spec.h"

namespace fructosa::dashboards {

using sensors::DashboardRow;

namespace {

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

std::string unit_word(Unit unit) {
  std::string_view text = to_string(unit);
  return text.empty() ? "values" : std::string(text);
}

}  // namespace

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

}  // namespace fructosa::dashboards
