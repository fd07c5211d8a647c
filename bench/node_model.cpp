#include "node_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include "metric.h"

namespace fructosa::bench {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

ValueModel counter(double start, double step, double quantum = 1) {
  return {Shape::counter, start, step, 0, 1e300, quantum};
}
ValueModel gauge(double start, double step, double low, double high, double quantum = 1) {
  return {Shape::gauge, start, step, low, high, quantum};
}
ValueModel percent(double start, double step = 3) { return {Shape::percent, start, step, 0, 100, 0.1}; }
ValueModel constant(double value) { return {Shape::constant, value, 0, value, value, 0}; }

// The sensors of a node with `cpus` CPUs, in the order an agent's batch carries them; per-CPU
// CPUTimes last, so that trimming to an exact number of values shortens only that.
std::vector<SensorModel> node_model(int cpus) {
  std::vector<SensorModel> model;
  auto& cpu_percent = model.emplace_back(SensorModel{"CPUPercent", {}, {}});
  for (int cpu = 0; cpu < cpus; ++cpu) cpu_percent.add(std::to_string(cpu), percent(35, 6));
  auto& times_percent = model.emplace_back(SensorModel{"CPUTimesPercent", {}, {}});
  for (auto [field, start] : {std::pair{"user", 30.0}, {"nice", 0.2}, {"system", 6.0}, {"idle", 60.0},
                              {"iowait", 1.5}, {"irq", 0.0}, {"softirq", 0.5}, {"steal", 0.0},
                              {"guest", 0.0}, {"guest_nice", 0.0}})
    times_percent.add(field, start == 0 ? constant(0) : percent(start, start / 5 + 0.2));
  auto& stats = model.emplace_back(SensorModel{"CPUStats", {}, {}});
  stats.add("ctx_switches", counter(5e9, 40000));
  stats.add("interrupts", counter(3e9, 20000));
  stats.add("soft_interrupts", counter(1e9, 8000));
  stats.add("syscalls", constant(0));
  auto& freq = model.emplace_back(SensorModel{"CPUFreq", {}, {}});
  freq.add("current", gauge(2400, 150, 1000, 3500, 0.001));
  freq.add("min", constant(1000));
  freq.add("max", constant(3500));
  model.emplace_back(SensorModel{"CPUCount", {""}, {constant(cpus)}});
  auto& memory = model.emplace_back(SensorModel{"VirtualMemory", {}, {}});
  memory.add("total", constant(256 * kGiB));
  memory.add("available", gauge(180 * kGiB, 0.05 * kGiB, 1 * kGiB, 255 * kGiB, 4096));
  memory.add("percent", percent(29.7, 0.3));
  memory.add("used", gauge(70 * kGiB, 0.05 * kGiB, 1 * kGiB, 255 * kGiB, 4096));
  memory.add("free", gauge(120 * kGiB, 0.05 * kGiB, 1 * kGiB, 255 * kGiB, 4096));
  memory.add("active", gauge(60 * kGiB, 0.03 * kGiB, 1 * kGiB, 255 * kGiB, 4096));
  memory.add("inactive", gauge(40 * kGiB, 0.02 * kGiB, 1 * kGiB, 255 * kGiB, 4096));
  memory.add("buffers", gauge(2 * kGiB, 0.001 * kGiB, 0, 10 * kGiB, 4096));
  memory.add("cached", gauge(55 * kGiB, 0.01 * kGiB, 1 * kGiB, 200 * kGiB, 4096));
  memory.add("shared", gauge(1 * kGiB, 0.0005 * kGiB, 0, 10 * kGiB, 4096));
  memory.add("slab", gauge(3 * kGiB, 0.0005 * kGiB, 0, 10 * kGiB, 4096));
  auto& swap = model.emplace_back(SensorModel{"SwapMemory", {}, {}});
  swap.add("total", constant(8 * kGiB));
  swap.add("used", gauge(0.1 * kGiB, 4096 * 4, 0, 8 * kGiB, 4096));
  swap.add("free", gauge(7.9 * kGiB, 4096 * 4, 0, 8 * kGiB, 4096));
  swap.add("percent", percent(1.2, 0.1));
  swap.add("sin", counter(2e8, 4096 * 2, 4096));
  swap.add("sout", counter(4e8, 4096 * 2, 4096));
  auto& disk_io = model.emplace_back(SensorModel{"DiskIOCounters", {}, {}});
  for (const char* disk : {"sda", "nvme0n1"}) {
    std::string prefix = std::string(disk) + ".";
    disk_io.add(prefix + "read_count", counter(4e7, 300));
    disk_io.add(prefix + "write_count", counter(9e7, 800));
    disk_io.add(prefix + "read_bytes", counter(2e12, 3e6, 512));
    disk_io.add(prefix + "write_bytes", counter(5e12, 8e6, 512));
    disk_io.add(prefix + "read_time", counter(3e7, 200));
    disk_io.add(prefix + "write_time", counter(8e7, 900));
    disk_io.add(prefix + "read_merged_count", counter(1e6, 20));
    disk_io.add(prefix + "write_merged_count", counter(5e7, 400));
    disk_io.add(prefix + "busy_time", counter(4e7, 600));
  }
  auto& usage = model.emplace_back(SensorModel{"DiskUsage", {}, {}});
  for (auto [path, size] : {std::pair{"/", 100.0}, {"/tmp", 400.0}, {"/scratch", 2000.0}}) {
    std::string prefix = key_component(path) + ".";
    usage.add(prefix + "total", constant(size * kGiB));
    usage.add(prefix + "used", gauge(size * 0.4 * kGiB, 1e6, 0, size * kGiB, 4096));
    usage.add(prefix + "free", gauge(size * 0.55 * kGiB, 1e6, 0, size * kGiB, 4096));
    usage.add(prefix + "percent", percent(42.1, 0.1));
  }
  auto& partitions = model.emplace_back(SensorModel{"DiskPartitions", {}, {}});
  partitions.add("count", constant(3));
  for (const char* path : {"/", "/tmp", "/scratch"}) {
    std::string prefix = key_component(path) + ".";
    partitions.add(prefix + "readonly", constant(0));
    partitions.add(prefix + "maxfile", constant(255));
    partitions.add(prefix + "maxpath", constant(4096));
  }
  auto& net_io = model.emplace_back(SensorModel{"NetIOCounters", {}, {}});
  for (const char* nic : {"eth0", "ib0"}) {
    std::string prefix = std::string(nic) + ".";
    net_io.add(prefix + "bytes_sent", counter(8e11, 2e6));
    net_io.add(prefix + "bytes_recv", counter(9e11, 3e6));
    net_io.add(prefix + "packets_sent", counter(6e8, 2000));
    net_io.add(prefix + "packets_recv", counter(7e8, 2500));
    net_io.add(prefix + "errin", constant(0));
    net_io.add(prefix + "errout", constant(0));
    net_io.add(prefix + "dropin", counter(1200, 0.02));
    net_io.add(prefix + "dropout", constant(0));
  }
  auto& if_stats = model.emplace_back(SensorModel{"NetIFStats", {}, {}});
  for (auto [nic, speed, mtu] : {std::tuple{"eth0", 25000.0, 1500.0}, {"ib0", 100000.0, 65520.0}}) {
    std::string prefix = std::string(nic) + ".";
    if_stats.add(prefix + "isup", constant(1));
    if_stats.add(prefix + "duplex", constant(2));
    if_stats.add(prefix + "speed", constant(speed));
    if_stats.add(prefix + "mtu", constant(mtu));
  }
  auto& connections = model.emplace_back(SensorModel{"NetConnections", {}, {}});
  connections.add("count", gauge(420, 4, 0, 1e5));
  for (auto [key, start] : {std::pair{"tcp4.count", 120.0}, {"tcp6.count", 30.0}, {"udp4.count", 12.0},
                            {"udp6.count", 4.0}, {"unix.count", 250.0}, {"tcp.ESTABLISHED", 90.0},
                            {"tcp.TIME_WAIT", 40.0}, {"tcp.LISTEN", 20.0}})
    connections.add(key, gauge(start, 2, 0, 1e5));
  model.emplace_back(SensorModel{"Users", {"count"}, {gauge(1, 1, 0, 20)}});
  model.emplace_back(SensorModel{"BootTime", {""}, {constant(1.7e9)}});
  auto& times = model.emplace_back(SensorModel{"CPUTimes", {}, {}});
  for (int cpu = 0; cpu < cpus; ++cpu) {
    std::string prefix = std::to_string(cpu) + ".";
    for (auto [field, step] : {std::pair{"user", 0.6}, {"nice", 0.01}, {"system", 0.12}, {"idle", 0.4},
                               {"iowait", 0.03}, {"irq", 0.0}, {"softirq", 0.01}, {"steal", 0.0},
                               {"guest", 0.0}, {"guest_nice", 0.0}})
      times.add(prefix + field, step == 0 ? constant(0) : counter(3e5 * step, step, 0.01));
  }
  return model;
}

double quantize(double value, double quantum) {
  return quantum > 0 ? std::round(value / quantum) * quantum : value;
}

}  // namespace

std::size_t value_count(const std::vector<SensorModel>& model) {
  std::size_t n = 0;
  for (const auto& sensor : model) n += sensor.keys.size();
  return n;
}

// The model with exactly `metrics` values: enough CPUs, then the tail cut.
std::vector<SensorModel> model_with(int metrics) {
  int cpus = 1;
  auto model = node_model(cpus);
  while (value_count(model) < static_cast<std::size_t>(metrics)) model = node_model(++cpus);
  std::size_t excess = value_count(model) - metrics;
  while (excess > 0) {
    auto& last = model.back();
    std::size_t cut = std::min(excess, last.keys.size());
    last.keys.resize(last.keys.size() - cut);
    last.values.resize(last.values.size() - cut);
    excess -= cut;
    if (last.keys.empty()) model.pop_back();
  }
  return model;
}

double first_value(const ValueModel& model, Random& random) {
  switch (model.shape) {
    case Shape::counter: return quantize(model.start * (0.5 + random.uniform()), model.quantum);
    case Shape::gauge:
    case Shape::percent:
      return quantize(std::clamp(model.start * (0.8 + 0.4 * random.uniform()), model.low, model.high), model.quantum);
    case Shape::constant: return model.start;
  }
  return 0;
}

double next_value(const ValueModel& model, double value, Random& random) {
  switch (model.shape) {
    case Shape::counter: return value + quantize(model.step * random.uniform(), model.quantum);
    case Shape::gauge:
    case Shape::percent:
      return quantize(std::clamp(value + model.step * (2 * random.uniform() - 1), model.low, model.high),
                      model.quantum);
    case Shape::constant: return value;
  }
  return value;
}

}  // namespace fructosa::bench
