// Prometheus names: the one mapping from fructosa's sensors, keys, catalog units and kinds to
// Prometheus metric and label names (docs/prometheus.md). lmaster's [prometheus] output sends
// these names and make-dashboard's PromQL asks for them, so both compute them here.
//
//   fructosa_<sensor in snake_case>[_<key>][_<unit>][_total]
//   sensor  "NetIOCounters" -> "net_io_counters"   (CamelCase words, acronyms kept together)
//   key     "eth0.bytes_sent" -> "eth0_bytes_sent" (every byte outside [A-Za-z0-9_] -> '_')
//   unit    bytes -> "_bytes", seconds -> "_seconds", celsius -> "_celsius" ... (not doubled)
//   counter -> "_total"
// so NetIOCounters' "eth0.bytes_sent" (bytes, counter) is
// fructosa_net_io_counters_eth0_bytes_sent_bytes_total. Light on purpose.
#pragma once

#include <string>
#include <string_view>

#include "metric.h"

namespace fructosa {

// "VirtualMemory" -> "virtual_memory", "CPUPercent" -> "cpu_percent", "lagent" -> "lagent";
// bytes outside [A-Za-z0-9] become '_'.
std::string prometheus_sensor_part(std::string_view sensor);

// What a catalog unit (its text, as the dictionary carries it) appends to a name: "_bytes",
// "_seconds", "_timestamp_seconds" ...; "" for units without one (count, bool, none).
std::string_view prometheus_unit_suffix(std::string_view unit);

// The metric name of one key of a sensor. `unit` as to_string(Unit) writes it.
std::string prometheus_metric_name(std::string_view sensor, std::string_view key,
                                   std::string_view unit, Kind kind);

// A label name made from text (the last part of a sample's text label key): [a-zA-Z0-9_] kept,
// everything else '_', '_' before a leading digit; a name Prometheus reserves (leading "__") or
// that lmaster sets itself (host, job_id) gets the prefix "label_". "" stays "" (not sent).
std::string prometheus_label_name(std::string_view text);

// The labels lmaster puts on every series.
inline constexpr std::string_view kPrometheusHostLabel = "host";
inline constexpr std::string_view kPrometheusJobLabel = "job_id";  // absent for the node's own

}  // namespace fructosa
