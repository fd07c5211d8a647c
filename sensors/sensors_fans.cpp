// SensorsFans: psutil.sensors_fans() on Linux (psutil 5.9.4): hwmon fan speeds.
//
// Every <sys>/class/hwmon/hwmon*/fan*_* file gives a fan <dir>/fanN; only when there is no such
// file at all, psutil looks in hwmon*/device/fan*_* instead (so a device/ fan is not reported on
// a node that also has a direct one, as in node_exporter's capture, where psutil reports the
// nct6779 fan and not the applesmc ones). current = int(fanN_input) in rpm, the chip is
// <dir>/name, the label fanN_label ("" without one). A fan whose input cannot be read is left
// out, as psutil; so is one whose input is not an integer or whose chip has no readable name,
// where psutil 5.9.4 raises instead.
//
// Keys: <chip>.<label>.current, made unique as in SensorsTemperatures (hwmon.h SensorKeys): an
// empty or repeated label gets "#<index in psutil's list for the chip>" ("nct6779.#0.current").
// Names, labels and the set of fans are read when scanning (first reading, a change in
// <sys>/class/hwmon, every `rescan_interval` seconds); inputs stay open.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "hwmon.h"
#include "sensor.h"

namespace fructosa::sensors::sensors_fans_file {
namespace {

const OptionTable kOptions{
    {.name = "rescan_interval",
     .type = OptionType::real,
     .default_value = "60",
     .help = "seconds between re-reading fan names and labels and looking for new fans (also done "
             "at once when <sys>/class/hwmon changes); 0: every reading, as psutil",
     .min = 0},
};

const Catalog kCatalog{
    {"*.*.current", Unit::rpm, Kind::gauge,
     "fan speed (<chip>.<label>: hwmon name and fanN_label; an empty or repeated label gets "
     "'#<index in psutil's list>')"},
};

struct Fan {
  SysfsAttribute input;
  std::string key;
};

class SensorsFansSensor final : public Sensor {
 public:
  explicit SensorsFansSensor(const SensorContext& context)
      : sys_(context.roots.sys),
        rescan_(context.roots.sys + "/class/hwmon", context.options.get_real("rescan_interval")) {}

  bool sample(SampleWriter& out) override {
    if (rescan_.due()) scan();
    if (fans_.empty()) throw SensorUnavailable(why_empty_);
    bool any = false;
    for (auto& fan : fans_) {
      auto text = fan.input.read();
      auto rpm = text ? python_int(*text) : std::nullopt;
      if (!rpm) continue;
      any = true;
      out.set(fan.key, static_cast<double>(*rpm));
    }
    if (!any)
      throw SensorUnavailable(fmt::format("none of the {} fan inputs can be read (first: {})",
                                          fans_.size(), fans_.front().input.path()));
    return true;
  }

 private:
  void scan() {
    fans_.clear();
    SensorKeys keys;
    auto bases = hwmon_bases(sys_, "fan", DeviceDirectory::only_when_none_direct);
    for (const auto& base : bases) {
      std::string input = base + "_input";
      auto current = read_file(input);
      auto name = read_file(std::string(parent_directory(base)) + "/name");
      if (!current || !python_int(*current) || !name) continue;
      auto label = read_file(base + "_label");
      std::string key = keys.add(strip(*name), label ? strip(*label) : std::string_view{});
      fans_.push_back(Fan{SysfsAttribute(std::move(input)), key + ".current"});
    }
    why_empty_ = bases.empty()
                     ? fmt::format("no hwmon fan inputs under {}/class/hwmon", sys_)
                     : fmt::format(
                           "none of the {} hwmon fans under {}/class/hwmon (first: {}_input) "
                           "has a readable speed and chip name",
                           bases.size(), sys_, bases.front());
  }

  std::string sys_;
  Rescan rescan_;
  std::vector<Fan> fans_;
  std::string why_empty_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("SensorsFans", "Fan speeds from hwmon (psutil.sensors_fans)", kOptions,
                         kCatalog, SensorsFansSensor, .row = DashboardRow::sensors);

}  // namespace fructosa::sensors::sensors_fans_file
