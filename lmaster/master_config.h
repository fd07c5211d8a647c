// lmaster.conf: [lmaster], [logging], and one section per enabled output.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "outputs/output.h"

namespace fructosa::master {

struct OutputConfig {
  std::string section;  // "stdout", "hdf5", "Graphite", "elasticsearch"
  Options options;      // the output's own keys plus output_common_options()
};

struct MasterConfig {
  std::string path;
  std::string bind_host = "127.0.0.1";
  // What [lmaster] host means to ZeroMQ, one bind each: "*", an address ("10.0.0.2",
  // "[::1]") or a network interface ("eth0"); a host name is resolved at load to its addresses.
  std::vector<std::string> listen_addresses{"127.0.0.1"};
  int port = 7888;  // 0: any free port (logged at start; for tests)
  std::string data_dir;                 // the journal (<data_dir>/journal), agents.json, lmaster.ctl
  std::uint64_t journal_max_bytes = 0;  // disk budget of the journal; 0: no journal (acks from memory)
  double stats_interval = 10;           // seconds between two samples of the `lmaster` sensor
  std::uint64_t memory_max = 0;         // resident bytes over which batches are turned away; 0: no bound
  double agent_timeout = 15;            // seconds of silence before an agent counts as down
  std::string metrics_listen;           // HOST:PORT of GET /metrics (lmaster's own health); "": off
  // CURVE (docs/security.md): off by default; on, only agents whose public key is a *.pub file
  // in curve_allowed_keys_dir get in. The master's key pair is read at load (Z85 text).
  bool curve = false;
  std::string curve_secret_key_file;
  std::string curve_allowed_keys_dir;
  std::string curve_public_key;
  std::string curve_secret_key;
  Options logging;
  std::vector<OutputConfig> outputs;
  // Accepted but worth a line in the log once logging is set up ("file:line: [section]: ...").
  std::vector<std::string> warnings;
};

const OptionTable& master_options();  // [lmaster]
// Keys every output section accepts besides its own (queue size, retry backoff).
const OptionTable& output_common_options();

// [lmaster] host as ZeroMQ bind addresses: "*", an IPv4 or (bracketed or not) IPv6 address and
// an interface name stay as they are; a host name becomes every address it resolves to, as
// FrUCToSA's lmaster listened on it. Throws std::runtime_error when the name does not resolve.
std::vector<std::string> listen_addresses(const std::string& host);

// ipc://<data_dir>/lmaster.ctl, where `lmaster ctl` reaches the running master.
std::string control_endpoint(const MasterConfig& config);

// Throws ConfigError naming file, line, section and key.
MasterConfig load_master_config(const std::string& path);

// Creates the output a section describes; throws std::runtime_error (e.g. unwritable file).
std::unique_ptr<Output> make_output(const OutputConfig& config, const MetricInfoStore& infos);

// Every key a section accepts (for tests and help texts); `section` as in lmaster.conf.
OptionTable output_options(std::string_view section);

}  // namespace fructosa::master
