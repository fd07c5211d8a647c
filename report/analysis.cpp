// A job's figures (analysis.h): per node from the summaries of its per-job series (so that
// --list's summaries and a report's series give the same figures), then, from the series, what
// only they give (rates over time, and node_resources.cpp's GPU, energy and network figures).
#include "analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "node_resources.h"

namespace fructosa::report {
namespace {

using Summaries = std::map<std::string, MetricSummary>;
using Labels = std::map<std::string, std::string>;

const MetricSummary* find_summary(const Summaries& summaries, const std::string& name) {
  auto found = summaries.find(name);
  return found == summaries.end() || found->second.count == 0 ? nullptr : &found->second;
}

// As counter_growth, series_max and series_last of the series the summary was made from.
std::optional<double> growth(const Summaries& summaries, const std::string& name) {
  const MetricSummary* summary = find_summary(summaries, name);
  return summary && summary->count >= 2 ? std::optional(summary->growth) : std::nullopt;
}
std::optional<double> highest(const Summaries& summaries, const std::string& name) {
  const MetricSummary* summary = find_summary(summaries, name);
  return summary ? std::optional(summary->max) : std::nullopt;
}
std::optional<double> last(const Summaries& summaries, const std::string& name) {
  const MetricSummary* summary = find_summary(summaries, name);
  return summary ? std::optional(summary->last) : std::nullopt;
}

std::string label(const Labels& labels, const std::string& name) {
  auto found = labels.find(name);
  return found == labels.end() ? std::string() : found->second;
}

void add_to(std::optional<double>& total, std::optional<double> value) {
  if (value) total = total.value_or(0) + *value;
}

std::optional<double> ratio(const std::optional<double>& part, const std::optional<double>& whole) {
  if (!part || !whole || *whole <= 0) return std::nullopt;
  return *part / *whole;
}

// A counter's rate between consecutive numbers (restarts skipped): cores busy for cpu.usage.
Series rates(const Series& counter) {
  Series out;
  std::optional<std::size_t> previous;
  for (std::size_t i = 0; i < counter.values.size(); ++i) {
    if (std::isnan(counter.values[i])) continue;
    if (previous) {
      double dt = static_cast<double>(counter.time_ns[i] - counter.time_ns[*previous]) / 1e9;
      double grew = counter.values[i] - counter.values[*previous];
      if (dt > 0 && grew >= 0) {
        out.time_ns.push_back(counter.time_ns[i]);
        out.values.push_back(grew / dt);
      }
    }
    previous = i;
  }
  return out;
}

Delays delays_of(const Summaries& summaries) {
  Delays delays;
  auto key = [](const char* name) { return std::string("Taskstats.") + name; };
  delays.cpu_s = growth(summaries, key("cpu_delay_total"));
  delays.blkio_s = growth(summaries, key("blkio_delay_total"));
  delays.swapin_s = growth(summaries, key("swapin_delay_total"));
  for (const char* name : {"freepages_delay_total", "thrashing_delay_total", "compact_delay_total"})
    add_to(delays.memory_s, growth(summaries, key(name)));
  // CPU time of the same tasks: user + system, else the scheduler's run time.
  std::optional<double> cpu;
  add_to(cpu, growth(summaries, key("ac_utime")));
  add_to(cpu, growth(summaries, key("ac_stime")));
  if (!cpu) cpu = growth(summaries, key("cpu_run_real_total"));
  if (cpu) {
    delays.active_s = *cpu;
    for (const auto* delay : {&delays.cpu_s, &delays.blkio_s, &delays.swapin_s, &delays.memory_s})
      add_to(delays.active_s, *delay);
  }
  return delays;
}

void add_delays(Delays& total, const Delays& node) {
  add_to(total.cpu_s, node.cpu_s);
  add_to(total.blkio_s, node.blkio_s);
  add_to(total.swapin_s, node.swapin_s);
  add_to(total.memory_s, node.memory_s);
  add_to(total.active_s, node.active_s);
}

// The GPUs the job's own samples name: NvidiaGPU's per-job <gpu>.processes (a GPU in use at
// some sample), and how many its cgroup allows (JobCgroup's key gpus, else its label gpu_minors).
void job_gpus(NodeFigures& node, const Summaries& summaries, const Labels& labels) {
  constexpr std::string_view kPrefix = "NvidiaGPU.", kProcesses = ".processes";
  bool per_job = false;
  std::map<std::string, GpuFigures> used;  // by NVML index
  for (auto it = summaries.lower_bound(std::string(kPrefix)); it != summaries.end(); ++it) {
    const std::string& name = it->first;
    if (name.compare(0, kPrefix.size(), kPrefix) != 0) break;
    per_job |= it->second.count > 0;
    if (name.size() <= kPrefix.size() + kProcesses.size() ||
        name.compare(name.size() - kProcesses.size(), kProcesses.size(), kProcesses) != 0)
      continue;
    // "<gpu>" or a MIG device "<gpu>.mig<k>", counted as its GPU.
    const std::string device = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kProcesses.size());
    const std::string gpu = device.substr(0, device.find('.'));
    auto processes = highest(summaries, name);
    if (!processes || *processes <= 0) continue;
    GpuFigures& figures = used[gpu];
    figures.gpu = gpu;
    figures.used = true;
    if (auto memory = highest(summaries, std::string(kPrefix) + device + ".process_memory"))
      figures.process_memory_peak = std::max(figures.process_memory_peak.value_or(0), *memory);
  }
  for (auto& [gpu, figures] : used) node.gpus.push_back(std::move(figures));
  if (per_job) node.gpus_used = static_cast<double>(node.gpus.size());
  node.gpus_allocated = last(summaries, "JobCgroup.gpus");
  if (!node.gpus_allocated)
    if (auto minors = allocated_gpus(label(labels, "JobCgroup.gpu_minors")))
      node.gpus_allocated = static_cast<double>(minors->size());
  // By count: the GPUs the job used are among those its cgroup allows.
  if (node.gpus_allocated && node.gpus_used)
    node.gpus_without_process = std::max(0.0, *node.gpus_allocated - *node.gpus_used);
}

// A node's figures from the summaries of the job's series on it.
NodeFigures node_from(const std::string& host, std::int64_t first_ns, std::int64_t last_ns,
                      const Summaries& summaries, const Labels& labels) {
  NodeFigures node;
  node.host = host;
  node.first_ns = first_ns;
  node.last_ns = last_ns;
  node.elapsed_s = static_cast<double>(last_ns - first_ns) / 1e9;
  node.cpu_seconds = growth(summaries, "JobCgroup.cpu.usage");
  node.cpus = last(summaries, "JobCgroup.cpus");
  if (node.cpu_seconds && node.elapsed_s > 0) node.cores_used = *node.cpu_seconds / node.elapsed_s;
  if (node.cores_used && node.cpus && *node.cpus > 0) node.cpu_efficiency = *node.cores_used / *node.cpus;
  node.memory_peak = highest(summaries, "JobCgroup.memory.peak");
  if (auto current = highest(summaries, "JobCgroup.memory.current"))
    node.memory_peak = std::max(node.memory_peak.value_or(0), *current);
  node.memory_limit = last(summaries, "JobCgroup.memory.limit");
  node.read_bytes = growth(summaries, "JobProc.read_bytes");
  node.write_bytes = growth(summaries, "JobProc.write_bytes");
  if (node.elapsed_s > 0) {
    if (node.read_bytes) node.read_rate = *node.read_bytes / node.elapsed_s;
    if (node.write_bytes) node.write_rate = *node.write_bytes / node.elapsed_s;
  }
  node.cpu_source = label(labels, "JobCgroup.cpu_source");
  node.instructions = growth(summaries, "PerfHW.instructions");
  node.cycles = growth(summaries, "PerfHW.cpu_cycles");
  node.ipc = ratio(node.instructions, node.cycles);
  node.cache_references = growth(summaries, "PerfHW.cache_references");
  node.cache_misses = growth(summaries, "PerfHW.cache_misses");
  node.cache_miss_ratio = ratio(node.cache_misses, node.cache_references);
  node.delays = delays_of(summaries);
  job_gpus(node, summaries, labels);
  node.user_metrics = user_metrics_of(summaries);
  return node;
}

// Whether node_from reads the series `name`: only those are summarized (a day of a big job is
// millions of points; docs/performance.md).
bool read_by_figures(const std::string& name) {
  static const std::set<std::string, std::less<>> kNames{
      "JobCgroup.cpu.usage", "JobCgroup.cpus", "JobCgroup.memory.peak", "JobCgroup.memory.current",
      "JobCgroup.memory.limit", "JobCgroup.gpus", "JobProc.read_bytes", "JobProc.write_bytes",
      "PerfHW.instructions", "PerfHW.cpu_cycles", "PerfHW.cache_references", "PerfHW.cache_misses",
      "Taskstats.ac_utime", "Taskstats.ac_stime", "Taskstats.cpu_run_real_total", "Taskstats.cpu_delay_total",
      "Taskstats.blkio_delay_total", "Taskstats.swapin_delay_total", "Taskstats.freepages_delay_total",
      "Taskstats.thrashing_delay_total", "Taskstats.compact_delay_total"};
  return kNames.count(name) > 0 || name.rfind("NvidiaGPU.", 0) == 0;
}

Summaries summaries_of(const HostData& host) {
  Summaries summaries;
  for (const auto& [name, series] : host.metrics)
    if (read_by_figures(name)) summaries.emplace(name, summarize(series));
  return summaries;
}

NodeFigures node_figures(const HostData& host) {
  std::int64_t first_ns = std::numeric_limits<std::int64_t>::max();
  std::int64_t last_ns = std::numeric_limits<std::int64_t>::min();
  for (const auto& [name, series] : host.metrics)
    if (!series.time_ns.empty()) {
      first_ns = std::min(first_ns, series.time_ns.front());
      last_ns = std::max(last_ns, series.time_ns.back());
    }
  if (first_ns > last_ns) first_ns = last_ns = 0;
  NodeFigures node = node_from(host.host, first_ns, last_ns, summaries_of(host), host.labels);
  if (auto usage = host.metrics.find("JobCgroup.cpu.usage"); usage != host.metrics.end())
    node.cores_over_time = rates(usage->second);
  if (auto memory = host.metrics.find("JobCgroup.memory.current"); memory != host.metrics.end())
    node.memory_over_time = memory->second;
  add_node_resources(node, host);
  // From the series themselves (summaries_of leaves them out): with their lowest values.
  node.user_metrics = user_metrics_of(host.metrics);
  return node;
}

double memory_ratio(const NodeFigures& node) {
  return node.memory_peak && node.memory_limit && *node.memory_limit > 0 ? *node.memory_peak / *node.memory_limit
                                                                         : -1;
}

bool has_missing(const JobFigures& figures, std::string_view what) {
  return std::any_of(figures.not_collected.begin(), figures.not_collected.end(),
                     [&](const auto& entry) { return entry.first == what; });
}

// The job's figures from its nodes': sums, ratios of sums, the fullest node's memory, and what
// none of them has. `labels`: each node's labels, for the application.
void sum_up(JobFigures& figures, const std::vector<const Labels*>& labels, const std::vector<AppPattern>& site,
            bool with_node_samples) {
  if (!figures.nodes.empty()) {
    figures.first_ns = std::numeric_limits<std::int64_t>::max();
    figures.last_ns = std::numeric_limits<std::int64_t>::min();
    for (const auto& node : figures.nodes) {
      figures.first_ns = std::min(figures.first_ns, node.first_ns);
      figures.last_ns = std::max(figures.last_ns, node.last_ns);
    }
  }
  figures.elapsed_s = static_cast<double>(figures.last_ns - figures.first_ns) / 1e9;
  // The application most nodes ran; on a tie, the first node's.
  std::map<std::string, std::size_t> votes;
  for (const Labels* node_labels : labels)
    if (auto app = application_of(split_commands(label(*node_labels, "JobProc.commands")), site); !app.empty())
      if (++votes[app] > votes[figures.application] || figures.application.empty()) figures.application = app;

  bool any_allocation = false, any_memory = false, any_io = false;
  bool energy_collected = false, energy_unattributed = false, network_collected = false;
  std::optional<double> instructions, cycles, references, misses;
  const NodeFigures* fullest = nullptr;  // the highest peak against its limit (else the highest peak)
  std::size_t gpus_with_utilization = 0;
  double utilization_sum = 0;
  for (const auto& node : figures.nodes) {
    any_allocation |= node.cpus.has_value();
    any_memory |= node.memory_peak.has_value();
    any_io |= node.read_bytes.has_value() || node.write_bytes.has_value();
    add_to(figures.cpu_seconds, node.cpu_seconds);
    add_to(figures.cpus, node.cpus);
    add_to(figures.cores_used, node.cores_used);
    add_to(figures.read_bytes, node.read_bytes);
    add_to(figures.write_bytes, node.write_bytes);
    if (node.cpu_efficiency) {
      figures.efficiency_min = std::min(figures.efficiency_min.value_or(*node.cpu_efficiency), *node.cpu_efficiency);
      figures.efficiency_max = std::max(figures.efficiency_max.value_or(*node.cpu_efficiency), *node.cpu_efficiency);
    }
    if (node.memory_peak &&
        (!fullest || memory_ratio(node) > memory_ratio(*fullest) ||
         (memory_ratio(node) == memory_ratio(*fullest) && *node.memory_peak > *fullest->memory_peak)))
      fullest = &node;
    if (node.instructions && node.cycles) {
      add_to(instructions, node.instructions);
      add_to(cycles, node.cycles);
    }
    if (node.cache_misses && node.cache_references) {
      add_to(misses, node.cache_misses);
      add_to(references, node.cache_references);
    }
    add_delays(figures.delays, node.delays);
    add_to(figures.gpus_allocated, node.gpus_allocated);
    add_to(figures.gpus_used, node.gpus_used);
    add_to(figures.gpus_without_process, node.gpus_without_process);
    for (const auto& gpu : node.gpus) {
      if (gpu.utilization) {
        utilization_sum += *gpu.utilization;
        ++gpus_with_utilization;
      }
      if (auto peak = gpu.memory_peak ? gpu.memory_peak : gpu.process_memory_peak)
        figures.gpu_memory_peak = std::max(figures.gpu_memory_peak.value_or(*peak), *peak);
    }
    energy_collected |= node.energy_collected;
    if (node.energy_collected) {
      energy_unattributed |= !node.rapl_joules && !node.ipmi_joules;
      figures.energy_apportioned |= node.use != NodeUse::alone;
      add_to(figures.rapl_joules, node.rapl_joules);
      add_to(figures.ipmi_joules, node.ipmi_joules);
    }
    network_collected |= node.network_collected;
    if (node.network_collected && node.use != NodeUse::alone) figures.network_shared = true;
    add_to(figures.net_sent, node.net_sent);
    add_to(figures.net_received, node.net_received);
    add_to(figures.ib_sent, node.ib_sent);
    add_to(figures.ib_received, node.ib_received);
    merge_user_metrics(figures.user_metrics, node.user_metrics);
  }
  if (figures.nodes.size() < 2) figures.efficiency_min = figures.efficiency_max = std::nullopt;
  if (figures.cores_used && figures.cpus && *figures.cpus > 0) figures.cpu_efficiency = *figures.cores_used / *figures.cpus;
  if (fullest) {
    figures.memory_peak = fullest->memory_peak;
    figures.memory_limit = fullest->memory_limit;
  }
  if (figures.elapsed_s > 0) {
    if (figures.read_bytes) figures.read_rate = *figures.read_bytes / figures.elapsed_s;
    if (figures.write_bytes) figures.write_rate = *figures.write_bytes / figures.elapsed_s;
  }
  figures.ipc = ratio(instructions, cycles);
  figures.cache_miss_ratio = ratio(misses, references);
  if (gpus_with_utilization > 0) figures.gpu_utilization = utilization_sum / static_cast<double>(gpus_with_utilization);
  if (energy_unattributed) figures.rapl_joules = figures.ipmi_joules = std::nullopt;
  if (figures.network_shared) figures.net_sent = figures.net_received = figures.ib_sent = figures.ib_received = std::nullopt;

  auto missing = [&](std::string what, std::string enable) { figures.not_collected.emplace_back(std::move(what), std::move(enable)); };
  if (!figures.cpu_seconds) missing("CPU time", "[sensor:JobCgroup]");
  if (!any_allocation) missing("CPU allocation", "[sensor:JobCgroup] and a cpuset cgroup");
  if (!any_memory) missing("memory", "[sensor:JobCgroup] and a memory cgroup");
  if (!any_io) missing("I/O", "[sensor:JobProc]");
  if (!cycles) missing("IPC", "[sensor:PerfHW] with scope = job");
  else if (!references) missing("cache misses", "[sensor:PerfHW] events cache_references and cache_misses");
  if (!figures.delays.active_s) missing("delays", "[sensor:Taskstats]");
  else if (!figures.delays.blkio_s) missing("I/O delays", "delay accounting: sysctl kernel.task_delayacct=1");
  if (figures.gpus_allocated.value_or(0) > 0 && !figures.gpus_used) missing("GPU", "[sensor:NvidiaGPU]");
  if (!with_node_samples) return;
  if (figures.gpus_used && (figures.gpus_used.value_or(0) > 0 || figures.gpus_allocated.value_or(0) > 0) &&
      !figures.gpu_utilization)
    missing("GPU utilization", "[sensor:NvidiaGPU] (its node samples)");
  if (!energy_collected) missing("energy", "[sensor:RAPL] or [sensor:IPMIPower]");
  else if (energy_unattributed) missing("energy", "[sensor:CPUTimes] (to apportion a shared node's energy)");
  if (!network_collected) missing("network", "[sensor:NetIOCounters] or [sensor:InfiniBand]");
}

}  // namespace

std::optional<double> Delays::share(const std::optional<double>& delay) const {
  if (!delay || !active_s || *active_s <= 0) return std::nullopt;
  return *delay / *active_s;
}

// One rule for a counter's growth, a series' highest and last number: summarize()'s, which
// lmaster's job index keeps too.
std::optional<double> counter_growth(const Series& series) {
  MetricSummary summary = summarize(series);
  return summary.count >= 2 ? std::optional(summary.growth) : std::nullopt;
}

std::optional<double> series_max(const Series& series) {
  MetricSummary summary = summarize(series);
  return summary.count > 0 ? std::optional(summary.max) : std::nullopt;
}

std::optional<double> series_last(const Series& series) {
  MetricSummary summary = summarize(series);
  return summary.count > 0 ? std::optional(summary.last) : std::nullopt;
}

JobFigures analyse(const JobData& job, const std::vector<AppPattern>& site) {
  JobFigures figures;
  figures.id = job.id;
  std::vector<const Labels*> labels;
  for (const auto& host : job.hosts) {
    if (figures.user.empty()) figures.user = label(host.labels, "JobCgroup.user");
    figures.nodes.push_back(node_figures(host));
    labels.push_back(&host.labels);
  }
  sum_up(figures, labels, site, true);
  return figures;
}

JobFigures analyse(const JobSummary& job, const std::vector<AppPattern>& site) {
  JobFigures figures;
  figures.id = job.id;
  figures.user = job.user;
  figures.first_ns = job.first_ns;
  figures.last_ns = job.last_ns;
  std::vector<const Labels*> labels;
  for (const auto& host : job.per_host) {
    if (figures.user.empty()) figures.user = label(host.labels, "JobCgroup.user");
    figures.nodes.push_back(node_from(host.host, host.first_ns, host.last_ns, host.metrics, host.labels));
    labels.push_back(&host.labels);
  }
  sum_up(figures, labels, site, false);
  return figures;
}

void set_request(JobFigures& figures, std::optional<SlurmRequest> request) {
  figures.request = std::move(request);
  if (figures.request && figures.request->gpus.value_or(0) > 0 && !figures.gpus_used && !has_missing(figures, "GPU"))
    figures.not_collected.emplace_back("GPU", "[sensor:NvidiaGPU]");
}

std::string percent(double fraction) { return fmt::format("{:.0f}%", 100 * fraction); }

std::string round_figure(double value) {
  double magnitude = std::fabs(value);
  std::string text = magnitude >= 10 ? fmt::format("{:.0f}", value)
                     : magnitude >= 0.995 || magnitude == 0 ? fmt::format("{:.1f}", value)
                                                            : fmt::format("{:.2f}", value);
  if (text.find('.') != std::string::npos) {  // "0.40" -> "0.4", "4.0" -> "4"
    while (text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
  }
  return text;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t unit = 0;
  while (std::fabs(bytes) >= 1024 && unit + 1 < std::size(units)) {
    bytes /= 1024;
    ++unit;
  }
  return fmt::format("{} {}", round_figure(bytes), units[unit]);
}

std::string format_duration(double seconds) {
  auto total = static_cast<std::int64_t>(std::llround(std::max(0.0, seconds)));
  std::int64_t days = total / 86400, hours = total / 3600 % 24, minutes = total / 60 % 60, secs = total % 60;
  if (days > 0) return fmt::format("{}-{:02}:{:02}:{:02}", days, hours, minutes, secs);
  return fmt::format("{}:{:02}:{:02}", hours, minutes, secs);
}

std::string format_energy(double joules) {
  // Watt-hours, as an electricity bill writes energy: "350 Wh", "1.2 kWh", "3.4 MWh".
  double wh = joules / 3600;
  if (std::fabs(wh) >= 1e6) return round_figure(wh / 1e6) + " MWh";
  if (std::fabs(wh) >= 1e3) return round_figure(wh / 1e3) + " kWh";
  return round_figure(wh) + " Wh";
}

}  // namespace fructosa::report
