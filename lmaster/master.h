// The lmaster service: receives agents' batches, acknowledges them, feeds the outputs.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace fructosa::master {

std::vector<std::string> check_master_config(const std::string& config_path);
// `lmaster status`: the agents the master knows, up or down, from its data_dir.
void print_status(const std::string& config_path, std::ostream& out);

// `lmaster ctl`: sends one JSON request to the running master, prints its answer; exit code.
int control(const std::string& config_path, const std::string& request, std::ostream& out);

// Runs until SIGTERM/SIGINT (flushing every output); SIGHUP reopens the outputs.
int run_master(const std::string& config_path, bool foreground, const std::function<void()>& ready);

}  // namespace fructosa::master
