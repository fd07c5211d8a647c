#include "metric.h"

#include <cstdio>
#include <cstdlib>

namespace fructosa {

std::string_view to_string(Kind kind) { return kind == Kind::counter ? "counter" : "gauge"; }

std::optional<Kind> kind_from_string(std::string_view text) {
  if (text == "gauge") return Kind::gauge;
  if (text == "counter") return Kind::counter;
  return std::nullopt;
}

std::string_view to_string(Unit unit) {
  switch (unit) {
    case Unit::none: return "";
    case Unit::percent: return "percent";
    case Unit::bytes: return "bytes";
    case Unit::seconds: return "seconds";
    case Unit::count: return "count";
    case Unit::hertz_mega: return "MHz";
    case Unit::celsius: return "celsius";
    case Unit::watts: return "watts";
    case Unit::joules: return "joules";
    case Unit::rpm: return "rpm";
    case Unit::timestamp: return "timestamp";
    case Unit::boolean: return "bool";
    case Unit::milliseconds: return "milliseconds";
    case Unit::megabits_per_second: return "Mbit/s";
    case Unit::volts: return "volts";
    case Unit::amperes: return "amperes";
  }
  return "";
}

bool key_matches(std::string_view pattern, std::string_view key) {
  while (!pattern.empty()) {
    if (pattern.front() == '*') {
      // `*` eats one non-empty dotted component of the key.
      auto dot = key.find('.');
      std::string_view component = key.substr(0, dot);
      if (component.empty()) return false;
      key.remove_prefix(component.size());
      pattern.remove_prefix(1);
      continue;
    }
    if (key.empty() || key.front() != pattern.front()) return false;
    key.remove_prefix(1);
    pattern.remove_prefix(1);
  }
  return key.empty();
}

const CatalogEntry* Catalog::find(std::string_view key) const {
  for (const auto& entry : entries_)
    if (key_matches(entry.pattern, key)) return &entry;
  return nullptr;
}

std::string key_component(std::string_view name) {
  std::string component(name);
  for (char& c : component)
    if (c == '.' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
  return component;
}

double python_round(double value, int ndigits) {
  // glibc's printf rounds the exact binary value correctly (ties to even), which is what
  // CPython's round() does through dtoa; going through text keeps both bit-identical.
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", ndigits, value);
  return std::strtod(text, nullptr);
}

double usage_percent(double used, double total) {
  if (total == 0) return 0.0;
  return python_round(used / total * 100, 1);
}

}  // namespace fructosa
