// Internal to make-dashboard: what a panel shows, before any datasource writes its queries.
// The dashboard kinds (node_dashboard.cpp, job_dashboard.cpp, cluster_dashboard.cpp) make
// PanelSpecs; a TargetBuilder (targets.h) turns their metrics into Grafana targets.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "dashboard.h"

namespace fructosa::dashboards {

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
  // Prometheus: the whole expression, "{selector}" standing for the metric's series selector,
  // and its legend ("" otherwise).
  std::string promql_template;
  std::string legend;
  std::string unit;  // Grafana unit when not the metric's (a count of hosts made of 0/1 values)
};

bool has_wildcard(std::string_view pattern);

// The catalog entries a sensor so configured reports in node (job 0) or per-job samples.
std::vector<Metric> shown_metrics(const ShownSensor& sensor, bool job_samples);
// A sensor's panels: one per pattern with a wildcard (a series per CPU, NIC, ...); the plain
// keys together, one panel per unit and kind.
std::vector<PanelSpec> sensor_panels(const ShownSensor& sensor, const std::vector<Metric>& metrics);

// ---------------------------------------------------------------------------------------------
// Units (grafana_units.cpp)

struct UnitPlan {
  std::string_view grafana;
  double scale = 1;  // applied to the value (or rate) before Grafana formats it
};

UnitPlan unit_plan(Unit unit, Kind kind);
std::string number_text(double value);

}  // namespace fructosa::dashboards
