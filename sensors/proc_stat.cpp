#include "proc_stat.h"

#include <unistd.h>

#include <algorithm>

#include "metric.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors {
namespace {

const double kClockTicks = static_cast<double>(::sysconf(_SC_CLK_TCK));

void parse_cpu_line(std::string_view rest, CpuTimes& out) {
  out.fields = 0;
  for (std::string_view field = next_field(rest); !field.empty() && out.fields < 10; field = next_field(rest)) {
    std::uint64_t ticks = 0;
    if (!parse_uint(field, ticks)) break;
    out.seconds[out.fields++] = static_cast<double>(ticks) / kClockTicks;
  }
}

}  // namespace

const std::string& PerCpuTimeKeys::operator()(std::size_t cpu, int field) {
  while (keys_.size() <= cpu) {
    std::string prefix = std::to_string(keys_.size()) + ".";
    auto& row = keys_.emplace_back();
    for (std::size_t i = 0; i < kCpuTimeFields.size(); ++i) row[i] = prefix + std::string(kCpuTimeFields[i]);
  }
  return keys_[cpu][field];
}

void parse_proc_stat_cpus(std::string_view text, ProcStatCpus& out) {
  std::size_t count = 0;
  bool total_seen = false;
  Lines lines(text);
  std::string_view line;
  while (lines.next(line)) {
    if (line.substr(0, 3) != "cpu") continue;
    std::string_view rest = line;
    std::string_view name = next_field(rest);
    if (name == "cpu") {
      parse_cpu_line(rest, out.total);
      total_seen = true;
    } else {
      if (out.cpus.size() <= count) out.cpus.emplace_back();
      parse_cpu_line(rest, out.cpus[count++]);
    }
  }
  out.cpus.resize(count);
  if (!total_seen) throw SensorUnavailable("no cpu line in /proc/stat");
}

namespace {

// psutil's _cpu_times_deltas() and _cpu_tot_time(): per-field deltas clamped at 0, summed
// left to right, guest time taken out (already in user/nice). Returns the total.
double cpu_deltas(const CpuTimes& before, const CpuTimes& after, std::array<double, 10>& delta, int fields) {
  delta = {};
  for (int i = 0; i < fields; ++i) delta[i] = std::max(0.0, after.seconds[i] - before.seconds[i]);
  double total = 0;
  for (int i = 0; i < fields; ++i) total += delta[i];
  if (fields > 8) total -= delta[8];  // guest
  if (fields > 9) total -= delta[9];  // guest_nice
  return total;
}

}  // namespace

double cpu_busy_percent(const CpuTimes& before, const CpuTimes& after) {
  // Step by step as psutil.cpu_percent's calculate(): idle and iowait are not busy.
  const int fields = std::min(before.fields, after.fields);
  std::array<double, 10> delta;
  double total = cpu_deltas(before, after, delta, fields);
  double busy = total - delta[3];     // idle
  if (fields > 4) busy -= delta[4];   // iowait
  if (total == 0) return 0.0;
  return python_round(busy / total * 100, 1);
}

void cpu_times_percent(const CpuTimes& before, const CpuTimes& after, CpuTimes& out) {
  // psutil.cpu_times_percent's calculate(): scale = 100.0 / max(1, all_delta) (so an interval
  // shorter than one CPU-second is scaled as if it were one, as psutil does), then each field
  // rounded to 0.1 and clamped to 0..100.
  out.fields = std::min(before.fields, after.fields);
  std::array<double, 10> delta;
  double total = cpu_deltas(before, after, delta, out.fields);
  double scale = 100.0 / std::max(1.0, total);
  out.seconds = {};
  for (int i = 0; i < out.fields; ++i)
    out.seconds[i] = std::min(std::max(0.0, python_round(delta[i] * scale, 1)), 100.0);
}

bool proc_stat_value(std::string_view text, std::string_view name, std::uint64_t& value) {
  Lines lines(text);
  std::string_view line;
  while (lines.next(line)) {
    if (line.substr(0, name.size()) != name) continue;
    std::string_view rest = line;
    next_field(rest);
    return parse_uint(next_field(rest), value);
  }
  return false;
}

}  // namespace fructosa::sensors
