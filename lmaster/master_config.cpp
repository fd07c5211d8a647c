#include "master_config.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>

#include <filesystem>
#include <iostream>

#include "curve.h"
#include "daemon.h"
#include "durable_file.h"
#include "localhost_name.h"
#include "logging.h"
#include "metrics_exposition.h"
#include "outputs/elasticsearch_output.h"
#include "outputs/graphite_output.h"
#include "outputs/hdf5_output.h"
#include "outputs/prometheus_output.h"
#include "outputs/stdout_output.h"

namespace fructosa::master {
namespace {

struct OutputKind {
  std::string_view section;  // matched case-insensitively: FrUCToSA wrote [Graphite]
  const OptionTable& (*own_options)();
  std::unique_ptr<Output> (*make)(const Options& options, const MetricInfoStore& infos);
};

const OptionTable& no_options() {
  static const OptionTable table;
  return table;
}

const OutputKind kOutputKinds[] = {
    {"stdout", &no_options,
     [](const Options&, const MetricInfoStore& infos) -> std::unique_ptr<Output> {
       return std::make_unique<StdoutOutput>(std::cout, infos);
     }},
    {"hdf5", &Hdf5Output::hdf5_options,
     [](const Options& options, const MetricInfoStore& infos) -> std::unique_ptr<Output> {
       // A fresh install has no data directory yet: make it, as systemd's StateDirectory would.
       auto directory = std::filesystem::path(options.get_text("path")).parent_path();
       if (!directory.empty()) create_directories_durably(directory);
       return std::make_unique<Hdf5Output>(options, infos);
     }},
    {"Graphite", &graphite_options, &make_graphite_output},
    {"elasticsearch", &elasticsearch_options, &make_elasticsearch_output},
    {"prometheus", &prometheus_options, &make_prometheus_output},
};

const OutputKind* find_output_kind(std::string_view section) {
  for (const auto& kind : kOutputKinds)
    if (equal_ignoring_case(kind.section, section)) return &kind;
  return nullptr;
}

// An output's own keys followed by the keys every output has.
OptionTable full_table(const OutputKind& kind) {
  OptionTable table = kind.own_options();
  const auto& common = output_common_options();
  table.insert(table.end(), common.begin(), common.end());
  return table;
}

}  // namespace

const OptionTable& output_common_options() {
  static const OptionTable table{
      {.name = "queue_max_points", .type = OptionType::integer, .default_value = "1000000",
       .help = "points this output may hold in memory while it is behind; beyond them it reads them "
               "back from the journal under [lmaster] data_dir when it catches up ([hdf5]: 200000 "
               "unless set, as its flushes and each rotation's compression hold it for seconds)",
       .min = 1000},
      {.name = "retry_max_interval", .type = OptionType::real, .default_value = "30",
       .help = "longest wait in seconds between two tries after a failure (the wait starts at 0.5 s "
               "and doubles)",
       .min = 0.1},
  };
  return table;
}

const OptionTable& master_options() {
  static const OptionTable table{
      {.name = "host", .type = OptionType::text, .default_value = "127.0.0.1",
       .help = "where to listen for agents: * (every interface), an address, a network interface, or "
               "a host name (every address it resolves to, logged at start)"},
      {.name = "incoming data port", .type = OptionType::integer, .default_value = "7888",
       .help = "port to listen on for agents; 0 picks a free one and logs it", .min = 0, .max = 65535},
      {.name = "data_dir", .type = OptionType::text, .default_value = "/var/lib/fructosa",
       .help = "directory of the journal (every accepted batch, durable before it is acknowledged), "
               "the agent table and the `lmaster ctl` socket (relative to this file)",
       .relative_to_file = true},
      {.name = "journal_max_bytes", .type = OptionType::integer, .default_value = "1073741824",
       .help = "disk budget of the journal: records every output has delivered are deleted; past "
               "the budget the oldest go even if an output has not delivered them (counted in "
               "<output>.dropped and logged); 0: no journal, batches are acknowledged from memory "
               "and lost if lmaster dies",
       .min = 0},
      {.name = "memory_max", .type = OptionType::integer, .default_value = "0",
       .help = "resident memory (bytes) lmaster may use: over it, new batches are turned away unacknowledged "
               "(agents keep them in their spools) until it is under 90 % again, then asked for; 0: no bound. "
               "Leave room for the outputs' queue_max_points",
       .min = 0},
      {.name = "stats_interval", .type = OptionType::real, .default_value = "10",
       .help = "seconds between two samples of the master's own sensor `lmaster` (per-output "
               "counters sent, retried, dropped, queued)",
       .min = 0.1},
      {.name = "agent_timeout", .type = OptionType::real, .default_value = "15",
       .help = "seconds without any message (batch or heartbeat) after which an agent counts as "
               "down: a log line, agent.<host>.up = 0 in the lmaster sensor, and `lmaster "
               "status` says so (agents send a heartbeat every 5 s when idle)",
       .min = 1},
      {.name = "metrics_listen", .type = OptionType::text, .default_value = "",
       .help = "HOST:PORT where lmaster serves its own health (agents up, points received, each "
               "output's sent/retried/dropped/queued, journal bytes) as Prometheus metrics on "
               "GET /metrics for a scrape, e.g. 127.0.0.1:9108; empty: off"},
      {.name = "curve", .type = OptionType::boolean, .default_value = "false",
       .help = "encrypt and authenticate the agents' connections with ZeroMQ CURVE: only agents whose "
               "public key is in curve_allowed_keys_dir get in (docs/security.md)"},
      {.name = "curve_secret_key_file", .type = OptionType::text,
       .default_value = "/etc/fructosa/curve/lmaster.key",
       .help = "with curve: this master's key pair, as `lmaster keygen --name lmaster` writes it "
               "(relative to this file)",
       .relative_to_file = true},
      {.name = "curve_allowed_keys_dir", .type = OptionType::text, .default_value = "/etc/fructosa/curve/agents",
       .help = "with curve: directory of the agents' public keys (their NAME.pub files) that may "
               "connect; read again when its files change (relative to this file)",
       .relative_to_file = true},
  };
  return table;
}

namespace {

// [lmaster] curve = true: the key pair and the allow-list directory must be usable now, so that
// a typo is a configuration error at start rather than a master no agent can reach.
void load_curve_keys(const IniFile& file, MasterConfig& config) {
  const IniSection* section = file.find("lmaster");
  // "file:line: [lmaster] key", also for a key left at its default (then the section's line).
  auto where = [&](std::string_view key) {
    if (!section) return fmt::format("{}: [lmaster] {}", file.path(), key);
    for (const auto& entry : section->entries)
      if (entry.key == key) return file.where(*section, &entry);
    return fmt::format("{} {}", file.where(*section), key);
  };
  try {
    curve::require("[lmaster] curve = true");
  } catch (const std::runtime_error& error) {
    throw ConfigError(fmt::format("{}: {}", where("curve"), error.what()));
  }
  try {
    auto pair = curve::read_key_pair(config.curve_secret_key_file);
    config.curve_public_key = pair.public_key;
    config.curve_secret_key = pair.secret_key;
  } catch (const std::exception& error) {
    throw ConfigError(fmt::format("{}: {} (`lmaster keygen` writes a key pair)",
                                  where("curve_secret_key_file"), error.what()));
  }
  std::error_code error;
  if (!std::filesystem::is_directory(config.curve_allowed_keys_dir, error))
    throw ConfigError(fmt::format("{}: {} is not a directory (it holds the *.pub keys of "
                                  "the agents that may connect)",
                                  where("curve_allowed_keys_dir"), config.curve_allowed_keys_dir));
}

}  // namespace

std::vector<std::string> listen_addresses(const std::string& host) {
  if (host == "*") return {host};
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return {host};
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') return {host};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) return {"[" + host + "]"};
  // ZeroMQ reads a name in a bind address as a network interface: keep that meaning for the
  // names that are interfaces here, and resolve every other name.
  if (::if_nametoindex(host.c_str()) != 0) return {host};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int error = getaddrinfo_localhost_aware(host.c_str(), nullptr, &hints, &found); error != 0)
    throw std::runtime_error(fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(error)));
  std::vector<std::string> addresses;
  for (auto* entry = found; entry; entry = entry->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    std::string address;
    if (entry->ai_family == AF_INET &&
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(entry->ai_addr)->sin_addr, text, sizeof text))
      address = text;
    else if (entry->ai_family == AF_INET6 &&
             ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(entry->ai_addr)->sin6_addr, text, sizeof text))
      address = fmt::format("[{}]", text);
    if (!address.empty() && std::find(addresses.begin(), addresses.end(), address) == addresses.end())
      addresses.push_back(address);
  }
  ::freeaddrinfo(found);
  if (addresses.empty()) throw std::runtime_error(fmt::format("'{}' resolves to no IPv4 or IPv6 address", host));
  return addresses;
}

std::string control_endpoint(const MasterConfig& config) {
  return "ipc://" + (std::filesystem::path(config.data_dir) / "lmaster.ctl").string();
}

MasterConfig load_master_config(const std::string& path) {
  IniFile file = IniFile::load(path);
  MasterConfig config;
  config.path = path;
  for (const auto& section : file.sections()) {
    if (section.name == "lmaster" || section.name == "logging") continue;
    // fructosa-report's rules (report/rules.h): read by the report, not by lmaster.
    if (section.name == "report") continue;
    const OutputKind* kind = find_output_kind(section.name);
    if (!kind) {
      if (auto note = legacy_section_note(section.name); !note.empty()) {
        config.warnings.push_back(fmt::format("{}: ignored: {}", file.where(section), note));
        continue;
      }
      throw ConfigError(fmt::format(
          "{}: unknown section{} (known: [lmaster], [logging], [stdout], [hdf5], [Graphite], [elasticsearch], "
          "[prometheus], [report])",
          file.where(section),
          did_you_mean(section.name, {"lmaster", "logging", "stdout", "hdf5", "Graphite", "elasticsearch", "prometheus", "report"})));
    }
    for (const auto& other : config.outputs)
      if (other.section == kind->section)
        throw ConfigError(fmt::format("{}: [{}] is already enabled above", file.where(section), kind->section));
    OutputConfig output{std::string(kind->section), parse_section(full_table(*kind), file, &section)};
    config.outputs.push_back(std::move(output));
  }
  Options master = parse_section(master_options(), file, file.find("lmaster"));
  config.bind_host = master.get_text("host");
  try {
    config.listen_addresses = listen_addresses(config.bind_host);
  } catch (const std::runtime_error& error) {
    const IniSection* section = file.find("lmaster");
    const IniEntry* entry = nullptr;
    if (section)
      for (const auto& candidate : section->entries)
        if (candidate.key == "host") entry = &candidate;
    throw ConfigError(fmt::format("{}: {}", section ? file.where(*section, entry) : path + ": [lmaster] host",
                                  error.what()));
  }
  config.port = static_cast<int>(master.get_int("incoming data port"));
  config.data_dir = master.get_text("data_dir");
  config.journal_max_bytes = static_cast<std::uint64_t>(master.get_int("journal_max_bytes"));
  config.stats_interval = master.get_real("stats_interval");
  config.memory_max = static_cast<std::uint64_t>(master.get_int("memory_max"));
  config.agent_timeout = master.get_real("agent_timeout");
  config.metrics_listen = master.get_text("metrics_listen");
  if (std::string host; !config.metrics_listen.empty()) {
    unsigned port = 0;
    if (!split_listen_address(config.metrics_listen, host, port)) {
      const IniSection* section = file.find("lmaster");
      const IniEntry* entry = nullptr;
      for (const auto& candidate : section->entries)
        if (candidate.key == "metrics_listen") entry = &candidate;
      throw ConfigError(fmt::format("{}: '{}' is not HOST:PORT (127.0.0.1:9108, [::1]:9108)",
                                    file.where(*section, entry), config.metrics_listen));
    }
  }
  config.curve = master.get_bool("curve");
  config.curve_secret_key_file = master.get_text("curve_secret_key_file");
  config.curve_allowed_keys_dir = master.get_text("curve_allowed_keys_dir");
  if (config.curve) load_curve_keys(file, config);
  config.logging = parse_section(logging_options(), file, file.find("logging"));
  return config;
}

std::unique_ptr<Output> make_output(const OutputConfig& config, const MetricInfoStore& infos) {
  const OutputKind* kind = find_output_kind(config.section);
  if (!kind) throw std::logic_error("no output for section " + config.section);
  return kind->make(config.options, infos);
}

OptionTable output_options(std::string_view section) {
  const OutputKind* kind = find_output_kind(section);
  if (!kind) throw std::logic_error("no output for section " + std::string(section));
  return full_table(*kind);
}

}  // namespace fructosa::master
