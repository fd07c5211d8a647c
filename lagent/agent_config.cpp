#include "agent_config.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "carbon_link.h"
#include "curve.h"
#include "daemon.h"
#include "logging.h"

namespace fructosa::agent {

const OptionTable& master_link_options() {
  static const OptionTable table{
      {.name = "host", .type = OptionType::text, .default_value = "127.0.0.1",
       .help = "the lmaster to send to (name or address), or several separated by commas, each "
               "optionally with :port (a, b:7999, [::1]:7888): the agent sends to the first and "
               "moves to the next when the one it sends to stays silent for 3 heartbeat intervals"},
      {.name = "incoming data port", .type = OptionType::integer, .default_value = "7888",
       .help = "the lmaster's port", .min = 1, .max = 65535},
      {.name = "curve_server_public_key_file", .type = OptionType::text, .default_value = "",
       .help = "turns CURVE on (docs/security.md): the lmaster's public key file, its NAME.pub from "
               "`lmaster keygen` (relative to this file); needs curve_secret_key_file",
       .relative_to_file = true},
      {.name = "curve_server_key", .type = OptionType::text, .default_value = "",
       .help = "the lmaster's public key itself (40 Z85 characters), instead of "
               "curve_server_public_key_file"},
      {.name = "curve_secret_key_file", .type = OptionType::text, .default_value = "",
       .help = "with CURVE: this agent's key pair, a NAME.key from `lmaster keygen` (mode 0600; "
               "relative to this file); its NAME.pub goes into lmaster's curve_allowed_keys_dir",
       .relative_to_file = true},
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
      {.name = "batch_interval", .type = OptionType::real, .default_value = "0",
       .help = "seconds a round's readings may wait to be sent with later rounds' (0: each round is sent at "
               "once); they are spooled at once, so nothing is lost if lagent is killed: only their sending "
               "waits, and they leave together, waking lagent's and lmaster's threads less often",
       .min = 0, .max = 60},
      {.name = "max_unacked_batches", .type = OptionType::integer, .default_value = "1000",
       .help = "batches sent and not yet acknowledged at most (memory); the others wait in the spool",
       .min = 1},
      {.name = "spool_dir", .type = OptionType::text, .default_value = "/var/spool/fructosa/lagent",
       .help = "where batches are kept until lmaster acknowledges them, across restarts (one lagent per "
               "directory); what a full or failing disk refuses waits in memory (32 MiB at most)",
       .relative_to_file = true},
      {.name = "spool_max_bytes", .type = OptionType::integer, .default_value = "268435456",
       .help = "disk the spool may use; beyond it the oldest unacknowledged batches are dropped, counted and logged",
       .min = 65536},
      // docs/push.md: only with a [sensor:User] section, which reports what is pushed.
      {.name = "push_socket", .type = OptionType::text, .default_value = "/run/fructosa/push.sock",
       .help = "with [sensor:User]: the unix socket (mode 0666) through which any process on the node pushes "
               "metrics (`lagent push`), attributed to the job of the process that pushes",
       .relative_to_file = true},
      {.name = "push_allow_outside_jobs", .type = OptionType::boolean, .default_value = "false",
       .help = "take pushes from processes in no job too, as the node's own samples (false: refused and counted)"},
      {.name = "push_max_names_per_job", .type = OptionType::integer, .default_value = "100",
       .help = "distinct names a job may push; lines with further names are dropped and counted", .min = 1,
       .max = 100000},
      {.name = "push_max_lines_per_second", .type = OptionType::integer, .default_value = "1000",
       .help = "lines a job may push per second; the excess is dropped and counted", .min = 1, .max = 100000000},
  };
  return table;
}

// "a, b:7999, [::1]:7888" -> masters; a bad port is a ConfigError.
std::vector<AgentConfig::Master> parse_masters(const std::string& text, int default_port) {
  std::vector<AgentConfig::Master> masters;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    std::string entry = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    auto first = entry.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    entry = entry.substr(first, entry.find_last_not_of(" \t") - first + 1);
    AgentConfig::Master master{entry, default_port};
    auto colon = entry.rfind(':');
    bool bracketed = !entry.empty() && entry.front() == '[';
    if (colon != std::string::npos && (!bracketed || entry[colon - 1] == ']') &&
        (bracketed || entry.find(':') == colon)) {
      std::string port = entry.substr(colon + 1);
      char* end = nullptr;
      long value = std::strtol(port.c_str(), &end, 10);
      if (port.empty() || *end != '\0' || value < 1 || value > 65535)
        throw ConfigError(fmt::format("'{}' has a bad port '{}'", entry, port));
      master = {entry.substr(0, colon), static_cast<int>(value)};
    }
    masters.push_back(master);
  }
  return masters;
}

std::string short_hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string host(name);
  return host.substr(0, host.find('.'));
}

namespace {

// [lmaster] curve_*: the key files are read now, so that a missing or malformed one is a
// configuration error at start (or a reload that keeps the running configuration).
void load_curve_keys(const IniFile& file, const Options& master, AgentConfig& config) {
  const IniSection* section = file.find("lmaster");
  // "file:line: [lmaster] key", also for a key left at its default (then the section's line).
  auto where = [&](std::string_view key) {
    if (!section) return fmt::format("{}: [lmaster] {}", file.path(), key);
    for (const auto& entry : section->entries)
      if (entry.key == key) return file.where(*section, &entry);
    return fmt::format("{} {}", file.where(*section), key);
  };
  const auto& server_file = master.get_text("curve_server_public_key_file");
  const auto& server_key = master.get_text("curve_server_key");
  const auto& secret_file = master.get_text("curve_secret_key_file");
  if (server_file.empty() && server_key.empty()) {
    if (!secret_file.empty())
      throw ConfigError(fmt::format("{}: given without the lmaster's public key "
                                    "(curve_server_public_key_file or curve_server_key)",
                                    where("curve_secret_key_file")));
    return;
  }
  if (!server_file.empty() && !server_key.empty())
    throw ConfigError(fmt::format("{}: give curve_server_key or curve_server_public_key_file, not both",
                                  where("curve_server_key")));
  try {
    curve::require("[lmaster] curve_server_key");
  } catch (const std::runtime_error& error) {
    throw ConfigError(fmt::format("{}: {}", where(server_key.empty() ? "curve_server_public_key_file" : "curve_server_key"),
                                  error.what()));
  }
  if (!server_key.empty()) {
    if (!curve::is_key(server_key))
      throw ConfigError(fmt::format("{}: not a CURVE public key (40 Z85 characters)",
                                    where("curve_server_key")));
    config.curve_server_key = server_key;
  } else {
    try {
      config.curve_server_key = curve::read_public_key(server_file);
    } catch (const std::exception& error) {
      throw ConfigError(fmt::format("{}: {}", where("curve_server_public_key_file"),
                                    error.what()));
    }
  }
  if (secret_file.empty())
    throw ConfigError(fmt::format("{}: missing: CURVE needs this agent's key pair too (`lmaster keygen --name NODE` "
                                  "writes one)",
                                  where("curve_secret_key_file")));
  try {
    auto pair = curve::read_key_pair(secret_file);
    config.curve_public_key = pair.public_key;
    config.curve_secret_key = pair.secret_key;
  } catch (const std::exception& error) {
    throw ConfigError(fmt::format("{}: {}", where("curve_secret_key_file"), error.what()));
  }
}

// What an unknown [sensor:Name] probably meant: a misspelt sensor, or FrUCToSA's Slurm sensor.
std::string unknown_sensor_message(const IniFile& file, const IniSection& section, const std::string& sensor) {
  if (sensor == "SlurmJobs")
    return fmt::format("{}: FrUCToSA's SlurmJobs sensor is replaced by job attribution: `[jobs] scheduler = slurm` "
                       "with [sensor:JobCgroup] and [sensor:JobProc] (README, \"Batch jobs and hardware\")",
                       file.where(section));
  std::vector<std::string> names;
  for (const auto* definition : sensors::all_sensors()) names.push_back(definition->name);
  return fmt::format("{}: unknown sensor '{}'{} (`lagent sensors` lists them)", file.where(section), sensor,
                     did_you_mean(sensor, names));
}

}  // namespace

AgentConfig load_agent_config(const std::string& path) {
  IniFile file = IniFile::load(path);
  AgentConfig config;
  config.path = path;
  for (const auto& section : file.sections()) {
    const std::string& name = section.name;
    if (name == "lmaster" || name == "lagent" || name == "logging" || name == "jobs") continue;
    if (equal_ignoring_case(name, "Graphite")) {  // as lmaster matches it
      // FrUCToSA 0.3's agents sent to carbon themselves: so does lagent, unless an lmaster is named.
      if (file.find("lmaster"))
        config.warnings.push_back(fmt::format("{}: ignored: lagent sends to the lmaster of [lmaster]; [Graphite] "
                                              "belongs in lmaster.conf",
                                              file.where(section)));
      else
        config.graphite = parse_section(carbon_link_options(), file, &section);
      continue;
    }
    if (name.rfind("sensor:", 0) == 0) {
      std::string sensor = name.substr(7);
      const auto* definition = sensors::find_sensor(sensor);
      if (!definition) throw ConfigError(unknown_sensor_message(file, section, sensor));
      Options all = parse_section(sensors::section_options(*definition), file, &section);
      SensorConfig entry{definition, parse_section(*definition->options, file, nullptr), all.get_real("time_interval"),
                         file.where(section)};
      // Keep only the sensor's own options (time_interval is the scheduler's business).
      for (const auto& spec : *definition->options) entry.options.set(spec.name, all.get(spec.name), all.is_set(spec.name));
      config.sensors.push_back(std::move(entry));
      continue;
    }
    if (auto note = legacy_section_note(name); !note.empty()) {
      config.warnings.push_back(fmt::format("{}: ignored: {}", file.where(section), note));
      continue;
    }
    throw ConfigError(fmt::format("{}: unknown section{} (known: [lmaster], [lagent], [logging], [jobs], [sensor:Name])",
                                  file.where(section), did_you_mean(name, {"lmaster", "lagent", "logging", "jobs"})));
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
  config.master_port = static_cast<int>(master.get_int("incoming data port"));
  {
    const IniSection* link = file.find("lmaster");
    const IniEntry* host_entry = nullptr;
    if (link)
      for (const auto& entry : link->entries)
        if (entry.key == "host") host_entry = &entry;
    auto where = [&] { return link ? file.where(*link, host_entry) : path; };
    try {
      config.masters = parse_masters(master.get_text("host"), config.master_port);
    } catch (const ConfigError& error) {
      throw ConfigError(fmt::format("{}: {}", where(), error.what()));
    }
    if (config.masters.empty()) throw ConfigError(fmt::format("{}: names no lmaster", where()));
  }
  config.master_host = config.masters.front().host;
  load_curve_keys(file, master, config);
  config.host = agent.get_text("host").empty() ? short_hostname() : agent.get_text("host");
  config.roots.proc = agent.get_text("proc_root");
  config.roots.sys = agent.get_text("sys_root");
  config.heartbeat_interval = agent.get_real("heartbeat_interval");
  config.max_unacked_batches = static_cast<std::size_t>(agent.get_int("max_unacked_batches"));
  config.batch_interval = agent.get_real("batch_interval");
  config.spool_dir = agent.get_text("spool_dir");
  config.spool_max_bytes = static_cast<std::uint64_t>(agent.get_int("spool_max_bytes"));
  config.push_socket = agent.get_text("push_socket");
  config.push_allow_outside_jobs = agent.get_bool("push_allow_outside_jobs");
  config.push_limits.max_names_per_job = static_cast<std::size_t>(agent.get_int("push_max_names_per_job"));
  config.push_limits.max_lines_per_second = static_cast<std::uint32_t>(agent.get_int("push_max_lines_per_second"));
  config.push = std::any_of(config.sensors.begin(), config.sensors.end(),
                            [](const SensorConfig& sensor) { return sensor.definition->name == "User"; });
  if (config.push && config.push_socket.empty())
    throw ConfigError(fmt::format("{}: [lagent] push_socket is empty: [sensor:User] needs a socket to listen on", path));
  if (!config.push && agent.is_set("push_socket"))
    config.warnings.push_back(fmt::format("{}: [lagent] push_socket is set, but without a [sensor:User] section "
                                          "lagent does not listen on it",
                                          path));
  if (config.spool_dir.empty()) {  // only a written "spool_dir =" can be empty
    const IniSection* section = file.find("lagent");
    const IniEntry* entry = nullptr;
    for (const auto& candidate : section->entries)
      if (candidate.key == "spool_dir") entry = &candidate;
    throw ConfigError(fmt::format("{}: must name a directory (lagent keeps unacknowledged batches there)",
                                  file.where(*section, entry)));
  }
  return config;
}

}  // namespace fructosa::agent
