// CPUPercent: psutil.cpu_percent(percpu=True) on Linux: busy share of each CPU between two
// readings of /proc/stat. Keys are the CPUs' positions "0".."N-1", as FrUCToSA sends them.
#include <string>
#include <vector>

#include "proc_stat.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors {
namespace {

const OptionTable kOptions{};

const Catalog kCatalog{
    {"*", Unit::percent, Kind::gauge, "share of the interval this CPU was busy (not idle or iowait)"},
};

class CpuPercentSensor final : public Sensor {
 public:
  explicit CpuPercentSensor(const SensorContext& context) : stat_(context.roots.proc + "/stat") {}

  bool sample(SampleWriter& out) override {
    parse_proc_stat_cpus(stat_.read(), now_);
    // The first reading (or one after CPUs came or went) only primes the rate.
    bool comparable = primed_ && now_.cpus.size() == before_.cpus.size();
    if (comparable) {
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
  ProcStatCpus before_, now_;
  std::vector<std::string> keys_;
  bool primed_ = false;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("CPUPercent", "Busy percentage of each CPU since the previous reading (psutil.cpu_percent, percpu)",
                         kOptions, kCatalog, CpuPercentSensor);

}  // namespace fructosa::sensors
