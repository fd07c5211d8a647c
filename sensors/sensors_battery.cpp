// SensorsBattery: psutil.sensors_battery() on Linux (psutil 5.9.4), from <sys>/class/power_supply.
//
// The battery is the first, in sorted order, of the entries named BAT* or containing "battery"
// (any case). Its energy_now (else charge_now), power_now (else current_now), energy_full (else
// charge_full) and time_to_empty_now are read as integers: the first of each pair that can be
// read counts.
//   percent       = 100.0 * energy_now / energy_full (0 when energy_full is 0), not rounded;
//                   without those two, the integer in `capacity`; without it psutil returns None
//                   and the sensor is unavailable.
//   power_plugged = AC0/online (else AC/online) == 1; without them, from the battery's status:
//                   "discharging" 0, "charging" or "full" 1, otherwise unknown: -1 (psutil's
//                   None). psutil 5.9.4 looks at no other mains supply (ADP1, ACAD...), so neither
//                   does this sensor.
//   secsleft      = psutil's POWER_TIME_UNLIMITED (-2) when plugged in; else
//                   int(energy_now / power_now * 3600) (truncated; POWER_TIME_UNKNOWN, -1, when
//                   power_now is 0); else int(time_to_empty_now * 60) (-1 if negative); else -1.
// An attribute whose content is not an integer counts as missing here (psutil 5.9.4 keeps the
// text and then fails on it with a TypeError, except for AC*/online, where it means unplugged).
//
// On node_exporter's capture (BAT0: energy_now 36580000, energy_full 45070000, power_now
// 5002000, capacity 81; AC/online 0) psutil gives percent 81.16263589971156, not the capacity
// file's 81: it prefers the energy ratio, which the kernel's capacity truncates.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "hwmon.h"
#include "sensor.h"

namespace fructosa::sensors::sensors_battery_file {
namespace {

const OptionTable kOptions{};

const Catalog kCatalog{
    {"percent", Unit::percent, Kind::gauge,
     "charge left: 100 * energy_now / energy_full (charge_* without energy_*), else capacity"},
    {"secsleft", Unit::seconds, Kind::gauge,
     "seconds until empty: energy_now / power_now * 3600, else time_to_empty_now * 60; "
     "-1 unknown (psutil.POWER_TIME_UNKNOWN), -2 on mains power (psutil.POWER_TIME_UNLIMITED)"},
    {"power_plugged", Unit::boolean, Kind::gauge,
     "on mains power: 1 yes, 0 no, -1 unknown (psutil's None): AC0/online or AC/online, else the "
     "battery's status"},
};

// The battery's attributes, in the order psutil reads them.
enum Attribute {
  EnergyNow,
  ChargeNow,
  PowerNow,
  CurrentNow,
  EnergyFull,
  ChargeFull,
  TimeToEmpty,
  Capacity,
  Status,
  kAttributes
};
constexpr std::array<const char*, kAttributes> kAttributeNames{
    "energy_now",  "charge_now",        "power_now", "current_now", "energy_full",
    "charge_full", "time_to_empty_now", "capacity",  "status"};

class SensorsBatterySensor final : public Sensor {
 public:
  explicit SensorsBatterySensor(const SensorContext& context)
      : power_supply_(context.roots.sys + "/class/power_supply"),
        no_battery_(fmt::format("no battery (BAT* or *battery*) under {}", power_supply_)),
        ac0_(power_supply_ + "/AC0/online"),
        ac_(power_supply_ + "/AC/online") {}

  bool sample(SampleWriter& out) override {
    choose_battery();
    // psutil's multi_bcat(): the first readable file of the list, as an integer.
    auto number = [&](std::initializer_list<Attribute> which) -> std::optional<std::int64_t> {
      for (Attribute attribute : which)
        if (auto text = attributes_[attribute].read()) return python_int(*text);
      return std::nullopt;
    };
    auto energy_now = number({EnergyNow, ChargeNow});
    auto power_now = number({PowerNow, CurrentNow});
    auto energy_full = number({EnergyFull, ChargeFull});
    auto time_to_empty = number({TimeToEmpty});

    double percent;
    if (energy_full && energy_now) {
      percent = *energy_full == 0
                    ? 0.0
                    : 100.0 * static_cast<double>(*energy_now) / static_cast<double>(*energy_full);
    } else {
      auto text = attributes_[Capacity].read();
      auto capacity = text ? python_int(*text) : std::nullopt;
      if (!capacity || *capacity == -1)
        throw SensorUnavailable(fmt::format(
            "{}/{} has neither energy_now and energy_full (nor charge_now and charge_full) nor a "
            "capacity",
            power_supply_, battery_));
      percent = static_cast<double>(*capacity);
    }

    double plugged = -1;  // psutil's None
    std::optional<std::string_view> online = ac0_.read();
    if (!online) online = ac_.read();
    if (online) {
      auto value = python_int(*online);
      plugged = value && *value == 1 ? 1 : 0;
    } else if (auto text = attributes_[Status].read()) {
      std::string_view status = strip(*text);
      if (equals_lower(status, "discharging"))
        plugged = 0;
      else if (equals_lower(status, "charging") || equals_lower(status, "full"))
        plugged = 1;
    }

    constexpr double kPowerTimeUnknown = -1, kPowerTimeUnlimited = -2;
    double secsleft = kPowerTimeUnknown;
    if (plugged == 1) {
      secsleft = kPowerTimeUnlimited;
    } else if (energy_now && power_now) {
      if (*power_now != 0)
        secsleft =
            std::trunc(static_cast<double>(*energy_now) / static_cast<double>(*power_now) * 3600);
    } else if (time_to_empty) {
      secsleft = static_cast<double>(*time_to_empty * 60);
      if (secsleft < 0) secsleft = kPowerTimeUnknown;
    }

    out.set("percent", percent);
    out.set("secsleft", secsleft);
    out.set("power_plugged", plugged);
    out.label("battery", battery_);
    return true;
  }

 private:
  static bool equals_lower(std::string_view text, std::string_view lower) {
    return text.size() == lower.size() &&
           std::equal(text.begin(), text.end(), lower.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == b;
           });
  }

  // psutil lists the directory on every call, and so does this sensor; the battery's files (and
  // AC0/online, AC/online) are opened anew only when the listing changes.
  void choose_battery() {
    list_directory(power_supply_, entries_);
    if (entries_ == previous_ && !first_) {
      if (battery_.empty()) throw SensorUnavailable(no_battery_);
      return;
    }
    first_ = false;
    previous_ = entries_;
    battery_.clear();
    attributes_.clear();
    for (const auto& name : entries_) {  // sorted: the first match is psutil's sorted(bats)[0]
      if (name.rfind("BAT", 0) == 0 || contains_battery(name)) {
        battery_ = name;
        break;
      }
    }
    if (battery_.empty()) throw SensorUnavailable(no_battery_);
    for (const char* attribute : kAttributeNames)
      attributes_.emplace_back(fmt::format("{}/{}/{}", power_supply_, battery_, attribute));
    ac0_ = SysfsAttribute(power_supply_ + "/AC0/online");
    ac_ = SysfsAttribute(power_supply_ + "/AC/online");
  }

  // Python's 'battery' in name.lower().
  static bool contains_battery(std::string_view name) {
    constexpr std::string_view kWord = "battery";
    for (std::size_t at = 0; at + kWord.size() <= name.size(); ++at)
      if (equals_lower(name.substr(at, kWord.size()), kWord)) return true;
    return false;
  }

  std::string power_supply_;
  std::string no_battery_;
  SysfsAttribute ac0_, ac_;
  std::vector<std::string> entries_, previous_;
  bool first_ = true;
  std::string battery_;
  std::vector<SysfsAttribute> attributes_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("SensorsBattery",
                         "Battery charge, time left and mains power (psutil.sensors_battery)",
                         kOptions, kCatalog, SensorsBatterySensor, .row = DashboardRow::sensors);

}  // namespace fructosa::sensors::sensors_battery_file
