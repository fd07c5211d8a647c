// Validation of a generated dashboard: its grid, units, datasource references, and targets that
// reference catalog entries of the shown sensors (Graphite paths, Elasticsearch fields,
// Prometheus metric names and name regexes).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <cctype>
#include <optional>
#include <regex>
#include <set>

#include "graphite_name.h"
#include "targets.h"

namespace fructosa::dashboards {

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

// The metric names and name regexes of a PromQL expression: each must be what lmaster's
// [prometheus] output names a catalog entry of a shown sensor (or lmaster's).
void check_promql(const std::string& expression, const std::vector<ShownSensor>& known, const std::string& title,
                  std::vector<std::string>& problems) {
  std::set<std::string> exact, templates, regexes;
  std::vector<std::regex> listed;  // sensors with a key list: any key of a pattern
  for (const auto& sensor : known)
    for (const auto& entry : sensor.catalog->entries()) {
      PrometheusName name = prometheus_name_parts(sensor.name, entry.pattern, entry.unit, entry.kind);
      if (name.regex.empty()) {
        exact.insert(name.parts.front());
        continue;
      }
      // A repeated panel's name: one variable stands for the items and what lies between them.
      templates.insert(name.parts.front() + "*" + name.parts.back());
      regexes.insert(name.regex);
      if (!sensor.hints.key_list_option.empty()) listed.emplace_back(name.regex);
    }
  bool found_name = false;
  for (std::size_t i = 0; i < expression.size();) {
    char c = expression[i];
    if (c == '"') {
      std::string text;
      std::size_t j = i + 1;
      for (; j < expression.size() && expression[j] != '"'; ++j) text += expression[j] == '\\' ? expression[++j] : expression[j];
      if (std::string_view(expression).substr(0, i).ends_with("__name__=~")) {
        found_name = true;
        if (!regexes.count(text))
          problems.push_back(fmt::format("panel '{}': name regex '{}' is no catalog pattern's", title, text));
      }
      i = j + 1;
      continue;
    }
    if (!(std::isalpha(static_cast<unsigned char>(c)) || c == '_')) {
      ++i;
      continue;
    }
    std::string token;
    while (i < expression.size()) {
      char d = expression[i];
      if (d == '$' && i + 1 < expression.size() && expression[i + 1] == '{') {
        auto end = expression.find('}', i);
        if (end == std::string::npos) break;
        token += '*';
        i = end + 1;
      } else if (std::isalnum(static_cast<unsigned char>(d)) || d == '_' || d == ':') {
        token += d;
        ++i;
      } else {
        break;
      }
    }
    if (!token.starts_with("fructosa_")) continue;
    found_name = true;
    bool ok = token.find('*') != std::string::npos ? templates.count(token) > 0 : exact.count(token) > 0;
    for (const auto& regex : listed) ok = ok || std::regex_match(token, regex);
    if (!ok) problems.push_back(fmt::format("panel '{}': '{}' is no metric lmaster sends for a shown sensor", title, token));
  }
  if (!found_name) problems.push_back(fmt::format("panel '{}': expression '{}' names no metric", title, expression));
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
      if (target.contains("expr")) {
        check_promql(target["expr"].get<std::string>(), known, title, problems);
        continue;
      }
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
