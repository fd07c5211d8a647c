// [elasticsearch]: documents through the _bulk API over libcurl.
//
// One document per sample, in a time-based index per sensor (docs/elasticsearch.md):
//   index  <index_prefix><sensor, lowercased>-YYYY.MM.DD     (the sample's UTC day)
//   _id    <host>|<sensor>|<job>|<time_ns>                    (a re-sent sample never duplicates)
//   {"@timestamp": "2024-05-01T12:00:00.200Z", "host": "node07", "sensor": "NetIOCounters",
//    "job": 0, "metrics": {"eth0.bytes_sent": 123, ...}, "labels": {...}}
// Before the first bulk of a sensor, and again when the catalog knows more keys of it, an index
// template typed from the catalog is put: `PUT _index_template/<index_prefix><sensor>`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "config.h"
#include "output.h"

namespace fructosa::master {

const OptionTable& elasticsearch_options();
// Throws ConfigError for a bad value (URL, index_prefix, an unreadable credentials_file).
std::unique_ptr<Output> make_elasticsearch_output(const Options& options,
                                                  const MetricInfoStore& infos);

// The pieces below are what the output sends; they are declared here for the tests.

// A sensor name as it appears in index and template names: lowercased, every character other
// than [a-z0-9_] replaced by '_' (so that one sensor's index pattern never matches another's).
std::string elasticsearch_sensor_part(std::string_view sensor);
// "<prefix><sensor part>-YYYY.MM.DD" for the UTC day of `time_ns`.
std::string elasticsearch_index_name(std::string_view prefix, std::string_view sensor,
                                     std::int64_t time_ns);
// The deterministic _id of a sample's document ('%' and '|' in host and sensor are %-escaped).
std::string elasticsearch_document_id(const Sample& sample);
// The field a metric key or label key becomes under "metrics" / "labels": the key itself (ES
// reads its dots as object paths), "value" for the empty key of a scalar sensor, and "_" for an
// empty or blank dotted component (ES refuses those).
std::string elasticsearch_field_name(std::string_view key);
// True for catalog units whose values are whole numbers: they are mapped as `long`.
bool elasticsearch_integer_unit(std::string_view unit);
// The document of a sample, as one line of JSON. Keys in `integer_keys` (mapped as long) are
// written as JSON integers when their value is a whole number; NaN and infinities become null.
std::string elasticsearch_document(const Sample& sample,
                                   const std::unordered_set<std::string>& integer_keys);
// The body of `PUT _index_template/<prefix><sensor part>` for a sensor and its catalog keys.
std::string elasticsearch_index_template(
    std::string_view prefix, std::string_view sensor,
    const std::vector<std::pair<std::string, MetricInfo>>& keys);

}  // namespace fructosa::master
