// `lmaster ctl`'s end in the running master: a local REP socket in data_dir (its permissions are
// the directory's), polled with the agents' socket. A master that cannot bind it runs without
// it (logged). The requests themselves are control_request.h's.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "codec.h"
#include "control_request.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace fructosa::master {

class ControlSocket {
 public:
  ControlSocket(zmq::context_t& context, const std::string& endpoint);
  ~ControlSocket();
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;

  // What zmq::poll watches (libzmq's socket handle).
  void* handle();

  // Answers one waiting request, if any, for the agents connected now; `ask` sends an agent
  // the Control message the request asks for.
  void serve(const ConnectedAgents& agents,
             const std::function<void(const std::string& identity, const Bytes& message)>& ask);

 private:
  std::unique_ptr<zmq::socket_t> socket_;
};

}  // namespace fructosa::master
