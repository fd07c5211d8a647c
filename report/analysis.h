// What fructosa-report says of a job: its figures per node and in all (from JobData, whatever
// the source), and a verdict from rules, each firing rule a note with advice. docs/report.md
// says how each figure is computed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "applications.h"
#include "job_data.h"
#include "slurm_request.h"

namespace fructosa::report {

// A counter's growth over a series: the sum of its rises, a fall counting as a restart from 0
// (an agent restarted, a job's cgroup made again). NaN points are skipped; nullopt when the
// series has fewer than two numbers.
std::optional<double> counter_growth(const Series& series);
// The largest / last number of a series (nullopt when it has none).
std::optional<double> series_max(const Series& series);
std::optional<double> series_last(const Series& series);

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
  std::string cpu_source;                // JobCgroup's label: "cgroup" or "processes"
  // Cores busy between consecutive samples, and memory charged at each sample (sparklines, plots).
  Series cores_over_time, memory_over_time;
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
  // Efficiency of the least and the most efficient node (several nodes only).
  std::optional<double> efficiency_min, efficiency_max;
  // What the job asked Slurm for (set by the caller: analyse() asks no one).
  std::optional<SlurmRequest> request;
  // What the job has no data for, and what collects it: {"CPU", "[sensor:JobCgroup]"}.
  std::vector<std::pair<std::string, std::string>> not_collected;
};

// `site`: a site's application patterns, tried before the built-in ones.
JobFigures analyse(const JobData& job, const std::vector<AppPattern>& site = {});

// The thresholds of the verdict's rules (docs/report.md).
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
};

struct Note {
  std::string rule;  // "cpu_underused", ...
  std::string text;  // what was seen and what to ask for
};

struct Verdict {
  // memory_near_limit, idle, cpu_underused, imbalanced, memory_over_requested, time_over_requested,
  // healthy
  std::string word;
  std::vector<Note> notes;
};

Verdict judge(const JobFigures& figures, const Rules& rules = {});

// Figures as a person writes them: "3.1", "32", "0.25"; bytes "2.1 GiB", "512 MiB";
// durations "1:02:03", "2-00:00:00".
std::string round_figure(double value);
std::string format_bytes(double bytes);
std::string format_duration(double seconds);

}  // namespace fructosa::report
