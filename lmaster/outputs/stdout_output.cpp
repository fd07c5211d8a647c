#include "stdout_output.h"

#include <fmt/format.h>

#include <ctime>
#include <iterator>
#include <string_view>

namespace fructosa::master {
namespace {

std::string_view unit_suffix(const std::string& unit) {
  if (unit == "percent") return "%";
  if (unit == "bytes") return "B";
  if (unit == "seconds") return "s";
  if (unit == "MHz") return "MHz";
  if (unit == "celsius") return "°C";
  if (unit == "watts") return "W";
  if (unit == "joules") return "J";
  if (unit == "rpm") return "rpm";
  return "";
}

bool control_byte(char c) { return static_cast<unsigned char>(c) < 0x20 || c == '\x7f'; }

// Whether a bare name could be misread: as no field, as two fields, or split at the wrong '='.
bool needs_quotes(std::string_view name) {
  if (name.empty()) return true;
  for (char c : name)
    if (c == ' ' || c == '=' || c == '"' || c == '\\' || control_byte(c)) return true;
  return false;
}

void append_quoted(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (control_byte(c)) {  // a '\n' would end the line
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  out += '"';
}

void append_name(std::string& out, std::string_view name) {
  if (needs_quotes(name))
    append_quoted(out, name);
  else
    out += name;
}

}  // namespace

std::string format_sample(const Sample& sample, const MetricInfoStore& infos) {
  std::time_t seconds = static_cast<std::time_t>(sample.time_ns / 1000000000);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  std::string line = fmt::format("{}.{:03}Z ", stamp, (sample.time_ns / 1000000) % 1000);
  append_name(line, sample.host);
  line += ' ';
  append_name(line, sample.sensor);
  fmt::format_to(std::back_inserter(line), " job={}", sample.job);
  for (const auto& metric : sample.metrics) {
    auto info = infos.find(sample.sensor, metric.key);
    line += ' ';
    // A scalar sensor (BootTime, CPUCount) reports under the empty key.
    append_name(line, metric.key.empty() ? "value" : metric.key);
    // "{}" is fmt's shortest text that reads back as the same double.
    fmt::format_to(std::back_inserter(line), "={}{}", metric.value,
                   info ? unit_suffix(info->unit) : "");
  }
  for (const auto& label : sample.labels) {
    line += ' ';
    append_name(line, label.key);
    line += '=';
    append_quoted(line, label.value);
  }
  return line;
}

void StdoutOutput::write(std::span<const Sample> samples) {
  for (const auto& sample : samples) out_ << format_sample(sample, infos_) << '\n';
  counters_.sent += count_points(samples);
}

}  // namespace fructosa::master
