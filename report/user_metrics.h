// The metrics a job's own processes pushed to lagent (sensor User: `lagent push`, statsd or
// Prometheus lines; docs/push.md), as the report shows them beside the system figures: per
// pushed name, per node and over the job's nodes. docs/report.md "User metrics".
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "job_data.h"

namespace fructosa::report {

// lagent's sensor of pushed metrics; its keys are the names the job pushed ("User.loss").
inline constexpr const char* kUserSensor = "User";

struct UserMetric {
  std::string name;  // as pushed ("loss")
  // Its samples: how many, the last one's value, the highest and the sum of their values. lagent
  // reports a pushed counter as its increments over each interval, so the sum is its total.
  MetricSummary summary;
  // The lowest value: known from the series, not from lmaster's job index (which keeps none).
  std::optional<double> min;
  double mean() const { return summary.sum / static_cast<double>(summary.count); }
};

// A node's user metrics (those with a sample), sorted by name: from the job's series on it
// (HostData::metrics) ...
std::vector<UserMetric> user_metrics_of(const std::map<std::string, Series>& metrics);
// ... or from their summaries (JobSummary::Host::metrics, from the job index): no min.
std::vector<UserMetric> user_metrics_of(const std::map<std::string, MetricSummary>& summaries);
// Folds a node's user metrics into the job's (both sorted by name): counts and sums add, max
// and min take the extreme (min only while every node's is known), last is the latest sample's.
void merge_user_metrics(std::vector<UserMetric>& into, const std::vector<UserMetric>& node);

}  // namespace fructosa::report
