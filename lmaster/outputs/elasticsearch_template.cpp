// The index templates: the body of `PUT _index_template/<index_prefix><sensor>`, typed from the
// catalog (long or double per unit, the catalog kept in the mapping's _meta, dynamic templates
// for keys it does not describe yet), and ElasticsearchOutput::put_templates, which puts a
// sensor's template before its first _bulk and again when the catalog knows more of its keys.
// A template refused for good only costs typed mappings; a cluster in trouble fails the write.
#include "elasticsearch_output_impl.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <string_view>

namespace fructosa::master {

using namespace elasticsearch;

namespace {

// Above Elasticsearch's own templates (priority 100 for logs-*-*, metrics-*-*) and above a
// catch-all a site may have, so that lmaster's indices get lmaster's mappings.
constexpr int kTemplatePriority = 200;

// Puts a field mapping at a dotted path inside `properties`; false when a leaf is in the way
// (a key that is also a prefix of another key of the same sensor).
bool put_field(Json& properties, std::string_view field, const Json& mapping) {
  Json* level = &properties;
  while (true) {
    auto dot = field.find('.');
    std::string name(field.substr(0, dot));
    if (dot == std::string_view::npos) {
      if (level->contains(name)) return false;  // already an object of other keys
      (*level)[name] = mapping;
      return true;
    }
    Json& object = (*level)[name];
    if (object.is_null()) object = Json{{"properties", Json::object()}};
    if (!object.contains("properties")) return false;  // a leaf: this key cannot be below it
    level = &object["properties"];
    field.remove_prefix(dot + 1);
  }
}

// {"<name>": {"path_match": ..., "match_mapping_type": ..., "mapping": ...}}
Json dynamic_template(std::string_view name, std::string_view path, std::string_view json_type,
                      Json mapping) {
  return {
      {std::string(name),
       {{"path_match", path}, {"match_mapping_type", json_type}, {"mapping", std::move(mapping)}}}};
}

}  // namespace

std::string elasticsearch_index_template(
    std::string_view prefix, std::string_view sensor,
    const std::vector<std::pair<std::string, MetricInfo>>& keys) {
  std::string name = std::string(prefix) + elasticsearch_sensor_part(sensor);
  Json metric_properties = Json::object();
  Json catalog = Json::object();
  for (const auto& [key, info] : keys) {
    std::string kind(to_string(info.kind));
    Json meta = {{"kind", kind}};
    if (!info.unit.empty()) meta["unit"] = info.unit.substr(0, 50);  // ES allows 50 characters
    Json mapping = {{"type", elasticsearch_integer_unit(info.unit) ? "long" : "double"},
                    {"meta", meta}};
    if (!put_field(metric_properties, elasticsearch_field_name(key), mapping))
      spdlog::warn(
          "elasticsearch: {} key {:?} is also the prefix of another key (or below one): it is left "
          "to dynamic mapping, and documents holding both are refused",
          std::string(sensor), key);
    catalog[elasticsearch_field_name(key)] = {
        {"unit", info.unit}, {"kind", kind}, {"description", info.description}};
  }
  // Keys the catalog did not describe (yet): numbers are doubles (ES would pick float), labels
  // are keywords (ES would pick text).
  Json dynamic_templates =
      Json::array({dynamic_template("metrics_integers", "metrics.*", "long", {{"type", "double"}}),
                   dynamic_template("metrics_numbers", "metrics.*", "double", {{"type", "double"}}),
                   dynamic_template("labels", "labels.*", "string",
                                    {{"type", "keyword"}, {"ignore_above", 1024}})});
  Json properties = {{"@timestamp", {{"type", "date"}}},
                     {"host", {{"type", "keyword"}}},
                     {"sensor", {{"type", "keyword"}}},
                     {"job", {{"type", "long"}}},
                     {"metrics", {{"properties", metric_properties}}},
                     {"labels", {{"type", "object"}}}};
  Json body = Json::object();
  body["index_patterns"] = Json::array({name + "-*"});
  body["priority"] = kTemplatePriority;
  body["_meta"] = {{"managed_by", "fructosa lmaster"}, {"sensor", std::string(sensor)}};
  // Mapping fields: metrics, labels, the fixed fields and the objects of dotted keys.
  body["template"]["settings"]["index.mapping.total_fields.limit"] =
      std::max<std::size_t>(1000, 4 * keys.size() + 200);
  body["template"]["mappings"] = {
      {"_meta", {{"sensor", std::string(sensor)}, {"metrics", catalog}}},
      {"dynamic_templates", std::move(dynamic_templates)},
      {"properties", std::move(properties)}};
  return dump(body);
}

namespace elasticsearch {

void ElasticsearchOutput::put_templates(std::span<const Sample> samples) {
  std::set<std::string_view> stale;
  for (const auto& sample : samples) {
    if (stale.count(sample.sensor)) continue;
    auto found = sensors_.find(sample.sensor);
    if (found == sensors_.end() || !found->second.template_put) {
      stale.insert(sample.sensor);
      continue;
    }
    for (const auto& metric : sample.metrics)
      if (!found->second.known_keys.count(metric.key)) {
        stale.insert(sample.sensor);
        break;
      }
  }
  for (std::string_view sensor_name : stale) {
    std::string sensor(sensor_name);
    auto keys = infos_.keys_of(sensor);
    SensorState& state = sensors_[sensor];
    // A key the agent never described stays unknown: it is mapped dynamically (as a double).
    if (state.template_put && keys.size() == state.catalog_keys) continue;
    std::string name = index_prefix_ + elasticsearch_sensor_part(sensor);
    Response response;
    try {
      response = send("PUT", "/_index_template/" + name,
                      elasticsearch_index_template(index_prefix_, sensor, keys), json_headers_, 0);
    } catch (const Unreachable& error) {
      throw OutputError(fmt::format("elasticsearch: no node answered: {}", error.what()));
    }
    if (response.status == 429 || response.status >= 500 || response.status == 401 ||
        response.status == 403 || response.status == 408)
      throw OutputError(fmt::format("elasticsearch {}: PUT _index_template/{} answered {}: {}",
                                    response.node->shown, name, response.status,
                                    body_error_text(response.body)));
    if (response.status < 200 || response.status >= 300) {
      // The documents still go in, with dynamic mappings; try again when the catalog grows.
      std::uint64_t held_back = 0;
      if (template_log_.ready(held_back))
        spdlog::error("elasticsearch {}: index template {} refused ({}): {}{}",
                      response.node->shown, name, response.status, body_error_text(response.body),
                      held_back_note(held_back));
    } else if (!state.template_put) {
      spdlog::info("elasticsearch {}: index template {} for {} ({} keys)", response.node->shown,
                   name, sensor, keys.size());
    } else {
      spdlog::debug("elasticsearch {}: index template {} updated ({} keys)", response.node->shown,
                    name, keys.size());
    }
    state.template_put = true;
    state.catalog_keys = keys.size();
    state.known_keys.clear();
    state.integer_keys.clear();
    for (const auto& [key, info] : keys) {
      state.known_keys.insert(key);
      if (elasticsearch_integer_unit(info.unit)) state.integer_keys.insert(key);
    }
  }
}

}  // namespace elasticsearch

}  // namespace fructosa::master
