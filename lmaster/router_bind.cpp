#include "router_bind.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace fructosa::master {

std::string bind_router(zmq::socket_t& router, const MasterConfig& config) {
  const auto& addresses = config.listen_addresses;
  if (std::any_of(addresses.begin(), addresses.end(), [](const std::string& a) { return a.front() == '['; }))
    router.set(zmq::sockopt::ipv6, 1);
  std::string port = config.port ? std::to_string(config.port) : "*";
  std::string bound;
  for (const auto& address : addresses) {
    std::string endpoint = fmt::format("tcp://{}:{}", address, port);
    try {
      router.bind(endpoint);
    } catch (const zmq::error_t& error) {
      throw std::runtime_error(fmt::format("cannot listen on {} ([lmaster] host = {}): {}", endpoint,
                                           config.bind_host, error.what()));
    }
    std::string last = router.get(zmq::sockopt::last_endpoint);
    port = last.substr(last.rfind(':') + 1);
    bound += (bound.empty() ? "" : ", ") + last;
  }
  if (addresses.size() != 1 || addresses.front() != config.bind_host)
    bound += fmt::format(" ([lmaster] host = {})", config.bind_host);
  return bound;
}

}  // namespace fructosa::master
