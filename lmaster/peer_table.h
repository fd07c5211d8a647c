// The connections lmaster keeps state for, by ZeroMQ routing identity: who an agent says it is,
// the key it came in with, and the dictionary its batches are decoded with. Bounded
// (AgentAdmission::kMaxPeers) and pruned: a connection that never said hello goes within
// seconds, an agent silent for kForgetPeerAfter goes with its dictionary.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "agent_identity.h"
#include "codec.h"
#include "control_request.h"

namespace fructosa::master {

struct Peer {
  using Clock = std::chrono::steady_clock;
  std::string address;   // tcp peer address, for log lines
  std::string host;      // from Hello; empty until then (and after a refused one)
  std::string key;       // CURVE: the name of the key it was let in with; empty without CURVE
  HelloRefusal refusal;  // set while its last hello is refused (agent_identity.h)
  Clock::time_point first_seen;
  std::uint64_t session = 0;
  MasterDictionary dictionary;
  Clock::time_point last_seen;
  Clock::time_point last_resync;
  bool resync_sent = false;
  bool turned_away = false;  // a batch was turned away over memory_max: resync once it is over
};

class PeerTable {
 public:
  using Clock = Peer::Clock;
  // Peers silent for this long are forgotten (their dictionary with them).
  static constexpr auto kForgetPeerAfter = std::chrono::minutes(30);

  // The peer of `identity`, made when new; null when it is new and kMaxPeers are known.
  Peer* find_or_add(const std::string& identity);
  Peer* find(const std::string& identity);

  // Forgets hello-less connections and silent agents (call about once a second).
  void forget_silent(Clock::time_point now = Clock::now());

  // The agents connected now (their hello accepted), for `lmaster ctl`.
  ConnectedAgents connected() const;
  // How many agents were heard from since `since`.
  std::uint64_t heard_since(Clock::time_point since) const;

  auto begin() { return peers_.begin(); }
  auto end() { return peers_.end(); }

 private:
  std::map<std::string, Peer> peers_;
};

}  // namespace fructosa::master
