#include "agent_identity.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "config.h"

namespace fructosa::master {
namespace {

std::string_view trim(std::string_view text) {
  auto start = text.find_first_not_of(" \t\r");
  if (start == std::string_view::npos) return {};
  auto end = text.find_last_not_of(" \t\r");
  return text.substr(start, end - start + 1);
}

bool glob_matches(const std::string& pattern, std::string_view name) {
  return ::fnmatch(pattern.c_str(), std::string(name).c_str(), FNM_CASEFOLD) == 0;
}

}  // namespace

std::vector<std::string> parse_host_patterns(std::string_view value) {
  std::vector<std::string> patterns;
  for (;;) {
    auto comma = value.find(',');
    std::string_view pattern = trim(value.substr(0, comma));
    if (pattern.empty())
      throw std::invalid_argument(patterns.empty() && comma == std::string_view::npos
                                      ? "no host pattern (expected e.g. `hosts = node[0-9][0-9], gpu*`)"
                                      : "an empty host pattern (between two commas, or after the last one)");
    if (pattern.find_first_of(" \t") != std::string_view::npos)
      throw std::invalid_argument(fmt::format("'{}' is not one host pattern: separate patterns with commas", pattern));
    patterns.emplace_back(pattern);
    if (comma == std::string_view::npos) return patterns;
    value.remove_prefix(comma + 1);
  }
}

std::optional<std::vector<std::string>> read_host_patterns(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  std::optional<std::vector<std::string>> patterns;
  int seen = 0;
  std::string raw;
  for (int number = 1; std::getline(in, raw); ++number) {
    std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    auto equals = line.find('=');
    if (equals == std::string_view::npos || trim(line.substr(0, equals)) != "hosts") continue;
    if (seen)
      throw std::runtime_error(fmt::format("{}:{}: hosts given again (first on line {})", path, number, seen));
    std::string_view value = trim(line.substr(equals + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    try {
      patterns = parse_host_patterns(value);
    } catch (const std::invalid_argument& error) {
      throw std::runtime_error(fmt::format("{}:{}: hosts: {}", path, number, error.what()));
    }
    seen = number;
  }
  if (in.bad()) throw std::runtime_error(fmt::format("{}: read error", path));
  return patterns;
}

bool speaks_for(const KeyHosts& key, std::string_view host) {
  // fnmatch() reads C strings: a NUL inside a host name would hide what follows it.
  if (host.empty() || host.find('\0') != std::string_view::npos) return false;
  std::string_view label = host.substr(0, host.find('.'));
  if (key.patterns.empty()) return equal_ignoring_case(host, key.name) || equal_ignoring_case(label, key.name);
  for (const auto& pattern : key.patterns)
    if (glob_matches(pattern, host) || glob_matches(pattern, label)) return true;
  return false;
}

std::string describe_hosts(const KeyHosts& key) {
  if (key.patterns.empty()) return key.name;
  std::string text = "hosts = ";
  for (std::size_t i = 0; i < key.patterns.size(); ++i) text += (i ? ", " : "") + key.patterns[i];
  return text;
}

std::string_view key_name_of(const zmq::message_t& message) {
  // zmq_msg_gets(), not message_t::gets(): a property a connection lacks is not an error here.
  const char* name = zmq_msg_gets(message.handle(), "User-Id");
  return name ? name : "";
}

std::string peer_address_of(const zmq::message_t& message) {
  const char* address = zmq_msg_gets(message.handle(), "Peer-Address");
  return address ? address : "unknown peer";
}

std::optional<std::string> AgentAdmission::refuse_hello(const std::string& key_name, const std::string& host,
                                                        const std::string& address, Clock::time_point now) {
  if (!lookup_) return std::nullopt;  // no CURVE: a hello is taken as sent
  std::optional<KeyHosts> key;
  if (!key_name.empty()) key = lookup_(key_name);
  if (key && speaks_for(*key, host)) return std::nullopt;
  std::string why;
  if (key_name.empty())
    why = "its connection carries no CURVE key name";  // lmaster's ZAP handler always gives one
  else if (!key)
    why = fmt::format("its CURVE key {} is no longer in the allow-list", key_name);
  else if (key->patterns.empty())
    why = fmt::format("its CURVE key {} speaks for host {} only (give that node its own key, or list its name in a "
                      "`hosts =` line of {}.pub)",
                      key_name, key_name, key_name);
  else
    why = fmt::format("its CURVE key {} speaks for {} only ({}.pub)", key_name, describe_hosts(*key), key_name);
  log_.refuse(key_name + '\n' + host,
              fmt::format("CURVE: refused a hello from {} as host {}: {}; nothing of that connection is accepted",
                          address, host, why),
              now);
  return fmt::format("lmaster refuses this agent as host {}: {}; it accepts nothing from it until then", host, why);
}

void AgentAdmission::refuse_peer_over_limit(const std::string& address, Clock::time_point now) {
  log_.refuse("\npeer limit",
              fmt::format("refused a new connection from {}: lmaster already keeps {} connections, its bound (those "
                          "silent for 30 minutes, or without a hello for {} s, are forgotten)",
                          address, kMaxPeers, kForgetHellolessPeerAfter.count()),
              now);
}

bool HelloRefusal::tell_now(std::chrono::steady_clock::time_point now) {
  if (told && now - *told < AgentAdmission::kAnswerRefusedEvery) return false;
  told = now;
  return true;
}

}  // namespace fructosa::master
