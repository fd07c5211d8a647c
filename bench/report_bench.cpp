// fructosa-report's performance targets (docs/performance.md, "fructosa-report"), measured on
// files written by lmaster's own HDF5 output (Hdf5Output, layout per_sensor, lmaster's options):
//
//   1. The report of one job: a --nodes node job (64) sampled every --interval s (10) for --hours
//      (24) by the default per-job sensors (JobCgroup and JobProc, with their node samples), in
//      files rotated every --job-rotate-hours (1: lmaster's rotate_age = 3600). Measured: the
//      wall time of Hdf5Source::job + analyse + judge + render_json (and render_text), and the
//      peak RSS. Target: <= 1 s and <= 200 MiB.
//   2. --list over a month: --days (30) files of --list-rotate-hours (24) each, of --list-nodes
//      (64) nodes with CPUPercent (--cpus keys) and VirtualMemory every 60 s, JobCgroup's node
//      samples and --jobs-per-day (100) jobs of 1-16 nodes with JobCgroup every 10 s (and
//      JobProc with --list-jobproc). Measured: Hdf5Source::jobs() (what --list reads first) and,
//      on --verdict-sample jobs, job() + analyse + judge (what --list then does for every job),
//      extrapolated to the whole list. Target: <= 2 s.
//
//   bench/report_bench [--dir DIR] [--repeat N] [--nodes N] [--hours H] [--interval S]
//                      [--job-rotate-hours H] [--days D] [--list-nodes N] [--cpus N]
//                      [--jobs-per-day N] [--list-rotate-hours H] [--list-jobproc]
//                      [--verdict-sample N] [--skip-job] [--skip-list]
//
// Every measurement runs in a fresh process (this program exec'd again with --measure-...), so
// that its peak RSS (VmHWM, ru_maxrss) is the reader's alone, not the writer's: the figures are
// the median of --repeat runs, with the files in the page cache (they were just written). The
// data is written into a temporary directory (removed at the end) or into --dir (kept).
// Generation flushes every 60 s of simulated time (lmaster flushes every 5 s of wall time): the
// closed files are rewritten compressed either way, so what is read is the same.
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
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "analysis.h"
#include "config.h"
#include "hdf5_output.h"
#include "hdf5_source.h"
#include "render.h"
#include "sensor.h"

using namespace fructosa;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr std::int64_t kSecond = 1'000'000'000;
// 2026-11-01T00:00:00Z: the month starts at midnight.
constexpr std::int64_t kStartNs = 1'793'491'200LL * kSecond;
constexpr std::uint64_t kReportedJob = 4'242'424;
constexpr double kGiB = 1024.0 * 1024 * 1024;

struct Settings {
  std::string dir;
  int repeat = 3;
  // The report of one job.
  int nodes = 64;
  double hours = 24;
  double interval = 10;
  double job_rotate_hours = 1;
  // --list over a month.
  double days = 30;
  int list_nodes = 64;
  int cpus = 32;
  int jobs_per_day = 100;
  double list_rotate_hours = 24;
  bool list_jobproc = false;
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

// splitmix64: deterministic, cheap, good enough for plausible noise.
struct Random {
  std::uint64_t state;
  explicit Random(std::uint64_t seed) : state(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double between(double low, double high) { return low + (high - low) * uniform(); }
  int integer(int low, int high) { return low + static_cast<int>(next() % (high - low + 1)); }
};

std::string host_name(int h) { return fmt::format("cn{:04d}", h + 1); }

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
  std::size_t metrics = 0, points = 0;
  for (const auto& host : data->hosts)
    for (const auto& [name, series] : host.metrics) {
      ++metrics;
      points += series.values.size();
    }
  fmt::print("files={}\nhosts={}\nmetrics={}\npoints={}\n", source.files().size(), data->hosts.size(),
             metrics, points);
  fmt::print("open_s={:.4f}\nread_s={:.4f}\nanalyse_s={:.4f}\njudge_s={:.4f}\njson_s={:.4f}\n", open,
             read - open, analysed - read, judged - analysed, json_done - judged);
  fmt::print("total_s={:.4f}\ntext_s={:.4f}\njson_bytes={}\ntext_bytes={}\nverdict={}\n", json_done,
             text_time, json.size(), text.size(), verdict.word);
  print_memory();
  return 0;
}

// --measure-list WHERE: Hdf5Source::jobs(), what --list reads before anything else.
int measure_list(const std::string& where) {
  const auto start = Clock::now();
  report::Hdf5Source source(where);
  const double open = seconds_since(start);
  auto jobs = source.jobs();
  const double total = seconds_since(start);
  std::set<std::string> hosts;
  for (const auto& job : jobs) hosts.insert(job.hosts.begin(), job.hosts.end());
  fmt::print("files={}\njobs={}\nhosts={}\nopen_s={:.4f}\ntotal_s={:.4f}\n", source.files().size(),
             jobs.size(), hosts.size(), open, total);
  print_memory();
  return 0;
}

// --measure-verdicts WHERE N: job() + analyse + judge for N jobs spread over the list (what
// --list does for each job once jobs() has listed them), timed apart from jobs().
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

// ---------------------------------------------------------------------------------------------
// Writing, with lmaster's Hdf5Output.

// A series written by one Hdf5Output, a new file (reopen()) every `rotate_ns` of simulated time,
// the files renamed after the simulated time they start at, as if lmaster had written them live.
class Writer {
 public:
  Writer(const fs::path& link, std::int64_t rotate_ns) : link_(link), rotate_ns_(rotate_ns) {
    // lmaster's defaults, but rotation: the files are started at simulated times (reopen()).
    const Options options =
        parse_pairs(master::Hdf5Output::hdf5_options(), {"path=" + link.string(), "rotate_age=0"}, "bench");
    output_ = std::make_unique<master::Hdf5Output>(options, infos_);
    files_.push_back({output_->file(), kStartNs});
    file_start_ns_ = kStartNs;
  }

  // Describes the keys lmaster would have learnt from the agents' dictionaries.
  void describe(const std::vector<Sample>& samples) {
    for (const auto& sample : samples)
      for (const auto& metric : sample.metrics)
        if (described_.emplace(sample.sensor, metric.key).second)
          infos_.remember(sample.sensor, metric.key, sensors::metric_info(sample.sensor, metric.key));
  }

  // Rows of time `time_ns`: a new file first when the file is rotate_ns old (simulated).
  void write(std::int64_t time_ns, const std::vector<Sample>& samples) {
    if (rotate_ns_ > 0 && time_ns >= file_start_ns_ + rotate_ns_) {
      output_->reopen();
      file_start_ns_ += rotate_ns_;
      files_.push_back({output_->file(), file_start_ns_});
    }
    describe(samples);
    const std::size_t step = output_->batch_samples();
    for (std::size_t i = 0; i < samples.size(); i += step)
      output_->write(std::span(samples).subspan(i, std::min(step, samples.size() - i)));
    for (const auto& sample : samples) points_ += sample.metrics.size();
    rows_ += samples.size();
  }
  void flush() { output_->flush(); }

  // Closes (and compresses) the last file, renames every file after its simulated start and
  // points the link at the last one.
  void close() {
    output_.reset();
    const std::string stem = link_.stem().string(), extension = link_.extension().string();
    fs::path last;
    for (const auto& [file, start_ns] : files_) {
      const std::time_t when = static_cast<std::time_t>(start_ns / kSecond);
      std::tm tm{};
      gmtime_r(&when, &tm);
      char stamp[32];
      std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
      fs::path renamed = link_.parent_path() / (stem + "-" + stamp + extension);
      fs::rename(file, renamed);
      last = renamed;
    }
    fs::remove(link_);
    fs::create_symlink(last.filename(), link_);
  }

  std::uint64_t points() const { return points_; }
  std::uint64_t rows() const { return rows_; }
  std::size_t files() const { return files_.size(); }

 private:
  fs::path link_;
  std::int64_t rotate_ns_;
  std::int64_t file_start_ns_ = 0;
  master::MetricInfoStore infos_;
  std::unique_ptr<master::Hdf5Output> output_;
  std::set<std::pair<std::string, std::string>> described_;
  std::vector<std::pair<std::string, std::int64_t>> files_;
  std::uint64_t points_ = 0, rows_ = 0;
};

std::uintmax_t bytes_of(const fs::path& directory) {
  std::uintmax_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(directory))
    if (entry.is_regular_file() && !entry.is_symlink() && entry.path().extension() == ".h5")
      bytes += entry.file_size();
  return bytes;
}

Sample make_sample(const std::string& host, const char* sensor, std::uint64_t job,
                   std::initializer_list<const char*> keys, std::initializer_list<Label> labels = {}) {
  Sample sample;
  sample.host = host;
  sample.sensor = sensor;
  sample.job = job;
  for (const char* key : keys) sample.metrics.push_back({key, 0});
  sample.labels = labels;
  return sample;
}

// One job on one node: the JobCgroup (and JobProc) samples it gets every interval, with
// plausible values (counters that grow, gauges that wander, whole bytes and counts).
struct JobOnNode {
  Sample cgroup, proc;
  std::uint64_t job = 0;
  std::int64_t end_ns = 0;
  std::size_t node = 0;
  double efficiency = 0.5, cpus = 32, limit = 0, memory_share = 0.5, memory = 0, peak = 0;
  double usage = 0, user = 0, system = 0;
  double rchar = 0, wchar = 0, syscr = 0, syscw = 0, read_bytes = 0, write_bytes = 0, cancelled = 0;

  JobOnNode(const std::string& host, std::uint64_t id, const std::string& user_name, double job_cpus,
            double job_limit, double job_efficiency, Random& random)
      : job(id), efficiency(job_efficiency), cpus(job_cpus), limit(job_limit) {
    cgroup = make_sample(host, "JobCgroup", id,
                         {"cpu.usage", "cpu.user", "cpu.system", "memory.current", "memory.peak", "tasks",
                          "cpus", "memory.limit"},
                         {{"cpu_source", "cgroup"}, {"user", user_name}});
    proc = make_sample(host, "JobProc", id,
                       {"processes", "unreadable_processes", "rchar", "wchar", "syscr", "syscw", "read_bytes",
                        "write_bytes", "cancelled_write_bytes", "vm_rss", "rss_shmem", "vm_size", "vm_hwm",
                        "vm_swap"},
                       {{"commands", "python3,srun,bash"}});
    memory_share = random.between(0.02, 0.95);
  }

  void step(std::int64_t time_ns, double interval, Random& random) {
    const double busy = std::clamp(efficiency * cpus * random.between(0.8, 1.2), 0.0, cpus) * interval;
    usage += std::round(busy * 1e6) / 1e6;
    user += std::round(busy * 0.93 * 1e6) / 1e6;
    system = usage - user;
    memory = std::floor(limit * memory_share * random.between(0.9, 1.05) / 4096) * 4096;
    peak = std::max(peak, memory);
    const double tasks = std::round(cpus * std::max(efficiency, 0.05)) + 2;
    auto& c = cgroup.metrics;
    cgroup.time_ns = time_ns;
    c[0].value = usage;
    c[1].value = user;
    c[2].value = system;
    c[3].value = memory;
    c[4].value = peak;
    c[5].value = tasks;
    c[6].value = cpus;
    c[7].value = limit;
    const double bytes = std::floor(random.between(0, 64.0 * 1024 * 1024 * interval));
    rchar += bytes + 4096;
    wchar += std::floor(bytes * 0.3);
    syscr += std::floor(bytes / 65536) + 10;
    syscw += std::floor(bytes / 262144) + 3;
    read_bytes += std::floor(bytes * 0.2 / 4096) * 4096;
    write_bytes += std::floor(bytes * 0.25 / 4096) * 4096;
    if (random.uniform() < 0.01) cancelled += 4096;
    auto& p = proc.metrics;
    proc.time_ns = time_ns;
    p[0].value = tasks;
    p[1].value = 0;
    p[2].value = rchar;
    p[3].value = wchar;
    p[4].value = syscr;
    p[5].value = syscw;
    p[6].value = read_bytes;
    p[7].value = write_bytes;
    p[8].value = cancelled;
    p[9].value = std::floor(memory * 0.9 / 4096) * 4096;
    p[10].value = std::floor(memory * 0.02 / 4096) * 4096;
    p[11].value = std::floor(memory * 2.5 / 4096) * 4096;
    p[12].value = std::floor(peak * 0.9 / 4096) * 4096;
    p[13].value = 0;
  }
};

struct Generated {
  double seconds = 0;
  std::uint64_t points = 0, rows = 0;
  std::size_t files = 0;
  std::uintmax_t bytes = 0;
};

// 1. One job on `nodes` nodes for `hours`, every `interval` s, with the nodes' own JobCgroup and
// JobProc samples (jobs = 1), in files of job_rotate_hours.
Generated write_job(const Settings& s, const fs::path& directory) {
  const auto start = Clock::now();
  fs::create_directories(directory);
  Writer writer(directory / "fructosa.h5",
                static_cast<std::int64_t>(std::llround(s.job_rotate_hours * 3600)) * kSecond);
  Random random(1);
  std::vector<JobOnNode> nodes;
  std::vector<Sample> node_rows;
  for (int h = 0; h < s.nodes; ++h) {
    nodes.emplace_back(host_name(h), kReportedJob, "alice", 32, 128 * kGiB, 0.55 + 0.3 * random.uniform(), random);
    nodes.back().memory_share = random.between(0.3, 0.6);
    node_rows.push_back(make_sample(host_name(h), "JobCgroup", 0, {"jobs"}));
    node_rows.push_back(make_sample(host_name(h), "JobProc", 0, {"jobs"}, {{"involved_jobs", std::to_string(kReportedJob)}}));
  }
  const auto interval_ns = static_cast<std::int64_t>(std::llround(s.interval * 1e9));
  const auto rounds = static_cast<std::int64_t>(std::llround(s.hours * 3600 / s.interval));
  const std::int64_t flush_every = std::max<std::int64_t>(1, std::llround(60 / s.interval));
  std::vector<Sample> batch;
  for (std::int64_t r = 0; r < rounds; ++r) {
    const std::int64_t time_ns = kStartNs + r * interval_ns;
    batch.clear();
    for (auto& row : node_rows) {
      row.time_ns = time_ns;
      row.metrics[0].value = 1;
    }
    for (auto& node : nodes) node.step(time_ns, s.interval, random);
    writer.write(time_ns, node_rows);
    for (auto& node : nodes) batch.push_back(node.cgroup), batch.push_back(node.proc);
    writer.write(time_ns, batch);
    if ((r + 1) % flush_every == 0) writer.flush();
  }
  writer.flush();
  writer.close();
  return {seconds_since(start), writer.points(), writer.rows(), writer.files(), bytes_of(directory)};
}

struct PlannedJob {
  std::uint64_t id;
  std::int64_t start_ns, end_ns;
  int first_node, nodes;
  std::string user;
  double cpus, limit, efficiency;
};

// 2. A month: `list_nodes` nodes with CPUPercent (percpu, `cpus` keys) and VirtualMemory every
// 60 s, JobCgroup's node samples every 10 s, and jobs_per_day jobs a day (start uniform over
// the day, 1-16 contiguous nodes, 5 min - 8 h log-uniform: about the cluster's capacity) with
// JobCgroup (and JobProc) every 10 s.
Generated write_month(const Settings& s, const fs::path& directory, std::size_t* job_count) {
  const auto start = Clock::now();
  fs::create_directories(directory);
  Writer writer(directory / "fructosa.h5",
                static_cast<std::int64_t>(std::llround(s.list_rotate_hours * 3600)) * kSecond);
  Random random(2);
  const std::int64_t end_ns = kStartNs + static_cast<std::int64_t>(std::llround(s.days * 86400)) * kSecond;
  std::vector<PlannedJob> planned;
  std::uint64_t next_id = 5'100'000;
  for (int day = 0; day < static_cast<int>(std::ceil(s.days)); ++day)
    for (int j = 0; j < s.jobs_per_day; ++j) {
      PlannedJob job;
      job.id = next_id++;
      job.start_ns = kStartNs + day * 86400 * kSecond +
                     static_cast<std::int64_t>(random.between(0, 86400)) / 10 * 10 * kSecond;
      const double minutes = std::exp(random.between(std::log(5.0), std::log(480.0)));
      job.end_ns = std::min(end_ns, job.start_ns + static_cast<std::int64_t>(minutes * 60) * kSecond);
      job.nodes = std::min(s.list_nodes, random.integer(1, 16));
      job.first_node = random.integer(0, s.list_nodes - job.nodes);
      job.user = fmt::format("user{:02d}", random.integer(1, 40));
      job.cpus = std::array{8.0, 16.0, 32.0}[random.next() % 3];
      job.limit = job.cpus * 4 * kGiB;
      job.efficiency = random.uniform();
      if (job.start_ns < end_ns) planned.push_back(job);
    }
  std::sort(planned.begin(), planned.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  *job_count = planned.size();

  std::vector<Sample> node_samples, cgroup_nodes;
  std::vector<std::string> cpu_keys;
  for (int c = 0; c < s.cpus; ++c) cpu_keys.push_back(std::to_string(c));
  for (int h = 0; h < s.list_nodes; ++h) {
    Sample cpu = make_sample(host_name(h), "CPUPercent", 0, {});
    for (const auto& key : cpu_keys) cpu.metrics.push_back({key, 0});
    node_samples.push_back(std::move(cpu));
    node_samples.push_back(make_sample(host_name(h), "VirtualMemory", 0,
                                       {"total", "available", "percent", "used", "free", "active", "inactive",
                                        "buffers", "cached", "shared", "slab"}));
    cgroup_nodes.push_back(make_sample(host_name(h), "JobCgroup", 0, {"jobs"}));
    if (s.list_jobproc)
      cgroup_nodes.push_back(make_sample(host_name(h), "JobProc", 0, {"jobs"}, {{"involved_jobs", ""}}));
  }
  const std::size_t per_node = s.list_jobproc ? 2 : 1;

  std::vector<JobOnNode> running;
  std::vector<Sample> batch;
  std::vector<int> jobs_on(static_cast<std::size_t>(s.list_nodes), 0);
  std::size_t next_job = 0;
  const std::int64_t interval_ns = 10 * kSecond;
  for (std::int64_t time_ns = kStartNs, r = 0; time_ns < end_ns; time_ns += interval_ns, ++r) {
    // Jobs that ended leave, jobs that start arrive.
    std::erase_if(running, [&](const JobOnNode& job) { return job.end_ns <= time_ns; });
    for (; next_job < planned.size() && planned[next_job].start_ns <= time_ns; ++next_job) {
      const auto& job = planned[next_job];
      for (int n = 0; n < job.nodes; ++n) {
        running.emplace_back(host_name(job.first_node + n), job.id, job.user, job.cpus, job.limit, job.efficiency,
                             random);
        running.back().end_ns = job.end_ns;
        running.back().node = static_cast<std::size_t>(job.first_node + n);
      }
    }
    std::fill(jobs_on.begin(), jobs_on.end(), 0);
    batch.clear();
    for (auto& job : running) {
      job.step(time_ns, 10, random);
      jobs_on[job.node]++;
      batch.push_back(job.cgroup);
      if (s.list_jobproc) batch.push_back(job.proc);
    }
    for (std::size_t i = 0; i < cgroup_nodes.size(); ++i) {
      cgroup_nodes[i].time_ns = time_ns;
      cgroup_nodes[i].metrics[0].value = jobs_on[i / per_node];
    }
    writer.write(time_ns, cgroup_nodes);
    if (!batch.empty()) writer.write(time_ns, batch);
    if (r % 6 == 0) {
      for (std::size_t i = 0; i < node_samples.size(); i += 2) {
        Sample& cpu = node_samples[i];
        Sample& memory = node_samples[i + 1];
        const double load = std::min(1.0, jobs_on[i / 2] * 0.4);
        cpu.time_ns = memory.time_ns = time_ns;
        for (auto& metric : cpu.metrics) metric.value = std::round(std::clamp(load * 100 * random.between(0.5, 1.1), 0.0, 100.0) * 10) / 10;
        const double total = 256 * kGiB, used = std::floor(total * (0.03 + 0.5 * load * random.between(0.8, 1.0)) / 4096) * 4096;
        const double values[] = {total, total - used, std::round(used / total * 1000) / 10, used, total - used * 1.3,
                                 used * 0.8, used * 0.3, 512.0 * 1024 * 1024, used * 0.25, 64.0 * 1024 * 1024,
                                 2 * kGiB};
        for (std::size_t k = 0; k < memory.metrics.size(); ++k) memory.metrics[k].value = std::floor(values[k]);
        memory.metrics[2].value = values[2];
      }
      writer.write(time_ns, node_samples);
      writer.flush();
    }
  }
  writer.flush();
  writer.close();
  return {seconds_since(start), writer.points(), writer.rows(), writer.files(), bytes_of(directory)};
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
        "read: {} file(s), {} hosts, {} series, {} points; verdict {}; json {} bytes, text {} bytes\n",
        m.median.at("files"), m.median.at("hosts"), m.median.at("metrics"), m.median.at("points"),
        m.median.at("verdict"), m.median.at("json_bytes"), m.median.at("text_bytes"));
    fmt::print("phases (median run): open {:.3f} s, job() {:.3f} s, analyse {:.3f} s, judge {:.3f} s, "
               "render_json {:.3f} s; render_text {:.3f} s\n",
               m.get("open_s"), m.get("read_s"), m.get("analyse_s"), m.get("judge_s"), m.get("json_s"),
               m.get("text_s"));
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
    fmt::print("--list's jobs() over {} files ({} jobs, {} hosts): {:.2f} s, peak RSS {:.0f} MiB (target <= 2 s) "
               "[median of {}: {:.2f}-{:.2f} s, {:.0f}-{:.0f} MiB; Hdf5Source + jobs()]\n",
               m.median.at("files"), m.median.at("jobs"), m.median.at("hosts"), m.get("total_s"), m.get("hwm_mib"),
               s.repeat, m.fastest, m.slowest, m.hwm_low, m.hwm_high);
    if (s.verdict_sample > 0) {
      const Figures v = measure({"--measure-verdicts", link, std::to_string(s.verdict_sample)});
      const double per_job = std::stod(v.at("per_job_s"));
      const double jobs = std::stod(v.at("jobs"));
      fmt::print("--list's verdicts (job() + analyse + judge per job, as fructosa-report --list does): "
                 "{:.3f} s a job over {} jobs sampled ({}), peak RSS {:.0f} MiB: about {:.0f} s for all {:.0f} jobs; "
                 "--list in all about {:.0f} s\n",
                 per_job, v.at("sampled"), v.at("verdicts"), std::stod(v.at("hwm_mib")), per_job * jobs, jobs,
                 per_job * jobs + m.get("total_s"));
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
