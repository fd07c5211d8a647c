// What the lmaster command asks of a running master or of its files, without running one:
// `lmaster check`, `lmaster status` (the agent table in data_dir) and `lmaster ctl` (a request
// over the master's local control socket). master.cpp is the master itself.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "agent_registry.h"
#include "master.h"
#include "master_config.h"

namespace fructosa::master {

std::vector<std::string> check_master_config(const std::string& config_path) {
  return load_master_config(config_path).warnings;
}

int control(const std::string& config_path, const std::string& request, std::ostream& out) {
  MasterConfig config = load_master_config(config_path);
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::req);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, 5000);
  socket.connect(control_endpoint(config));
  socket.send(zmq::buffer(request), zmq::send_flags::none);
  zmq::message_t reply;
  if (!socket.recv(reply)) {
    out << "lmaster ctl: no answer from " << control_endpoint(config) << " within 5 s (is lmaster running?)\n";
    return 1;
  }
  auto answer = nlohmann::json::parse(reply.to_string_view(), nullptr, false);
  if (answer.is_discarded() || !answer.value("ok", false)) {
    out << "lmaster ctl: refused: " << (answer.is_discarded() ? "?" : answer.value("error", "?")) << "\n";
    return 1;
  }
  out << "asked: " << fmt::format("{}", fmt::join(answer["asked"].get<std::vector<std::string>>(), ", ")) << "\n";
  auto missing = answer["not_connected"].get<std::vector<std::string>>();
  if (!missing.empty()) out << "not connected: " << fmt::format("{}", fmt::join(missing, ", ")) << "\n";
  return missing.empty() && !answer["asked"].empty() ? 0 : 1;
}

void print_status(const std::string& config_path, std::ostream& out) {
  MasterConfig config = load_master_config(config_path);
  std::string path = (std::filesystem::path(config.data_dir) / "agents.json").string();
  auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch());
  if (!print_agent_table(path, out, now.count())) out << "no agent table yet (" << path << ")\n";
}

}  // namespace fructosa::master
