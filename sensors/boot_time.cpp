// BootTime: psutil.boot_time() on Linux: the "btime" line of /proc/stat, seconds since the
// epoch, under the scalar key "". Read every round, as psutil does not cache it: the kernel
// derives it from the wall clock, which may be stepped.
#include "proc_stat.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::boot_time_file {
namespace {

const OptionTable kOptions{};

const Catalog kCatalog{
    {"", Unit::timestamp, Kind::gauge, "when the system booted (btime)"},
};

class BootTimeSensor final : public Sensor {
 public:
  explicit BootTimeSensor(const SensorContext& context) : stat_(context.roots.proc + "/stat") {}

  bool sample(SampleWriter& out) override {
    std::uint64_t btime = 0;
    if (!proc_stat_value(stat_.read(out.time_ns()), "btime", btime)) throw SensorUnavailable("no btime line in " + stat_.path());
    out.set("", static_cast<double>(btime));
    return true;
  }

 private:
  SharedReading stat_;  // /proc/stat, read once per reading time with the CPU sensors
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("BootTime", "When the system booted, seconds since the epoch (psutil.boot_time)", kOptions,
                         kCatalog, BootTimeSensor, .row = DashboardRow::global);

}  // namespace fructosa::sensors::boot_time_file
