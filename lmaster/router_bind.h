// Where lmaster's ROUTER socket listens for agents ([lmaster] host and incoming data port).
#pragma once

#include <string>
#include <zmq.hpp>

#include "master_config.h"

namespace fructosa::master {

// Binds every address [lmaster] host stands for (a host name may have several); with port 0
// the first bind picks the port and the others take the same. Returns the endpoints bound,
// for the log ("tcp://a:7888, tcp://[b]:7888 (host master2)").
std::string bind_router(zmq::socket_t& router, const MasterConfig& config);

}  // namespace fructosa::master
