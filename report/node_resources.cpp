// What a job's node samples say of it (node_resources.h): the windows of analysis.h over the
// node's series, and the choices of which series to add up (docs/report.md, "The figures").
#include "node_resources.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

namespace fructosa::report {
namespace {

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }
bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

const Series* node_series(const HostData& host, const std::string& name) {
  auto found = host.node_metrics.find(name);
  return found == host.node_metrics.end() ? nullptr : &found->second;
}

// Adds `measure` of every node series named prefix + <middle> + suffix whose middle `keep`s.
template <typename Keep, typename Measure>
std::optional<double> sum_matching(const HostData& host, std::string_view prefix, std::string_view suffix, Keep keep,
                                   Measure measure) {
  std::optional<double> total;
  for (auto it = host.node_metrics.lower_bound(std::string(prefix)); it != host.node_metrics.end(); ++it) {
    std::string_view name = it->first;
    if (!starts_with(name, prefix)) break;
    if (name.size() < prefix.size() + suffix.size() || !ends_with(name, suffix)) continue;
    std::string_view middle = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (!keep(middle)) continue;
    if (auto value = measure(it->second)) total = total.value_or(0) + *value;
  }
  return total;
}

bool one_word(std::string_view middle) { return !middle.empty() && middle.find('.') == std::string_view::npos; }

// Over the job's span: did the node run other jobs? JobCgroup's and JobProc's node key `jobs`
// counts the jobs on it, this one included.
NodeUse use_of(const HostData& host, std::int64_t from, std::int64_t to) {
  std::optional<double> most;
  for (const char* name : {"JobCgroup.jobs", "JobProc.jobs"})
    if (const Series* jobs = node_series(host, name))
      if (auto high = window_max(*jobs, from, to)) most = std::max(most.value_or(*high), *high);
  if (!most) return NodeUse::unknown;
  return *most > 1 ? NodeUse::shared : NodeUse::alone;
}

// The node's busy CPU time over the span: CPUTimes' user (guest included), nice, system, irq and
// softirq; steal is another guest's. Summed over the CPUs when the sensor reports per CPU.
std::optional<double> busy_cpu_seconds(const HostData& host, std::int64_t from, std::int64_t to) {
  std::optional<double> total;
  auto growth = [&](const Series& series) { return window_growth(series, from, to); };
  for (const char* mode : {"user", "nice", "system", "irq", "softirq"}) {
    std::optional<double> value;
    if (const Series* series = node_series(host, std::string("CPUTimes.") + mode))
      value = growth(*series);
    else
      value = sum_matching(host, "CPUTimes.", std::string(".") + mode, one_word, growth);
    if (value) total = total.value_or(0) + *value;
  }
  return total;
}

// RAPL's energy of the node: the psys zones where there are (the whole platform), else the
// packages with their DRAM subzones (a package's counter leaves its DRAM out), else the same of
// the intel-rapl-mmio zones (which count what the MSR ones do: never both).
std::optional<double> rapl_joules(const HostData& host, std::int64_t from, std::int64_t to) {
  std::set<std::string> zones;
  for (auto it = host.node_metrics.lower_bound("RAPL."); it != host.node_metrics.end(); ++it) {
    std::string_view name = it->first;
    if (!starts_with(name, "RAPL.")) break;
    std::string_view zone = name.substr(5);
    if (!ends_with(zone, ".energy")) continue;
    zone.remove_suffix(7);
    if (one_word(zone)) zones.emplace(zone);
  }
  auto chosen = [&](std::string_view family) {
    std::vector<std::string> out;
    for (const auto& zone : zones)
      if (starts_with(zone, family)) out.push_back(zone);
    return out;
  };
  std::vector<std::string> picked = chosen("psys");
  bool with_dram = picked.empty();
  if (picked.empty()) picked = chosen("package-");
  if (picked.empty()) picked = chosen("mmio-package-");
  std::optional<double> total;
  for (const auto& zone : picked) {
    std::vector<std::string> names{"RAPL." + zone + ".energy"};
    if (with_dram) names.push_back("RAPL." + zone + ".dram.energy");
    for (const auto& name : names)
      if (const Series* series = node_series(host, name))
        if (auto grew = window_growth(*series, from, to)) total = total.value_or(0) + *grew;
  }
  return total;
}

// GPU keys sort by their number: "2" before "10".
bool gpu_order(const GpuFigures& a, const GpuFigures& b) {
  auto number = [](const std::string& key) {
    long value = -1;
    auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), value);
    return error == std::errc() && end == key.data() + key.size() ? value : -1;
  };
  long x = number(a.gpu), y = number(b.gpu);
  return x != y ? x < y : a.gpu < b.gpu;
}

void add_gpus(NodeFigures& node, const HostData& host, std::int64_t from, std::int64_t to) {
  // The node's GPUs, and the minor of each (what the job's cgroup names).
  std::map<std::string, std::optional<double>> minors;
  for (auto it = host.node_metrics.lower_bound("NvidiaGPU."); it != host.node_metrics.end(); ++it) {
    std::string_view name = it->first;
    if (!starts_with(name, "NvidiaGPU.")) break;
    std::string_view rest = name.substr(10);
    auto dot = rest.find('.');
    if (dot == std::string_view::npos || rest.find('.', dot + 1) != std::string_view::npos) continue;
    auto& minor = minors[std::string(rest.substr(0, dot))];
    if (rest.substr(dot + 1) == "minor") minor = series_last(it->second);
  }
  auto figures_of = [&](const std::string& gpu) -> GpuFigures& {
    for (auto& figures : node.gpus)
      if (figures.gpu == gpu) return figures;
    GpuFigures figures;
    figures.gpu = gpu;
    node.gpus.push_back(std::move(figures));
    return node.gpus.back();
  };
  if (auto allowed = allocated_gpus([&] {
        auto found = host.labels.find("JobCgroup.gpu_minors");
        return found == host.labels.end() ? std::string_view() : std::string_view(found->second);
      }()))
    for (const auto& [gpu, minor] : minors)
      if (minor && std::find(allowed->begin(), allowed->end(), static_cast<int>(*minor)) != allowed->end())
        figures_of(gpu).allocated = true;
  for (auto& gpu : node.gpus) {
    const std::string prefix = "NvidiaGPU." + gpu.gpu + ".";
    if (auto found = minors.find(gpu.gpu); found != minors.end()) gpu.minor = found->second;
    if (const Series* utilization = node_series(host, prefix + "utilization_gpu")) {
      if (auto mean = window_mean(*utilization, from, to)) gpu.utilization = *mean / 100;
      for (std::size_t i = 0; i < utilization->values.size(); ++i)
        if (utilization->time_ns[i] >= from && utilization->time_ns[i] <= to) {
          gpu.utilization_over_time.time_ns.push_back(utilization->time_ns[i]);
          gpu.utilization_over_time.values.push_back(utilization->values[i] / 100);
        }
    }
    if (const Series* used = node_series(host, prefix + "memory_used")) gpu.memory_peak = window_max(*used, from, to);
    if (const Series* total = node_series(host, prefix + "memory_total")) gpu.memory_total = series_last(*total);
  }
  std::sort(node.gpus.begin(), node.gpus.end(), gpu_order);
}

void add_energy(NodeFigures& node, const HostData& host, std::int64_t from, std::int64_t to) {
  std::optional<double> rapl = rapl_joules(host, from, to), ipmi;
  if (const Series* power = node_series(host, "IPMIPower.power")) ipmi = window_integral(*power, from, to);
  node.energy_collected = rapl || ipmi;
  if (!node.energy_collected) return;
  if (node.use != NodeUse::alone) {
    // Its share of what the node's CPUs did over the span.
    auto busy = busy_cpu_seconds(host, from, to);
    if (node.cpu_seconds && busy && *busy > 0) node.cpu_share = std::clamp(*node.cpu_seconds / *busy, 0.0, 1.0);
    if (!node.cpu_share) return;
    if (rapl) *rapl *= *node.cpu_share;
    if (ipmi) *ipmi *= *node.cpu_share;
  }
  node.rapl_joules = rapl;
  node.ipmi_joules = ipmi;
}

void add_network(NodeFigures& node, const HostData& host, std::int64_t from, std::int64_t to) {
  auto growth = [&](const Series& series) { return window_growth(series, from, to); };
  // NetIOCounters: its totals (all NICs, loopback included), else the NICs but lo.
  auto nic = [&](const char* key) {
    if (const Series* total = node_series(host, std::string("NetIOCounters.") + key)) return growth(*total);
    return sum_matching(host, "NetIOCounters.", std::string(".") + key,
                        [](std::string_view nic) { return one_word(nic) && nic != "lo"; }, growth);
  };
  // InfiniBand: every port of every device (<device>.<port>.port_*_data).
  auto ib = [&](const char* key) {
    return sum_matching(host, "InfiniBand.", std::string(".") + key,
                        [](std::string_view port) { return std::count(port.begin(), port.end(), '.') == 1; },
                        growth);
  };
  std::optional<double> sent = nic("bytes_sent"), received = nic("bytes_recv");
  std::optional<double> ib_sent = ib("port_xmit_data"), ib_received = ib("port_rcv_data");
  node.network_collected = sent || received || ib_sent || ib_received;
  if (node.use != NodeUse::alone) return;  // not attributed: others' traffic is in it
  node.net_sent = sent;
  node.net_received = received;
  node.ib_sent = ib_sent;
  node.ib_received = ib_received;
}

}  // namespace

std::optional<std::vector<int>> allocated_gpus(std::string_view label) {
  std::vector<int> minors;
  while (!label.empty()) {
    auto comma = label.find(',');
    std::string_view part = label.substr(0, comma);
    label = comma == std::string_view::npos ? std::string_view() : label.substr(comma + 1);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (part.empty()) continue;
    auto dash = part.find('-');
    int low = 0, high = 0;
    auto number = [](std::string_view text, int& out) {
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
      return !text.empty() && error == std::errc() && end == text.data() + text.size() && out >= 0;
    };
    if (!number(part.substr(0, dash), low)) return std::nullopt;
    high = low;
    if (dash != std::string_view::npos && (!number(part.substr(dash + 1), high) || high < low)) return std::nullopt;
    for (int minor = low; minor <= high; ++minor)
      if (std::find(minors.begin(), minors.end(), minor) == minors.end()) minors.push_back(minor);
  }
  if (minors.empty()) return std::nullopt;
  return minors;
}

std::optional<double> window_growth(const Series& counter, std::int64_t from_ns, std::int64_t to_ns) {
  double total = 0;
  bool overlapped = false;
  std::optional<std::size_t> previous;
  for (std::size_t i = 0; i < counter.values.size(); ++i) {
    const double value = counter.values[i];
    if (std::isnan(value)) continue;
    if (previous) {
      const std::int64_t t0 = counter.time_ns[*previous], t1 = counter.time_ns[i];
      const std::int64_t overlap = std::min(t1, to_ns) - std::max(t0, from_ns);
      if (t1 > t0 && overlap > 0) {
        const double before = counter.values[*previous];
        const double rise = value >= before ? value - before : value;  // a fall: a restart from 0
        total += rise * static_cast<double>(overlap) / static_cast<double>(t1 - t0);
        overlapped = true;
      }
    }
    previous = i;
  }
  return overlapped ? std::optional(total) : std::nullopt;
}

std::optional<double> window_integral(const Series& gauge, std::int64_t from_ns, std::int64_t to_ns) {
  double total = 0;
  bool overlapped = false;
  std::optional<std::size_t> previous;
  for (std::size_t i = 0; i < gauge.values.size(); ++i) {
    if (std::isnan(gauge.values[i])) continue;
    if (previous) {
      const std::int64_t t0 = gauge.time_ns[*previous], t1 = gauge.time_ns[i];
      const std::int64_t a = std::max(t0, from_ns), b = std::min(t1, to_ns);
      if (t1 > t0 && b > a) {
        const double v0 = gauge.values[*previous], v1 = gauge.values[i];
        auto at = [&](std::int64_t t) { return v0 + (v1 - v0) * static_cast<double>(t - t0) / static_cast<double>(t1 - t0); };
        total += (at(a) + at(b)) / 2 * static_cast<double>(b - a) / 1e9;
        overlapped = true;
      }
    }
    previous = i;
  }
  return overlapped ? std::optional(total) : std::nullopt;
}

std::optional<double> window_mean(const Series& gauge, std::int64_t from_ns, std::int64_t to_ns) {
  double sum = 0;
  std::size_t count = 0;
  for (std::size_t i = 0; i < gauge.values.size(); ++i)
    if (!std::isnan(gauge.values[i]) && gauge.time_ns[i] >= from_ns && gauge.time_ns[i] <= to_ns) {
      sum += gauge.values[i];
      ++count;
    }
  return count ? std::optional(sum / static_cast<double>(count)) : std::nullopt;
}

std::optional<double> window_max(const Series& gauge, std::int64_t from_ns, std::int64_t to_ns) {
  std::optional<double> most;
  for (std::size_t i = 0; i < gauge.values.size(); ++i)
    if (!std::isnan(gauge.values[i]) && gauge.time_ns[i] >= from_ns && gauge.time_ns[i] <= to_ns)
      most = std::max(most.value_or(gauge.values[i]), gauge.values[i]);
  return most;
}

void add_node_resources(NodeFigures& node, const HostData& host) {
  const std::int64_t from = node.first_ns, to = node.last_ns;
  node.use = use_of(host, from, to);
  add_gpus(node, host, from, to);
  add_energy(node, host, from, to);
  add_network(node, host, from, to);
  // Without delay accounting the kernel leaves these delays 0: not measured, not none.
  if (const Series* accounting = node_series(host, "Taskstats.delay_accounting"))
    if (auto on = series_last(*accounting); on && *on == 0)
      node.delays.blkio_s = node.delays.swapin_s = node.delays.memory_s = std::nullopt;
}

}  // namespace fructosa::report
