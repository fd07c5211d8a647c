// The agent's link to lmaster: a ZeroMQ DEALER socket. It says Hello with the spool's session,
// sends the dictionary and each batch under it, and hands lmaster's acknowledgements to the
// sender (a batch is taken once lmaster acknowledged it: its journal has it on disk). On a
// resync request (lmaster restarted, or the connection was re-established) and at a failover
// every unacknowledged batch goes again. Memory stays bounded: at most max_unacked_batches (and
// 8 MiB) are in flight; the others wait in the spool. Heartbeats while nothing else is sent.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "link.h"

namespace fructosa::agent {

struct LmasterLinkSettings {
  // tcp://host:port of each lmaster, in order: the agent sends to one and moves to the next
  // when the one it sends to has said nothing (no ack) for `failover_after` seconds.
  std::vector<std::string> endpoints;
  double failover_after = 15.0;
  std::string host;  // the name this agent reports as
  double heartbeat_interval = 5.0;
  std::size_t max_unacked_batches = 1000;  // sent, not yet acknowledged; the rest wait in the spool
  // CURVE (docs/security.md), Z85 text: with a server key the link is encrypted and this
  // agent authenticates with its own key pair; empty: plain ZMTP.
  std::string curve_server_key;
  std::string curve_public_key;
  std::string curve_secret_key;
  // lmaster asked to read `sensor` every `interval` s for `duration` s (`lmaster ctl`). Called on
  // the sender's thread: it must only hand the request over.
  std::function<void(const std::string& sensor, double interval, double duration)> on_control;
};

// Connects at once (ZeroMQ connects in the background). Throws std::runtime_error.
std::unique_ptr<Link> make_lmaster_link(LmasterLinkSettings settings);

}  // namespace fructosa::agent
