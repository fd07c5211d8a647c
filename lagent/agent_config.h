// lagent.conf: [lmaster], [lagent], [logging] and one [sensor:Name] per active sensor; or,
// instead of [lmaster], [Graphite] to send to carbon directly (lagent/carbon_link.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "jobs.h"
#include "pushed_metrics.h"
#include "sensor.h"

namespace fructosa::agent {

struct SensorConfig {
  const sensors::SensorDefinition* definition = nullptr;
  Options options;        // the sensor's own table (without time_interval)
  double interval = 1.0;  // seconds
  std::string where;      // "lagent.conf:12: [sensor:Name]", for errors found later
};

struct AgentConfig {
  std::string path;
  std::string master_host;  // the first lmaster (FrUCToSA's single one)
  int master_port = 7888;
  struct Master {
    std::string host;  // a name, an IPv4 address or a bracketed IPv6 one
    int port = 7888;
    bool operator==(const Master&) const = default;
  };
  std::vector<Master> masters;  // [lmaster] host = a, b:7999, ...: failover order
  // CURVE, Z85 text read from the key files at load; empty server key: CURVE off.
  std::string curve_server_key;
  std::string curve_public_key;
  std::string curve_secret_key;
  std::string host;  // the name samples are attributed to
  sensors::Roots roots;
  double heartbeat_interval = 5.0;
  std::size_t max_unacked_batches = 1000;
  double batch_interval = 0;  // seconds readings may wait to leave with later rounds'
  std::string spool_dir;  // [lagent] spool_dir, made absolute
  std::uint64_t spool_max_bytes = 256ull << 20;
  Options logging;
  sensors::JobSettings jobs;  // [jobs]
  // The push socket (docs/push.md): listened on when a [sensor:User] section exists (`push`).
  bool push = false;
  std::string push_socket;
  bool push_allow_outside_jobs = false;
  sensors::PushLimits push_limits;
  std::vector<SensorConfig> sensors;
  // [Graphite] in a file without [lmaster]: lagent sends to carbon itself, with these options
  // (carbon_link_options()). Empty: to lmaster.
  std::optional<Options> graphite;
  // Accepted but worth a line in the log once logging is set up ("file:line: [section]: ...").
  std::vector<std::string> warnings;
};

const OptionTable& master_link_options();  // [lmaster]
const OptionTable& agent_options();        // [lagent]

// Throws ConfigError naming file, line, section and key.
AgentConfig load_agent_config(const std::string& path);

// This machine's short host name (up to the first dot), as FrUCToSA names nodes.
std::string short_hostname();

// [lmaster] host: "a, b:7999, [::1]:7888" (ports default to `default_port`). Throws ConfigError.
std::vector<AgentConfig::Master> parse_masters(const std::string& text, int default_port);

}  // namespace fructosa::agent
