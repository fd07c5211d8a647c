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

double cpu_busy_percent(const CpuTimes& before, const CpuTimes& after) {
  // Step by step as psutil.cpu_percent's calculate(): per-field deltas clamped at 0, summed
  // left to right, guest time taken out (already in user/nice), idle and iowait not busy.
  const int fields = std::min(before.fields, after.fields);
  std::array<double, 10> delta{};
  for (int i = 0; i < fields; ++i) delta[i] = std::max(0.0, after.seconds[i] - before.seconds[i]);
  double total = 0;
  for (int i = 0; i < fields; ++i) total += delta[i];
  if (fields > 8) total -= delta[8];  // guest
  if (fields > 9) total -= delta[9];  // guest_nice
  double busy = total - delta[3];     // idle
  if (fields > 4) busy -= delta[4];   // iowait
  if (total == 0) return 0.0;
  return python_round(busy / total * 100, 1);
}

}  // namespace fructosa::sensors
