// report_bench's data (bench/report_bench.cpp measures the reader on it; docs/performance.md,
// "Reports"): files written by lmaster's own HDF5 output (Hdf5Output, layout per_sensor,
// lmaster's defaults: complevel 4, chunk 4096; its job index included), started with reopen() at
// simulated times and renamed to the series names <stem>-<UTC start>.h5, `path` linking the last.
// Generation flushes every 60 s of simulated time (lmaster flushes every 5 s of wall time): the
// closed files are rewritten compressed either way, so what is read is the same.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace fructosa::report_bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline constexpr std::int64_t kSecond = 1'000'000'000;
// 2026-11-01T00:00:00Z: the month starts at midnight.
inline constexpr std::int64_t kStartNs = 1'793'491'200LL * kSecond;
inline constexpr std::uint64_t kReportedJob = 4'242'424;
inline constexpr double kGiB = 1024.0 * 1024 * 1024;

struct DataSettings {
  // 1. The report of one job.
  int nodes = 64;
  double hours = 24;
  double interval = 10;
  double job_rotate_hours = 1;
  // 2. --list over a month.
  double days = 30;
  int list_nodes = 64;
  int cpus = 32;
  int jobs_per_day = 100;
  double list_rotate_hours = 24;
  bool list_jobproc = false;
};

struct Generated {
  double seconds = 0;
  std::uint64_t points = 0, rows = 0;
  std::size_t files = 0;
  std::uintmax_t bytes = 0;
};

// 1. One job (kReportedJob) on `nodes` nodes for `hours`, every `interval` s, with the nodes' own
// JobCgroup and JobProc samples (jobs = 1), in files of job_rotate_hours.
Generated write_job(const DataSettings& s, const std::filesystem::path& directory);

// 2. A month: `list_nodes` nodes with CPUPercent (percpu, `cpus` keys) and VirtualMemory every
// 60 s, JobCgroup's node samples every 10 s, and jobs_per_day jobs a day (start uniform over
// the day, 1-16 contiguous nodes, 5 min - 8 h log-uniform: about the cluster's capacity) with
// JobCgroup (and JobProc) every 10 s. `job_count`: the jobs planned.
Generated write_month(const DataSettings& s, const std::filesystem::path& directory, std::size_t* job_count);

}  // namespace fructosa::report_bench
