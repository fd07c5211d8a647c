// The sensors the dashboards show: every registered one with defaults, an lagent.conf's, and
// lmaster's own.
#include "dashboard.h"

#include "agent_config.h"
#include "master_catalog.h"

namespace fructosa::dashboards {

using sensors::DashboardRow;

std::vector<ShownSensor> all_sensors_with_defaults() {
  std::vector<ShownSensor> shown;
  IniFile none = IniFile::parse("", "(defaults)");
  double interval = parse_section(sensors::common_sensor_options(), none, nullptr).get_real("time_interval");
  for (const auto* definition : sensors::all_sensors())
    shown.push_back({definition->name, definition->catalog, definition->dashboard,
                     parse_section(*definition->options, none, nullptr),
                     // lagent's own sensor runs every 10 s unless configured (agent_config.cpp).
                     definition->name == "lagent" ? 10.0 : interval});
  return shown;
}

std::vector<ShownSensor> sensors_of_agent_config(const std::string& path) {
  agent::AgentConfig config = agent::load_agent_config(path);
  std::vector<ShownSensor> shown;
  for (const auto& sensor : config.sensors)
    shown.push_back({sensor.definition->name, sensor.definition->catalog, sensor.definition->dashboard, sensor.options,
                     sensor.interval});
  return shown;
}

ShownSensor master_sensor() {
  IniFile none = IniFile::parse("", "(defaults)");
  // Every 10 s: the default [lmaster] stats_interval (lmaster/master_config.cpp; a unit test
  // keeps the two equal). make-dashboard does not read lmaster.conf.
  return {master::kMasterSensorName, &master::master_catalog(), {.row = DashboardRow::lmaster},
          parse_section({}, none, nullptr), 10.0};
}

}  // namespace fructosa::dashboards
