// CPUTimesPercent: psutil.cpu_times_percent(percpu=...) on Linux: each mode's share of the time
// between two readings of /proc/stat, with psutil's arithmetic (see cpu_times_percent() in
// proc_stat.cpp). percpu = false (psutil's default): keys "user", "nice"...; percpu = true:
// keys "<position>.user"... per CPU.
#include "proc_stat.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::cpu_times_percent_file {
namespace {

const OptionTable kOptions{
    {"percpu", OptionType::boolean, "false",
     "one set of shares per CPU (keys <cpu>.<mode>, psutil's percpu=True); false: the machine's (keys <mode>)"},
};

const Catalog kCatalog{
    {"user", Unit::percent, Kind::gauge, "share of the interval in user mode (guest included)"},
    {"nice", Unit::percent, Kind::gauge, "share of the interval running niced processes (guest_nice included)"},
    {"system", Unit::percent, Kind::gauge, "share of the interval in the kernel"},
    {"idle", Unit::percent, Kind::gauge, "share of the interval doing nothing"},
    {"iowait", Unit::percent, Kind::gauge, "share of the interval idle with I/O outstanding"},
    {"irq", Unit::percent, Kind::gauge, "share of the interval servicing hardware interrupts"},
    {"softirq", Unit::percent, Kind::gauge, "share of the interval servicing software interrupts"},
    {"steal", Unit::percent, Kind::gauge, "share of the interval other guests ran while this (virtual) machine waited"},
    {"guest", Unit::percent, Kind::gauge, "share of the interval running virtual CPUs for guests"},
    {"guest_nice", Unit::percent, Kind::gauge, "share of the interval running niced guests"},
    {"*.user", Unit::percent, Kind::gauge, "share of the interval this CPU was in user mode (guest included)"},
    {"*.nice", Unit::percent, Kind::gauge, "share of the interval this CPU ran niced processes (guest_nice included)"},
    {"*.system", Unit::percent, Kind::gauge, "share of the interval this CPU was in the kernel"},
    {"*.idle", Unit::percent, Kind::gauge, "share of the interval this CPU did nothing"},
    {"*.iowait", Unit::percent, Kind::gauge, "share of the interval this CPU was idle with I/O outstanding"},
    {"*.irq", Unit::percent, Kind::gauge, "share of the interval this CPU serviced hardware interrupts"},
    {"*.softirq", Unit::percent, Kind::gauge, "share of the interval this CPU serviced software interrupts"},
    {"*.steal", Unit::percent, Kind::gauge, "share of the interval other guests ran while this (virtual) CPU waited"},
    {"*.guest", Unit::percent, Kind::gauge, "share of the interval this CPU ran a virtual CPU for guests"},
    {"*.guest_nice", Unit::percent, Kind::gauge, "share of the interval this CPU ran a niced guest"},
};

class CpuTimesPercentSensor final : public Sensor {
 public:
  explicit CpuTimesPercentSensor(const SensorContext& context)
      : readings_(context.roots.proc), percpu_(context.options.get_bool("percpu")) {}

  bool sample(SampleWriter& out) override {
    if (!readings_.next(percpu_, out.time_ns())) return false;
    const auto& before = readings_.before();
    const auto& now = readings_.now();
    if (!percpu_) {
      cpu_times_percent(before.total, now.total, shares_);
      for (int i = 0; i < shares_.fields; ++i) out.set(kCpuTimeFields[i], shares_.seconds[i]);
    }
    for (std::size_t cpu = 0; percpu_ && cpu < now.cpus.size(); ++cpu) {
      cpu_times_percent(before.cpus[cpu], now.cpus[cpu], shares_);
      for (int i = 0; i < shares_.fields; ++i) out.set(key_(cpu, i), shares_.seconds[i]);
    }
    return true;
  }

 private:
  ProcStatReadings readings_;
  bool percpu_;
  CpuTimes shares_;  // percentages, in CpuTimes' field order
  PerCpuTimeKeys key_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("CPUTimesPercent",
                         "Share of each CPU mode since the previous reading, for the machine or per CPU "
                         "(psutil.cpu_times_percent)",
                         kOptions, kCatalog, CpuTimesPercentSensor, .row = DashboardRow::cpu, .per_item_option = "percpu");

}  // namespace fructosa::sensors::cpu_times_percent_file
