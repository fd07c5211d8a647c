// Temperature: every thermal zone of the kernel's thermal framework
// (<sys>/class/thermal/thermal_zone*), colmet's temperature backend without its fixed six
// columns. (SensorsTemperatures, psutil's view through hwmon, is a different sensor.)
//
// Keys: the zone's `type` ("x86_pkg_temp", "acpitz", "cpu-thermal", "iwlwifi_1"), made a key
// component (dots become '_'); a type repeated by several zones gets "#1", "#2", ... in zone
// order (thermal_zone0, thermal_zone1, ..., numerically), so "acpitz", "acpitz#1". A zone
// without a readable type is keyed by its directory name ("thermal_zone3").
// Values: temp / 1000 in degrees Celsius (the kernel reports millidegrees; negative allowed).
// A zone whose temp cannot be read this round (ENODATA/EAGAIN from a device that is off, e.g.
// an iwlwifi zone with the radio down) is left out of that round; when none can be read the
// sensor is unavailable, naming the first.
// The zones and their types are read at the first reading, when <sys>/class/thermal changes,
// and every `rescan_interval` seconds; the temp files stay open.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "glob_match.h"
#include "hwmon.h"
#include "sensor.h"
#include "sysfs_tree.h"

namespace fructosa::sensors::thermal_zones_file {
namespace {

const OptionTable kOptions{
    {.name = "rescan_interval",
     .type = OptionType::real,
     .default_value = "60",
     .help = "seconds between looking for new thermal zones and re-reading their types (also "
             "done at once when <sys>/class/thermal changes); 0: every reading",
     .min = 0},
    {.name = "include",
     .type = OptionType::list,
     .default_value = "",
     .help = "zone type patterns (fnmatch: * ? [seq]) to report, comma-separated, matched "
             "against the type as the kernel writes it; empty: every zone"},
    {.name = "exclude",
     .type = OptionType::list,
     .default_value = "",
     .help = "zone type patterns to leave out; wins over include"},
};

const Catalog kCatalog{
    {"*", Unit::celsius, Kind::gauge,
     "temperature of a thermal zone, keyed by its type (a repeated type gets '#1', '#2', ... in "
     "zone order)"},
};

struct Zone {
  SysfsAttribute temp;
  std::string key;
};

class TemperatureSensor final : public Sensor {
 public:
  explicit TemperatureSensor(const SensorContext& context)
      : class_dir_(context.roots.sys + "/class/thermal"),
        rescan_(class_dir_, context.options.get_real("rescan_interval")),
        filter_(context.options.get_list("include"), context.options.get_list("exclude")) {}

  bool sample(SampleWriter& out) override {
    if (rescan_.due()) scan();
    if (zones_.empty()) throw SensorUnavailable(why_empty_);
    bool any = false;
    for (auto& zone : zones_) {
      auto text = zone.temp.read();
      auto millidegrees = text ? python_int(*text) : std::nullopt;
      if (!millidegrees) continue;
      out.set(zone.key, static_cast<double>(*millidegrees) / 1000.0);
      any = true;
    }
    if (!any)
      throw SensorUnavailable(fmt::format("none of the {} thermal zones' temp can be read (first: {})",
                                          zones_.size(), zones_.front().temp.path()));
    return true;
  }

 private:
  void scan() {
    zones_.clear();
    sysfs::UniqueNames keys;
    auto entries = sysfs::list(class_dir_, "thermal_zone");
    std::size_t filtered = 0;
    for (const auto& entry : entries) {
      std::string dir = class_dir_ + "/" + entry;
      std::string temp = dir + "/temp";
      if (sysfs::open_error(temp) == ENOENT) continue;
      auto type_text = read_file(dir + "/type");
      std::string type = type_text ? std::string(strip(*type_text)) : std::string();
      if (type.empty()) type = entry;
      if (!filter_.accepts(type)) {
        ++filtered;
        continue;
      }
      zones_.push_back(Zone{SysfsAttribute(std::move(temp)), keys.add(type)});
    }
    if (filtered > 0)
      why_empty_ = fmt::format("none of the thermal zones under {} passes include/exclude", class_dir_);
    else if (!sysfs::is_directory_accessible(class_dir_))
      why_empty_ = fmt::format("cannot read {}: {} (no thermal framework)", class_dir_,
                               sysfs::errno_text(errno));
    else
      why_empty_ = fmt::format("no thermal_zone* with a temp file under {}", class_dir_);
  }

  std::string class_dir_;
  Rescan rescan_;
  NameFilter filter_;
  std::vector<Zone> zones_;
  std::string why_empty_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("Temperature",
                         "Temperature of every thermal zone (/sys/class/thermal), keyed by zone type",
                         kOptions, kCatalog, TemperatureSensor, .row = DashboardRow::sensors);

}  // namespace fructosa::sensors::thermal_zones_file
