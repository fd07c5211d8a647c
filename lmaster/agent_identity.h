// Which agents lmaster lets speak, beyond the CURVE handshake (docs/security.md, "Identity" and
// "Bounds on unauthenticated work"):
// - With CURVE, a key speaks only for the hosts it covers: its name (the .pub file's stem, which
//   the ZAP handler returns as the connection's User-Id), or, when its .pub file has a line
//   `hosts = PATTERN[, PATTERN...]`, the hosts those shell patterns match. A hello that names
//   another host is refused: nothing of that connection is accepted, the agent is told why (a
//   resync carrying the reason, at most once per kAnswerRefusedEvery) and the refusal is logged
//   with the key's name, the host claimed and the peer's address (RefusalLog).
// - lmaster knows at most kMaxPeers connections at once; a connection that never said hello is
//   forgotten kForgetHellolessPeerAfter after its first message.
// Without CURVE nothing is checked: any hello is taken as sent.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "refusal_log.h"

namespace fructosa::master {

// The hosts an allow-listed key may send as.
struct KeyHosts {
  std::string name;                   // its .pub file's stem: node01.pub -> node01
  std::vector<std::string> patterns;  // its `hosts =` line; empty: the key speaks for `name`
};

// "node[0-9][0-9], gpu*" -> {"node[0-9][0-9]", "gpu*"}. Throws std::invalid_argument for an
// empty list, an empty pattern, or one with blanks in it (patterns are separated by commas).
std::vector<std::string> parse_host_patterns(std::string_view value);

// The patterns of a .pub file's `hosts = ...` line, nothing without one (curve::read_key_file
// skips that line). Throws std::runtime_error "PATH:LINE: ..." for a bad or repeated line.
std::optional<std::vector<std::string>> read_host_patterns(const std::string& path);

// Whether `key` may send as `host`. Names compare without regard to ASCII case (as DNS names
// do), and a name or pattern matches either the whole host or its first label, so that key
// node01 (or `hosts = node0*`) covers node01 and node01.cluster. Patterns are fnmatch(3)'s.
bool speaks_for(const KeyHosts& key, std::string_view host);

// What a key speaks for, for log lines: "node01" or "hosts = node0*, gpu*".
std::string describe_hosts(const KeyHosts& key);

// The name of the CURVE key a message's connection was let in with (libzmq's "User-Id" message
// property, from the ZAP handler's reply); empty without CURVE. Valid while `message` is.
std::string_view key_name_of(const zmq::message_t& message);

// The address a message came from (libzmq's "Peer-Address"), or "unknown peer".
std::string peer_address_of(const zmq::message_t& message);

// A connection whose hello was refused: why, and when it was last told.
struct HelloRefusal {
  std::string reason;  // empty: not refused
  std::optional<std::chrono::steady_clock::time_point> told;

  explicit operator bool() const { return !reason.empty(); }
  // Whether the connection is due to be told (again): at most once per kAnswerRefusedEvery, so
  // that an agent retrying is answered without a flood. Notes that it is told now.
  bool tell_now(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
};

class AgentAdmission {
 public:
  using Clock = std::chrono::steady_clock;
  // Connections lmaster keeps state for at once (an agent has one; one that reconnected leaves
  // the old one behind until it is forgotten).
  static constexpr std::size_t kMaxPeers = 65536;
  static constexpr auto kForgetHellolessPeerAfter = std::chrono::seconds(10);
  static constexpr auto kAnswerRefusedEvery = std::chrono::seconds(60);

  // A key name's current entry in the allow-list (ZapHandler::key_hosts): nothing when no key
  // of that name is allowed now.
  using Lookup = std::function<std::optional<KeyHosts>(const std::string& key_name)>;

  explicit AgentAdmission(RefusalLog::Writer write = {}) : log_(write ? RefusalLog(std::move(write)) : RefusalLog()) {}

  // CURVE is on: from now on hellos are checked against the keys `lookup` finds.
  void check_keys_with(Lookup lookup) { lookup_ = std::move(lookup); }

  // Why a connection from `address`, let in with the key named `key_name`, may not send as
  // `host` (the text the agent is sent); nothing when it may. A refusal is logged.
  std::optional<std::string> refuse_hello(const std::string& key_name, const std::string& host,
                                          const std::string& address, Clock::time_point now = Clock::now());

  // A new connection from `address` while kMaxPeers are known: its messages are dropped. Logged.
  void refuse_peer_over_limit(const std::string& address, Clock::time_point now = Clock::now());

  // Writes the refusal lines held back for a minute (call about once a second).
  void flush_log(Clock::time_point now = Clock::now()) { log_.flush(now); }

 private:
  Lookup lookup_;
  RefusalLog log_;
};

}  // namespace fructosa::master
