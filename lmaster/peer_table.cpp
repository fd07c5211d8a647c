#include "peer_table.h"

#include <spdlog/spdlog.h>

namespace fructosa::master {

Peer* PeerTable::find_or_add(const std::string& identity) {
  auto found = peers_.find(identity);
  if (found != peers_.end()) return &found->second;
  if (peers_.size() >= AgentAdmission::kMaxPeers) return nullptr;
  return &peers_[identity];
}

Peer* PeerTable::find(const std::string& identity) {
  auto found = peers_.find(identity);
  return found == peers_.end() ? nullptr : &found->second;
}

void PeerTable::forget_silent(Clock::time_point now) {
  for (auto it = peers_.begin(); it != peers_.end();) {
    // A connection that never said hello holds no agent's state: it goes within seconds.
    const Peer& peer = it->second;
    if (peer.host.empty() && !peer.refusal && now - peer.first_seen > AgentAdmission::kForgetHellolessPeerAfter) {
      it = peers_.erase(it);
    } else if (now - peer.last_seen > kForgetPeerAfter) {
      spdlog::info("forgetting agent {} ({}): silent for {} minutes", peer.host, peer.address,
                   std::chrono::duration_cast<std::chrono::minutes>(kForgetPeerAfter).count());
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
}

ConnectedAgents PeerTable::connected() const {
  ConnectedAgents agents;
  for (const auto& [identity, peer] : peers_)
    if (!peer.host.empty()) agents.emplace_back(identity, peer.host);
  return agents;
}

std::uint64_t PeerTable::heard_since(Clock::time_point since) const {
  std::uint64_t agents = 0;
  for (const auto& [identity, peer] : peers_) agents += !peer.host.empty() && peer.last_seen >= since;
  return agents;
}

}  // namespace fructosa::master
