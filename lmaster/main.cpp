// lmaster: the fructosa master.
#include <boost/program_options.hpp>
#include <iostream>

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
  std::vector<std::string> words;
  visible.add_options()
      ("help,h", "show this help")
      ("version", "print the version")
      ("config,c", po::value<std::string>()->default_value("/etc/fructosa/lmaster.conf"), "configuration file")
      ("pidfile,p", po::value<std::string>()->default_value("/run/lmaster.pid"), "pidfile");
  po::options_description hidden;
  hidden.add_options()("words", po::value<std::vector<std::string>>(&words));
  po::options_description all;
  all.add(visible).add(hidden);
  po::positional_options_description positional;
  positional.add("words", -1);
  po::variables_map args;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), args);
    po::notify(args);
  } catch (const po::error& error) {
    std::cerr << "lmaster: " << error.what() << "\n" << visible;
    return 2;
  }
  if (args.count("help")) {
    std::cout << visible;
    return 0;
  }
  if (args.count("version")) {
    std::cout << "lmaster (fructosa) " << FRUCTOSA_VERSION << "\n";
    return 0;
  }
  if (words.size() != 1) {
    std::cerr << visible;
    return 2;
  }
  try {
    ServiceProgram program{"lmaster", master::check_master_config, master::run_master};
    return run_service_verb(program, words[0], args["config"].as<std::string>(), args["pidfile"].as<std::string>());
  } catch (const std::exception& error) {
    std::cerr << "lmaster: " << error.what() << "\n";
    return 1;
  }
}
