// lagent: the fructosa node agent.
#include <iostream>

#include "agent.h"
#include "agent_config.h"
#include "command_line.h"
#include "config.h"
#include "daemon.h"
#include "logging.h"
#include "probe.h"
#include "push_client.h"

namespace po = boost::program_options;
using namespace fructosa;

namespace {

const char* kUsage = R"(Usage:
  lagent start|stop|status|restart|reload|run|check [-c FILE] [-p PIDFILE]
  lagent sensors
  lagent push NAME VALUE [--counter] [--socket PATH]   (lagent push --help)
  lagent probe SENSOR... [--interval S] [--proc-root DIR] [--sys-root DIR] [-o KEY=VALUE]...

Commands:
  start     start as a daemon (exits 0 once running; 78 on a configuration error)
  stop      send SIGTERM and wait until the agent has exited (it first sends what it holds)
  status    exit 0 when running, 3 when not
  restart   stop, then start
  reload    send SIGHUP: re-read the configuration and re-arm the sensor timers
  run       run in the foreground, logging to stderr (for systemd and debugging)
  check     check the configuration: print its warnings, exit 0 when it is usable, 78 when not
  sensors   list every sensor with its description, options and metrics
  push      push a metric from inside a batch job into the job's data (docs/push.md);
            run by any user, while lagent runs with a [sensor:User] section
  probe     take one sample of each named sensor and print it as one JSON line
            (rate sensors: two readings --interval apart); -o sets a sensor option,
            as KEY=VALUE for every named sensor that has it or Sensor.KEY=VALUE;
            -o jobs.KEY=VALUE sets job discovery as [jobs] KEY would (e.g.
            -o jobs.scheduler=slurm -o jobs.cgroup_root=DIR)

Where readings go (the configuration file, -c):
  [lmaster]   to lmaster over ZeroMQ (also without the section: 127.0.0.1:7888),
              which hands them to its outputs (Graphite, HDF5, Elasticsearch, stdout)
  [Graphite]  in a file without [lmaster]: straight to carbon, as lmaster's Graphite
              output sends them (pickle or plaintext; FrUCToSA 0.3's agents did this).
              With [lmaster] it is ignored, with a warning: it belongs in lmaster.conf
  Either way every batch waits on disk ([lagent] spool_dir) until it is taken:
  acknowledged by lmaster, or written to carbon and the connection still up
  replay_window seconds later; after a lost connection the rest is sent again.

Options)";

}  // namespace

int main(int argc, char** argv) {
  // `push` is run by users' batch scripts: its own arguments (a gauge may be negative).
  if (argc > 1 && std::string_view(argv[1]) == "push") {
    try {
      return agent::push_command(argc, argv, 0, std::cerr);
    } catch (const std::exception& error) {
      std::cerr << "lagent push: " << error.what() << "\n";
      return 2;
    }
  }
  po::options_description visible(kUsage);
  std::vector<std::string> overrides;
  visible.add_options()
      ("interval", po::value<double>()->default_value(1.0), "probe: seconds between the two readings of rate sensors")
      ("proc-root", po::value<std::string>()->default_value("/proc"), "probe: where procfs is")
      ("sys-root", po::value<std::string>()->default_value("/sys"), "probe: where sysfs is")
      ("host", po::value<std::string>(), "probe: host name to report (default: the short host name)")
      ("option,o", po::value<std::vector<std::string>>(&overrides), "probe: sensor option KEY=VALUE");
  CommandLine line;
  if (auto done = parse_command_line(argc, argv, "lagent", visible, line)) return *done;
  const auto& words = line.words;
  const auto& args = line.args;
  const std::string& command = words[0];
  // Before a configuration sets up logging (and for `probe`, whose stdout is JSON), log
  // lines go to stderr: spdlog's own default logger would write them to stdout.
  setup_logging(parse_pairs(logging_options(), {}, "defaults"), true, "lagent");
  try {
    if (command == "sensors") {
      agent::list_sensors(std::cout);
      return 0;
    }
    if (command == "probe") {
      agent::ProbeRequest request;
      request.sensors.assign(words.begin() + 1, words.end());
      if (request.sensors.empty()) {
        std::cerr << "lagent probe: name at least one sensor (`lagent sensors` lists them)\n";
        return 2;
      }
      request.interval = args["interval"].as<double>();
      request.roots.proc = args["proc-root"].as<std::string>();
      request.roots.sys = args["sys-root"].as<std::string>();
      request.options = overrides;
      request.host = args.count("host") ? args["host"].as<std::string>() : agent::short_hostname();
      return agent::probe(request, std::cout, std::cerr);
    }
    if (words.size() > 1) {
      std::cerr << "lagent " << command << ": unexpected argument '" << words[1] << "'\n";
      return 2;
    }
    ServiceProgram program{"lagent", agent::check_agent_config, agent::run_agent};
    return run_service_verb(program, command, args["config"].as<std::string>(), args["pidfile"].as<std::string>());
  } catch (const ConfigError& error) {
    std::cerr << "lagent: " << error.what() << "\n";
    return kExitConfigError;
  } catch (const std::exception& error) {
    std::cerr << "lagent: " << error.what() << "\n";
    return 1;
  }
}
