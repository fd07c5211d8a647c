// The lagent service: sensors on aligned timers, readings sent to lmaster.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace fructosa::agent {

// Loads and validates the configuration; throws ConfigError.
std::vector<std::string> check_agent_config(const std::string& config_path);

// Runs until SIGTERM/SIGINT (flushing what is queued); SIGHUP re-reads the configuration.
int run_agent(const std::string& config_path, bool foreground, const std::function<void()>& ready);

}  // namespace fructosa::agent
