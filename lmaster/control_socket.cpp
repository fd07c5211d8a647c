#include "control_socket.h"

#include <spdlog/spdlog.h>

#include <zmq.hpp>

namespace fructosa::master {

ControlSocket::ControlSocket(zmq::context_t& context, const std::string& endpoint)
    : socket_(std::make_unique<zmq::socket_t>(context, zmq::socket_type::rep)) {
  socket_->set(zmq::sockopt::linger, 0);
  socket_->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(64 << 10));
  try {
    socket_->bind(endpoint);
  } catch (const zmq::error_t& error) {
    spdlog::warn("`lmaster ctl` is unavailable: cannot bind {}: {}", endpoint, error.what());
  }
}

ControlSocket::~ControlSocket() = default;

void* ControlSocket::handle() { return socket_->handle(); }

void ControlSocket::serve(const ConnectedAgents& agents,
                          const std::function<void(const std::string& identity, const Bytes& message)>& ask) {
  zmq::message_t request;
  if (!socket_->recv(request, zmq::recv_flags::dontwait)) return;
  std::string reply = answer_control_request(request.to_string_view(), agents, ask);
  socket_->send(zmq::buffer(reply), zmq::send_flags::dontwait);
}

}  // namespace fructosa::master
