// CPUPercent: psutil.cpu_percent() on Linux: busy share between two readings of /proc/stat.
// percpu (the default, as FrUCToSA sends it): one key per CPU, its position "0".."N-1";
// percpu = false: the whole machine under the scalar key "".
#include <string>
#include <vector>

#include "proc_stat.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors {
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
      : stat_(context.roots.proc + "/stat"), percpu_(context.options.get_bool("percpu")) {}

  bool sample(SampleWriter& out) override {
    parse_proc_stat_cpus(stat_.read(), now_);
    // The first reading (or one after CPUs came or went) only primes the rate.
    bool comparable = primed_ && (!percpu_ || now_.cpus.size() == before_.cpus.size());
    if (comparable && !percpu_) out.set("", cpu_busy_percent(before_.total, now_.total));
    if (comparable && percpu_) {
      for (std::size_t cpu = 0; cpu < now_.cpus.size(); ++cpu) {
        if (cpu >= keys_.size()) keys_.push_back(std::to_string(cpu));
        out.set(keys_[cpu], cpu_busy_percent(before_.cpus[cpu], now_.cpus[cpu]));
      }
    }
    std::swap(before_, now_);
    primed_ = true;
    return comparable;
  }

 private:
  ProcFile stat_;
  bool percpu_;
  ProcStatCpus before_, now_;
  std::vector<std::string> keys_;
  bool primed_ = false;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("CPUPercent",
                         "Busy percentage since the previous reading, per CPU or for the machine (psutil.cpu_percent)",
                         kOptions, kCatalog, CpuPercentSensor);

}  // namespace fructosa::sensors
