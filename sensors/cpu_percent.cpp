// CPUPercent: psutil.cpu_percent() on Linux: busy share between two readings of /proc/stat.
// percpu (the default, as FrUCToSA sends it): one key per CPU, its position "0".."N-1";
// percpu = false: the whole machine under the scalar key "".
#include <string>
#include <vector>

#include "proc_stat.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::cpu_percent_file {
namespace {

const OptionTable kOptions{
    {"percpu", OptionType::boolean, "true",
     "one value per CPU (keys 0..N-1, psutil's percpu=True); false: one value for the machine (key \"\")"},
};

const Catalog kCatalog{
    {"", Unit::percent, Kind::gauge, "share of the interval all CPUs together were busy (percpu = false)"},
    {"*", Unit::percent, Kind::gauge, "share of the interval this CPU was busy (not idle or iowait)"},
};

class CpuPercentSensor final : public Sensor {
 public:
  explicit CpuPercentSensor(const SensorContext& context)
      : readings_(context.roots.proc), percpu_(context.options.get_bool("percpu")) {}

  bool sample(SampleWriter& out) override {
    if (!readings_.next(percpu_, out.time_ns())) return false;
    const auto& before = readings_.before();
    const auto& now = readings_.now();
    if (!percpu_) out.set("", cpu_busy_percent(before.total, now.total));
    for (std::size_t cpu = 0; percpu_ && cpu < now.cpus.size(); ++cpu) {
      if (cpu >= keys_.size()) keys_.push_back(std::to_string(cpu));
      out.set(keys_[cpu], cpu_busy_percent(before.cpus[cpu], now.cpus[cpu]));
    }
    return true;
  }

 private:
  ProcStatReadings readings_;
  bool percpu_;
  std::vector<std::string> keys_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("CPUPercent",
                         "Busy percentage since the previous reading, per CPU or for the machine (psutil.cpu_percent)",
                         kOptions, kCatalog, CpuPercentSensor, .row = DashboardRow::cpu, .per_item_option = "percpu");

}  // namespace fructosa::sensors::cpu_percent_file
