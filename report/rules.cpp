// The verdict (analysis.h's judge) and its thresholds from [report] (rules.h). docs/report.md
// has the rules' table; the order here is theirs: the first that fires is the verdict.
#include "rules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace fructosa::report {
namespace {

struct Key {
  const char* name;
  double Rules::*field;
  double min, max;
  const char* help;
};

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Every threshold of Rules, once: report_options() and rules_from() are made from this.
const Key kKeys[] = {
    {"idle_efficiency", &Rules::idle_efficiency, 0, 1, "idle: CPU efficiency below"},
    {"underused_efficiency", &Rules::underused_efficiency, 0, 1, "cpu_underused: CPU efficiency below"},
    {"memory_near_limit", &Rules::memory_near_limit, 0, 1, "memory_near_limit: peak / limit above"},
    {"memory_over_requested", &Rules::memory_over_requested, 0, 1, "memory_over_requested: peak / limit below"},
    {"imbalance", &Rules::imbalance, 0, 1, "imbalanced: least / most efficient node below"},
    {"memory_headroom", &Rules::memory_headroom, 1, 100, "advice: ask for the memory peak times this"},
    {"time_over_requested", &Rules::time_over_requested, 0, 1, "time_over_requested: elapsed / time limit below"},
    {"time_headroom", &Rules::time_headroom, 1, 100, "advice: ask for the elapsed time times this"},
    {"min_elapsed_s", &Rules::min_elapsed_s, 0, kInfinity, "seconds all but idle, memory_near_limit wait for"},
    {"gpu_idle", &Rules::gpu_idle, 0, 1, "gpu_idle: a GPU's utilization below (or no process)"},
    {"gpu_underused", &Rules::gpu_underused, 0, 1, "gpu_underused: busy GPUs' mean utilization below"},
    {"io_bound", &Rules::io_bound, 0, 1, "io_bound: block-I/O share of its tasks' time above"},
    {"memory_bound_ipc", &Rules::memory_bound_ipc, 0, 100, "memory_bound: instructions per cycle below ..."},
    {"memory_bound_cache_miss", &Rules::memory_bound_cache_miss, 0, 1, "... and cache misses / references above"},
};

// Rounded up to what a request is written as: whole GiB from 1 GiB, else 128 MiB steps.
std::string memory_request(double bytes) {
  constexpr double kMiB = 1 << 20, kGiB = 1 << 30;
  if (bytes >= kGiB) return fmt::format("{} GiB", std::ceil(bytes / kGiB));
  return fmt::format("{} MiB", std::max(1.0, std::ceil(bytes / (128 * kMiB))) * 128);
}

std::string plural(double count, const char* one, const char* many) {
  return fmt::format("{} {}", round_figure(count), count == 1 ? one : many);
}

struct GpuCounts {
  double total = 0;          // the job's GPUs: allocated, else used
  double without_process = 0;
  double below_idle = 0;     // used, but busy less than gpu_idle of the time
  std::vector<double> busy;  // utilization of each used GPU busy at least gpu_idle
  bool any_busy = false;     // a used GPU not known to be idle (its utilization unknown counts)
};

GpuCounts count_gpus(const JobFigures& figures, const Rules& rules) {
  GpuCounts counts;
  counts.total = std::max(figures.gpus_allocated.value_or(0), figures.gpus_used.value_or(0));
  counts.without_process = figures.gpus_without_process.value_or(0);
  for (const auto& node : figures.nodes)
    for (const auto& gpu : node.gpus) {
      if (!gpu.used) continue;
      if (!gpu.utilization) {
        counts.any_busy = true;
      } else if (*gpu.utilization < rules.gpu_idle) {
        ++counts.below_idle;
      } else {
        counts.busy.push_back(*gpu.utilization);
        counts.any_busy = true;
      }
    }
  return counts;
}

}  // namespace

const OptionTable& report_options() {
  static const OptionTable table = [] {
    OptionTable out;
    const Rules defaults;
    for (const auto& key : kKeys)
      out.push_back({.name = key.name,
                     .type = OptionType::real,
                     .default_value = fmt::format("{}", defaults.*key.field),
                     .help = key.help,
                     .min = key.min,
                     .max = key.max});
    return out;
  }();
  return table;
}

Rules rules_from(const IniFile& file, bool required) {
  const IniSection* section = file.find("report");
  if (!section && required) {
    std::vector<std::string> names;
    for (const auto& other : file.sections()) names.push_back(other.name);
    std::string hint;
    for (const auto& other : file.sections())
      if (closest_name("report", {other.name}) == other.name) hint = fmt::format(" (is [{}] meant?)", other.name);
    throw ConfigError(fmt::format("{}: no [report] section{}", file.path(), hint));
  }
  Options options = parse_section(report_options(), file, section);
  Rules rules;
  for (const auto& key : kKeys) rules.*key.field = options.get_real(key.name);
  // Pairs of thresholds that only make sense one below the other.
  auto ordered = [&](const char* low, const char* high) {
    if (options.get_real(low) > options.get_real(high))
      throw ConfigError(fmt::format("{}: {} ({}) must not be above {} ({})", section ? file.where(*section) : file.path(),
                                    low, options.get_real(low), high, options.get_real(high)));
  };
  ordered("idle_efficiency", "underused_efficiency");
  ordered("memory_over_requested", "memory_near_limit");
  ordered("gpu_idle", "gpu_underused");
  return rules;
}

Rules load_rules(const std::string& path, bool required) { return rules_from(IniFile::load(path), required); }

Verdict judge(const JobFigures& figures, const Rules& rules) {
  Verdict verdict;
  auto fire = [&](const char* rule, std::string text) { verdict.notes.push_back({rule, std::move(text)}); };
  const bool long_enough = figures.elapsed_s >= rules.min_elapsed_s;
  const GpuCounts gpus = count_gpus(figures, rules);

  // Near its memory limit first: the job may be killed; seen at once, however long it ran.
  if (figures.memory_peak && figures.memory_limit && *figures.memory_limit > 0) {
    double ratio = *figures.memory_peak / *figures.memory_limit;
    if (ratio > rules.memory_near_limit)
      fire("memory_near_limit",
           fmt::format("peak memory {} of its {} limit: it may be killed when it needs more; ask for {}",
                       format_bytes(*figures.memory_peak), format_bytes(*figures.memory_limit),
                       memory_request(*figures.memory_peak * rules.memory_headroom)));
  }
  // Idle: hardly any CPU for what it was given (or at all, when the allocation is unknown), and
  // no GPU at work either (a GPU job feeds its GPUs from a core or two).
  const double busy = figures.cpu_efficiency ? *figures.cpu_efficiency : figures.cores_used.value_or(1);
  const bool idle = figures.cores_used && busy < rules.idle_efficiency && !gpus.any_busy;
  if (idle)
    fire("idle", fmt::format("used {} cores on average over {}{}: is it waiting for something?",
                             round_figure(*figures.cores_used), format_duration(figures.elapsed_s),
                             figures.cpus ? fmt::format(" of {} allocated", round_figure(*figures.cpus)) : ""));
  const double idle_gpus = gpus.without_process + gpus.below_idle;
  if (long_enough && idle_gpus > 0 && gpus.total > 0) {
    std::vector<std::string> why;
    if (gpus.without_process > 0) why.push_back(round_figure(gpus.without_process) + " without a process of the job");
    if (gpus.below_idle > 0)
      why.push_back(fmt::format("{} busy under {} of the time", round_figure(gpus.below_idle), percent(rules.gpu_idle)));
    const std::string how = fmt::format("{}", fmt::join(why, ", "));
    if (idle_gpus >= gpus.total)
      fire("gpu_idle", fmt::format("its {} did nothing ({}): does it use them (a CUDA build, CUDA_VISIBLE_DEVICES)? "
                                   "If not, ask for none",
                                   plural(gpus.total, "GPU", "GPUs"), how));
    else
      fire("gpu_idle", fmt::format("{} of its {} GPUs did nothing ({}): ask for {}", round_figure(idle_gpus),
                                   round_figure(gpus.total), how, plural(gpus.total - idle_gpus, "GPU", "GPUs")));
  }
  if (long_enough) {
    auto share = figures.delays.share(figures.delays.blkio_s);
    if (share && *share > rules.io_bound)
      fire("io_bound", fmt::format("its tasks waited for block I/O {} of the time they ran or waited ({} in all): "
                                   "read and write in larger blocks and fewer files, or on node-local storage",
                                   percent(*share), format_duration(*figures.delays.blkio_s)));
  }
  if (long_enough && !idle && figures.cpu_efficiency && *figures.cpu_efficiency < rules.underused_efficiency)
    fire("cpu_underused", fmt::format("used {} of {} allocated cores on average: ask for {}",
                                      round_figure(*figures.cores_used), round_figure(*figures.cpus),
                                      std::max(1.0, std::ceil(*figures.cores_used))));
  if (long_enough && !gpus.busy.empty()) {
    double sum = 0;
    for (double utilization : gpus.busy) sum += utilization;
    const double mean = sum / static_cast<double>(gpus.busy.size());
    if (mean < rules.gpu_underused) {
      // As many GPUs as their work would keep busy all the time.
      const double enough = std::max(1.0, std::ceil(sum));
      if (gpus.busy.size() == 1)
        fire("gpu_underused", fmt::format("its GPU ran kernels {} of the time: give it more work at once "
                                          "(larger batches, more data-loading workers)",
                                          percent(mean)));
      else
        fire("gpu_underused", fmt::format("its {} busy GPUs ran kernels {} of the time on average: give them more "
                                          "work at once (larger batches, more data-loading workers){}",
                                          gpus.busy.size(), percent(mean),
                                          enough < static_cast<double>(gpus.busy.size())
                                              ? ", or ask for " + plural(enough, "GPU", "GPUs")
                                              : ""));
    }
  }
  if (long_enough && figures.efficiency_min && figures.efficiency_max && *figures.efficiency_max > 0 &&
      *figures.efficiency_min / *figures.efficiency_max < rules.imbalance)
    fire("imbalanced", fmt::format("its least busy node used {:.0f}% of its cores, its busiest {:.0f}%: "
                                   "spread the work evenly, or ask for fewer nodes",
                                   100 * *figures.efficiency_min, 100 * *figures.efficiency_max));
  if (long_enough && !idle && figures.ipc && *figures.ipc < rules.memory_bound_ipc &&
      (!figures.cache_miss_ratio || *figures.cache_miss_ratio > rules.memory_bound_cache_miss))
    fire("memory_bound",
         fmt::format("{} instructions per cycle{}: its cores mostly wait for memory; make its data accesses "
                     "local (blocking, contiguous arrays), or spread its processes over more nodes for more "
                     "memory bandwidth",
                     round_figure(*figures.ipc),
                     figures.cache_miss_ratio
                         ? fmt::format(", {} of its cache references missing", percent(*figures.cache_miss_ratio))
                         : ""));
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

}  // namespace fructosa::report
