// `lagent probe` and `lagent sensors`: try sensors by hand, list what they offer.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "sensor.h"

namespace fructosa::agent {

struct ProbeRequest {
  std::vector<std::string> sensors;
  double interval = 1.0;           // between the two readings of rate sensors
  sensors::Roots roots;
  std::vector<std::string> options;  // "key=value" (every named sensor with that key) or "Sensor.key=value"
  std::string host;
};

// Prints one JSON object per sensor and line. Throws ConfigError for unknown sensors/options.
int probe(const ProbeRequest& request, std::ostream& out, std::ostream& err);

// Every sensor with its description, options and metric catalog.
void list_sensors(std::ostream& out);

}  // namespace fructosa::agent
