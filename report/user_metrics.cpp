// A job's pushed metrics (user_metrics.h): summarize() and merge_summary() of its User series,
// the figures lmaster's job index keeps too, plus the lowest value where the series are read.
#include "user_metrics.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace fructosa::report {
namespace {

// The entries of `map` whose names are "User.<name>", as (name, value). "Users." (another
// sensor) sorts after every "User." and is not among them.
template <typename Value, typename Each>
void each_user_entry(const std::map<std::string, Value>& map, Each each) {
  const std::string prefix = std::string(kUserSensor) + ".";
  for (auto it = map.lower_bound(prefix); it != map.end() && it->first.starts_with(prefix); ++it)
    if (it->first.size() > prefix.size()) each(it->first.substr(prefix.size()), it->second);
}

std::optional<double> lowest(const Series& series) {
  std::optional<double> low;
  for (double value : series.values)
    if (!std::isnan(value)) low = std::min(low.value_or(value), value);
  return low;
}

}  // namespace

std::vector<UserMetric> user_metrics_of(const std::map<std::string, Series>& metrics) {
  std::vector<UserMetric> out;
  each_user_entry(metrics, [&](std::string name, const Series& series) {
    MetricSummary summary = summarize(series);
    if (summary.count > 0) out.push_back({std::move(name), summary, lowest(series)});
  });
  return out;
}

std::vector<UserMetric> user_metrics_of(const std::map<std::string, MetricSummary>& summaries) {
  std::vector<UserMetric> out;
  each_user_entry(summaries, [&](std::string name, const MetricSummary& summary) {
    if (summary.count > 0) out.push_back({std::move(name), summary, std::nullopt});
  });
  return out;
}

void merge_user_metrics(std::vector<UserMetric>& into, const std::vector<UserMetric>& node) {
  for (const UserMetric& metric : node) {
    auto at = std::lower_bound(into.begin(), into.end(), metric.name,
                               [](const UserMetric& one, const std::string& name) { return one.name < name; });
    if (at == into.end() || at->name != metric.name) {
      into.insert(at, metric);
      continue;
    }
    merge_summary(at->summary, metric.summary);
    at->min = at->min && metric.min ? std::optional(std::min(*at->min, *metric.min)) : std::nullopt;
  }
}

}  // namespace fructosa::report
