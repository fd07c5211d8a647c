// make-dashboard: writes Grafana dashboards for the metrics the sensors produce.
#include <boost/program_options.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "config.h"
#include "dashboard.h"

namespace po = boost::program_options;
using namespace fructosa;
using namespace fructosa::dashboards;

namespace {

const char* kUsage = R"(Usage:
  make-dashboard [HOSTS_FILE] [--host H ...] [--agent-config lagent.conf]
                 [--datasource graphite|elasticsearch|prometheus] [--kind node|job|cluster]
                 [--prefix P] [--top N] [--out DIR]
  make-dashboard [--agent-config lagent.conf] [--prefix P] --storage-schemas

Writes Grafana dashboards (JSON model, schema 39) made from the sensors' metric catalogs:
  fructosa-node.json     one node ($host variable), a row per group of sensors
  fructosa-job.json      one batch job ($job; Prometheus: $job_id): per-job sensors and the
                         nodes of the job
  fructosa-cluster.json  top hosts by CPU, memory and power; hosts reporting; lmaster health
(all three unless --kind names one). With a HOSTS_FILE (FrUCToSA's: host names as keys of a
[hosts] section) or --host: one node dashboard per host instead, <short host>.json.
Panels show the sensors an lagent.conf enables (every sensor when none is given), with its
options (percpu, pernic, ...). Every dashboard uses a datasource variable and lists it in
__inputs, so it can be imported or provisioned (dashboards/provisioning/).
--storage-schemas writes no dashboard: it prints carbon storage-schemas.conf rules that store
each sensor's Graphite paths at its time_interval first (one rule per interval), to put above
the catch-all rules of carbon's storage-schemas.conf.

Options)";

int run(int argc, char** argv) {
  po::options_description visible(kUsage);
  std::vector<std::string> hosts;
  visible.add_options()
      ("help,h", "this help")
      ("host", po::value<std::vector<std::string>>(&hosts), "one node dashboard for this host (repeatable)")
      ("agent-config", po::value<std::string>(), "lagent.conf whose sensors (and options) the panels show")
      ("datasource", po::value<std::string>()->default_value("graphite"),
       "graphite, elasticsearch or prometheus (PromQL on the names lmaster's [prometheus] output sends)")
      ("kind", po::value<std::string>(), "node, job or cluster (default: all three)")
      ("prefix", po::value<std::string>()->default_value(""), "Graphite path prefix (lmaster's [Graphite] prefix)")
      ("top", po::value<std::size_t>()->default_value(10), "hosts in each top-N panel of the cluster overview")
      ("out", po::value<std::string>()->default_value("."), "directory the JSON files are written to")
      ("storage-schemas", "print carbon storage-schemas.conf rules for the sensors' intervals instead");
  po::options_description hidden;
  hidden.add_options()("hosts-file", po::value<std::vector<std::string>>(), "");
  po::options_description all;
  all.add(visible).add(hidden);
  po::positional_options_description positional;
  positional.add("hosts-file", -1);
  po::variables_map args;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), args);
    po::notify(args);
  } catch (const po::error& error) {
    std::cerr << "make-dashboard: " << error.what() << "\n(make-dashboard --help)\n";
    return 64;  // EX_USAGE
  }
  if (args.count("help")) {
    std::cout << visible << "\n";
    return 0;
  }
  auto usage_error = [](const std::string& message) {
    std::cerr << "make-dashboard: " << message << "\n(make-dashboard --help)\n";
    return 64;
  };
  if (args.count("hosts-file") && args["hosts-file"].as<std::vector<std::string>>().size() > 1)
    return usage_error("one HOSTS_FILE at most");

  Settings settings;
  std::string datasource = args["datasource"].as<std::string>();
  if (datasource == "graphite")
    settings.datasource = Datasource::graphite;
  else if (datasource == "elasticsearch")
    settings.datasource = Datasource::elasticsearch;
  else if (datasource == "prometheus")
    settings.datasource = Datasource::prometheus;
  else
    return usage_error("--datasource must be graphite, elasticsearch or prometheus, not '" + datasource + "'");
  settings.prefix = args["prefix"].as<std::string>();
  settings.top = args["top"].as<std::size_t>();
  if (settings.top == 0) return usage_error("--top must be at least 1");

  std::vector<DashboardKind> kinds{DashboardKind::node, DashboardKind::job, DashboardKind::cluster};
  if (args.count("kind")) {
    std::string kind = args["kind"].as<std::string>();
    if (kind == "node")
      kinds = {DashboardKind::node};
    else if (kind == "job")
      kinds = {DashboardKind::job};
    else if (kind == "cluster")
      kinds = {DashboardKind::cluster};
    else
      return usage_error("--kind must be node, job or cluster, not '" + kind + "'");
  }

  try {
    if (args.count("hosts-file"))
      for (auto& host : read_hosts_file(args["hosts-file"].as<std::vector<std::string>>().front()))
        hosts.push_back(host);
    settings.sensors = args.count("agent-config") ? sensors_of_agent_config(args["agent-config"].as<std::string>())
                                                  : all_sensors_with_defaults();
  } catch (const ConfigError& error) {
    std::cerr << "make-dashboard: " << error.what() << "\n";
    return kExitConfigError;
  }

  if (args.count("storage-schemas")) {
    std::cout << storage_schemas(settings);
    return std::cout.flush() ? 0 : 74;  // EX_IOERR
  }

  std::filesystem::path out = args["out"].as<std::string>();
  std::error_code error;
  std::filesystem::create_directories(out, error);
  if (error) {
    std::cerr << "make-dashboard: cannot create " << out.string() << ": " << error.message() << "\n";
    return 73;  // EX_CANTCREAT
  }
  auto write = [&](const std::string& name, const nlohmann::ordered_json& dashboard) {
    // A generator that wrote something Grafana would misread would be worse than none.
    auto problems = validate_dashboard(dashboard, settings);
    if (!problems.empty()) {
      for (const auto& problem : problems) std::cerr << "make-dashboard: " << name << ": " << problem << "\n";
      return false;
    }
    std::filesystem::path path = out / name;
    std::ofstream file(path);
    file << dashboard.dump(2) << "\n";
    file.close();
    if (!file) {
      std::cerr << "make-dashboard: cannot write " << path.string() << "\n";
      return false;
    }
    std::cout << path.string() << "\n";
    return true;
  };

  bool ok = true;
  if (!hosts.empty()) {
    // FrUCToSA's make-fructosa-dashboard HOSTS: one node dashboard per host.
    for (const auto& host : hosts) {
      std::string name = (settings.datasource == Datasource::graphite ? short_host(host) : host) + ".json";
      ok = write(name, make_dashboard(DashboardKind::node, settings, host)) && ok;
    }
  } else {
    for (auto kind : kinds)
      ok = write("fructosa-" + std::string(to_string(kind)) + ".json", make_dashboard(kind, settings)) && ok;
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "make-dashboard: " << error.what() << "\n";
    return 1;
  }
}
