#include "probe.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "jobs.h"
#include "wall_clock.h"

namespace fructosa::agent {
namespace {

// Integral values print as integers ("total": 25165824000, not 25165824000.0).
nlohmann::ordered_json number(double value) {
  if (std::isfinite(value) && value == std::trunc(value) && std::fabs(value) < 9.0e15)
    return static_cast<std::int64_t>(value);
  if (!std::isfinite(value)) return nullptr;
  return value;
}

nlohmann::ordered_json to_json(const Sample& sample) {
  nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
  for (const auto& metric : sample.metrics) metrics[metric.key] = number(metric.value);
  nlohmann::ordered_json line{{"host", sample.host},
                      {"sensor", sample.sensor},
                      {"time", static_cast<double>(sample.time_ns) / 1e9},
                      {"job", sample.job},
                      {"metrics", std::move(metrics)}};
  if (!sample.labels.empty()) {
    nlohmann::ordered_json labels = nlohmann::ordered_json::object();
    for (const auto& label : sample.labels) labels[label.key] = label.value;
    line["labels"] = std::move(labels);
  }
  return line;
}

}  // namespace

int probe(const ProbeRequest& request, std::ostream& out, std::ostream& err) {
  struct Probed {
    const sensors::SensorDefinition* definition;
    std::vector<std::string> pairs;
    std::unique_ptr<sensors::Sensor> sensor;
    std::vector<Sample> samples;
    bool done = false;
    std::string unavailable;
  };
  std::vector<Probed> probed;
  for (const auto& name : request.sensors) {
    const auto* definition = sensors::find_sensor(name);
    if (!definition) throw ConfigError(fmt::format("unknown sensor '{}' (`lagent sensors` lists them)", name));
    probed.push_back({definition, {}, nullptr, {}, false, {}});
  }
  // Route each -o to the sensors it concerns ("jobs.KEY" to job discovery, as [jobs] would).
  std::vector<std::string> job_pairs;
  for (const auto& pair : request.options) {
    auto eq = pair.find('=');
    std::string key = pair.substr(0, eq);
    if (key.rfind("jobs.", 0) == 0) {
      job_pairs.push_back(pair.substr(5));
      continue;
    }
    bool used = false;
    for (auto& entry : probed) {
      std::string prefix = entry.definition->name + ".";
      if (key.rfind(prefix, 0) == 0) {
        entry.pairs.push_back(pair.substr(prefix.size()));
        used = true;
      } else if (key.find('.') == std::string::npos) {
        for (const auto& spec : *entry.definition->options)
          if (spec.name == key) {
            entry.pairs.push_back(pair);
            used = true;
          }
      }
    }
    if (!used) throw ConfigError(fmt::format("-o {}: no probed sensor has the option '{}'", pair, key));
  }
  sensors::JobSettings job_settings;
  try {
    job_settings = sensors::job_settings(parse_pairs(sensors::job_options(), job_pairs, "-o jobs."));
  } catch (const ConfigError& error) {
    throw ConfigError(fmt::format("-o jobs.*: {}", error.what()));
  }
  sensors::JobDirectory jobs(job_settings, request.roots);
  std::vector<Options> options;
  options.reserve(probed.size());
  for (auto& entry : probed) {
    options.push_back(parse_pairs(*entry.definition->options, entry.pairs, "-o for " + entry.definition->name));
    entry.sensor = entry.definition->make(sensors::SensorContext{request.roots, options.back(), &jobs});
  }
  // Rate sensors need two readings: take every first reading, wait once, take the second.
  for (int round = 0; round < 2; ++round) {
    bool waiting = false;
    for (auto& entry : probed) {
      if (entry.done) continue;
      entry.samples.clear();
      sensors::SampleWriter writer(entry.samples, request.host, entry.definition->name, wall_clock_ns());
      try {
        entry.done = entry.sensor->sample(writer);
      } catch (const sensors::SensorUnavailable& why) {
        entry.unavailable = why.what();
        entry.done = true;
      }
      waiting |= !entry.done;
    }
    if (!waiting) break;
    if (round == 0) std::this_thread::sleep_for(std::chrono::duration<double>(request.interval));
  }
  int status = 0;
  for (const auto& entry : probed) {
    if (!entry.unavailable.empty()) {
      err << fmt::format("{}: unavailable: {}\n", entry.definition->name, entry.unavailable);
      status = 1;
      continue;
    }
    auto running = jobs.snapshot();
    for (const auto& sample : entry.samples) {
      auto line = to_json(sample);
      if (sample.job == 0 && !running->involved_jobs.empty()) line["labels"]["involved_jobs"] = running->involved_jobs;
      out << line.dump() << "\n";
    }
  }
  return status;
}

void list_sensors(std::ostream& out) {
  out << "[jobs]\n  Job discovery shared by the per-job sensors (JobCgroup, JobProc, Taskstats, PerfHW, "
         "NvidiaGPU);\n  node samples carry the label involved_jobs while jobs run\n  options:\n";
  out << describe_options(sensors::job_options(), "    ") << "\n";
  for (const auto* sensor : sensors::all_sensors()) {
    out << fmt::format("[sensor:{}]\n  {}\n  options:\n", sensor->name, sensor->description);
    out << describe_options(sensors::section_options(*sensor), "    ");
    out << "  metrics (key, unit, kind, description):\n";
    for (const auto& entry : sensor->catalog->entries())
      out << fmt::format("    {:<14} {:<9} {:<8} {}\n", entry.pattern, to_string(entry.unit).empty() ? "-" : to_string(entry.unit),
                         to_string(entry.kind), entry.description);
    out << "\n";
  }
}

}  // namespace fructosa::agent
