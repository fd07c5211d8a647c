// A sensor made for a test: its definition, its parsed options and the sensor itself.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "config.h"
#include "sensor.h"

namespace fructosa::test {

struct SensorProbe {
  const sensors::SensorDefinition* definition = nullptr;
  // On the heap: the sensor keeps a reference to its options, which must not move with the probe.
  std::unique_ptr<Options> options;
  std::unique_ptr<sensors::Sensor> sensor;
};

// `name` with "key=value" options, on `roots`, with `jobs` as its job discovery (may be null).
inline SensorProbe make_probe(const std::string& name, const sensors::Roots& roots,
                              const std::vector<std::string>& pairs = {}, sensors::JobDirectory* jobs = nullptr) {
  SensorProbe probe;
  probe.definition = sensors::find_sensor(name);
  if (!probe.definition) throw std::runtime_error("no sensor " + name);
  probe.options = std::make_unique<Options>(parse_pairs(*probe.definition->options, pairs, "test"));
  probe.sensor = probe.definition->make(sensors::SensorContext{roots, *probe.options, jobs});
  return probe;
}

}  // namespace fructosa::test
