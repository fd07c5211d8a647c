// Summaries of series (job_data.h): the figures lmaster's job index keeps, computed from a series
// by the sources that have no index (Graphite, files being written).
#include "job_data.h"

#include <algorithm>
#include <cmath>

namespace fructosa::report {

MetricSummary summarize(const Series& series) {
  MetricSummary summary;
  for (std::size_t i = 0; i < series.values.size(); ++i) {
    const double value = series.values[i];
    if (std::isnan(value)) continue;
    if (summary.count == 0) {
      summary.first_ns = series.time_ns[i];
      summary.max = value;
    } else {
      // A fall is a restart from 0 (analysis.h's counter_growth).
      summary.growth += value >= summary.last ? value - summary.last : value;
      summary.max = std::max(summary.max, value);
    }
    summary.last_ns = series.time_ns[i];
    summary.last = value;
    summary.sum += value;
    ++summary.count;
  }
  return summary;
}

void merge_summary(MetricSummary& into, const MetricSummary& later) {
  if (later.count == 0) return;
  if (into.count == 0) {
    into = later;
    return;
  }
  into.first_ns = std::min(into.first_ns, later.first_ns);
  into.max = std::max(into.max, later.max);
  into.sum += later.sum;
  into.growth += later.growth;
  if (later.last_ns >= into.last_ns) {
    into.last_ns = later.last_ns;
    into.last = later.last;
  }
  into.count += later.count;
}

}  // namespace fructosa::report
