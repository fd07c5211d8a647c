#include "prometheus_name.h"

namespace fructosa {
namespace {

bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool keeps(char c) { return is_upper(c) || is_lower(c) || is_digit(c) || c == '_'; }

void append_kept(std::string& out, std::string_view text) {
  for (char c : text) out += keeps(c) ? c : '_';
}

}  // namespace

std::string prometheus_sensor_part(std::string_view sensor) {
  std::string out;
  for (std::size_t i = 0; i < sensor.size(); ++i) {
    char c = sensor[i];
    if (is_upper(c)) {
      // A word starts at an upper-case letter after a lower-case one or a digit ("netIO"), or at
      // the last upper-case letter of an acronym followed by a lower-case one ("IOCounters").
      bool after_word = i > 0 && (is_lower(sensor[i - 1]) || is_digit(sensor[i - 1]));
      bool ends_acronym = i > 0 && is_upper(sensor[i - 1]) && i + 1 < sensor.size() &&
                          is_lower(sensor[i + 1]);
      if ((after_word || ends_acronym) && !out.empty() && out.back() != '_') out += '_';
      out += static_cast<char>(c - 'A' + 'a');
    } else {
      out += keeps(c) ? c : '_';
    }
  }
  return out;
}

std::string_view prometheus_unit_suffix(std::string_view unit) {
  if (unit == "bytes") return "_bytes";
  if (unit == "seconds") return "_seconds";
  if (unit == "celsius") return "_celsius";
  if (unit == "joules") return "_joules";
  if (unit == "watts") return "_watts";
  if (unit == "volts") return "_volts";
  if (unit == "amperes") return "_amperes";
  if (unit == "percent") return "_percent";
  if (unit == "MHz") return "_megahertz";
  if (unit == "rpm") return "_rpm";
  if (unit == "milliseconds") return "_milliseconds";
  if (unit == "Mbit/s") return "_megabits_per_second";
  // Seconds since the epoch, as Prometheus's own process_start_time_seconds, but not to be
  // mistaken for a duration.
  if (unit == "timestamp") return "_timestamp_seconds";
  return "";  // count, bool, none: plain numbers
}

std::string prometheus_metric_name(std::string_view sensor, std::string_view key,
                                   std::string_view unit, Kind kind) {
  std::string name = "fructosa_";
  name += prometheus_sensor_part(sensor);
  if (!key.empty()) {
    name += '_';
    append_kept(name, key);
  }
  // A key that already says its unit or that it is a total keeps one ("read_bytes", not
  // "read_bytes_bytes").
  std::string_view suffix = prometheus_unit_suffix(unit);
  if (!suffix.empty() && !std::string_view(name).ends_with(suffix)) name += suffix;
  if (kind == Kind::counter && !std::string_view(name).ends_with("_total")) name += "_total";
  return name;
}

std::string prometheus_label_name(std::string_view text) {
  if (text.empty()) return {};
  std::string name;
  if (is_digit(text.front())) name += '_';
  append_kept(name, text);
  if (name.starts_with("__") || name == kPrometheusHostLabel || name == kPrometheusJobLabel)
    name.insert(0, "label_");
  return name;
}

}  // namespace fructosa
