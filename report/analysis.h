// What fructosa-report says of a job: its figures per node and in all (from JobData, whatever
// the source, or from the per-host summaries of JobSummary for --list), and a verdict from
// rules, each firing rule a note with advice. docs/report.md says how each figure is computed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "applications.h"
#include "job_data.h"
#include "slurm_request.h"
#include "user_metrics.h"

namespace fructosa::report {

// A counter's growth over a series: the sum of its rises, a fall counting as a restart from 0
// (an agent restarted, a job's cgroup made again). NaN points are skipped; nullopt when the
// series has fewer than two numbers.
std::optional<double> counter_growth(const Series& series);
// The largest / last number of a series (nullopt when it has none).
std::optional<double> series_max(const Series& series);
std::optional<double> series_last(const Series& series);

// Over a window [from_ns, to_ns] of a node's series (HostData::node_metrics start at or before a
// job and end at or after it):
// a counter's growth, each rise between consecutive numbers (a fall: a restart from 0) counted
// for the part of its interval inside the window; nullopt when no interval overlaps it.
std::optional<double> window_growth(const Series& counter, std::int64_t from_ns, std::int64_t to_ns);
// The integral over the window of a gauge (watts -> joules), linear between consecutive numbers;
// nullopt when no interval overlaps it.
std::optional<double> window_integral(const Series& gauge, std::int64_t from_ns, std::int64_t to_ns);
// The mean and the largest of the numbers sampled inside the window (nullopt when none is).
std::optional<double> window_mean(const Series& gauge, std::int64_t from_ns, std::int64_t to_ns);
std::optional<double> window_max(const Series& gauge, std::int64_t from_ns, std::int64_t to_ns);

// Taskstats' delays of a job's tasks (summed over its threads), and the time they ran or waited:
// CPU time (ac_utime + ac_stime) plus these delays, the basis of their shares.
struct Delays {
  std::optional<double> cpu_s;     // cpu_delay_total: runnable, waiting for a CPU
  std::optional<double> blkio_s;   // blkio_delay_total: synchronous block I/O
  std::optional<double> swapin_s;  // swapin_delay_total
  std::optional<double> memory_s;  // freepages + thrashing + compact delay totals: memory reclaim
  std::optional<double> active_s;  // CPU time + the delays above
  // delay / active_s: the share of the time its tasks ran or waited that they spent waiting so.
  std::optional<double> share(const std::optional<double>& delay) const;
};

// A GPU of a node that the job was allocated (JobCgroup's label `gpu_minors`) or had processes on.
struct GpuFigures {
  std::string gpu;                 // NVML's index ("0"), the key of NvidiaGPU's <gpu>.* series
  std::optional<double> minor;     // its /dev/nvidia<minor> (NvidiaGPU <gpu>.minor)
  bool allocated = false;          // its minor is in the job's cgroup's gpu_minors
  bool used = false;               // the job had compute processes on it (<gpu>.processes > 0)
  std::optional<double> utilization;          // 0..1: mean of the node's <gpu>.utilization_gpu over the span
  std::optional<double> memory_peak;          // the node's <gpu>.memory_used, highest over the span
  std::optional<double> memory_total;         // <gpu>.memory_total
  std::optional<double> process_memory_peak;  // the job's <gpu>.process_memory, highest
  Series utilization_over_time;               // 0..1, the node's samples over the span (plots)
};

// Whether the job had a node to itself over its span (JobCgroup's or JobProc's node key `jobs`).
enum class NodeUse { unknown, alone, shared };

struct NodeFigures {
  std::string host;
  std::int64_t first_ns = 0, last_ns = 0;  // the job's first and last sample on this node
  double elapsed_s = 0;
  std::optional<double> cpu_seconds;     // JobCgroup cpu.usage's growth
  std::optional<double> cpus;            // allocated: JobCgroup cpus (its cpuset)
  std::optional<double> cores_used;      // cpu_seconds / elapsed: cores busy on average
  std::optional<double> cpu_efficiency;  // cores_used / cpus
  std::optional<double> memory_peak;     // JobCgroup memory.peak (else memory.current), highest
  std::optional<double> memory_limit;    // JobCgroup memory.limit
  std::optional<double> read_bytes, write_bytes;  // JobProc read_bytes/write_bytes growth
  std::optional<double> read_rate, write_rate;    // those / elapsed, bytes/s
  std::string cpu_source;                // JobCgroup's label: "cgroup" or "processes"
  // PerfHW (per job): instructions / cpu_cycles and cache_misses / cache_references, the
  // counters' growth (kept for the sums over nodes).
  std::optional<double> instructions, cycles, ipc;
  std::optional<double> cache_references, cache_misses, cache_miss_ratio;
  Delays delays;  // Taskstats (per job)
  // GPUs: from the job's NvidiaGPU samples (processes per GPU), its cgroup's allocation and the
  // node's NvidiaGPU samples (utilization, memory).
  std::vector<GpuFigures> gpus;
  std::optional<double> gpus_allocated;          // JobCgroup's gpus (else its gpu_minors): how many
  std::optional<double> gpus_used;               // with a process of the job at some sample
  std::optional<double> gpus_without_process;    // allocated, but no process of the job ever on them
  // Energy of the node over the job's span (RAPL counters' growth, IPMI power integrated),
  // attributed to the job: whole when it had the node alone, else times cpu_share.
  NodeUse use = NodeUse::unknown;
  std::optional<double> cpu_share;  // the job's CPU time / the node's busy CPU time (CPUTimes)
  std::optional<double> rapl_joules, ipmi_joules;
  bool energy_collected = false;    // the node has RAPL or IPMIPower samples over the span
  // Network of the node over the span (NetIOCounters, InfiniBand), only when it had the node alone.
  std::optional<double> net_sent, net_received, ib_sent, ib_received;
  bool network_collected = false;   // the node has NetIOCounters or InfiniBand samples over the span
  // Cores busy between consecutive samples, and memory charged at each sample (sparklines, plots).
  Series cores_over_time, memory_over_time;
  // What the job's processes pushed on this node (sensor User), by name.
  std::vector<UserMetric> user_metrics;
};

struct JobFigures {
  std::uint64_t id = 0;
  std::string user;
  // What it ran (applications.h), from JobProc's label `commands`: the application most of its
  // nodes ran ("" when unknown).
  std::string application;
  std::int64_t first_ns = 0, last_ns = 0;
  double elapsed_s = 0;
  std::vector<NodeFigures> nodes;
  // Over the nodes that have them (sums; memory: the highest node's peak and its limit).
  std::optional<double> cpu_seconds, cpus, cores_used, cpu_efficiency;
  std::optional<double> memory_peak, memory_limit;
  std::optional<double> read_bytes, write_bytes;
  std::optional<double> read_rate, write_rate;  // the sums / the job's elapsed time
  // Efficiency of the least and the most efficient node (several nodes only).
  std::optional<double> efficiency_min, efficiency_max;
  std::optional<double> ipc, cache_miss_ratio;  // from the counters summed over the nodes
  Delays delays;                                // summed over the nodes
  // GPUs: counts summed over the nodes; utilization the mean over the GPUs that have one; memory
  // the highest GPU's peak.
  std::optional<double> gpus_allocated, gpus_used, gpus_without_process;
  std::optional<double> gpu_utilization, gpu_memory_peak;
  // Energy attributed to the job, summed over the nodes that have it; `energy_apportioned`: some
  // node's figure is its share of a node it did not have alone (or not known to have alone).
  std::optional<double> rapl_joules, ipmi_joules;
  bool energy_apportioned = false;
  // Network: summed over the nodes, only when every node with samples was the job's alone;
  // `network_shared`: it was not, so the figure is not attributed.
  std::optional<double> net_sent, net_received, ib_sent, ib_received;
  bool network_shared = false;
  // What its processes pushed (sensor User), by name, over the nodes; optional: never in
  // not_collected.
  std::vector<UserMetric> user_metrics;
  // What the job asked Slurm for (set by the caller with set_request: analyse() asks no one).
  std::optional<SlurmRequest> request;
  // What the job has no data for, and what collects it: {"CPU time", "[sensor:JobCgroup]"}.
  std::vector<std::pair<std::string, std::string>> not_collected;
};

// `site`: a site's application patterns, tried before the built-in ones.
JobFigures analyse(const JobData& job, const std::vector<AppPattern>& site = {});
// The figures --list's verdict needs, from a job's per-host summaries (JobSummary::per_host):
// CPU, memory, I/O, PerfHW, Taskstats and the GPUs of the job's own NvidiaGPU samples; no
// series, no node samples (no energy, network, GPU utilization); the user metrics without their
// min. The same figures as analyse(JobData) of the series the summaries were made from.
JobFigures analyse(const JobSummary& job, const std::vector<AppPattern>& site = {});
// Sets what the job asked Slurm for; a job that asked for GPUs without NvidiaGPU samples gets
// "GPU: not collected".
void set_request(JobFigures& figures, std::optional<SlurmRequest> request);

// The thresholds of the verdict's rules (docs/report.md; set by [report], rules.h).
struct Rules {
  double idle_efficiency = 0.05;        // below: idle
  double underused_efficiency = 0.5;    // below: CPU underused
  double memory_near_limit = 0.9;       // peak / limit above: memory near its limit
  double memory_over_requested = 0.25;  // peak / limit below: memory over-requested
  double imbalance = 0.5;               // least / most efficient node below: imbalanced
  double memory_headroom = 1.2;         // advice: ask for the peak times this
  double time_over_requested = 0.5;     // elapsed / time limit below (an ended job): time over-requested
  double time_headroom = 1.5;           // advice: ask for the elapsed time times this
  double min_elapsed_s = 10;            // shorter jobs get no rule but idle and memory_near_limit
  double gpu_idle = 0.05;               // a GPU's utilization below (or no process of the job on it): idle
  double gpu_underused = 0.5;           // mean utilization of its busy GPUs below: GPU underused
  double io_bound = 0.25;               // block-I/O delay share of its tasks' active time above: I/O-bound
  double memory_bound_ipc = 0.7;        // IPC below ...
  double memory_bound_cache_miss = 0.2; // ... with cache misses / references above (when counted): memory-bound
};

struct Note {
  std::string rule;  // "cpu_underused", ...
  std::string text;  // what was seen and what to ask for
};

struct Verdict {
  // The first of, in this order: memory_near_limit, idle, gpu_idle, io_bound, cpu_underused,
  // gpu_underused, imbalanced, memory_bound, memory_over_requested, time_over_requested; else
  // healthy.
  std::string word;
  std::vector<Note> notes;
};

Verdict judge(const JobFigures& figures, const Rules& rules = {});

// Figures as a person writes them: "3.1", "32", "0.25"; bytes "2.1 GiB", "512 MiB";
// durations "1:02:03", "2-00:00:00"; energy "1.2 kWh", "350 Wh"; fractions "24%".
std::string round_figure(double value);
std::string percent(double fraction);
std::string format_bytes(double bytes);
std::string format_duration(double seconds);
std::string format_energy(double joules);

}  // namespace fructosa::report
