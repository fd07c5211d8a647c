#include "control_request.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace fructosa::master {

std::string answer_control_request(std::string_view request, const ConnectedAgents& agents,
                                   const std::function<void(const std::string& identity, const Bytes& message)>& ask) {
  nlohmann::json reply;
  try {
    auto command = nlohmann::json::parse(request);
    if (command.value("command", "") != "interval") throw std::invalid_argument("unknown command");
    std::string sensor = command.at("sensor");
    double interval = command.at("interval");
    double duration = command.at("duration");
    auto wanted = command.value("hosts", std::vector<std::string>{});
    if (sensor.empty() || !(interval >= 0.01 && interval <= 86400) || !(duration > 0 && duration <= 86400))
      throw std::invalid_argument("needs a sensor, an interval of 0.01..86400 s and a duration of 0..86400 s");
    std::vector<std::string> asked;
    for (const auto& [identity, host] : agents) {
      if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), host) == wanted.end()) continue;
      ask(identity, encode_control(sensor, interval, duration));
      asked.push_back(host);
    }
    std::vector<std::string> missing;
    for (const auto& host : wanted)
      if (std::find(asked.begin(), asked.end(), host) == asked.end()) missing.push_back(host);
    spdlog::info("ctl: asked {} agent(s) to read {} every {} s for {} s{}", asked.size(), sensor, interval, duration,
                 missing.empty() ? "" : fmt::format(" (not connected: {})", fmt::join(missing, ", ")));
    reply = {{"ok", true}, {"asked", asked}, {"not_connected", missing}};
  } catch (const std::exception& error) {
    reply = {{"ok", false}, {"error", error.what()}};
  }
  return reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace fructosa::master
