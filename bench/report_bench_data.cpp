// report_bench_data.h: the data sets, written with lmaster's Hdf5Output.
#include "report_bench_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "config.h"
#include "hdf5_output.h"
#include "sensor.h"

namespace fructosa::report_bench {

namespace fs = std::filesystem;

namespace {

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


struct PlannedJob {
  std::uint64_t id;
  std::int64_t start_ns, end_ns;
  int first_node, nodes;
  std::string user;
  double cpus, limit, efficiency;
};

}  // namespace

Generated write_job(const DataSettings& s, const fs::path& directory) {
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

Generated write_month(const DataSettings& s, const fs::path& directory, std::size_t* job_count) {
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

}  // namespace fructosa::report_bench
