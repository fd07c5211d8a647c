// The document encoding (docs/elasticsearch.md): what a sample becomes in a _bulk request, its
// index name (per sensor and UTC day), its deterministic _id, the field names of its metric and
// label keys, and the document itself (the @timestamp, typed metric values, labels). Nothing here
// talks to a node: the functions are pure and tested on their own (they are declared in
// elasticsearch_output.h); iso8601_millis and dump serve the rest of the output as well.
#include "elasticsearch_output_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>

namespace fructosa::master {

namespace elasticsearch {
namespace {

struct UtcTime {
  std::tm calendar{};
  int millis = 0;
};

UtcTime utc_time(std::int64_t time_ns) {
  std::int64_t seconds = time_ns / 1'000'000'000;
  std::int64_t rest = time_ns % 1'000'000'000;
  if (rest < 0) {  // before 1970: floor, not truncation
    rest += 1'000'000'000;
    --seconds;
  }
  UtcTime utc;
  std::time_t whole = static_cast<std::time_t>(seconds);
  ::gmtime_r(&whole, &utc.calendar);
  utc.millis = static_cast<int>(rest / 1'000'000);
  return utc;
}

std::string escape_id_part(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char c : text) {
    if (c == '%' || c == '|')
      escaped += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else
      escaped += c;
  }
  return escaped;
}

}  // namespace

std::string iso8601_millis(std::int64_t time_ns) {
  UtcTime utc = utc_time(time_ns);
  const std::tm& t = utc.calendar;
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", t.tm_year + 1900, t.tm_mon + 1,
                     t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, utc.millis);
}

// JSON text of a value; invalid UTF-8 (a host name, a label read from the node) becomes U+FFFD
// instead of making dump() throw.
std::string dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace elasticsearch

using namespace elasticsearch;

std::string elasticsearch_sensor_part(std::string_view sensor) {
  std::string part;
  part.reserve(sensor.size());
  for (char c : sensor) {
    unsigned char byte = static_cast<unsigned char>(c);
    part += (std::isalnum(byte) && byte < 0x80) ? static_cast<char>(std::tolower(byte)) : '_';
  }
  return part.empty() ? "_" : part;
}

std::string elasticsearch_index_name(std::string_view prefix, std::string_view sensor,
                                     std::int64_t time_ns) {
  const std::tm& day = utc_time(time_ns).calendar;
  return fmt::format("{}{}-{:04}.{:02}.{:02}", prefix, elasticsearch_sensor_part(sensor),
                     day.tm_year + 1900, day.tm_mon + 1, day.tm_mday);
}

std::string elasticsearch_document_id(const Sample& sample) {
  return fmt::format("{}|{}|{}|{}", escape_id_part(sample.host), escape_id_part(sample.sensor),
                     sample.job, sample.time_ns);
}

std::string elasticsearch_field_name(std::string_view key) {
  if (key.empty()) return "value";
  std::string field;
  field.reserve(key.size());
  while (true) {
    auto dot = key.find('.');
    std::string_view component = key.substr(0, dot);
    bool blank = std::all_of(component.begin(), component.end(),
                             [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
    field += blank ? std::string_view("_") : component;
    if (dot == std::string_view::npos) break;
    field += '.';
    key.remove_prefix(dot + 1);
  }
  return field;
}

bool elasticsearch_integer_unit(std::string_view unit) {
  return unit == to_string(Unit::bytes) || unit == to_string(Unit::count) ||
         unit == to_string(Unit::boolean);
}

std::string elasticsearch_document(const Sample& sample,
                                   const std::unordered_set<std::string>& integer_keys) {
  Json metrics = Json::object();
  for (const auto& metric : sample.metrics) {
    Json& field = metrics[elasticsearch_field_name(metric.key)];
    double value = metric.value;
    // Whole numbers of long fields as JSON integers; everything else as a double (dump writes
    // the shortest text that reads back as the same double; NaN and infinities become null).
    if (integer_keys.count(metric.key) && std::isfinite(value) && value == std::trunc(value) &&
        std::fabs(value) < 9.2e18)
      field = static_cast<std::int64_t>(value);
    else
      field = value;
  }
  Json document = {{"@timestamp", iso8601_millis(sample.time_ns)},
                   {"host", sample.host},
                   {"sensor", sample.sensor},
                   {"job", sample.job},
                   {"metrics", std::move(metrics)}};
  if (!sample.labels.empty()) {
    Json labels = Json::object();
    for (const auto& label : sample.labels)
      labels[elasticsearch_field_name(label.key)] = label.value;
    document["labels"] = std::move(labels);
  }
  return dump(document);
}

}  // namespace fructosa::master
