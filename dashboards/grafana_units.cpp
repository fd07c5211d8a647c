// Grafana units: the unit id for a catalog unit shown as it is (gauge) or per second (counter),
// and the scale applied before Grafana formats it.
#include <fmt/format.h>

#include <set>

#include "panel_spec.h"

namespace fructosa::dashboards {

UnitPlan unit_plan(Unit unit, Kind kind) {
  if (kind == Kind::counter) {
    switch (unit) {
      case Unit::bytes: return {"binBps"};
      case Unit::count: return {"cps"};
      case Unit::seconds: return {"percentunit"};  // seconds per second: share of a CPU or of the time
      case Unit::milliseconds: return {"percentunit", 0.001};
      case Unit::joules: return {"watt"};  // joules per second
      default: return {"none"};
    }
  }
  switch (unit) {
    case Unit::none: return {"none"};
    case Unit::percent: return {"percent"};
    case Unit::bytes: return {"bytes"};
    case Unit::seconds: return {"s"};
    case Unit::count: return {"short"};
    case Unit::hertz_mega: return {"rotmhz"};
    case Unit::celsius: return {"celsius"};
    case Unit::watts: return {"watt"};
    case Unit::joules: return {"joule"};
    case Unit::rpm: return {"rotrpm"};
    case Unit::timestamp: return {"dateTimeAsIso", 1000};  // Grafana dates are in milliseconds
    case Unit::boolean: return {"bool"};
    case Unit::milliseconds: return {"ms"};
    case Unit::megabits_per_second: return {"Mbits"};
    case Unit::volts: return {"volt"};
    case Unit::amperes: return {"amp"};
  }
  return {"none"};
}

std::string number_text(double value) { return fmt::format("{}", value); }

std::string_view grafana_unit(Unit unit, Kind kind) { return unit_plan(unit, kind).grafana; }

bool is_grafana_unit(std::string_view id) {
  static const std::set<std::string_view> known{
      "none",  "short",  "percent", "percentunit", "bytes", "binBps",  "cps",  "s",    "ms",  "rotmhz",
      "celsius", "watt", "joule",   "rotrpm",      "dateTimeAsIso", "bool", "Mbits", "volt", "amp"};
  return known.count(id) > 0;
}

}  // namespace fructosa::dashboards
