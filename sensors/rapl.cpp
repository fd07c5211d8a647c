// RAPL: cumulative energy of the Intel/AMD RAPL power zones from the powercap class
// (<sys>/class/powercap), colmet's RAPL backend without perf or MSRs.
//
// Zones are the entries intel-rapl:<i>[:<j>] (the MSR interface: package-N, its core, uncore
// and dram subzones, psys) and intel-rapl-mmio:<i> (the MMIO interface of recent client
// CPUs, which names its zone "package-0" too). In a live sysfs they are symlinks into
// devices/virtual/powercap/intel-rapl/..., subzones nested in their package; the class
// directory lists all of them flat, which is what is read here (node_exporter's capture has
// them as plain directories). A subzone's parent is its name without the last ":<j>".
//
// Keys: <zone>.energy, <zone>.<subzone>.energy, where the components are the zones' `name`
// files: "package-0.energy", "package-0.core.energy", "package-1.dram.energy", "psys.energy";
// an intel-rapl-mmio zone is "mmio-<name>" ("mmio-package-0.energy"). A name repeated among
// siblings gets "#1", "#2" (sysfs_tree.h UniqueNames), in the zones' natural order.
//
// Values: energy_uj / 1e6 in joules. The counter wraps at max_energy_range_uj (a 32-bit MSR,
// every minute or so on a busy server at ~260 kJ): whenever a reading is lower than the
// previous one, max_energy_range_uj is added to the zone's offset, which lives as long as the
// agent (a zone that disappears and comes back keeps it). Without a readable
// max_energy_range_uj the previous reading is added instead (psutil's nowrap rule). The first
// reading is the raw counter: energy since boot modulo the wraps before the agent started.
// A wrap is only seen if time_interval is shorter than one wrap period (max_energy_range_uj
// at full power: ~262 kJ / 200 W, over 20 minutes on a server package), which any sensible
// interval is.
//
// Permissions: since Linux 5.10 (CVE-2020-8694, "Platypus") energy_uj is mode 0400, root only.
// A zone whose energy_uj cannot be opened (EACCES/EPERM) is left out and logged once (a
// warning naming the zones and the remedy, again whenever that set changes); when no zone is
// readable at all the sensor is unavailable with that reason, never a success with nothing.
// Remedy: run lagent as root, or give it CAP_DAC_READ_SEARCH (systemd:
// AmbientCapabilities=CAP_DAC_READ_SEARCH), or relax the mode with a udev rule.
//
// The zone list is re-read at the first reading, when <sys>/class/powercap changes, and every
// `rescan_interval` seconds (which also notices permissions changed by an administrator).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include "hwmon.h"
#include "sensor.h"
#include "sysfs_tree.h"

namespace fructosa::sensors::rapl_file {
namespace {

const OptionTable kOptions{
    {.name = "rescan_interval",
     .type = OptionType::real,
     .default_value = "300",
     .help = "seconds between looking for new or changed RAPL zones (also done at once when "
             "<sys>/class/powercap changes); 0: every reading",
     .min = 0},
};

const Catalog kCatalog{
    {"*.energy", Unit::joules, Kind::counter,
     "energy used by a top-level RAPL zone (package-N, psys; mmio-package-N for the "
     "intel-rapl-mmio zone), energy_uj/1e6, corrected for the wrap at max_energy_range_uj"},
    {"*.*.energy", Unit::joules, Kind::counter,
     "energy used by a RAPL subzone (<zone>.core, <zone>.uncore, <zone>.dram), energy_uj/1e6, "
     "corrected for the wrap at max_energy_range_uj"},
    {"*.*.*.energy", Unit::joules, Kind::counter, "energy used by a nested RAPL subzone"},
};

constexpr std::string_view kMsr = "intel-rapl:";
constexpr std::string_view kMmio = "intel-rapl-mmio:";

struct Zone {
  std::string entry;  // "intel-rapl:0:0"
  std::string key;    // "package-0.core.energy"
  SysfsAttribute energy;
  std::uint64_t max_range = 0;  // µJ, 0 when unknown
};

struct Wrap {
  std::uint64_t last = 0;
  std::uint64_t offset = 0;
  bool primed = false;
};

class RaplSensor final : public Sensor {
 public:
  explicit RaplSensor(const SensorContext& context)
      : class_dir_(context.roots.sys + "/class/powercap"),
        rescan_(class_dir_, context.options.get_real("rescan_interval")) {}

  bool sample(SampleWriter& out) override {
    if (rescan_.due()) scan();
    if (zones_.empty()) throw SensorUnavailable(why_empty_);
    bool any = false;
    for (auto& zone : zones_) {
      auto text = zone.energy.read();
      auto raw = text ? sysfs::parse_u64(*text) : std::nullopt;
      if (!raw) continue;
      Wrap& wrap = wraps_[zone.entry];
      if (wrap.primed && *raw < wrap.last) wrap.offset += zone.max_range ? zone.max_range : wrap.last;
      wrap.last = *raw;
      wrap.primed = true;
      out.set(zone.key, static_cast<double>(*raw + wrap.offset) / 1e6);
      any = true;
    }
    if (!any)
      throw SensorUnavailable(fmt::format("none of the {} RAPL zones' energy_uj can be read (first: {})",
                                          zones_.size(), zones_.front().energy.path()));
    return true;
  }

 private:
  void scan() {
    zones_.clear();
    std::vector<std::string> entries = sysfs::list(class_dir_, "intel-rapl");
    std::erase_if(entries, [](const std::string& entry) {
      return entry.rfind(kMsr, 0) != 0 && entry.rfind(kMmio, 0) != 0;
    });
    std::map<std::string, std::string> prefixes;  // entry -> key prefix, for the subzones
    std::map<std::string, sysfs::UniqueNames> siblings;  // parent entry ("" at the top) -> names
    std::vector<std::string> denied;
    std::string denied_path, other_error;
    for (const auto& entry : entries) {
      std::string dir = class_dir_ + "/" + entry;
      std::string energy = dir + "/energy_uj";
      auto colon = entry.rfind(':');
      bool top = entry.find(':') == colon;
      std::string parent = top ? "" : entry.substr(0, colon);
      auto name_text = read_file(dir + "/name");
      std::string name = name_text ? std::string(strip(*name_text)) : entry;
      if (top && entry.rfind(kMmio, 0) == 0) name = "mmio-" + name;
      std::string prefix;
      if (!top) {
        auto it = prefixes.find(parent);
        if (it == prefixes.end()) continue;  // a subzone of a zone without energy: not ours
        prefix = it->second + ".";
      }
      int error = sysfs::open_error(energy);
      if (error == ENOENT || error == ENOTDIR) continue;  // a control directory, not a zone
      prefix += siblings[parent].add(name);
      prefixes[entry] = prefix;
      if (error == EACCES || error == EPERM) {
        denied.push_back(entry);
        if (denied_path.empty()) denied_path = energy;
        continue;
      }
      if (error != 0) {
        if (other_error.empty())
          other_error = fmt::format("cannot open {}: {}", energy, sysfs::errno_text(error));
        continue;
      }
      auto range = read_file(dir + "/max_energy_range_uj");
      auto max_range = range ? sysfs::parse_u64(*range) : std::nullopt;
      zones_.push_back(Zone{entry, prefix + ".energy", SysfsAttribute(energy), max_range.value_or(0)});
    }

    std::string root_only;
    if (!denied.empty())
      root_only = fmt::format(
          "{} is readable by root only (Linux >= 5.10 makes RAPL energy_uj mode 0400, "
          "CVE-2020-8694): run lagent as root or give it CAP_DAC_READ_SEARCH "
          "(systemd: AmbientCapabilities=CAP_DAC_READ_SEARCH)",
          denied_path);
    std::string denied_list = fmt::format("{}", fmt::join(denied, ", "));
    if (!zones_.empty() && denied_list != logged_denied_) {
      if (!denied.empty())
        spdlog::warn("RAPL: zones {} left out: {}", denied_list, root_only);
      logged_denied_ = denied_list;
    }
    if (!root_only.empty())
      why_empty_ = root_only;
    else if (!other_error.empty())
      why_empty_ = other_error;
    else if (!sysfs::is_directory_accessible(class_dir_))
      why_empty_ = fmt::format("cannot read {}: {} (no powercap support; intel_rapl_msr not loaded?)",
                               class_dir_, sysfs::errno_text(errno));
    else
      why_empty_ = fmt::format("no intel-rapl zone with an energy_uj under {} (intel_rapl_msr "
                               "not loaded, or no RAPL on this CPU)",
                               class_dir_);
  }

  std::string class_dir_;
  Rescan rescan_;
  std::vector<Zone> zones_;
  std::map<std::string, Wrap> wraps_;  // by entry, kept across rescans
  std::string why_empty_;
  std::string logged_denied_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("RAPL",
                         "Cumulative energy of the RAPL power zones (package, core, uncore, dram, "
                         "psys) from /sys/class/powercap, wrap-corrected",
                         kOptions, kCatalog, RaplSensor, .row = DashboardRow::energy);

}  // namespace fructosa::sensors::rapl_file
