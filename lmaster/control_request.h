// The master's side of `lmaster ctl` (master_client.cpp is the command's): one request on the
// local control socket, answered without knowing ZeroMQ or the master's peers.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codec.h"

namespace fructosa::master {

// The connected agents: (routing identity, host).
using ConnectedAgents = std::vector<std::pair<std::string, std::string>>;

// {"command": "interval", "sensor": S, "interval": s, "duration": s, "hosts": [...] (empty: every
// connected agent)}: `ask(identity, message)` sends each agent asked its Control message. Returns
// the JSON reply: {"ok": true, "asked": [...], "not_connected": [...]} or {"ok": false, "error": ...}.
std::string answer_control_request(std::string_view request, const ConnectedAgents& agents,
                                   const std::function<void(const std::string& identity, const Bytes& message)>& ask);

}  // namespace fructosa::master
