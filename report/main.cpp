// fructosa-report: what a batch job did, a verdict and advice, from what lmaster stored.
#include <unistd.h>

#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>

#include "analysis.h"
#include "config.h"
#include "graphite_source.h"
#include "hdf5_source.h"
#include "render.h"
#include "rules.h"
#include "slurm_request.h"

namespace po = boost::program_options;
using namespace fructosa;
using namespace fructosa::report;

namespace {

const char* kUsage = R"(Usage:
  fructosa-report [options] JOBID...
  fructosa-report --list [--since TIME] [--until TIME] [--user USER] [options]

Prints the report of each job: elapsed time, CPU efficiency against the CPUs it was given,
memory peak against its limit, I/O, Taskstats' delays, PerfHW's IPC and cache misses, its
GPUs' utilization and memory, its nodes' energy (RAPL, IPMI; apportioned by its share of the
CPU time of a node it shared) and network traffic (nodes it had alone), per node with
sparklines, and a verdict with advice (docs/report.md). A figure the job has no data for says
which sensor collects it. --list lists the jobs seen, one line each with its verdict. The
data is what lmaster's HDF5 output stored: the series of files of its [hdf5] path (read from
-c), or the file or directory given with --data; or, with --graphite, what its [Graphite]
output sent, read through graphite-web's render API (no user is known there).

The rules' thresholds come from a [report] section: -c's (lmaster ignores it), or that of
--rules FILE. An unknown key or a bad value is an error naming the file and the line. Keys:
)";

const char* kUsageEnd = R"(
Exit status: 0; 1 when a job has no data or the data cannot be read; 2 on a usage error.

Options)";

// The usage text, with a line per [report] key from the table rules_from reads.
std::string usage() {
  std::string text = kUsage;
  for (const auto& spec : report_options())
    text += fmt::format("  {:<32}{}\n", spec.name + " = " + spec.default_value, spec.help);
  return text + kUsageEnd;
}

// "2026-11-25", "2026-11-25T18:00:00", "2026-11-25 18:00" (UTC) or seconds since the epoch.
std::optional<std::int64_t> parse_time(const std::string& text) {
  char* end = nullptr;
  double seconds = std::strtod(text.c_str(), &end);
  if (end && *end == '\0' && !text.empty()) return static_cast<std::int64_t>(seconds * 1e9);
  for (const char* format : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"}) {
    std::tm tm{};
    const char* rest = ::strptime(text.c_str(), format, &tm);
    if (rest && (*rest == '\0' || (*rest == 'Z' && rest[1] == '\0')))
      return static_cast<std::int64_t>(::timegm(&tm)) * 1'000'000'000;
  }
  return std::nullopt;
}

// lmaster.conf's [hdf5] path, made absolute against the file's directory as lmaster does.
std::string hdf5_path_of(const std::string& config) {
  IniFile file = IniFile::load(config);
  const IniSection* section = file.find("hdf5");
  if (!section) throw ConfigError(config + ": no [hdf5] section: lmaster writes no HDF5 files (give --data)");
  for (const auto& entry : section->entries)
    if (equal_ignoring_case(entry.key, "path")) return resolve_config_path(config, entry.value);
  throw ConfigError(file.where(*section) + "no path key (give --data)");
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description options(usage());
  options.add_options()
      ("help,h", "show this help")
      ("version", "print the version")
      ("config,c", po::value<std::string>()->default_value("/etc/fructosa/lmaster.conf"),
       "lmaster's configuration: its [hdf5] path names the files; its [report] section sets the rules' thresholds")
      ("data,d", po::value<std::string>(), "an HDF5 file, the [hdf5] path link, or a directory of files (instead of -c)")
      ("graphite", po::value<std::string>(), "read Graphite's render API at URL (graphite-web, e.g. http://graphite:8080) instead of HDF5 files")
      ("graphite-prefix", po::value<std::string>()->default_value(""), "--graphite: lmaster's [Graphite] prefix")
      ("graphite-from", po::value<std::string>()->default_value("-30d"), "--graphite: how far back to look for jobs (Graphite's from: -30d, -12h, 20261125, seconds since the epoch)")
      ("graphite-until", po::value<std::string>()->default_value("now"), "--graphite: the end of that window (Graphite's until)")
      ("format,f", po::value<std::string>()->default_value("text"),
       "text, json, html (one self-contained document of every job), or summary (one line: what contrib/slurm/fructosa-epilog stores in the job's AdminComment)")
      ("slurm", po::value<std::string>()->default_value("auto"),
       "ask Slurm what each job requested (time limit, partition, CPUs, memory, GPUs) with sacct, else "
       "scontrol: auto (when they are installed) or no")
      ("list,l", "list the jobs seen")
      ("since", po::value<std::string>(), "--list: jobs whose last sample is at or after TIME (UTC, e.g. 2026-11-25 or 2026-11-25T18:00)")
      ("until", po::value<std::string>(), "--list: jobs whose first sample is before TIME")
      ("user,u", po::value<std::string>(), "--list: jobs of USER")
      ("app", po::value<std::string>(), "--list: jobs that ran APP (as the APP column names it: gromacs, python, ...)")
      ("apps", po::value<std::string>(),
       "a site's application patterns, tried before the built-in ones (lines 'name glob...', docs/report.md)")
      ("rules", po::value<std::string>(), "the rules' thresholds from FILE's [report] section instead of -c's");
  po::options_description hidden;
  std::vector<std::string> words;
  hidden.add_options()("jobs", po::value<std::vector<std::string>>(&words));
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("jobs", -1);
  po::variables_map args;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), args);
    po::notify(args);
  } catch (const po::error& error) {
    std::cerr << "fructosa-report: " << error.what() << "\n" << options;
    return 2;
  }
  if (args.count("help")) {
    std::cout << options;
    return 0;
  }
  if (args.count("version")) {
    std::cout << "fructosa-report (fructosa) " << FRUCTOSA_VERSION << "\n";
    return 0;
  }
  const bool list = args.count("list") > 0;
  const std::string format = args["format"].as<std::string>();
  if (format != "text" && format != "json" && format != "summary" && format != "html") {
    std::cerr << "fructosa-report: --format " << format << ": text, json, html or summary\n";
    return 2;
  }
  if (list && format == "html") {
    std::cerr << "fructosa-report: --list prints text or json, not html\n";
    return 2;
  }
  if (list != words.empty()) {
    std::cerr << "fructosa-report: give job ids, or --list\n" << options;
    return 2;
  }
  if (args.count("graphite") && args.count("data")) {
    std::cerr << "fructosa-report: give --data or --graphite, not both\n";
    return 2;
  }
  std::vector<std::uint64_t> ids;
  for (const auto& word : words) {
    char* end = nullptr;
    unsigned long long id = std::strtoull(word.c_str(), &end, 10);
    if (word.empty() || *end != '\0' || id == 0) {
      std::cerr << "fructosa-report: " << word << ": not a job id (a positive number)\n";
      return 2;
    }
    ids.push_back(id);
  }
  const std::string slurm = args["slurm"].as<std::string>();
  if (slurm != "auto" && slurm != "no") {
    std::cerr << "fructosa-report: --slurm " << slurm << ": auto or no\n";
    return 2;
  }
  const bool ask = slurm == "auto";
  std::optional<std::int64_t> since, until;
  for (auto [name, bound] : {std::pair{"since", &since}, std::pair{"until", &until}}) {
    if (!args.count(name)) continue;
    *bound = parse_time(args[name].as<std::string>());
    if (!*bound) {
      std::cerr << "fructosa-report: --" << name << " " << args[name].as<std::string>()
                << ": not a time (2026-11-25, 2026-11-25T18:00:00 UTC, or seconds since the epoch)\n";
      return 2;
    }
  }

  try {
    // load_app_patterns throws std::runtime_error naming the file and line.
    const std::vector<AppPattern> site_apps =
        args.count("apps") ? load_app_patterns(args["apps"].as<std::string>()) : std::vector<AppPattern>{};
    // The thresholds: --rules, else -c's [report] (the default -c only where it can be read:
    // with --data a host need not have lmaster.conf).
    Rules rules;
    const std::string config = args["config"].as<std::string>();
    if (args.count("rules"))
      rules = load_rules(args["rules"].as<std::string>(), true);
    else if (!args["config"].defaulted() || ::access(config.c_str(), R_OK) == 0)
      rules = load_rules(config, false);
    std::unique_ptr<JobSource> source;
    if (args.count("graphite"))
      source = std::make_unique<GraphiteSource>(GraphiteSettings{
          args["graphite"].as<std::string>(), args["graphite-prefix"].as<std::string>(),
          args["graphite-from"].as<std::string>(), args["graphite-until"].as<std::string>()});
    else
      source = std::make_unique<Hdf5Source>(
          args.count("data") ? args["data"].as<std::string>() : hdf5_path_of(args["config"].as<std::string>()));
    if (list) {
      std::vector<ListedJob> listed;
      for (auto& summary : source->jobs()) {
        if (since && summary.last_ns < *since) continue;
        if (until && summary.first_ns >= *until) continue;
        if (args.count("user") && summary.user != args["user"].as<std::string>()) continue;
        // The job index's summaries where the files have them, else the series.
        std::optional<JobFigures> figures;
        if (!summary.per_host.empty())
          figures = analyse(summary, site_apps);
        else if (auto data = source->job(summary.id))
          figures = analyse(*data, site_apps);
        ListedJob job{std::move(summary), "?", ""};
        if (figures) {
          job.verdict = judge(*figures, rules).word;
          job.application = figures->application;
        }
        if (args.count("app") && job.application != args["app"].as<std::string>()) continue;
        listed.push_back(std::move(job));
      }
      std::cout << (format == "json" ? render_list_json(listed) : render_list(listed));
      return 0;
    }
    int status = 0;
    bool first = true;
    std::vector<std::pair<JobFigures, Verdict>> html;  // --format html: one document, printed at the end
    for (auto id : ids) {
      auto data = source->job(id);
      if (!data) {
        std::cerr << "fructosa-report: job " << id << ": no sample of it in " << source->describe()
                  << " (is a per-job sensor such as [sensor:JobCgroup] enabled on its nodes?)\n";
        status = 1;
        continue;
      }
      JobFigures figures = analyse(*data, site_apps);
      if (ask) set_request(figures, ask_slurm(id));
      Verdict verdict = judge(figures, rules);
      if (format == "html") {
        html.emplace_back(std::move(figures), std::move(verdict));
      } else if (format == "json") {
        std::cout << render_json(figures, verdict);
      } else if (format == "summary") {
        std::cout << render_summary(figures, verdict);
      } else {
        if (!first) std::cout << "\n";
        std::cout << render_text(figures, verdict);
      }
      first = false;
    }
    if (!html.empty()) std::cout << render_html(html);
    return status;
  } catch (const ConfigError& error) {
    std::cerr << "fructosa-report: " << error.what() << "\n";
    return 1;
  } catch (const SourceError& error) {
    std::cerr << "fructosa-report: " << error.what() << "\n";
    return 1;
  } catch (const std::runtime_error& error) {  // a site's application patterns
    std::cerr << "fructosa-report: " << error.what() << "\n";
    return 1;
  }
}
