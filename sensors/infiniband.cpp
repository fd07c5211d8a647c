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
// round, all at once, with one deadline (perfquery_timeout seconds) for the lot: a perfquery
// still running then is killed with its process group (SIGKILL; reaped later if it is stuck
// in the kernel), so the sensor never waits longer than that. Its extended counters
// (PortXmitData, PortRcvData x4, PortXmitPkts, ..., and the error counters when it prints
// them) replace the sysfs values of the same counters; when it fails or times out for a port,
// that port keeps its sysfs values and a warning is logged (once per failure streak).
// perfquery needs access to /dev/infiniband/umad* (root, or the rdma group on most
// distributions).
//
// Devices and ports are looked for at the first reading, when <sys>/class/infiniband changes,
// and every `rescan_interval` seconds; the attribute files stay open.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "glob_match.h"
#include "hwmon.h"
#include "sensor.h"
#include "sysfs_tree.h"

extern char** environ;

namespace fructosa::sensors {
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
     .help = "the perfquery program (looked up in PATH unless it contains a '/')"},
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

// One perfquery run: its pid and what it wrote to stdout and stderr.
struct Run {
  pid_t pid = -1;
  int fd = -1;
  std::string output;
  bool eof = false;
  int status = -1;  // waitpid status once reaped
  bool reaped = false;
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

  ~InfiniBandSensor() override {
    for (pid_t pid : stuck_) ::waitpid(pid, nullptr, WNOHANG);
  }

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

  // Starts one perfquery per port, waits for all of them up to the deadline, parses what they
  // printed. Ports whose run fails keep an empty map (sysfs values).
  void run_perfquery(std::vector<std::map<std::string, std::uint64_t>>& queried) {
    reap_stuck();
    using Clock = std::chrono::steady_clock;
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(perfquery_timeout_));
    std::vector<Run> runs(ports_.size());
    std::vector<std::string> errors(ports_.size());
    for (std::size_t i = 0; i < ports_.size(); ++i) errors[i] = start(ports_[i], runs[i]);

    // Read every pipe until EOF or the deadline.
    std::vector<pollfd> fds;
    std::vector<std::size_t> which;
    char chunk[4096];
    for (;;) {
      fds.clear();
      which.clear();
      for (std::size_t i = 0; i < runs.size(); ++i)
        if (runs[i].fd >= 0 && !runs[i].eof) {
          fds.push_back(pollfd{runs[i].fd, POLLIN, 0});
          which.push_back(i);
        }
      if (fds.empty()) break;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      int ready = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()) + 1);
      if (ready < 0 && errno != EINTR) break;
      for (std::size_t k = 0; ready > 0 && k < fds.size(); ++k) {
        if (!fds[k].revents) continue;
        Run& run = runs[which[k]];
        ssize_t got = ::read(run.fd, chunk, sizeof chunk);
        if (got > 0 && run.output.size() < (1u << 20))
          run.output.append(chunk, static_cast<std::size_t>(got));
        else if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
          run.eof = true;
      }
    }
    // Collect the exit statuses: a run that closed its output exits at once; give it until the
    // deadline, then kill whatever is left.
    for (;;) {
      bool waiting = false;
      for (auto& run : runs)
        if (run.pid > 0 && !run.reaped) {
          pid_t done = ::waitpid(run.pid, &run.status, WNOHANG);
          if (done == run.pid || (done < 0 && errno == ECHILD))
            run.reaped = true;
          else if (run.eof)
            waiting = true;  // closed its output, exiting now; the others are killed below
        }
      if (!waiting || Clock::now() >= deadline) break;
      timespec pause{0, 2'000'000};
      ::nanosleep(&pause, nullptr);
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
      Run& run = runs[i];
      if (run.fd >= 0) ::close(run.fd);
      if (run.pid > 0 && !run.reaped) {
        ::kill(-run.pid, SIGKILL);
        if (::waitpid(run.pid, &run.status, WNOHANG) != run.pid) stuck_.push_back(run.pid);
        if (errors[i].empty())
          errors[i] = fmt::format("timed out after {} s", perfquery_timeout_);
        continue;
      }
      if (run.pid <= 0) continue;
      if (errors[i].empty() && run.status != -1 &&
          !(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0))
        errors[i] = WIFEXITED(run.status) ? fmt::format("exit status {}", WEXITSTATUS(run.status))
                                          : fmt::format("killed by signal {}", WTERMSIG(run.status));
      if (errors[i].empty()) {
        queried[i] = parse_perfquery(run.output);
        if (queried[i].empty()) errors[i] = "no counters in its output";
      }
    }
    for (std::size_t i = 0; i < ports_.size(); ++i) {
      Port& port = ports_[i];
      bool failing = !errors[i].empty();
      if (failing && !port.perfquery_failing) {
        std::string_view tail = strip(runs[i].output);
        if (tail.size() > 200) tail = tail.substr(tail.size() - 200);
        spdlog::warn("InfiniBand: `{} -x -C {} -P {}`: {}{}{}; reading sysfs counters instead",
                     perfquery_command_, port.device, port.port, errors[i],
                     tail.empty() ? "" : ": ", tail);
      }
      port.perfquery_failing = failing;
      if (failing) queried[i].clear();
    }
  }

  // Spawns perfquery for `port` with stdout and stderr on a pipe; "" or why it could not.
  std::string start(const Port& port, Run& run) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return fmt::format("pipe: {}", sysfs::errno_text(errno));
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
    ::posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
    posix_spawnattr_t attributes;
    ::posix_spawnattr_init(&attributes);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    ::posix_spawnattr_setsigmask(&attributes, &none);
    ::posix_spawnattr_setsigdefault(&attributes, &all);
    ::posix_spawnattr_setpgroup(&attributes, 0);  // its own group: a timeout kills what it started too
    ::posix_spawnattr_setflags(&attributes,
                               POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    std::vector<std::string> words{perfquery_command_, "-x", "-C", port.device, "-P", port.port};
    std::vector<char*> argv;
    for (auto& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
    int error = ::posix_spawnp(&run.pid, perfquery_command_.c_str(), &actions, &attributes,
                               argv.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    ::posix_spawnattr_destroy(&attributes);
    ::close(pipe_fds[1]);
    if (error != 0) {
      ::close(pipe_fds[0]);
      run.pid = -1;
      return fmt::format("cannot run {}: {}", perfquery_command_, sysfs::errno_text(error));
    }
    run.fd = pipe_fds[0];
    return {};
  }

  // Reaps the runs killed in earlier rounds that had not exited yet (stuck in the kernel).
  void reap_stuck() {
    std::erase_if(stuck_, [](pid_t pid) {
      pid_t done = ::waitpid(pid, nullptr, WNOHANG);
      return done == pid || (done < 0 && errno == ECHILD);
    });
  }

  std::string class_dir_;
  Rescan rescan_;
  NameFilter filter_;
  bool hw_counters_;
  bool perfquery_;
  std::string perfquery_command_;
  double perfquery_timeout_;
  std::vector<Port> ports_;
  std::vector<pid_t> stuck_;
  std::string why_empty_;
  std::string key_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("InfiniBand",
                         "InfiniBand/Omni-Path/RDMA port counters (bytes, packets, errors), link "
                         "state and rate from /sys/class/infiniband",
                         kOptions, kCatalog, InfiniBandSensor);

}  // namespace fructosa::sensors
