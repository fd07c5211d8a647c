// lmaster: the fructosa master.
#include <curl/curl.h>

#include <iostream>

#include "command_line.h"
#include "config.h"
#include "daemon.h"
#include "master.h"

namespace po = boost::program_options;
using namespace fructosa;

namespace {

const char* kUsage = R"(Usage:
  lmaster start|stop|status|restart|reload|run [-c FILE] [-p PIDFILE]

Commands:
  start     start as a daemon (exits 0 once listening; 78 on a configuration error)
  stop      send SIGTERM and wait until the master has exited (it first flushes its outputs)
  status    exit 0 when running, 3 when not
  restart   stop, then start
  reload    send SIGHUP: reopen the outputs and the log file
  run       run in the foreground, logging to stderr (for systemd and debugging)

Options)";

}  // namespace

int main(int argc, char** argv) {
  po::options_description visible(kUsage);
  CommandLine line;
  if (auto done = parse_command_line(argc, argv, "lmaster", visible, line)) return *done;
  const auto& words = line.words;
  const auto& args = line.args;
  if (words.size() != 1) {
    std::cerr << visible;
    return 2;
  }
  // libcurl's global state must be set up before any thread starts (the outputs' threads).
  curl_global_init(CURL_GLOBAL_DEFAULT);
  try {
    ServiceProgram program{"lmaster", master::check_master_config, master::run_master};
    return run_service_verb(program, words[0], args["config"].as<std::string>(), args["pidfile"].as<std::string>());
  } catch (const std::exception& error) {
    std::cerr << "lmaster: " << error.what() << "\n";
    return 1;
  }
}
