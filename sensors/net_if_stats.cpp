// NetIFStats: psutil.net_if_stats() on Linux: for each NIC of /proc/net/dev, whether it is up,
// duplex, speed, MTU and flags. psutil asks ioctls (SIOCGIFFLAGS, SIOCGIFMTU, ETHTOOL_GSET);
// the same facts are in /sys/class/net/<nic>/, which is what is read here:
//   - flags: sysfs `flags` is dev->flags; SIOCGIFFLAGS adds IFF_RUNNING when the NIC is up and
//     its operational state is "up" or "unknown" (dev_get_flags, netif_oper_up), so `running`
//     comes from `operstate`. psutil's isup is 'running' in flags. (SIOCGIFFLAGS takes promisc
//     and allmulti from the user-requested flags; sysfs shows the effective ones, which differ
//     only on NICs put in promiscuous mode by the kernel, e.g. bridge ports.)
//   - duplex, speed: sysfs asks the same ethtool link settings, but only while the NIC is up
//     (EINVAL otherwise): then duplex unknown and speed 0, which is also what drivers report
//     for a NIC without link. Speed -1 (SPEED_UNKNOWN) becomes 0, as psutil.
// A NIC listed in /proc/net/dev that has no sysfs directory is skipped (psutil skips ENODEV).
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::net_if_stats_file {
namespace {

const OptionTable kOptions{};

const Catalog kCatalog{
    {"*.isup", Unit::boolean, Kind::gauge,
     "1 when the NIC is up and running (IFF_RUNNING), as psutil's isup"},
    {"*.duplex", Unit::none, Kind::gauge,
     "duplex mode as psutil's NicDuplex: 2 full (NIC_DUPLEX_FULL), 1 half (NIC_DUPLEX_HALF), 0 "
     "unknown"},
    {"*.speed", Unit::megabits_per_second, Kind::gauge,
     "link speed; 0 when unknown (no link, virtual NIC)"},
    {"*.mtu", Unit::bytes, Kind::gauge, "maximum transmission unit"},
};

// The SIOCGIFFLAGS bits psutil names, in its order (IFF_RUNNING is derived, see above).
constexpr unsigned kRunning = 0x40;
struct FlagName {
  unsigned bit;
  std::string_view name;
};
constexpr std::array<FlagName, 16> kFlagNames{{{0x1, "up"},
                                               {0x2, "broadcast"},
                                               {0x4, "debug"},
                                               {0x8, "loopback"},
                                               {0x10, "pointopoint"},
                                               {0x20, "notrailers"},
                                               {kRunning, "running"},
                                               {0x80, "noarp"},
                                               {0x100, "promisc"},
                                               {0x200, "allmulti"},
                                               {0x400, "master"},
                                               {0x800, "slave"},
                                               {0x1000, "multicast"},
                                               {0x2000, "portsel"},
                                               {0x4000, "automedia"},
                                               {0x8000, "dynamic"}}};

std::string_view trimmed(std::string_view text) {
  auto end = text.find_last_not_of(" \t\n");
  return end == std::string_view::npos ? std::string_view{} : text.substr(0, end + 1);
}

struct Nic {
  explicit Nic(std::string_view name, const std::string& sys)
      : name(name),
        key_prefix(key_component(name) + "."),
        flags(sys + "/class/net/" + this->name + "/flags"),
        operstate(sys + "/class/net/" + this->name + "/operstate"),
        mtu(sys + "/class/net/" + this->name + "/mtu"),
        duplex(sys + "/class/net/" + this->name + "/duplex"),
        speed(sys + "/class/net/" + this->name + "/speed") {}
  std::string name;
  std::string key_prefix;
  ProcFile flags, operstate, mtu, duplex, speed;
  bool seen = false;
  // The flags with which the NIC, up, refused both duplex and speed (lo, tun, ...: EINVAL):
  // not asked again until its flags change (each refusal was an open and an exception).
  std::uint64_t no_link_settings_with = ~std::uint64_t{0};
};

// The file's content, or empty when it cannot be read (EINVAL for duplex of a down NIC).
std::string_view read_or_empty(ProcFile& file) {
  try {
    return trimmed(file.read());
  } catch (const SensorUnavailable&) {
    return {};
  }
}

class NetIFStatsSensor final : public Sensor {
 public:
  explicit NetIFStatsSensor(const SensorContext& context)
      : dev_(context.roots.proc + "/net/dev"), sys_(context.roots.sys) {}

  bool sample(SampleWriter& out) override {
    for (auto& nic : nics_) nic->seen = false;
    Lines lines(dev_.read());
    std::string_view line;
    int number = 0;
    bool any = false;
    while (lines.next(line)) {
      if (++number <= 2) continue;
      auto colon = line.rfind(':');
      if (colon == std::string_view::npos) continue;
      std::string_view name = line.substr(0, colon);
      auto begin = name.find_first_not_of(" \t");
      if (begin == std::string_view::npos) continue;
      name = trimmed(name.substr(begin));
      Nic& nic = find(name);
      nic.seen = true;
      any |= report(nic, out);
    }
    std::erase_if(nics_, [](const auto& nic) { return !nic->seen; });
    if (!any)
      throw SensorUnavailable("no network interface of " + dev_.path() + " found in " + sys_ +
                              "/class/net");
    return true;
  }

 private:
  Nic& find(std::string_view name) {
    for (auto& nic : nics_)
      if (nic->name == name) return *nic;
    return *nics_.emplace_back(std::make_unique<Nic>(name, sys_));
  }

  bool report(Nic& nic, SampleWriter& out) {
    std::uint64_t flags = 0, mtu = 0;
    std::string_view text = read_or_empty(nic.flags);
    if (text.substr(0, 2) != "0x" || !parse_hex(text.substr(2), flags))
      return false;  // gone: psutil's ENODEV
    if (!parse_uint(read_or_empty(nic.mtu), mtu)) return false;
    flags &= 0xFFFF & ~kRunning;
    std::string_view operstate = read_or_empty(nic.operstate);
    if ((flags & 0x1) && (operstate == "up" || operstate == "unknown")) flags |= kRunning;

    double duplex = 0, speed = 0;
    if ((flags & 0x1) && flags != nic.no_link_settings_with) {  // EINVAL for a NIC that is down
      std::string_view mode = read_or_empty(nic.duplex);
      duplex = mode == "full" ? 2 : mode == "half" ? 1 : 0;
      std::string_view mbits = read_or_empty(nic.speed);
      std::uint64_t value = 0;
      if (parse_uint(mbits, value) && value <= 0x7FFFFFFF)
        speed = static_cast<double>(value);  // "-1": unknown
      if (mode.empty() && mbits.empty()) nic.no_link_settings_with = flags;
    }

    flag_text_.clear();
    for (const auto& flag : kFlagNames)
      if (flags & flag.bit) {
        if (!flag_text_.empty()) flag_text_ += ',';
        flag_text_ += flag.name;
      }
    auto key = [&](std::string_view field) -> const std::string& {
      return key_.assign(nic.key_prefix).append(field);
    };
    out.set(key("isup"), (flags & kRunning) ? 1 : 0);
    out.set(key("duplex"), duplex);
    out.set(key("speed"), speed);
    out.set(key("mtu"), static_cast<double>(mtu));
    out.label(key("flags"), flag_text_);
    return true;
  }

  static bool parse_hex(std::string_view text, std::uint64_t& value) {
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
    return !text.empty() && error == std::errc() && end == text.data() + text.size();
  }

  ProcFile dev_;
  std::string sys_;
  std::vector<std::unique_ptr<Nic>> nics_;
  std::string flag_text_;
  std::string key_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("NetIFStats",
                         "Per NIC: up, duplex, speed, MTU and flags (psutil.net_if_stats)",
                         kOptions, kCatalog, NetIFStatsSensor, .row = DashboardRow::network);

}  // namespace fructosa::sensors::net_if_stats_file
