#include "stdout_output.h"

#include <fmt/format.h>

#include <ctime>

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

}  // namespace

std::string format_sample(const Sample& sample, const MetricInfoStore& infos) {
  std::time_t seconds = static_cast<std::time_t>(sample.time_ns / 1000000000);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  std::string line = fmt::format("{}.{:03}Z {} {} job={}", stamp, (sample.time_ns / 1000000) % 1000, sample.host,
                                 sample.sensor, sample.job);
  for (const auto& metric : sample.metrics) {
    auto info = infos.find(sample.sensor, metric.key);
    // A scalar sensor (BootTime, CPUCount) reports under the empty key.
    line += fmt::format(" {}={}{}", metric.key.empty() ? "value" : metric.key, metric.value,
                        info ? unit_suffix(info->unit) : "");
  }
  for (const auto& label : sample.labels) line += fmt::format(" {}=\"{}\"", label.key, label.value);
  return line;
}

void StdoutOutput::write(std::span<const Sample> samples) {
  for (const auto& sample : samples) out_ << format_sample(sample, infos_) << '\n';
  counters_.sent += count_points(samples);
}

}  // namespace fructosa::master
