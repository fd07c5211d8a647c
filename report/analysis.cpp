#include "analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace fructosa::report {
namespace {

const Series* find_series(const HostData& host, const std::string& name) {
  auto found = host.metrics.find(name);
  return found == host.metrics.end() ? nullptr : &found->second;
}

std::optional<double> of(const HostData& host, const std::string& name,
                         std::optional<double> (*measure)(const Series&)) {
  const Series* series = find_series(host, name);
  return series ? measure(*series) : std::nullopt;
}

std::string label(const HostData& host, const std::string& name) {
  auto found = host.labels.find(name);
  return found == host.labels.end() ? std::string() : found->second;
}

void add_to(std::optional<double>& total, std::optional<double> value) {
  if (value) total = total.value_or(0) + *value;
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

NodeFigures node_figures(const HostData& host) {
  NodeFigures node;
  node.host = host.host;
  node.first_ns = std::numeric_limits<std::int64_t>::max();
  node.last_ns = std::numeric_limits<std::int64_t>::min();
  for (const auto& [name, series] : host.metrics)
    if (!series.time_ns.empty()) {
      node.first_ns = std::min(node.first_ns, series.time_ns.front());
      node.last_ns = std::max(node.last_ns, series.time_ns.back());
    }
  if (node.first_ns > node.last_ns) node.first_ns = node.last_ns = 0;
  node.elapsed_s = static_cast<double>(node.last_ns - node.first_ns) / 1e9;

  node.cpu_seconds = of(host, "JobCgroup.cpu.usage", counter_growth);
  node.cpus = of(host, "JobCgroup.cpus", series_last);
  if (node.cpu_seconds && node.elapsed_s > 0) node.cores_used = *node.cpu_seconds / node.elapsed_s;
  if (node.cores_used && node.cpus && *node.cpus > 0) node.cpu_efficiency = *node.cores_used / *node.cpus;
  node.memory_peak = of(host, "JobCgroup.memory.peak", series_max);
  if (auto current = of(host, "JobCgroup.memory.current", series_max))
    node.memory_peak = std::max(node.memory_peak.value_or(0), *current);
  node.memory_limit = of(host, "JobCgroup.memory.limit", series_last);
  node.read_bytes = of(host, "JobProc.read_bytes", counter_growth);
  node.write_bytes = of(host, "JobProc.write_bytes", counter_growth);
  node.cpu_source = label(host, "JobCgroup.cpu_source");
  if (const Series* usage = find_series(host, "JobCgroup.cpu.usage")) node.cores_over_time = rates(*usage);
  if (const Series* memory = find_series(host, "JobCgroup.memory.current")) node.memory_over_time = *memory;
  return node;
}

double memory_ratio(const NodeFigures& node) {
  return node.memory_peak && node.memory_limit && *node.memory_limit > 0 ? *node.memory_peak / *node.memory_limit
                                                                         : -1;
}

// Rounded up to what a request is written as: whole GiB from 1 GiB, else 128 MiB steps.
std::string memory_request(double bytes) {
  constexpr double kMiB = 1 << 20, kGiB = 1 << 30;
  if (bytes >= kGiB) return fmt::format("{} GiB", std::ceil(bytes / kGiB));
  return fmt::format("{} MiB", std::max(1.0, std::ceil(bytes / (128 * kMiB))) * 128);
}

}  // namespace

std::optional<double> counter_growth(const Series& series) {
  double grown = 0;
  std::optional<double> previous;
  std::size_t numbers = 0;
  for (double value : series.values) {
    if (std::isnan(value)) continue;
    ++numbers;
    if (previous) grown += value >= *previous ? value - *previous : value;
    previous = value;
  }
  if (numbers < 2) return std::nullopt;
  return grown;
}

std::optional<double> series_max(const Series& series) {
  std::optional<double> found;
  for (double value : series.values)
    if (!std::isnan(value)) found = std::max(found.value_or(value), value);
  return found;
}

std::optional<double> series_last(const Series& series) {
  for (auto it = series.values.rbegin(); it != series.values.rend(); ++it)
    if (!std::isnan(*it)) return *it;
  return std::nullopt;
}

JobFigures analyse(const JobData& job, const std::vector<AppPattern>& site) {
  JobFigures figures;
  figures.id = job.id;
  figures.first_ns = std::numeric_limits<std::int64_t>::max();
  figures.last_ns = std::numeric_limits<std::int64_t>::min();
  bool any_cpu = false, any_allocation = false, any_memory = false, any_io = false;
  const NodeFigures* fullest = nullptr;  // the highest peak against its limit (else the highest peak)
  for (const auto& host : job.hosts) {
    if (figures.user.empty()) figures.user = label(host, "JobCgroup.user");
    NodeFigures node = node_figures(host);
    figures.first_ns = std::min(figures.first_ns, node.first_ns);
    figures.last_ns = std::max(figures.last_ns, node.last_ns);
    any_cpu |= node.cpu_seconds.has_value();
    any_allocation |= node.cpus.has_value();
    any_memory |= node.memory_peak.has_value();
    any_io |= node.read_bytes.has_value() || node.write_bytes.has_value();
    figures.nodes.push_back(std::move(node));
  }
  if (figures.nodes.empty()) figures.first_ns = figures.last_ns = 0;
  // The application most nodes ran; on a tie, the first node's.
  std::map<std::string, std::size_t> votes;
  for (const auto& host : job.hosts)
    if (auto app = application_of(split_commands(label(host, "JobProc.commands")), site); !app.empty())
      if (++votes[app] > votes[figures.application] || figures.application.empty()) figures.application = app;
  figures.elapsed_s = static_cast<double>(figures.last_ns - figures.first_ns) / 1e9;

  for (const auto& node : figures.nodes) {
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
  }
  if (figures.nodes.size() < 2) figures.efficiency_min = figures.efficiency_max = std::nullopt;
  if (figures.cores_used && figures.cpus && *figures.cpus > 0) figures.cpu_efficiency = *figures.cores_used / *figures.cpus;
  if (fullest) {
    figures.memory_peak = fullest->memory_peak;
    figures.memory_limit = fullest->memory_limit;
  }
  if (!any_cpu) figures.not_collected.emplace_back("CPU time", "[sensor:JobCgroup]");
  if (!any_allocation) figures.not_collected.emplace_back("CPU allocation", "[sensor:JobCgroup] and a cpuset cgroup");
  if (!any_memory) figures.not_collected.emplace_back("memory", "[sensor:JobCgroup] and a memory cgroup");
  if (!any_io) figures.not_collected.emplace_back("I/O", "[sensor:JobProc]");
  return figures;
}

Verdict judge(const JobFigures& figures, const Rules& rules) {
  Verdict verdict;
  auto fire = [&](const char* rule, std::string text) { verdict.notes.push_back({rule, std::move(text)}); };
  const bool long_enough = figures.elapsed_s >= rules.min_elapsed_s;

  // Near its memory limit first: the job may be killed; seen at once, however long it ran.
  if (figures.memory_peak && figures.memory_limit && *figures.memory_limit > 0) {
    double ratio = *figures.memory_peak / *figures.memory_limit;
    if (ratio > rules.memory_near_limit)
      fire("memory_near_limit",
           fmt::format("peak memory {} of its {} limit: it may be killed when it needs more; ask for {}",
                       format_bytes(*figures.memory_peak), format_bytes(*figures.memory_limit),
                       memory_request(*figures.memory_peak * rules.memory_headroom)));
  }
  // Idle: hardly any CPU for what it was given (or at all, when the allocation is unknown).
  const double busy = figures.cpu_efficiency ? *figures.cpu_efficiency : figures.cores_used.value_or(1);
  if (figures.cores_used && busy < rules.idle_efficiency)
    fire("idle", fmt::format("used {} cores on average over {}{}: is it waiting for something?",
                             round_figure(*figures.cores_used), format_duration(figures.elapsed_s),
                             figures.cpus ? fmt::format(" of {} allocated", round_figure(*figures.cpus)) : ""));
  if (long_enough && figures.cpu_efficiency && *figures.cpu_efficiency >= rules.idle_efficiency &&
      *figures.cpu_efficiency < rules.underused_efficiency)
    fire("cpu_underused", fmt::format("used {} of {} allocated cores on average: ask for {}",
                                      round_figure(*figures.cores_used), round_figure(*figures.cpus),
                                      std::max(1.0, std::ceil(*figures.cores_used))));
  if (long_enough && figures.efficiency_min && figures.efficiency_max && *figures.efficiency_max > 0 &&
      *figures.efficiency_min / *figures.efficiency_max < rules.imbalance)
    fire("imbalanced", fmt::format("its least busy node used {:.0f}% of its cores, its busiest {:.0f}%: "
                                   "spread the work evenly, or ask for fewer nodes",
                                   100 * *figures.efficiency_min, 100 * *figures.efficiency_max));
  if (long_enough && figures.memory_peak && figures.memory_limit && *figures.memory_limit > 0 &&
      *figures.memory_peak / *figures.memory_limit < rules.memory_over_requested)
    fire("memory_over_requested", fmt::format("peak memory {} of {} requested: ask for {}",
                                              format_bytes(*figures.memory_peak), format_bytes(*figures.memory_limit),
                                              memory_request(*figures.memory_peak * rules.memory_headroom)));
  if (long_enough && figures.request && figures.request->time_limit_s && figures.request->ended_early() &&
      figures.elapsed_s / *figures.request->time_limit_s < rules.time_over_requested) {
    // Whole minutes, from the run time with headroom.
    double minutes = std::ceil(figures.elapsed_s * rules.time_headroom / 60);
    fire("time_over_requested", fmt::format("completed in {:.0f}% of its {} time limit: ask for --time={}",
                                            100 * figures.elapsed_s / *figures.request->time_limit_s,
                                            format_duration(*figures.request->time_limit_s),
                                            format_duration(minutes * 60)));
  }
  verdict.word = verdict.notes.empty() ? "healthy" : verdict.notes.front().rule;
  return verdict;
}

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

}  // namespace fructosa::report
