// carbon storage schemas: a whisper step per sensor interval, so that Graphite's rates are exact.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "graphite_name.h"
#include "targets.h"

namespace fructosa::dashboards {

int storage_step(double interval) {
  // Readings fall on multiples of the interval: a step that is a whole number of intervals
  // keeps, in each point, the reading at the same place of the step.
  for (int n = 1; n <= 1000; ++n) {
    double span = n * interval;
    double whole = std::round(span);
    if (whole >= 1 && std::abs(span - whole) < 1e-6 * std::max(1.0, span)) return static_cast<int>(whole);
  }
  return static_cast<int>(std::max(1.0, std::ceil(interval)));
}

namespace {

// The archives after the first: the step for a day, then minutes for 30 days, hours for two
// years (whisper wants each precision a multiple of the one before). Suggestions: the first
// archive is what makes rates exact, the rest a site changes at will.
std::string retentions(int step) {
  struct Tier {
    long precision;  // at least this coarse
    const char* period;
  };
  static const Tier tiers[] = {{1, "1d"}, {60, "30d"}, {3600, "2y"}};
  std::vector<std::pair<long, std::string>> archives;
  for (const auto& tier : tiers) {
    long previous = archives.empty() ? step : archives.back().first;
    long precision = std::max<long>(tier.precision, previous);
    precision = (precision + previous - 1) / previous * previous;
    if (!archives.empty() && archives.back().first == precision)
      archives.back().second = tier.period;  // the same precision kept longer
    else
      archives.push_back({precision, tier.period});
  }
  std::string text;
  for (const auto& [precision, period] : archives)
    text += fmt::format("{}{}s:{}", text.empty() ? "" : ",", precision, period);
  return text;
}

}  // namespace

std::string storage_schemas(const Settings& settings) {
  std::vector<ShownSensor> sensors = settings.sensors;
  sensors.push_back(master_sensor());
  std::map<int, std::set<std::string>> by_step;
  for (const auto& sensor : sensors)
    by_step[storage_step(sensor.interval)].insert(graphite_component(sensor.name));
  // Components hold only [A-Za-z0-9_:#-] (graphite_name.h): literals in carbon's Python regex,
  // and nothing its ConfigParser would take for an interpolation ('%').
  std::string prefix;
  for (const auto& part : prefix_components(settings.prefix)) prefix += part + "\\.";
  std::string text =
      "# carbon storage-schemas.conf rules for fructosa (make-dashboard --storage-schemas): the paths of\n"
      "# each sensor, [prefix.]<host>.<Sensor>[.<key>] and [prefix.]jobs.<job>.<host>.<Sensor>[.<key>],\n"
      "# are stored first at its time_interval (lmaster's own sensor: at the default stats_interval,\n"
      "# 10 s), in whole seconds, so that Graphite's rates are right and coarser archives fill up.\n"
      "# Carbon uses the first rule that matches a new metric: put these above the catch-all rules.\n"
      "# They apply to new whisper files only (whisper-resize.py changes existing ones).\n";
  for (const auto& [step, names] : by_step) {
    std::string alternatives;
    for (const auto& name : names) alternatives += (alternatives.empty() ? "" : "|") + name;
    text += fmt::format("\n[fructosa_{}s]\npattern = ^{}(jobs\\.[0-9]+\\.)?[^.]+\\.({})(\\.|$)\n", step, prefix,
                        alternatives);
    text += fmt::format("retentions = {}\n", retentions(step));
  }
  return text;
}

}  // namespace fructosa::dashboards
