// CPUTimes: psutil.cpu_times() on Linux: seconds each mode has run, from /proc/stat.
#include <string>

#include "proc_stat.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors {
namespace {

const OptionTable kOptions{};

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
};

class CpuTimesSensor final : public Sensor {
 public:
  explicit CpuTimesSensor(const SensorContext& context) : stat_(context.roots.proc + "/stat") {}

  bool sample(SampleWriter& out) override {
    parse_proc_stat_cpus(stat_.read(), cpus_);
    for (int i = 0; i < cpus_.total.fields; ++i) out.set(kCpuTimeFields[i], cpus_.total.seconds[i]);
    return true;
  }

 private:
  ProcFile stat_;
  ProcStatCpus cpus_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("CPUTimes", "CPU time per mode since boot, all CPUs together (psutil.cpu_times)",
                         kOptions, kCatalog, CpuTimesSensor);

}  // namespace fructosa::sensors
