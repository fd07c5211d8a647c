// lmaster: the fructosa master.
#include <curl/curl.h>

#include <fstream>
#include <iostream>

#include "command_line.h"
#include "config.h"
#include "agent_identity.h"
#include "curve.h"
#include "daemon.h"
#include "logging.h"
#include "master.h"

#include <nlohmann/json.hpp>

namespace po = boost::program_options;
using namespace fructosa;

namespace {

const char* kUsage = R"(Usage:
  lmaster start|stop|status|restart|reload|run|check [-c FILE] [-p PIDFILE]
  lmaster keygen [--out DIR] [--name NAME] [--hosts PATTERNS] [--force]
  lmaster ctl interval SENSOR SECONDS [--for SECONDS] [--host HOST]... [-c FILE]

Commands:
  start     start as a daemon (exits 0 once listening; 78 on a configuration error)
  stop      send SIGTERM and wait until the master has exited (it first flushes its outputs)
  status    exit 0 when running, 3 when not
  restart   stop, then start
  reload    send SIGHUP: reopen the outputs and the log file
  run       run in the foreground, logging to stderr (for systemd and debugging)
  check     check the configuration: print its warnings, exit 0 when it is usable, 78 when not
  keygen    write a CURVE key pair: DIR/NAME.key (secret, mode 0600) and DIR/NAME.pub
            (public, 0644); one for lmaster, one per agent (docs/security.md). An agent's
            key speaks for the host NAME only, or for those --hosts matches
  ctl       tell the running lmaster's agents (--host, or all) to read SENSOR every
            SECONDS for --for seconds (default 60), then at their configured interval

Options)";

int keygen(const std::vector<std::string>& words, const po::variables_map& args) {
  if (words.size() > 1) {
    std::cerr << "lmaster keygen: unexpected argument '" << words[1] << "' (use --out DIR --name NAME)\n";
    return 2;
  }
  try {
    curve::require("lmaster keygen");
    std::optional<master::KeyHosts> hosts;  // checked before anything is written
    if (args.count("hosts")) hosts = master::KeyHosts{"", master::parse_host_patterns(args["hosts"].as<std::string>())};
    auto files = curve::write_key_pair(args["out"].as<std::string>(), args["name"].as<std::string>(),
                                       curve::generate(), args.count("force") > 0);
    if (hosts) {
      std::ofstream pub(files.public_path, std::ios::app);
      pub << "# The hosts this key may send as (shell patterns); without this line, " << args["name"].as<std::string>()
          << " only.\n"
          << master::describe_hosts(*hosts) << "\n";
      if (!pub.flush()) throw std::runtime_error("cannot write " + files.public_path);
    }
    std::cout << "wrote " << files.secret_path << " (key pair, secret: keep it on its own host, mode 0600)\n"
              << "wrote " << files.public_path << " (public key: into lmaster's curve_allowed_keys_dir for an "
              << "agent; every agent's curve_server_public_key_file for lmaster)\n";
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "lmaster keygen: " << error.what() << "\n";
    return 1;
  }
}

int ctl(const std::vector<std::string>& words, const po::variables_map& args) {
  if (words.size() != 4 || words[1] != "interval") {
    std::cerr << "lmaster ctl: usage: lmaster ctl interval SENSOR SECONDS [--for SECONDS] [--host HOST]...\n";
    return 2;
  }
  try {
    nlohmann::json request{{"command", "interval"},
                           {"sensor", words[2]},
                           {"interval", std::stod(words[3])},
                           {"duration", args["for"].as<double>()},
                           {"hosts", args.count("host") ? args["host"].as<std::vector<std::string>>()
                                                        : std::vector<std::string>{}}};
    return master::control(args["config"].as<std::string>(), request.dump(), std::cout);
  } catch (const std::exception& error) {
    std::cerr << "lmaster ctl: " << error.what() << "\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description visible(kUsage);
  visible.add_options()
      ("out", po::value<std::string>()->default_value("."), "keygen: directory to write the key files to")
      ("name", po::value<std::string>()->default_value("lmaster"), "keygen: NAME of NAME.key and NAME.pub")
      ("hosts", po::value<std::string>(), "keygen: the hosts an agent's key may send as, as shell patterns "
                                          "(\"node[0-9][0-9], gpu*\"), for a key shared by a group of nodes; "
                                          "written into NAME.pub as `hosts = ...`")
      ("force", "keygen: replace existing key files")
      ("for", po::value<double>()->default_value(60), "ctl: seconds the new interval lasts")
      ("host", po::value<std::vector<std::string>>(), "ctl: an agent to ask (repeatable; default: every one)");
  CommandLine line;
  if (auto done = parse_command_line(argc, argv, "lmaster", visible, line)) return *done;
  const auto& words = line.words;
  const auto& args = line.args;
  // Until a configuration sets up logging, log lines go to stderr (spdlog's own default
  // logger would write them to stdout, where [stdout] prints samples).
  setup_logging(parse_pairs(logging_options(), {}, "defaults"), true, "lmaster");
  if (!words.empty() && words[0] == "keygen") return keygen(words, args);
  if (!words.empty() && words[0] == "ctl") return ctl(words, args);
  if (words.size() != 1) {
    std::cerr << visible;
    return 2;
  }
  // libcurl's global state must be set up before any thread starts (the outputs' threads).
  curl_global_init(CURL_GLOBAL_DEFAULT);
  try {
    ServiceProgram program{"lmaster", master::check_master_config, master::run_master, master::print_status};
    return run_service_verb(program, words[0], args["config"].as<std::string>(), args["pidfile"].as<std::string>());
  } catch (const std::exception& error) {
    std::cerr << "lmaster: " << error.what() << "\n";
    return 1;
  }
}
