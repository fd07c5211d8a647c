// Jobs made for fructosa-report's unit tests: series whose figures follow from how they are made.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "job_data.h"

namespace fructosa::report::test {

constexpr std::int64_t kT0 = 1'795'600'000'000'000'000;  // 2026-11-25T09:46:40Z
constexpr double kGiB = 1 << 30;

// Every line of `text` fits 80 columns (UTF-8 characters counted, not bytes).
inline void expect_80_columns(const std::string& text) {
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    std::size_t columns = 0;
    for (unsigned char c : line) columns += (c & 0xC0) != 0x80;
    EXPECT_LE(columns, 80u) << line;
    start = end == std::string::npos ? text.size() : end + 1;
  }
}

inline std::int64_t at(double seconds) { return kT0 + std::llround(seconds * 1e9); }

// Adds to `metrics` the series `name` sampled every `step` s from `from` to `to` (s after kT0),
// the value at t being value(t).
inline void add_series(std::map<std::string, Series>& metrics, const std::string& name,
                       const std::function<double(double)>& value, double from = 0, double to = 600,
                       double step = 10) {
  Series& series = metrics[name];
  for (double t = from; t <= to + 1e-9; t += step) {
    series.time_ns.push_back(at(t));
    series.values.push_back(value(t));
  }
}

// A counter growing at `rate` per second from `start`.
inline std::function<double(double)> rising(double rate, double start = 0) {
  return [=](double t) { return start + rate * t; };
}
inline std::function<double(double)> constant(double value) {
  return [=](double) { return value; };
}

// A node whose job ran 600 s (samples every 10 s) on `cpus` CPUs busy `cores` on average, with
// `memory` bytes charged of a `limit` (0: no limit).
inline HostData job_host(const std::string& name, double cores, double cpus, double memory = kGiB,
                         double limit = 4 * kGiB) {
  HostData host;
  host.host = name;
  add_series(host.metrics, "JobCgroup.cpu.usage", rising(cores, 100));
  add_series(host.metrics, "JobCgroup.cpus", constant(cpus));
  add_series(host.metrics, "JobCgroup.memory.current", constant(memory));
  if (limit > 0) add_series(host.metrics, "JobCgroup.memory.limit", constant(limit));
  host.labels["JobCgroup.user"] = "alice";
  host.labels["JobCgroup.cpu_source"] = "cgroup";
  host.sensors = {"JobCgroup"};
  return host;
}

// The summaries --list's job index would hold of `job` (summarize() of each series).
inline JobSummary summary_of(const JobData& job) {
  JobSummary summary;
  summary.id = job.id;
  summary.first_ns = INT64_MAX;
  summary.last_ns = INT64_MIN;
  for (const auto& host : job.hosts) {
    JobSummary::Host out;
    out.host = host.host;
    out.first_ns = INT64_MAX;
    out.last_ns = INT64_MIN;
    for (const auto& [name, series] : host.metrics) {
      out.metrics[name] = summarize(series);
      if (!series.time_ns.empty()) {
        out.first_ns = std::min(out.first_ns, series.time_ns.front());
        out.last_ns = std::max(out.last_ns, series.time_ns.back());
      }
    }
    out.labels = host.labels;
    out.sensors = host.sensors;
    summary.hosts.push_back(host.host);
    summary.first_ns = std::min(summary.first_ns, out.first_ns);
    summary.last_ns = std::max(summary.last_ns, out.last_ns);
    if (auto user = host.labels.find("JobCgroup.user"); user != host.labels.end() && summary.user.empty())
      summary.user = user->second;
    summary.per_host.push_back(std::move(out));
  }
  return summary;
}

}  // namespace fructosa::report::test
