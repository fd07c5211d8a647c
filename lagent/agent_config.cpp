#include "agent_config.h"

#include <fmt/format.h>
#include <unistd.h>

#include "daemon.h"
#include "logging.h"

namespace fructosa::agent {

const OptionTable& master_link_options() {
  static const OptionTable table{
      {.name = "host", .type = OptionType::text, .default_value = "127.0.0.1",
       .help = "the lmaster to send to (name or address)"},
      {.name = "incoming data port", .type = OptionType::integer, .default_value = "7888",
       .help = "the lmaster's port", .min = 1, .max = 65535},
  };
  return table;
}

const OptionTable& agent_options() {
  static const OptionTable table{
      {.name = "host", .type = OptionType::text, .default_value = "",
       .help = "name this node reports as; empty: the short host name"},
      {.name = "proc_root", .type = OptionType::text, .default_value = "/proc",
       .help = "where procfs is mounted (a fixture tree for tests)", .relative_to_file = true},
      {.name = "sys_root", .type = OptionType::text, .default_value = "/sys",
       .help = "where sysfs is mounted (a fixture tree for tests)", .relative_to_file = true},
      {.name = "heartbeat_interval", .type = OptionType::real, .default_value = "5",
       .help = "seconds between heartbeats when no batch was sent", .min = 0.1, .max = 3600},
      {.name = "max_unacked_batches", .type = OptionType::integer, .default_value = "10000",
       .help = "batches kept in memory until the lmaster acknowledges them; the oldest are dropped (and counted) beyond",
       .min = 1},
  };
  return table;
}

std::string short_hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string host(name);
  return host.substr(0, host.find('.'));
}

AgentConfig load_agent_config(const std::string& path) {
  IniFile file = IniFile::load(path);
  AgentConfig config;
  config.path = path;
  for (const auto& section : file.sections()) {
    const std::string& name = section.name;
    if (name == "lmaster" || name == "lagent" || name == "logging" || name == "jobs") continue;
    if (name.rfind("sensor:", 0) == 0) {
      std::string sensor = name.substr(7);
      const auto* definition = sensors::find_sensor(sensor);
      if (!definition)
        throw ConfigError(fmt::format("{}: unknown sensor '{}' (`lagent sensors` lists them)", file.where(section), sensor));
      Options all = parse_section(sensors::section_options(*definition), file, &section);
      SensorConfig entry{definition, parse_section(*definition->options, file, nullptr), all.get_real("time_interval"),
                         file.where(section)};
      // Keep only the sensor's own options (time_interval is the scheduler's business).
      for (const auto& spec : *definition->options) entry.options.set(spec.name, all.get(spec.name), all.is_set(spec.name));
      config.sensors.push_back(std::move(entry));
      continue;
    }
    throw ConfigError(fmt::format("{}: unknown section (known: [lmaster], [lagent], [logging], [jobs], [sensor:Name])",
                                  file.where(section)));
  }
  // lagent's own health is always reported: every 10 s unless a [sensor:lagent] section says.
  if (!file.find("sensor:lagent")) {
    if (const auto* self = sensors::find_sensor("lagent"))
      config.sensors.push_back({self, parse_section(*self->options, file, nullptr), 10.0, path});
  }
  Options master = parse_section(master_link_options(), file, file.find("lmaster"));
  Options agent = parse_section(agent_options(), file, file.find("lagent"));
  config.logging = parse_section(logging_options(), file, file.find("logging"));
  const IniSection* jobs = file.find("jobs");
  try {
    config.jobs = sensors::job_settings(parse_section(sensors::job_options(), file, jobs));
  } catch (const ConfigError& error) {
    if (!jobs) throw;
    // The settings' own checks concern the regex (or the scheduler that needs one).
    const IniEntry* entry = nullptr;
    for (const auto& candidate : jobs->entries)
      if (candidate.key == "regex" || (!entry && candidate.key == "scheduler")) entry = &candidate;
    throw ConfigError(fmt::format("{}: {}", file.where(*jobs, entry), error.what()));
  }
  config.master_host = master.get_text("host");
  config.master_port = static_cast<int>(master.get_int("incoming data port"));
  config.host = agent.get_text("host").empty() ? short_hostname() : agent.get_text("host");
  config.roots.proc = agent.get_text("proc_root");
  config.roots.sys = agent.get_text("sys_root");
  config.heartbeat_interval = agent.get_real("heartbeat_interval");
  config.max_unacked_batches = static_cast<std::size_t>(agent.get_int("max_unacked_batches"));
  return config;
}

}  // namespace fructosa::agent
