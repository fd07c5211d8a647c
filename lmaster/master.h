// The lmaster service: receives agents' batches, acknowledges them, feeds the outputs.
#pragma once

#include <functional>
#include <string>

namespace fructosa::master {

void check_master_config(const std::string& config_path);

// Runs until SIGTERM/SIGINT (flushing every output); SIGHUP reopens the outputs.
int run_master(const std::string& config_path, bool foreground, const std::function<void()>& ready);

}  // namespace fructosa::master
