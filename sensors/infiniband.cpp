// InfiniBand: the port counters, link state and rate of every RDMA device port under
// <sys>/class/infiniband/<device>/ports/<port>/ (Mellanox mlx4/mlx5, Intel Omni-Path hfi1,
// qib, i40iw/irdma, RoCE devices alike: they all expose the PMA counters there), colmet's
// infiniband backend without perfquery.
//
// Keys: <device>.<port>.<counter>, e.g. "mlx4_0.1.port_rcv_data":
//   - every readable number in ports/<port>/counters/ under its file name. port_rcv_data and
//     port_xmit_data are converted to bytes: the PMA counts them in 4-byte words (as
//     node_exporter does, x4). Omni-Path's hfi1 translates its flit counters into the same
//     IB words, so the x4 holds there too. Files reading "N/A (no PMA)" (i40iw) are skipped.
//     On kernels >= 4.x the files are the 64-bit PortCountersExtended values when the HCA has
//     them; mlx4's legacy counters_ext/ directory (port_rcv_data_64, port_unicast_rcv_packets,
//     ...) is only used for a counter that counters/ lacks or cannot give a number for, under
//     the counters/ name (port_rcv_data_64 -> port_rcv_data, x4 too).
//   - <device>.<port>.state: the number of the state file ("4: ACTIVE" -> 4);
//     <device>.<port>.phys_state ("5: LinkUp" -> 5); <device>.<port>.rate in Mb/s
//     ("40 Gb/sec (4X QDR)" -> 40000).
//   - with hw_counters = true, ports/<port>/hw_counters/<name> (driver-specific: mlx5's
//     out_of_buffer, rx_write_requests, ...; hfi1's) as <device>.<port>.hw.<name>
//     ("lifespan" is a setting, not a counter, and is skipped).
// Counters are reported as the kernel gives them (cumulative; a counter reset by the HCA or
// by perfquery -R goes backwards, which a rate in the dashboard shows as a reset).
//
// perfquery = true runs `<perfquery_command> -x -C <device> -P <port>` for every port each
// round, all at once, with one deadline (perfquery_timeout seconds) for the lot
// (run_in_parallel of child_process.h): a perfquery still running then is killed with its
// process group (SIGKILL; reaped in a later round if it is stuck in the kernel), so the sensor
// never waits longer than that. perfquery_command is looked up in PATH, then /usr/local/sbin,
// /usr/sbin, /sbin, once a round (unless it contains a '/'). Its extended counters
// (PortXmitData, PortRcvData x4, PortXmitPkts, ..., and the error counters when it prints
// them) replace the sysfs values of the same counters; when it fails or times out for a port,
// that port keeps its sysfs values and a warning is logged (once per failure streak).
// perfquery needs access to /dev/infiniband/umad* (root, or the rdma group on most
// distributions).
//
// Devices and ports are looked for at the first reading, when <sys>/class/infiniband changes,
// and every `rescan_interval` seconds; the attribute files stay open.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <map>
#include <string>
#include <vector>

#include "child_process.h"
#include "glob_match.h"
#include "hwmon.h"
#include "sensor.h"
#include "sysfs_tree.h"

namespace fructosa::sensors::infiniband_file {
namespace {

const OptionTable kOptions{
    {.name = "rescan_interval",
     .type = OptionType::real,
     .default_value = "60",
     .help = "seconds between looking for new devices, ports and counters (also done at once "
             "when <sys>/class/infiniband changes); 0: every reading",
     .min = 0},
    {.name = "include",
     .type = OptionType::list,
     .default_value = "",
     .help = "device name patterns (fnmatch: * ? [seq]) to report, e.g. mlx5_*, hfi1_*; empty: "
             "every device"},
    {.name = "exclude",
     .type = OptionType::list,
     .default_value = "",
     .help = "device name patterns to leave out; wins over include"},
    {.name = "hw_counters",
     .type = OptionType::boolean,
     .default_value = "false",
     .help = "also report the driver-specific ports/<port>/hw_counters/* as "
             "<device>.<port>.hw.<name>"},
    {.name = "perfquery",
     .type = OptionType::boolean,
     .default_value = "false",
     .help = "read the extended counters with `perfquery -x -C <device> -P <port>` (one run per "
             "port each round, in parallel) instead of sysfs; sysfs stays the fallback"},
    {.name = "perfquery_command",
     .type = OptionType::text,
     .default_value = "perfquery",
     .help = "the perfquery program (looked up in PATH, then /usr/local/sbin, /usr/sbin, /sbin, "
             "unless it contains a '/')"},
    {.name = "perfquery_timeout",
     .type = OptionType::real,
     .default_value = "2",
     .help = "seconds all of one round's perfquery runs may take together; those still running "
             "then are killed and their ports read from sysfs",
     .min = 0.01,
     .max = 60},
};

const Catalog kCatalog{
    {"*.*.port_rcv_data", Unit::bytes, Kind::counter,
     "data received by the port (the PMA counts 4-byte words; reported x4, in bytes)"},
    {"*.*.port_xmit_data", Unit::bytes, Kind::counter,
     "data transmitted by the port (the PMA counts 4-byte words; reported x4, in bytes)"},
    {"*.*.port_rcv_packets", Unit::count, Kind::counter, "packets received"},
    {"*.*.port_xmit_packets", Unit::count, Kind::counter, "packets transmitted"},
    {"*.*.unicast_rcv_packets", Unit::count, Kind::counter, "unicast packets received"},
    {"*.*.unicast_xmit_packets", Unit::count, Kind::counter, "unicast packets transmitted"},
    {"*.*.multicast_rcv_packets", Unit::count, Kind::counter, "multicast packets received"},
    {"*.*.multicast_xmit_packets", Unit::count, Kind::counter, "multicast packets transmitted"},
    {"*.*.symbol_error", Unit::count, Kind::counter, "minor link errors on any physical lane"},
    {"*.*.link_error_recovery", Unit::count, Kind::counter,
     "successful link error recoveries (link retraining)"},
    {"*.*.link_downed", Unit::count, Kind::counter, "times the link failed to recover and went down"},
    {"*.*.port_rcv_errors", Unit::count, Kind::counter, "received packets with errors"},
    {"*.*.port_rcv_remote_physical_errors", Unit::count, Kind::counter,
     "received packets marked with the EBP delimiter (a remote physical error)"},
    {"*.*.port_rcv_switch_relay_errors", Unit::count, Kind::counter,
     "received packets discarded because they could not be forwarded by the switch relay"},
    {"*.*.port_xmit_discards", Unit::count, Kind::counter,
     "outbound packets discarded (port down or congestion)"},
    {"*.*.port_rcv_discards", Unit::count, Kind::counter, "inbound packets discarded"},
    {"*.*.port_xmit_constraint_errors", Unit::count, Kind::counter,
     "outbound packets not sent because of partition/raw-packet constraints"},
    {"*.*.port_rcv_constraint_errors", Unit::count, Kind::counter,
     "inbound packets discarded because of partition/raw-packet constraints"},
    {"*.*.local_link_integrity_errors", Unit::count, Kind::counter,
     "times the local physical errors exceeded the LocalPhyErrors threshold"},
    {"*.*.excessive_buffer_overrun_errors", Unit::count, Kind::counter,
     "times consecutive flow-control update periods had buffer overruns"},
    {"*.*.VL15_dropped", Unit::count, Kind::counter, "subnet management packets dropped (VL15)"},
    {"*.*.port_xmit_wait", Unit::count, Kind::counter,
     "ticks during which the port had data to send but could not (congestion)"},
    {"*.*.state", Unit::none, Kind::gauge,
     "logical port state: 0 NOP, 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER"},
    {"*.*.phys_state", Unit::none, Kind::gauge,
     "physical port state: 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, "
     "5 LinkUp, 6 LinkErrorRecovery, 7 PhyTest"},
    {"*.*.rate", Unit::megabits_per_second, Kind::gauge,
     "link rate (width x lane speed) from the rate file, '40 Gb/sec (4X QDR)' -> 40000"},
    {"*.*.hw.*", Unit::count, Kind::counter,
     "a driver-specific counter from ports/<port>/hw_counters (hw_counters = true)"},
    {"*.*.*", Unit::count, Kind::counter, "another PMA counter of ports/<port>/counters"},
};

// mlx4's legacy counters_ext/ names -> the counters/ name they duplicate.
constexpr std::array<std::pair<std::string_view, std::string_view>, 8> kExtended{{
    {"port_rcv_data_64", "port_rcv_data"},
    {"port_xmit_data_64", "port_xmit_data"},
    {"port_rcv_packets_64", "port_rcv_packets"},
    {"port_xmit_packets_64", "port_xmit_packets"},
    {"port_unicast_rcv_packets", "unicast_rcv_packets"},
    {"port_unicast_xmit_packets", "unicast_xmit_packets"},
    {"port_multicast_rcv_packets", "multicast_rcv_packets"},
    {"port_multicast_xmit_packets", "multicast_xmit_packets"},
}};

// perfquery's field names -> the sysfs counter names.
constexpr std::array<std::pair<std::string_view, std::string_view>, 21> kPerfquery{{
    {"PortXmitData", "port_xmit_data"},
    {"PortRcvData", "port_rcv_data"},
    {"PortXmitPkts", "port_xmit_packets"},
    {"PortRcvPkts", "port_rcv_packets"},
    {"PortUnicastXmitPkts", "unicast_xmit_packets"},
    {"PortUnicastRcvPkts", "unicast_rcv_packets"},
    {"PortMulticastXmitPkts", "multicast_xmit_packets"},
    {"PortMulticastRcvPkts", "multicast_rcv_packets"},
    {"SymbolErrorCounter", "symbol_error"},
    {"LinkErrorRecoveryCounter", "link_error_recovery"},
    {"LinkDownedCounter", "link_downed"},
    {"PortRcvErrors", "port_rcv_errors"},
    {"PortRcvRemotePhysicalErrors", "port_rcv_remote_physical_errors"},
    {"PortRcvSwitchRelayErrors", "port_rcv_switch_relay_errors"},
    {"PortXmitDiscards", "port_xmit_discards"},
    {"PortXmitConstraintErrors", "port_xmit_constraint_errors"},
    {"PortRcvConstraintErrors", "port_rcv_constraint_errors"},
    {"LocalLinkIntegrityErrors", "local_link_integrity_errors"},
    {"ExcessiveBufferOverrunErrors", "excessive_buffer_overrun_errors"},
    {"VL15Dropped", "VL15_dropped"},
    {"PortXmitWait", "port_xmit_wait"},
}};

double scale_of(std::string_view name) {
  return name == "port_rcv_data" || name == "port_xmit_data" ? 4.0 : 1.0;
}

struct Counter {
  std::string name;  // the counters/ name ("port_rcv_data")
  std::string key;
  double scale = 1;
  std::optional<SysfsAttribute> file;      // counters/<name>
  std::optional<SysfsAttribute> extended;  // counters_ext/<..._64>, when there is one
};

struct Port {
  std::string device, port;
  std::string prefix;  // "mlx4_0.1."
  std::vector<Counter> counters;
  SysfsAttribute state, phys_state, rate;
  bool perfquery_failing = false;
};

std::optional<std::uint64_t> read_counter(std::optional<SysfsAttribute>& file) {
  if (!file) return std::nullopt;
  auto text = file->read();
  return text ? sysfs::parse_u64(*text) : std::nullopt;
}

// "PortXmitData:....................1234" lines -> {sysfs name: value}.
std::map<std::string, std::uint64_t> parse_perfquery(std::string_view output) {
  std::map<std::string, std::uint64_t> values;
  while (!output.empty()) {
    auto end = output.find('\n');
    std::string_view line = output.substr(0, end);
    output = end == std::string_view::npos ? std::string_view{} : output.substr(end + 1);
    auto colon = line.find(':');
    if (colon == std::string_view::npos || line.starts_with("#")) continue;
    std::string_view field = strip(line.substr(0, colon));
    std::string_view value = line.substr(colon + 1);
    value.remove_prefix(std::min(value.find_first_not_of('.'), value.size()));
    for (const auto& [perf, sysfs_name] : kPerfquery)
      if (perf == field)
        if (auto number = sysfs::parse_u64(value)) values[std::string(sysfs_name)] = *number;
  }
  return values;
}

class InfiniBandSensor final : public Sensor {
 public:
  explicit InfiniBandSensor(const SensorContext& context)
      : class_dir_(context.roots.sys + "/class/infiniband"),
        rescan_(class_dir_, context.options.get_real("rescan_interval")),
        filter_(context.options.get_list("include"), context.options.get_list("exclude")),
        hw_counters_(context.options.get_bool("hw_counters")),
        perfquery_(context.options.get_bool("perfquery")),
        perfquery_command_(context.options.get_text("perfquery_command")),
        perfquery_timeout_(context.options.get_real("perfquery_timeout")) {}

  bool sample(SampleWriter& out) override {
    if (rescan_.due()) scan();
    if (ports_.empty()) throw SensorUnavailable(why_empty_);
    std::vector<std::map<std::string, std::uint64_t>> queried(ports_.size());
    if (perfquery_) run_perfquery(queried);
    bool any = false;
    for (std::size_t i = 0; i < ports_.size(); ++i) {
      Port& port = ports_[i];
      auto& from_perfquery = queried[i];
      for (auto& counter : port.counters) {
        std::optional<std::uint64_t> value;
        if (auto it = from_perfquery.find(counter.name); it != from_perfquery.end()) {
          value = it->second;
          from_perfquery.erase(it);
        } else {
          value = read_counter(counter.file);
          if (!value) value = read_counter(counter.extended);
        }
        if (!value) continue;
        out.set(counter.key, static_cast<double>(*value) * counter.scale);
        any = true;
      }
      for (const auto& [name, value] : from_perfquery) {  // what sysfs did not have
        key_.assign(port.prefix).append(name);
        out.set(key_, static_cast<double>(value) * scale_of(name));
        any = true;
      }
      if (auto text = port.state.read())
        if (auto state = sysfs::leading_int(*text)) {
          key_.assign(port.prefix).append("state");
          out.set(key_, static_cast<double>(*state));
          any = true;
        }
      if (auto text = port.phys_state.read())
        if (auto state = sysfs::leading_int(*text)) {
          key_.assign(port.prefix).append("phys_state");
          out.set(key_, static_cast<double>(*state));
        }
      if (auto text = port.rate.read()) {
        std::string_view rate = strip(*text);
        double gbits = 0;
        auto [end, error] = std::from_chars(rate.data(), rate.data() + rate.size(), gbits);
        if (error == std::errc() && end != rate.data()) {
          key_.assign(port.prefix).append("rate");
          out.set(key_, gbits * 1000.0);
        }
      }
    }
    if (!any)
      throw SensorUnavailable(fmt::format("none of the {} InfiniBand ports under {} has a readable "
                                          "counter or state (first: {}/{})",
                                          ports_.size(), class_dir_, ports_.front().device,
                                          ports_.front().port));
    return true;
  }

 private:
  void scan() {
    ports_.clear();
    auto devices = sysfs::list(class_dir_);
    std::size_t filtered = 0;
    for (const auto& device : devices) {
      if (!filter_.accepts(device)) {
        ++filtered;
        continue;
      }
      std::string ports_dir = class_dir_ + "/" + device + "/ports";
      for (const auto& number : sysfs::list(ports_dir)) {
        std::string dir = ports_dir + "/" + number;
        Port port{device, number, key_component(device) + "." + number + ".", {},
                  SysfsAttribute(dir + "/state"), SysfsAttribute(dir + "/phys_state"),
                  SysfsAttribute(dir + "/rate")};
        for (const auto& name : sysfs::list(dir + "/counters"))
          port.counters.push_back(Counter{name, port.prefix + key_component(name), scale_of(name),
                                          SysfsAttribute(dir + "/counters/" + name), std::nullopt});
        for (const auto& name : sysfs::list(dir + "/counters_ext")) {
          std::string_view legacy;
          for (const auto& [ext, base] : kExtended)
            if (ext == name) legacy = base;
          if (legacy.empty()) continue;
          SysfsAttribute file(dir + "/counters_ext/" + name);
          auto it = std::find_if(port.counters.begin(), port.counters.end(),
                                 [&](const Counter& counter) { return counter.name == legacy; });
          if (it != port.counters.end())
            it->extended.emplace(std::move(file));
          else
            port.counters.push_back(Counter{std::string(legacy), port.prefix + std::string(legacy),
                                            scale_of(legacy), std::nullopt, std::move(file)});
        }
        if (hw_counters_)
          for (const auto& name : sysfs::list(dir + "/hw_counters")) {
            if (name == "lifespan") continue;
            port.counters.push_back(Counter{"hw." + name, port.prefix + "hw." + key_component(name),
                                            1.0, SysfsAttribute(dir + "/hw_counters/" + name),
                                            std::nullopt});
          }
        ports_.push_back(std::move(port));
      }
    }
    if (!sysfs::is_directory_accessible(class_dir_))
      why_empty_ = fmt::format("cannot read {}: {} (no RDMA device, or ib_core not loaded)",
                               class_dir_, sysfs::errno_text(errno));
    else if (devices.empty())
      why_empty_ = fmt::format("no InfiniBand/RDMA device under {}", class_dir_);
    else if (filtered == devices.size())
      why_empty_ = fmt::format("none of the devices under {} passes include/exclude", class_dir_);
    else
      why_empty_ = fmt::format("no device under {} has a ports/ directory", class_dir_);
  }

  // Runs one perfquery per port, all under one deadline, and parses what they printed. Ports
  // whose run fails keep an empty map (sysfs values).
  void run_perfquery(std::vector<std::map<std::string, std::uint64_t>>& queried) {
    std::string program = perfquery_command_.find('/') != std::string::npos ? perfquery_command_
                                                                            : find_program(perfquery_command_);
    std::vector<std::string> errors(ports_.size());
    std::vector<ChildResult> runs;
    if (program.empty()) {
      for (auto& error : errors)
        error = fmt::format("cannot run {}: {}", perfquery_command_, sysfs::errno_text(ENOENT));
    } else {
      std::vector<std::vector<std::string>> argvs;
      argvs.reserve(ports_.size());
      for (const Port& port : ports_) argvs.push_back({program, "-x", "-C", port.device, "-P", port.port});
      runs = run_in_parallel(argvs, perfquery_timeout_, stragglers_);
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const ChildResult& run = runs[i];
      if (run.spawn_error != 0)
        errors[i] = fmt::format("cannot run {}: {}", perfquery_command_, sysfs::errno_text(run.spawn_error));
      else if (run.timed_out)
        errors[i] = fmt::format("timed out after {} s", perfquery_timeout_);
      else if (run.signal != 0)
        errors[i] = fmt::format("killed by signal {}", run.signal);
      else if (run.exit_code > 0)  // -1: reaped by someone else, status unknown: its output decides
        errors[i] = fmt::format("exit status {}", run.exit_code);
      if (errors[i].empty()) {
        queried[i] = parse_perfquery(run.out);
        if (queried[i].empty()) errors[i] = "no counters in its output";
      }
    }
    for (std::size_t i = 0; i < ports_.size(); ++i) {
      Port& port = ports_[i];
      bool failing = !errors[i].empty();
      if (failing && !port.perfquery_failing) {
        std::string_view tail = i < runs.size() ? strip(runs[i].err) : std::string_view{};
        if (tail.empty() && i < runs.size()) tail = strip(runs[i].out);
        if (tail.size() > 200) tail = tail.substr(tail.size() - 200);
        spdlog::warn("InfiniBand: `{} -x -C {} -P {}`: {}{}{}; reading sysfs counters instead",
                     perfquery_command_, port.device, port.port, errors[i],
                     tail.empty() ? "" : ": ", tail);
      }
      port.perfquery_failing = failing;
      if (failing) queried[i].clear();
    }
  }

  std::string class_dir_;
  Rescan rescan_;
  NameFilter filter_;
  bool hw_counters_;
  bool perfquery_;
  std::string perfquery_command_;
  double perfquery_timeout_;
  std::vector<Port> ports_;
  Stragglers stragglers_;  // perfquery runs killed at a deadline that had not died yet
  std::string why_empty_;
  std::string key_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("InfiniBand",
                         "InfiniBand/Omni-Path/RDMA port counters (bytes, packets, errors), link "
                         "state and rate from /sys/class/infiniband",
                         kOptions, kCatalog, InfiniBandSensor, .row = DashboardRow::interconnect);

}  // namespace fructosa::sensors::infiniband_file
