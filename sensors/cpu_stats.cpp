// CPUStats: psutil.cpu_stats() on Linux: the "ctxt", "intr" (its first number, the total) and
// "softirq" lines of /proc/stat; syscalls is always 0 on Linux, as psutil reports it.
#include <array>
#include <string_view>

#include "proc_stat.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::cpu_stats_file {
namespace {

const OptionTable kOptions{};

const Catalog kCatalog{
    {"ctx_switches", Unit::count, Kind::counter, "context switches since boot (ctxt)"},
    {"interrupts", Unit::count, Kind::counter, "interrupts serviced since boot (intr total)"},
    {"soft_interrupts", Unit::count, Kind::counter, "software interrupts serviced since boot (softirq total)"},
    {"syscalls", Unit::count, Kind::counter, "system calls since boot: always 0 on Linux, as psutil reports it"},
};

struct Line {
  std::string_view name;  // the /proc/stat line
  std::string_view key;   // psutil's field
};
constexpr std::array<Line, 3> kLines{{{"ctxt", "ctx_switches"}, {"intr", "interrupts"}, {"softirq", "soft_interrupts"}}};

class CpuStatsSensor final : public Sensor {
 public:
  explicit CpuStatsSensor(const SensorContext& context) : stat_(context.roots.proc + "/stat") {}

  bool sample(SampleWriter& out) override {
    std::string_view text = stat_.read(out.time_ns());
    // psutil leaves a missing line as None; a number is reported only when there is one.
    bool any = false;
    for (const auto& line : kLines) {
      std::uint64_t value = 0;
      if (!proc_stat_value(text, line.name, value)) continue;
      out.set(line.key, static_cast<double>(value));
      any = true;
    }
    if (!any) throw SensorUnavailable(stat_.path() + " has no ctxt, intr or softirq line");
    out.set("syscalls", 0);
    return true;
  }

 private:
  SharedReading stat_;  // /proc/stat, read once per reading time with the CPU sensors
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("CPUStats", "Context switches and interrupts since boot (psutil.cpu_stats)", kOptions,
                         kCatalog, CpuStatsSensor, .row = DashboardRow::cpu);

}  // namespace fructosa::sensors::cpu_stats_file
