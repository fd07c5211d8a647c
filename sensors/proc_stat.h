// /proc/stat CPU lines as psutil reads them (psutil/_pslinux.py cpu_times, per_cpu_times).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "procfs.h"

namespace fructosa::sensors {

// psutil's scputimes fields, in /proc/stat order. Older kernels have only the first 7..9.
inline constexpr std::array<std::string_view, 10> kCpuTimeFields{
    "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice"};

struct CpuTimes {
  std::array<double, 10> seconds{};  // ticks / CLOCK_TICKS, as psutil divides
  int fields = 0;                    // how many of kCpuTimeFields this kernel reports
};

// Keys "<cpu>.<field>" for per-CPU readings, built once per CPU and kept.
class PerCpuTimeKeys {
 public:
  const std::string& operator()(std::size_t cpu, int field);

 private:
  std::vector<std::array<std::string, kCpuTimeFields.size()>> keys_;
};

struct ProcStatCpus {
  CpuTimes total;               // the "cpu" line
  std::vector<CpuTimes> cpus;   // "cpuN" lines, in file order (psutil's list index)
};

// Fills `out` (reusing its storage). Throws SensorUnavailable if there is no "cpu" line.
void parse_proc_stat_cpus(std::string_view text, ProcStatCpus& out);

// The two latest readings of /proc/stat, which the rate sensors compare (psutil compares a
// reading with the previous one; the very first reading only primes).
class ProcStatReadings {
 public:
  explicit ProcStatReadings(const std::string& proc_root) : stat_(proc_root + "/stat") {}
  // Takes the reading of reading time `at_ns`. True when there is an earlier one to compare
  // with, with the same CPUs when `per_cpu` (CPUs that come or go prime anew). A failed read
  // changes nothing.
  bool next(bool per_cpu, std::int64_t at_ns) {
    parse_proc_stat_cpus(stat_.read(at_ns), next_);
    std::swap(before_, now_);
    std::swap(now_, next_);
    bool comparable = primed_ && (!per_cpu || now_.cpus.size() == before_.cpus.size());
    primed_ = true;
    return comparable;
  }
  const ProcStatCpus& before() const { return before_; }
  const ProcStatCpus& now() const { return now_; }

 private:
  SharedReading stat_;  // read once per reading time with the other CPU sensors
  ProcStatCpus before_, now_, next_;
  bool primed_ = false;
};

// psutil's cpu_percent(): busy share of the time between two readings, rounded to 0.1.
double cpu_busy_percent(const CpuTimes& before, const CpuTimes& after);

// psutil's cpu_times_percent(): each mode's share of the time between two readings, rounded
// to 0.1 and clamped to 0..100. `out.fields` is the number of fields both readings have.
void cpu_times_percent(const CpuTimes& before, const CpuTimes& after, CpuTimes& out);

// The first number of the /proc/stat line starting with `name` ("ctxt", "intr", "btime"...),
// as psutil's line.startswith(name) / int(line.split()[1]). False when there is none.
bool proc_stat_value(std::string_view text, std::string_view name, std::uint64_t& value);

}  // namespace fructosa::sensors
