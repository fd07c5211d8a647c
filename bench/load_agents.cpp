#include "load_agents.h"

#include <cstdio>
#include <random>

#include "graphite_name.h"
#include "wall_clock.h"

namespace fructosa::bench {

void fill_agent(Agent& agent, int index, const Settings& settings, const std::vector<SensorModel>& model) {
  char name[64];
  std::snprintf(name, sizeof name, "%s%05d", settings.host_prefix.c_str(), index);
  agent.host = name;
  std::random_device entropy;
  agent.session = (static_cast<std::uint64_t>(entropy()) << 32 | entropy()) ^ static_cast<std::uint64_t>(index);
  agent.random.state = 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(index) + 1) | 1;
  agent.phase = settings.aligned || settings.interval == 0
                    ? 0
                    : settings.interval * static_cast<double>(index) / settings.agents;
  for (const auto& sensor : model) {
    Sample& sample = agent.samples.emplace_back();
    sample.host = agent.host;
    sample.sensor = sensor.sensor;
    for (std::size_t k = 0; k < sensor.keys.size(); ++k) {
      sample.metrics.push_back({sensor.keys[k], first_value(sensor.values[k], agent.random)});
      if (!settings.plaintext.empty()) {
        // The names lmaster's Graphite output would send (common/graphite_name.h).
        std::string path;
        append_graphite_host(path, agent.host);
        path += '.';
        append_graphite_component(path, sensor.sensor);
        if (!sensor.keys[k].empty()) {
          path += '.';
          append_graphite_dotted(path, sensor.keys[k]);
        }
        path += ' ';
        agent.paths.push_back(std::move(path));
      }
    }
  }
}

std::size_t advance(Agent& agent, const std::vector<SensorModel>& model) {
  std::int64_t now = wall_clock_ns();
  std::size_t points = 0;
  for (std::size_t s = 0; s < agent.samples.size(); ++s) {
    Sample& sample = agent.samples[s];
    // Sensors read one after another in lagent: a few tens of microseconds apart.
    sample.time_ns = now + static_cast<std::int64_t>(s) * 23000;
    for (std::size_t k = 0; k < sample.metrics.size(); ++k)
      sample.metrics[k].value = next_value(model[s].values[k], sample.metrics[k].value, agent.random);
    points += sample.metrics.size();
  }
  return points;
}

}  // namespace fructosa::bench
