// SensorsTemperatures: psutil.sensors_temperatures() on Linux (psutil 5.9.4): hwmon temperature
// inputs, or the thermal zones when hwmon has none.
//
// hwmon: every <sys>/class/hwmon/hwmon*/temp*_* and hwmon*/device/temp*_* file gives a sensor
// <dir>/tempN; current = tempN_input / 1000, the chip is <dir>/name, the label tempN_label
// ("" without one), high = tempN_max / 1000 and critical = tempN_crit / 1000 where readable.
// A sensor whose input or chip name cannot be read is left out (psutil skips it). psutil's
// extra glob of /sys/devices/platform/coretemp.*/hwmon/hwmon*/temp*_* adds nothing in 5.9.4
// (it compares whole file names with bases, and the bases it then adds read "..._input_input",
// which never exists), so it is not repeated here.
//
// Thermal zones, only when no hwmon temp*_* file exists at all: every
// <sys>/class/thermal/thermal_zone* with a readable temp gives chip = its type, label "",
// current = temp / 1000, critical = the temp of its trip point of type "critical" and high that
// of one of type "high", / 1000. (psutil 5.9.4 divides a threshold by 1000 again for every
// further trip point it visits, in the hash order of a Python set, so its value depends on
// PYTHONHASHSEED when a zone has several trip points; here each is divided once, which is what
// psutil gives when the critical trip point comes last. Of several "critical" trip points the
// highest-numbered one counts.)
//
// Then, as psutil's sensors_temperatures() wrapper: a high without a critical gives the
// critical the high's value, and a critical without a high the reverse (a 0 counts as missing,
// as Python's truth test). A threshold still missing (psutil's None) is not reported.
//
// Keys: <chip>.<label>.current / .high / .critical, made unique by SensorKeys (hwmon.h): an
// empty or repeated label gets "#<index in psutil's list for the chip>" appended
// ("mt7996_phy0_0.#0.current", "coretemp.Core 0#6.current" for a second coretemp package).
//
// Names, labels, thresholds and the set of inputs are read when scanning: at the first reading,
// when the entries of <sys>/class/hwmon change, and every `rescan_interval` seconds (0: every
// reading, as psutil). Inputs stay open and are re-read every reading. Keys are fixed at a scan
// (from the sensors readable then), so a sensor failing for one reading only drops its keys for
// that reading.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "hwmon.h"
#include "sensor.h"

namespace fructosa::sensors::sensors_temperatures_file {
namespace {

const OptionTable kOptions{
    {.name = "rescan_interval",
     .type = OptionType::real,
     .default_value = "60",
     .help =
         "seconds between re-reading sensor names, labels and thresholds and looking for new "
         "inputs (also done at once when <sys>/class/hwmon changes); 0: every reading, as psutil",
     .min = 0},
};

const Catalog kCatalog{
    {"*.*.current", Unit::celsius, Kind::gauge,
     "temperature (<chip>.<label>: hwmon name and tempN_label, or thermal zone type and '#N'; an "
     "empty or repeated label gets '#<index in psutil's list>')"},
    {"*.*.high", Unit::celsius, Kind::gauge,
     "high threshold (tempN_max, or a 'high' trip point; the critical one when missing); absent "
     "when psutil gives None"},
    {"*.*.critical", Unit::celsius, Kind::gauge,
     "critical threshold (tempN_crit, or the 'critical' trip point; the high one when missing); "
     "absent when psutil gives None"},
};

std::optional<double> read_celsius(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::nullopt;
  auto value = python_float(*text);
  if (!value) return std::nullopt;
  return *value / 1000.0;
}

struct Temperature {
  SysfsAttribute input;
  std::string current_key, high_key, critical_key;
  std::optional<double> high, critical;
};

class SensorsTemperaturesSensor final : public Sensor {
 public:
  explicit SensorsTemperaturesSensor(const SensorContext& context)
      : sys_(context.roots.sys),
        rescan_(context.roots.sys + "/class/hwmon", context.options.get_real("rescan_interval")) {}

  bool sample(SampleWriter& out) override {
    if (rescan_.due()) scan();
    if (temperatures_.empty()) throw SensorUnavailable(why_empty_);
    bool any = false;
    for (auto& temperature : temperatures_) {
      auto text = temperature.input.read();
      std::optional<double> raw = text ? python_float(*text) : std::nullopt;
      if (!raw) continue;
      any = true;
      out.set(temperature.current_key, *raw / 1000.0);
      if (temperature.high) out.set(temperature.high_key, *temperature.high);
      if (temperature.critical) out.set(temperature.critical_key, *temperature.critical);
    }
    if (!any)
      throw SensorUnavailable(
          fmt::format("none of the {} temperature inputs can be read (first: {})",
                      temperatures_.size(), temperatures_.front().input.path()));
    return true;
  }

 private:
  void scan() {
    temperatures_.clear();
    SensorKeys keys;
    auto add = [&](std::string input_path, std::string_view chip, std::string_view label,
                   std::optional<double> high, std::optional<double> critical) {
      // psutil's wrapper: a missing (or zero) threshold takes the other one's value.
      if (high.value_or(0) != 0 && critical.value_or(0) == 0)
        critical = high;
      else if (critical.value_or(0) != 0 && high.value_or(0) == 0)
        high = critical;
      std::string key = keys.add(chip, label);
      temperatures_.push_back(Temperature{SysfsAttribute(std::move(input_path)), key + ".current",
                                          key + ".high", key + ".critical", high, critical});
    };

    auto bases = hwmon_bases(sys_, "temp", DeviceDirectory::always);
    for (const auto& base : bases) {
      std::string input = base + "_input";
      auto current = read_file(input);
      auto name = read_file(std::string(parent_directory(base)) + "/name");
      if (!current || !python_float(*current) || !name) continue;  // psutil skips the sensor
      auto label = read_file(base + "_label");
      add(std::move(input), strip(*name), label ? strip(*label) : std::string_view{},
          read_celsius(base + "_max"), read_celsius(base + "_crit"));
    }
    if (!bases.empty()) {
      why_empty_ = fmt::format(
          "none of the {} hwmon temperature inputs under {}/class/hwmon "
          "(first: {}_input) has a readable value and chip name",
          bases.size(), sys_, bases.front());
      return;
    }

    // No hwmon temperature at all: the thermal zones.
    const std::string thermal = sys_ + "/class/thermal";
    std::vector<std::string> zones, files;
    list_directory(thermal, zones);
    std::erase_if(zones,
                  [](const std::string& name) { return name.rfind("thermal_zone", 0) != 0; });
    for (const auto& zone : zones) {
      const std::string base = thermal + "/" + zone;
      auto current = read_file(base + "/temp");
      auto type = read_file(base + "/type");
      if (!current || !python_float(*current) || !type) continue;
      list_directory(base, files);
      std::vector<std::pair<std::int64_t, std::string>> trip_points;  // number, "trip_point_N"
      for (const auto& file : files) {
        // psutil's '_'.join(basename.split('_')[0:3]) of trip_point* files.
        if (file.rfind("trip_point", 0) != 0) continue;
        auto first = file.find('_'), second = file.find('_', first + 1);
        std::string trip =
            file.substr(0, file.find('_', second == file.npos ? file.npos : second + 1));
        auto number = second == file.npos ? std::nullopt : python_int(trip.substr(second + 1));
        trip_points.emplace_back(number.value_or(-1), std::move(trip));
      }
      std::sort(trip_points.begin(), trip_points.end());
      trip_points.erase(std::unique(trip_points.begin(), trip_points.end()), trip_points.end());
      std::optional<double> high, critical;
      for (const auto& [number, trip] : trip_points) {
        auto trip_type = read_file(base + "/" + trip + "_type");
        std::string_view kind = trip_type ? strip(*trip_type) : std::string_view{};
        if (kind == "critical")
          critical = read_celsius(base + "/" + trip + "_temp");
        else if (kind == "high")
          high = read_celsius(base + "/" + trip + "_temp");
      }
      add(base + "/temp", strip(*type), "", high, critical);
    }
    why_empty_ =
        zones.empty()
            ? fmt::format("no hwmon temperature inputs or thermal zones under {}/class", sys_)
            : fmt::format(
                  "no hwmon temperature inputs under {0}/class/hwmon and none of the "
                  "{1} thermal zones under {0}/class/thermal has a readable temp "
                  "and type",
                  sys_, zones.size());
  }

  std::string sys_;
  Rescan rescan_;
  std::vector<Temperature> temperatures_;
  std::string why_empty_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("SensorsTemperatures",
                         "Hardware temperatures from hwmon, or thermal zones without hwmon "
                         "(psutil.sensors_temperatures)",
                         kOptions, kCatalog, SensorsTemperaturesSensor, .row = DashboardRow::sensors);

}  // namespace fructosa::sensors::sensors_temperatures_file
