// CPUTimes: psutil.cpu_times(percpu=...) on Linux: seconds each mode has run, from /proc/stat.
// percpu = false (psutil's default): the "cpu" line, keys "user", "nice"...; percpu = true:
// each "cpuN" line, keys "<position>.user"... (position in psutil's list, 0..N-1).
#include "proc_stat.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::cpu_times_file {
namespace {

const OptionTable kOptions{
    {"percpu", OptionType::boolean, "false",
     "one set of times per CPU (keys <cpu>.<mode>, psutil's percpu=True); false: the machine's (keys <mode>)"},
};

const Catalog kCatalog{
    {"user", Unit::seconds, Kind::counter, "time running normal processes in user mode (guest included)"},
    {"nice", Unit::seconds, Kind::counter, "time running niced processes in user mode (guest_nice included)"},
    {"system", Unit::seconds, Kind::counter, "time running in the kernel"},
    {"idle", Unit::seconds, Kind::counter, "time doing nothing"},
    {"iowait", Unit::seconds, Kind::counter, "idle time with I/O outstanding"},
    {"irq", Unit::seconds, Kind::counter, "time servicing hardware interrupts"},
    {"softirq", Unit::seconds, Kind::counter, "time servicing software interrupts"},
    {"steal", Unit::seconds, Kind::counter, "time other guests ran while this (virtual) CPU waited"},
    {"guest", Unit::seconds, Kind::counter, "time running a virtual CPU for guests"},
    {"guest_nice", Unit::seconds, Kind::counter, "time running a niced guest"},
    {"*.user", Unit::seconds, Kind::counter, "this CPU's time in user mode (guest included)"},
    {"*.nice", Unit::seconds, Kind::counter, "this CPU's time running niced processes (guest_nice included)"},
    {"*.system", Unit::seconds, Kind::counter, "this CPU's time in the kernel"},
    {"*.idle", Unit::seconds, Kind::counter, "this CPU's time doing nothing"},
    {"*.iowait", Unit::seconds, Kind::counter, "this CPU's idle time with I/O outstanding"},
    {"*.irq", Unit::seconds, Kind::counter, "this CPU's time servicing hardware interrupts"},
    {"*.softirq", Unit::seconds, Kind::counter, "this CPU's time servicing software interrupts"},
    {"*.steal", Unit::seconds, Kind::counter, "time other guests ran while this (virtual) CPU waited"},
    {"*.guest", Unit::seconds, Kind::counter, "this CPU's time running a virtual CPU for guests"},
    {"*.guest_nice", Unit::seconds, Kind::counter, "this CPU's time running a niced guest"},
};

class CpuTimesSensor final : public Sensor {
 public:
  explicit CpuTimesSensor(const SensorContext& context)
      : stat_(context.roots.proc + "/stat"), percpu_(context.options.get_bool("percpu")) {}

  bool sample(SampleWriter& out) override {
    parse_proc_stat_cpus(stat_.read(out.time_ns()), cpus_);
    if (!percpu_) {
      for (int i = 0; i < cpus_.total.fields; ++i) out.set(kCpuTimeFields[i], cpus_.total.seconds[i]);
      return true;
    }
    for (std::size_t cpu = 0; cpu < cpus_.cpus.size(); ++cpu) {
      const CpuTimes& times = cpus_.cpus[cpu];
      for (int i = 0; i < times.fields; ++i) out.set(key_(cpu, i), times.seconds[i]);
    }
    return true;
  }

 private:
  SharedReading stat_;  // /proc/stat, read once per reading time with the CPU sensors
  bool percpu_;
  ProcStatCpus cpus_;
  PerCpuTimeKeys key_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("CPUTimes", "CPU time per mode since boot, for the machine or per CPU (psutil.cpu_times)",
                         kOptions, kCatalog, CpuTimesSensor, .row = DashboardRow::cpu, .per_item_option = "percpu");

}  // namespace fructosa::sensors::cpu_times_file
