// Elasticsearch targets (docs/elasticsearch.md: one document per sample, fields metrics.<key>):
// Lucene queries by sensor, host and job, date histograms, derivatives of counters, and a
// repeated panel per key of a wildcard pattern.
#include <fmt/format.h>

#include <cctype>
#include <map>

#include "graphite_name.h"
#include "targets.h"

namespace fructosa::dashboards {

namespace {

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

}  // namespace

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

namespace {

class ElasticsearchTargets final : public TargetBuilder {
 public:
  explicit ElasticsearchTargets(const Settings& settings) : settings_(settings) {}

  PanelTargets panel_targets(const PanelSpec& panel, Scope scope, const std::string& host, json& variables) override {
    PanelTargets out;
    json& targets = out.targets;
    std::string& repeat = out.repeat;
    for (const auto& metric : panel.metrics) {
      std::string field = es_field(metric);
      std::string alias = metric.pattern.empty() ? metric.sensor : metric.pattern;
      if (has_wildcard(metric.pattern)) {
        repeat = es_key_variable(metric, variables);
        field = "metrics.${" + repeat + "}";
        alias = "${" + repeat + "}";
      }
      targets.push_back(es_target(panel, metric, scope, host, field, alias, targets.size()));
    }
    return out;
  }

 private:
  // The hidden multi-value variable listing the keys of a wildcard pattern (Elasticsearch maps
  // each key to its own field; a repeated panel shows each).
  std::string es_key_variable(const Metric& metric, json& variables) {
    std::string regex = es_key_regex(metric.pattern);
    std::string name = fmt::format("keys_{}_{}", graphite_component(metric.sensor), es_key_variables_.size());
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
    auto [it, added] = es_key_variables_.emplace(metric.sensor + "\n" + metric.pattern, name);
    if (!added) return it->second;
    variables.push_back({{"type", "query"},
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
  std::map<std::string, std::string> es_key_variables_;
};

}  // namespace

std::unique_ptr<TargetBuilder> make_elasticsearch_targets(const Settings& settings) {
  return std::make_unique<ElasticsearchTargets>(settings);
}

}  // namespace fructosa::dashboards
