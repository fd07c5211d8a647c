// fructosa-report's performance targets (docs/performance.md, "Reports"), measured on files
// written by lmaster's own HDF5 output (report_bench_data.h writes them):
//
//   1. The report of one job: a --nodes node job (64) sampled every --interval s (10) for --hours
//      (24) by the default per-job sensors (JobCgroup and JobProc, with their node samples), in
//      files rotated every --job-rotate-hours (1: lmaster's rotate_age = 3600). Measured: the
//      wall time of Hdf5Source::job + analyse + judge + render_json (and render_text), and the
//      peak RSS. Target: <= 1 s and <= 200 MiB.
//   2. --list over a month: --days (30) files of --list-rotate-hours (24) each, of --list-nodes
//      (64) nodes with CPUPercent (--cpus keys) and VirtualMemory every 60 s, JobCgroup's node
//      samples and --jobs-per-day (100) jobs of 1-16 nodes with JobCgroup every 10 s (and
//      JobProc with --list-jobproc). Measured: Hdf5Source::jobs() (what --list reads first), and
//      --list with every job's verdict as fructosa-report computes it (analyse of the job
//      index's per-host summaries, job() where the files have no complete index). Target: <= 2 s.
//      And, on --verdict-sample jobs, job() + analyse + judge: what a verdict costs from the
//      series (files without an index), extrapolated to the whole list.
//
//   bench/report_bench [--dir DIR] [--repeat N] [--nodes N] [--hours H] [--interval S]
//                      [--job-rotate-hours H] [--days D] [--list-nodes N] [--cpus N]
//                      [--jobs-per-day N] [--list-rotate-hours H] [--list-jobproc]
//                      [--verdict-sample N] [--skip-job] [--skip-list]
//   bench/report_bench --measure-job|--measure-list|--measure-verdicts ...   (one measurement,
//                      on kept --dir data: see main)
//
// Every measurement runs in a fresh process (this program exec'd again with --measure-...), so
// that its peak RSS (VmHWM, ru_maxrss) is the reader's alone, not the writer's: the figures are
// the median of --repeat runs, with the files in the page cache (they were just written). The
// data is written into a temporary directory (removed at the end) or into --dir (kept).
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "analysis.h"
#include "hdf5_source.h"
#include "render.h"
#include "report_bench_data.h"

using namespace fructosa;
using namespace fructosa::report_bench;
namespace fs = std::filesystem;

namespace {

struct Settings : DataSettings {
  std::string dir;
  int repeat = 3;
  int verdict_sample = 10;
  bool skip_job = false, skip_list = false;
};

[[noreturn]] void usage() {
  std::cerr << "usage: report_bench [--dir DIR] [--repeat N] [--nodes N] [--hours H] [--interval S]\n"
               "                    [--job-rotate-hours H] [--days D] [--list-nodes N] [--cpus N]\n"
               "                    [--jobs-per-day N] [--list-rotate-hours H] [--list-jobproc]\n"
               "                    [--verdict-sample N] [--skip-job] [--skip-list]\n";
  std::exit(2);
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    try {
      if (arg == "--dir") s.dir = value();
      else if (arg == "--repeat") s.repeat = std::max(1, std::stoi(value()));
      else if (arg == "--nodes") s.nodes = std::max(1, std::stoi(value()));
      else if (arg == "--hours") s.hours = std::stod(value());
      else if (arg == "--interval") s.interval = std::stod(value());
      else if (arg == "--job-rotate-hours") s.job_rotate_hours = std::stod(value());
      else if (arg == "--days") s.days = std::stod(value());
      else if (arg == "--list-nodes") s.list_nodes = std::max(1, std::stoi(value()));
      else if (arg == "--cpus") s.cpus = std::max(1, std::stoi(value()));
      else if (arg == "--jobs-per-day") s.jobs_per_day = std::max(0, std::stoi(value()));
      else if (arg == "--list-rotate-hours") s.list_rotate_hours = std::stod(value());
      else if (arg == "--list-jobproc") s.list_jobproc = true;
      else if (arg == "--verdict-sample") s.verdict_sample = std::max(0, std::stoi(value()));
      else if (arg == "--skip-job") s.skip_job = true;
      else if (arg == "--skip-list") s.skip_list = true;
      else usage();
    } catch (const std::logic_error&) {
      usage();
    }
  }
  if (s.interval <= 0 || s.hours <= 0 || s.days <= 0) usage();
  return s;
}
// ---------------------------------------------------------------------------------------------
// Measurements, each in a fresh process.

struct Memory {
  double hwm_mib = 0, maxrss_mib = 0;
};

Memory memory_now() {
  Memory memory;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) memory.hwm_mib = std::stod(line.substr(6)) / 1024;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  memory.maxrss_mib = static_cast<double>(usage.ru_maxrss) / 1024;
  return memory;
}

void print_memory() {
  const Memory memory = memory_now();
  fmt::print("hwm_mib={:.1f}\nmaxrss_mib={:.1f}\n", memory.hwm_mib, memory.maxrss_mib);
}

// --measure-floor: the RSS of this program with its libraries loaded and nothing read.
int measure_floor() {
  print_memory();
  return 0;
}

// --measure-job WHERE ID: what `fructosa-report --slurm no ID` (and --format json) computes.
int measure_job(const std::string& where, std::uint64_t id) {
  const auto start = Clock::now();
  report::Hdf5Source source(where);
  const double open = seconds_since(start);
  auto data = source.job(id);
  const double read = seconds_since(start);
  const double read_hwm = memory_now().hwm_mib;  // what job() peaked at, before the analysis
  if (!data) {
    std::cerr << "report_bench: job " << id << " not found in " << source.describe() << "\n";
    return 1;
  }
  report::JobFigures figures = report::analyse(*data);
  const double analysed = seconds_since(start);
  report::Verdict verdict = report::judge(figures);
  const double judged = seconds_since(start);
  const std::string json = report::render_json(figures, verdict);
  const double json_done = seconds_since(start);
  const auto text_start = Clock::now();
  const std::string text = report::render_text(figures, verdict);
  const double text_time = seconds_since(text_start);
  std::size_t metrics = 0, points = 0, node_metrics = 0, node_points = 0;
  for (const auto& host : data->hosts) {
    for (const auto& [name, series] : host.metrics) {
      ++metrics;
      points += series.values.size();
    }
    for (const auto& [name, series] : host.node_metrics) {
      ++node_metrics;
      node_points += series.values.size();
    }
  }
  fmt::print("files={}\nhosts={}\nmetrics={}\npoints={}\nnode_metrics={}\nnode_points={}\n",
             source.files().size(), data->hosts.size(), metrics, points, node_metrics, node_points);
  fmt::print("open_s={:.4f}\nread_s={:.4f}\nanalyse_s={:.4f}\njudge_s={:.4f}\njson_s={:.4f}\n", open,
             read - open, analysed - read, judged - analysed, json_done - judged);
  fmt::print("read_hwm_mib={:.1f}\n", read_hwm);
  fmt::print("total_s={:.4f}\ntext_s={:.4f}\njson_bytes={}\ntext_bytes={}\nverdict={}\n", json_done,
             text_time, json.size(), text.size(), verdict.word);
  print_memory();
  return 0;
}

// --measure-list WHERE: Hdf5Source::jobs(), what --list reads before anything else; then every
// job's verdict as fructosa-report --list computes it (main.cpp): from the job index's per-host
// summaries, else (files without a complete index) from the series job() reads.
int measure_list(const std::string& where) {
  const auto start = Clock::now();
  report::Hdf5Source source(where);
  const double open = seconds_since(start);
  auto jobs = source.jobs();
  const double listed = seconds_since(start);
  std::size_t summarized = 0, read = 0;
  std::map<std::string, int> words;
  for (const auto& summary : jobs) {
    std::optional<report::JobFigures> figures;
    if (!summary.per_host.empty()) {
      figures = report::analyse(summary);
      ++summarized;
    } else if (auto data = source.job(summary.id)) {
      figures = report::analyse(*data);
      ++read;
    }
    words[figures ? report::judge(*figures).word : "?"]++;
  }
  const double total = seconds_since(start);
  std::set<std::string> hosts;
  for (const auto& job : jobs) hosts.insert(job.hosts.begin(), job.hosts.end());
  fmt::print("files={}\njobs={}\nhosts={}\nopen_s={:.4f}\njobs_s={:.4f}\ntotal_s={:.4f}\n", source.files().size(),
             jobs.size(), hosts.size(), open, listed, total);
  std::string said;
  for (const auto& [word, n] : words) said += fmt::format("{}{}:{}", said.empty() ? "" : ",", word, n);
  fmt::print("summarized={}\nread={}\nverdicts={}\n", summarized, read, said);
  print_memory();
  return 0;
}

// --measure-verdicts WHERE N: job() + analyse + judge for N jobs spread over the list (what
// --list does for each job of files without a job index), timed apart from jobs().
int measure_verdicts(const std::string& where, int sample) {
  report::Hdf5Source source(where);
  auto jobs = source.jobs();
  if (jobs.empty() || sample <= 0) return 1;
  const std::size_t count = std::min<std::size_t>(static_cast<std::size_t>(sample), jobs.size());
  const auto start = Clock::now();
  std::map<std::string, int> words;
  for (std::size_t i = 0; i < count; ++i) {
    const auto& summary = jobs[i * jobs.size() / count];
    auto data = source.job(summary.id);
    words[data ? report::judge(report::analyse(*data)).word : "?"]++;
  }
  const double total = seconds_since(start);
  fmt::print("sampled={}\njobs={}\nper_job_s={:.4f}\n", count, jobs.size(), total / static_cast<double>(count));
  std::string said;
  for (const auto& [word, n] : words) said += fmt::format("{}{}:{}", said.empty() ? "" : ",", word, n);
  fmt::print("verdicts={}\n", said);
  print_memory();
  return 0;
}

using Figures = std::map<std::string, std::string>;

// Runs this program again with `args`, returns its key=value lines.
Figures measure(const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    std::vector<std::string> words{"report_bench"};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) > 0;) output.append(buffer, static_cast<std::size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error(fmt::format("measurement {} failed (status {})", args.front(), status));
  Figures figures;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (auto equals = line.find('='); equals != std::string::npos)
      figures[line.substr(0, equals)] = line.substr(equals + 1);
  return figures;
}

// The median of `repeat` runs (by total_s), and the range of total_s and hwm_mib.
struct Measured {
  Figures median;
  double fastest = 0, slowest = 0, hwm_low = 0, hwm_high = 0;
  double get(const std::string& key) const {
    auto found = median.find(key);
    return found == median.end() ? 0 : std::stod(found->second);
  }
};

Measured measure_repeated(const std::vector<std::string>& args, int repeat, const std::string& by = "total_s") {
  std::vector<Figures> runs;
  for (int i = 0; i < repeat; ++i) runs.push_back(measure(args));
  auto number = [](const Figures& f, const std::string& key) { return std::stod(f.at(key)); };
  std::sort(runs.begin(), runs.end(), [&](const Figures& a, const Figures& b) { return number(a, by) < number(b, by); });
  Measured measured;
  measured.median = runs[runs.size() / 2];
  measured.fastest = number(runs.front(), by);
  measured.slowest = number(runs.back(), by);
  measured.hwm_low = measured.hwm_high = number(runs.front(), "hwm_mib");
  for (const auto& run : runs) {
    measured.hwm_low = std::min(measured.hwm_low, number(run, "hwm_mib"));
    measured.hwm_high = std::max(measured.hwm_high, number(run, "hwm_mib"));
  }
  return measured;
}

double mib(std::uintmax_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024); }

std::string hours_text(double hours) { return hours == std::floor(hours) ? fmt::format("{:.0f}", hours) : fmt::format("{:g}", hours); }

std::string rotation_text(double hours) {
  return hours > 0 ? "a new one every " + hours_text(hours) + " h" : "never rotated";
}

int run(const Settings& s, const fs::path& directory, const std::string& command) {
  fmt::print("command: {}\n", command);
  const Figures floor = measure({"--measure-floor"});
  fmt::print("reader floor (this program, libraries loaded, nothing read): peak RSS {} MiB\n",
             floor.at("hwm_mib"));
  if (!s.skip_job) {
    const fs::path where = directory / "job";
    const Generated generated = write_job(s, where);
    fmt::print(
        "\n[1] one job: {} nodes x {} h at {} s; JobCgroup (8 keys, labels cpu_source, user) and JobProc "
        "(14 keys, label commands) per node, plus their node samples; {} file(s) ({})\n",
        s.nodes, hours_text(s.hours), s.interval, generated.files, rotation_text(s.job_rotate_hours));
    fmt::print("written in {:.1f} s: {} rows, {} points, {:.1f} MiB compressed\n", generated.seconds, generated.rows,
               generated.points, mib(generated.bytes));
    const Measured m =
        measure_repeated({"--measure-job", (where / "fructosa.h5").string(), std::to_string(kReportedJob)}, s.repeat);
    fmt::print(
        "read: {} file(s), {} hosts, {} series, {} points, {} node series, {} node points; verdict {}; json {} "
        "bytes, text {} bytes\n",
        m.median.at("files"), m.median.at("hosts"), m.median.at("metrics"), m.median.at("points"),
        m.median.at("node_metrics"), m.median.at("node_points"),
        m.median.at("verdict"), m.median.at("json_bytes"), m.median.at("text_bytes"));
    fmt::print("phases (median run): open {:.3f} s, job() {:.3f} s (peak RSS {:.0f} MiB at its end), analyse "
               "{:.3f} s, judge {:.3f} s, render_json {:.3f} s; render_text {:.3f} s\n",
               m.get("open_s"), m.get("read_s"), m.get("read_hwm_mib"), m.get("analyse_s"), m.get("judge_s"),
               m.get("json_s"), m.get("text_s"));
    fmt::print("report of one job ({} nodes x {} h at {} s): {:.2f} s, peak RSS {:.0f} MiB "
               "(target <= 1 s, <= 200 MiB) [median of {}: {:.2f}-{:.2f} s, {:.0f}-{:.0f} MiB; "
               "Hdf5Source + job + analyse + judge + render_json; render_text adds {:.2f} s]\n",
               s.nodes, hours_text(s.hours), s.interval, m.get("total_s"), m.get("hwm_mib"), s.repeat,
               m.fastest, m.slowest, m.hwm_low, m.hwm_high, m.get("text_s"));
  }
  if (!s.skip_list) {
    const fs::path where = directory / "month";
    std::size_t planned = 0;
    const Generated generated = write_month(s, where, &planned);
    fmt::print(
        "\n[2] a month: {} day(s) in {} file(s) ({}); {} nodes with CPUPercent ({} per-CPU keys) "
        "and VirtualMemory (11 keys) every 60 s and {} node samples every 10 s; {} jobs a day of 1-16 "
        "nodes, 5 min - 8 h, with {} every 10 s ({} jobs)\n",
        hours_text(s.days), generated.files, rotation_text(s.list_rotate_hours), s.list_nodes, s.cpus,
        s.list_jobproc ? "JobCgroup's and JobProc's" : "JobCgroup's", s.jobs_per_day,
        s.list_jobproc ? "JobCgroup and JobProc" : "JobCgroup", planned);
    fmt::print("written in {:.1f} s: {} rows, {} points, {:.1f} MiB compressed\n", generated.seconds, generated.rows,
               generated.points, mib(generated.bytes));
    const std::string link = (where / "fructosa.h5").string();
    const Measured m = measure_repeated({"--measure-list", link}, s.repeat);
    fmt::print("--list's jobs() over {} files ({} jobs, {} hosts): {:.2f} s (target <= 2 s) [the median run's; "
               "Hdf5Source + jobs()]\n",
               m.median.at("files"), m.median.at("jobs"), m.median.at("hosts"), m.get("jobs_s"));
    fmt::print("--list with every job's verdict: {:.2f} s, peak RSS {:.0f} MiB (target <= 2 s) [median of {}: "
               "{:.2f}-{:.2f} s, {:.0f}-{:.0f} MiB; Hdf5Source + jobs() + analyse + judge of each job: {} from the "
               "index's summaries, {} read with job(); {}]\n",
               m.get("total_s"), m.get("hwm_mib"), s.repeat, m.fastest, m.slowest, m.hwm_low, m.hwm_high,
               m.median.at("summarized"), m.median.at("read"), m.median.at("verdicts"));
    if (s.verdict_sample > 0) {
      const Figures v = measure({"--measure-verdicts", link, std::to_string(s.verdict_sample)});
      const double per_job = std::stod(v.at("per_job_s"));
      const double jobs = std::stod(v.at("jobs"));
      fmt::print("--list's verdicts from the series (job() + analyse + judge per job, what --list does for files "
                 "without a job index): {:.3f} s a job over {} jobs sampled ({}), peak RSS {:.0f} MiB: about {:.0f} s "
                 "for all {:.0f} jobs\n",
                 per_job, v.at("sampled"), v.at("verdicts"), std::stod(v.at("hwm_mib")), per_job * jobs, jobs);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]).rfind("--measure-", 0) == 0) {
    const std::string mode = argv[1];
    try {
      if (mode == "--measure-floor") return measure_floor();
      if (mode == "--measure-job" && argc == 4) return measure_job(argv[2], std::stoull(argv[3]));
      if (mode == "--measure-list" && argc == 3) return measure_list(argv[2]);
      if (mode == "--measure-verdicts" && argc == 4) return measure_verdicts(argv[2], std::stoi(argv[3]));
    } catch (const std::exception& error) {
      std::cerr << "report_bench " << mode << ": " << error.what() << "\n";
      return 1;
    }
    usage();
  }
  const Settings settings = parse(argc, argv);
  spdlog::set_level(spdlog::level::warn);  // the output's "started file" lines
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  fs::path directory;
  if (settings.dir.empty()) {
    char pattern[] = "/tmp/report_bench.XXXXXX";
    if (!mkdtemp(pattern)) return 1;
    directory = pattern;
  } else {
    directory = settings.dir;
    fs::create_directories(directory);
  }
  const auto start = Clock::now();
  int status = 1;
  try {
    status = run(settings, directory, command);
  } catch (const std::exception& error) {
    fmt::print(stderr, "report_bench: {}\n", error.what());
  }
  fmt::print("\nbenchmark time {:.0f} s\n", seconds_since(start));
  if (settings.dir.empty())
    fs::remove_all(directory);
  else
    fmt::print("files kept in {}\n", directory.string());
  return status;
}
