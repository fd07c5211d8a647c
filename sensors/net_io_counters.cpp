// NetIOCounters: psutil.net_io_counters(pernic=..., nowrap=True) on Linux, from /proc/net/dev.
// Counters that go backwards (a 32-bit driver counter wrapping, a NIC reset) are corrected as
// psutil's _WrapNumbers does: the old value is added to a per-NIC, per-field reminder that
// stays until the NIC disappears. The totals are the sums over the (filtered) NICs.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "glob_match.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::net_io_counters_file {
namespace {

const OptionTable kOptions{
    {.name = "pernic",
     .type = OptionType::boolean,
     .default_value = "false",
     .help = "one set of counters per network interface (keys NIC.field) instead of totals over "
             "all of them"},
    {.name = "include",
     .type = OptionType::list,
     .default_value = "",
     .help = "NIC name patterns (fnmatch: * ? [seq]) to report, comma-separated; empty: all NICs. "
             "Applies to the totals too"},
    {.name = "exclude",
     .type = OptionType::list,
     .default_value = "",
     .help = "NIC name patterns to leave out (of the totals too); wins over include"},
};

// psutil's snetio fields, in its order.
constexpr std::array<std::string_view, 8> kFields{"bytes_sent",   "bytes_recv", "packets_sent",
                                                  "packets_recv", "errin",      "errout",
                                                  "dropin",       "dropout"};

const Catalog kCatalog{
    {"bytes_sent", Unit::bytes, Kind::counter, "bytes sent, all NICs together"},
    {"bytes_recv", Unit::bytes, Kind::counter, "bytes received, all NICs together"},
    {"packets_sent", Unit::count, Kind::counter, "packets sent, all NICs together"},
    {"packets_recv", Unit::count, Kind::counter, "packets received, all NICs together"},
    {"errin", Unit::count, Kind::counter, "receive errors, all NICs together"},
    {"errout", Unit::count, Kind::counter, "transmit errors, all NICs together"},
    {"dropin", Unit::count, Kind::counter, "incoming packets dropped, all NICs together"},
    {"dropout", Unit::count, Kind::counter, "outgoing packets dropped, all NICs together"},
    {"*.bytes_sent", Unit::bytes, Kind::counter, "bytes sent by this NIC (pernic)"},
    {"*.bytes_recv", Unit::bytes, Kind::counter, "bytes received by this NIC (pernic)"},
    {"*.packets_sent", Unit::count, Kind::counter, "packets sent by this NIC (pernic)"},
    {"*.packets_recv", Unit::count, Kind::counter, "packets received by this NIC (pernic)"},
    {"*.errin", Unit::count, Kind::counter, "receive errors of this NIC (pernic)"},
    {"*.errout", Unit::count, Kind::counter, "transmit errors of this NIC (pernic)"},
    {"*.dropin", Unit::count, Kind::counter, "incoming packets this NIC dropped (pernic)"},
    {"*.dropout", Unit::count, Kind::counter, "outgoing packets this NIC dropped (pernic)"},
};

using Counters = std::array<std::uint64_t, kFields.size()>;

struct Nic {
  std::string name;
  std::string key_prefix;  // key_component(name) + "."
  Counters last{};         // raw values of the previous reading
  Counters reminder{};     // what wrapping has taken away so far
  Counters value{};        // this reading, wrap-corrected
  bool accepted = true;    // passes include/exclude
  bool seen = false;
};

// One /proc/net/dev line after the two header lines: "  eth0: rx(8 fields) tx(8 fields)".
// Fills `raw` in snetio order; false when the line does not have the 16 numbers.
bool parse_dev_line(std::string_view line, std::string_view& name, Counters& raw) {
  auto colon = line.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  name = line.substr(0, colon);
  auto begin = name.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return false;
  name.remove_prefix(begin);
  name = name.substr(0, name.find_last_not_of(" \t") + 1);
  std::string_view rest = line.substr(colon + 1);
  std::array<std::uint64_t, 16> fields{};
  for (auto& field : fields)
    if (!parse_uint(next_field(rest), field)) return false;
  // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs drop ...
  raw = {fields[8], fields[0], fields[9], fields[1], fields[2], fields[10], fields[3], fields[11]};
  return true;
}

class NetIOCountersSensor final : public Sensor {
 public:
  explicit NetIOCountersSensor(const SensorContext& context)
      : dev_(context.roots.proc + "/net/dev"),
        pernic_(context.options.get_bool("pernic")),
        filter_(context.options.get_list("include"), context.options.get_list("exclude")) {}

  bool sample(SampleWriter& out) override {
    for (auto& nic : nics_) nic.seen = false;
    Lines lines(dev_.read());
    std::string_view line;
    int number = 0;
    std::size_t found = 0;
    while (lines.next(line)) {
      if (++number <= 2) continue;  // the two header lines
      std::string_view name;
      Counters raw;
      if (!parse_dev_line(line, name, raw)) continue;
      ++found;
      update(name, raw);
    }
    // psutil forgets the NICs that are gone, reminders included.
    std::erase_if(nics_, [](const Nic& nic) { return !nic.seen; });
    if (found == 0) throw SensorUnavailable("no network interface in " + dev_.path());

    Counters totals{};
    bool any = false;
    for (const auto& nic : nics_) {
      if (!nic.accepted) continue;
      any = true;
      for (std::size_t i = 0; i < kFields.size(); ++i) {
        if (pernic_) {
          key_.assign(nic.key_prefix).append(kFields[i]);
          out.set(key_, static_cast<double>(nic.value[i]));
        } else {
          totals[i] += nic.value[i];
        }
      }
    }
    if (!any)
      throw SensorUnavailable("no network interface in " + dev_.path() + " passes include/exclude");
    if (!pernic_)
      for (std::size_t i = 0; i < kFields.size(); ++i)
        out.set(kFields[i], static_cast<double>(totals[i]));
    return true;
  }

 private:
  void update(std::string_view name, const Counters& raw) {
    auto it =
        std::find_if(nics_.begin(), nics_.end(), [&](const Nic& nic) { return nic.name == name; });
    if (it == nics_.end()) {  // a new NIC: its values as they are
      Nic& nic = nics_.emplace_back();
      nic.name = name;
      nic.key_prefix = key_component(name) + ".";
      nic.accepted = filter_.accepts(nic.name);
      it = nics_.end() - 1;
    } else {
      for (std::size_t i = 0; i < raw.size(); ++i)
        if (raw[i] < it->last[i]) it->reminder[i] += it->last[i];  // it wrapped
    }
    for (std::size_t i = 0; i < raw.size(); ++i) it->value[i] = raw[i] + it->reminder[i];
    it->last = raw;
    it->seen = true;
  }

  ProcFile dev_;
  bool pernic_;
  NameFilter filter_;
  std::vector<Nic> nics_;  // in order of first appearance in /proc/net/dev
  std::string key_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR(
    "NetIOCounters",
    "Network I/O counters, totals or per NIC (psutil.net_io_counters, nowrap=True)", kOptions,
    kCatalog, NetIOCountersSensor, .row = DashboardRow::network, .per_item_option = "pernic");

}  // namespace fructosa::sensors::net_io_counters_file
