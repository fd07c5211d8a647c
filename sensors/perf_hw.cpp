// PerfHW: hardware and software perf counters (perf_event_open(2)) per batch job or per node,
// colmet's perfhw backend done as a lagent sensor.
//
// scope = job: for every job of the job directory's snapshot, one counter per event and online
// CPU (<sys>/devices/system/cpu/online) in cgroup mode: pid = an fd of the job's perf_event
// cgroup directory (JobCgroup::dir("perf_event"): the v1 perf_event hierarchy, else the cgroup
// v2 directory, where perf_event is always on), PERF_FLAG_PID_CGROUP. The kernel counts only
// while a task of that cgroup (or of a descendant) runs on the CPU; cgroup events cannot be
// opened with cpu = -1, hence one per CPU. Counters of a new job are opened when it first shows
// up, and closed (RAII) when it leaves the snapshot. scope = node: the same per CPU with
// pid = -1, i.e. everything that runs on the node.
//
// Names (option `events`): colmet's 28 and cache_<cache>_<op>_<result>, see the catalog below
// and perf_events.h. A hardware cache event's config is cache | op << 8 | result << 16. colmet
// gave its cache_* names a bare enum value as the whole config, which means (cache, op,
// result) = (value, read, access) for cache_l1d ... cache_node; its cache_op_read and
// cache_result_access thus counted L1D read accesses (config 0) and so do ours, while its
// cache_op_prefetch (config 2) counted last-level-cache *read* accesses: here it is what the
// name says, L1D prefetch accesses (config 0x200). The rule: a colmet name picks one of cache,
// op or result; the others are L1D, read, access.
//
// Values: every counter is read as {value, time_enabled, time_running} (read_format
// TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING). When the PMU has fewer counters than events the
// kernel multiplexes them and each CPU's value is scaled to value * enabled / running. No cap
// on the number of events: as many as asked are opened. Keys are the event names, cumulative
// since the counters were opened (a counter; clock events in seconds). The scaled estimate
// can dip when the multiplexing pattern changes: the value reported never goes below the one
// reported before, so rates stay non-negative. `scaling = true` adds "scaling.<event>", the
// enabled/running ratio over the CPUs (1: counted all the time; 4: seen a quarter of the time).
//
// Unavailable events: each event is first tried system-wide on the first online CPU (the same
// privilege as cgroup mode: root, CAP_PERFMON or kernel.perf_event_paranoid <= 0). An event
// the kernel or the CPU refuses (EACCES, EPERM, ENOENT, EOPNOTSUPP, ENODEV, EINVAL, ...) is
// logged once, with the reason, and left out while the others count; when no event can be
// opened the sensor is unavailable, with every reason. A job whose cgroup cannot be counted is
// skipped; when no job can, the sensor is unavailable with the reason.
//
// File descriptors: jobs x events x CPUs of them. On EMFILE/ENFILE the soft RLIMIT_NOFILE is
// raised once to the hard limit (lagent uses poll/epoll, never select); when that is not
// enough, the jobs that did not fit are not counted this round (logged once) and tried again
// at the next.
//
// The first reading after the counters are opened (at start, after a release) reports nothing:
// it only starts them, as a rate sensor's first reading (`lagent probe` then shows what was
// counted in its --interval). A job that appears later is reported from its first round on.
//
// Release switch (`release_file`): while that file exists, the sensor closes all its counters
// (the PMU is free for a user's own perf/likwid/PAPI run) and reports nothing; when it is gone,
// counters are opened again. Values carry on from where they were: a job's counts keep rising
// across a release, with what happened during it not counted. Logged once per release.
#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/perf_event.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jobs.h"
#include "perf_events.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors {

namespace perf {
namespace {

struct NamedEvent {
  std::string_view name;
  EventCode code;
};

constexpr EventCode hardware(std::uint64_t config) { return {PERF_TYPE_HARDWARE, config, false}; }
constexpr EventCode software(std::uint64_t config, bool clock = false) {
  return {PERF_TYPE_SOFTWARE, config, clock};
}
constexpr EventCode cache(std::uint64_t id, std::uint64_t op = PERF_COUNT_HW_CACHE_OP_READ,
                          std::uint64_t result = PERF_COUNT_HW_CACHE_RESULT_ACCESS) {
  return {PERF_TYPE_HW_CACHE, cache_config(id, op, result), false};
}

// colmet's names (colmet/node/backends/lib_perf_hw), in its order.
const std::array<NamedEvent, 28> kColmetEvents{{
    {"cpu_cycles", hardware(PERF_COUNT_HW_CPU_CYCLES)},
    {"instructions", hardware(PERF_COUNT_HW_INSTRUCTIONS)},
    {"cache_references", hardware(PERF_COUNT_HW_CACHE_REFERENCES)},
    {"cache_misses", hardware(PERF_COUNT_HW_CACHE_MISSES)},
    {"branch_instructions", hardware(PERF_COUNT_HW_BRANCH_INSTRUCTIONS)},
    {"branch_misses", hardware(PERF_COUNT_HW_BRANCH_MISSES)},
    {"bus_cycles", hardware(PERF_COUNT_HW_BUS_CYCLES)},
    {"ref_cpu_cycles", hardware(PERF_COUNT_HW_REF_CPU_CYCLES)},
    {"cache_l1d", cache(PERF_COUNT_HW_CACHE_L1D)},
    {"cache_ll", cache(PERF_COUNT_HW_CACHE_LL)},
    {"cache_dtlb", cache(PERF_COUNT_HW_CACHE_DTLB)},
    {"cache_itlb", cache(PERF_COUNT_HW_CACHE_ITLB)},
    {"cache_bpu", cache(PERF_COUNT_HW_CACHE_BPU)},
    {"cache_node", cache(PERF_COUNT_HW_CACHE_NODE)},
    {"cache_op_read", cache(PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_OP_READ)},
    {"cache_op_prefetch", cache(PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_OP_PREFETCH)},
    {"cache_result_access", cache(PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_OP_READ,
                                  PERF_COUNT_HW_CACHE_RESULT_ACCESS)},
    {"cpu_clock", software(PERF_COUNT_SW_CPU_CLOCK, true)},
    {"task_clock", software(PERF_COUNT_SW_TASK_CLOCK, true)},
    {"page_faults", software(PERF_COUNT_SW_PAGE_FAULTS)},
    {"context_switches", software(PERF_COUNT_SW_CONTEXT_SWITCHES)},
    {"cpu_migrations", software(PERF_COUNT_SW_CPU_MIGRATIONS)},
    {"page_faults_min", software(PERF_COUNT_SW_PAGE_FAULTS_MIN)},
    {"page_faults_maj", software(PERF_COUNT_SW_PAGE_FAULTS_MAJ)},
    {"alignment_faults", software(PERF_COUNT_SW_ALIGNMENT_FAULTS)},
    {"emulation_faults", software(PERF_COUNT_SW_EMULATION_FAULTS)},
    {"dummy", software(PERF_COUNT_SW_DUMMY)},
    {"bpf_output", software(PERF_COUNT_SW_BPF_OUTPUT)},
}};

struct Part {
  std::string_view name;
  std::uint64_t id;
};
const std::array<Part, 7> kCaches{{{"l1d", PERF_COUNT_HW_CACHE_L1D},
                                   {"l1i", PERF_COUNT_HW_CACHE_L1I},
                                   {"ll", PERF_COUNT_HW_CACHE_LL},
                                   {"dtlb", PERF_COUNT_HW_CACHE_DTLB},
                                   {"itlb", PERF_COUNT_HW_CACHE_ITLB},
                                   {"bpu", PERF_COUNT_HW_CACHE_BPU},
                                   {"node", PERF_COUNT_HW_CACHE_NODE}}};
const std::array<Part, 3> kOps{{{"read", PERF_COUNT_HW_CACHE_OP_READ},
                                {"write", PERF_COUNT_HW_CACHE_OP_WRITE},
                                {"prefetch", PERF_COUNT_HW_CACHE_OP_PREFETCH}}};
const std::array<Part, 2> kResults{
    {{"access", PERF_COUNT_HW_CACHE_RESULT_ACCESS}, {"miss", PERF_COUNT_HW_CACHE_RESULT_MISS}}};

template <std::size_t N>
const Part* find_part(const std::array<Part, N>& parts, std::string_view name) {
  for (const auto& part : parts)
    if (part.name == name) return &part;
  return nullptr;
}

}  // namespace

std::optional<EventCode> find_event(std::string_view name) {
  for (const auto& event : kColmetEvents)
    if (event.name == name) return event.code;
  // cache_<cache>_<op>_<result>
  constexpr std::string_view prefix = "cache_";
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::string_view rest = name.substr(prefix.size());
  auto first = rest.find('_');
  if (first == std::string_view::npos) return std::nullopt;
  auto second = rest.find('_', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  const Part* id = find_part(kCaches, rest.substr(0, first));
  const Part* op = find_part(kOps, rest.substr(first + 1, second - first - 1));
  const Part* result = find_part(kResults, rest.substr(second + 1));
  if (!id || !op || !result) return std::nullopt;
  return cache(id->id, op->id, result->id);
}

const std::vector<std::string_view>& colmet_event_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> list;
    for (const auto& event : kColmetEvents) list.push_back(event.name);
    return list;
  }();
  return names;
}

std::vector<std::string> event_names() {
  std::vector<std::string> names(colmet_event_names().begin(), colmet_event_names().end());
  for (const auto& id : kCaches)
    for (const auto& op : kOps)
      for (const auto& result : kResults)
        names.push_back(fmt::format("cache_{}_{}_{}", id.name, op.name, result.name));
  return names;
}

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::vector<int> cpus;
  if (text.empty()) return cpus;  // no CPU (an empty "offline" list)
  while (true) {
    auto comma = text.find(',');
    std::string_view range = text.substr(0, comma);
    auto dash = range.find('-');
    std::uint64_t low = 0, high = 0;
    if (!parse_uint(range.substr(0, dash), low)) return std::nullopt;
    high = low;
    if (dash != std::string_view::npos && !parse_uint(range.substr(dash + 1), high))
      return std::nullopt;
    if (high < low || high > 1u << 20) return std::nullopt;
    for (std::uint64_t cpu = low; cpu <= high; ++cpu) cpus.push_back(static_cast<int>(cpu));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return cpus;
}

}  // namespace perf

namespace {

const OptionTable kOptions{
    {.name = "scope",
     .type = OptionType::text,
     .default_value = "job",
     .help = "job: one sample per batch job, counting its cgroup (perf cgroup mode, one counter "
             "per event and online CPU); node: one sample for the whole node",
     .choices = {"job", "node"}},
    {.name = "events",
     .type = OptionType::list,
     .default_value = "cpu_cycles,instructions,cache_references,cache_misses,branch_instructions,"
                      "branch_misses,task_clock",
     .help = "events to count, comma-separated: colmet's names (cpu_cycles, instructions, "
             "cache_references, cache_misses, branch_instructions, branch_misses, bus_cycles, "
             "ref_cpu_cycles, cache_l1d, cache_ll, cache_dtlb, cache_itlb, cache_bpu, cache_node, "
             "cache_op_read, cache_op_prefetch, cache_result_access, cpu_clock, task_clock, "
             "page_faults, context_switches, cpu_migrations, page_faults_min, page_faults_maj, "
             "alignment_faults, emulation_faults, dummy, bpf_output) or hardware cache events "
             "cache_<l1d|l1i|ll|dtlb|itlb|bpu|node>_<read|write|prefetch>_<access|miss>. No "
             "limit: when the PMU has fewer counters the kernel multiplexes them and the counts "
             "are scaled"},
    {.name = "scaling",
     .type = OptionType::boolean,
     .default_value = "false",
     .help = "also report scaling.<event>: time enabled / time running (> 1 when the event was "
             "multiplexed and its count scaled up)"},
    {.name = "exclude_kernel",
     .type = OptionType::boolean,
     .default_value = "false",
     .help = "count user space only (perf_event_attr exclude_kernel and exclude_hv)"},
    {.name = "release_file",
     .type = OptionType::text,
     .default_value = "/run/fructosa/perf-release",
     .help = "while this file exists the counters are closed and nothing is reported, so that a "
             "user's own profiler has the PMU (touch it to release, remove it to resume); empty: "
             "never release"},
};

const Catalog kCatalog{
    {"scaling.*", Unit::none, Kind::gauge,
     "time enabled / time running of the event over the CPUs (1: counted all the time; > 1: "
     "multiplexed and scaled up by this); with scaling = true"},
    {"jobs_counted", Unit::count, Kind::gauge,
     "scope = job, node sample: jobs whose counters are open and reported this round (the "
     "agent's involved_jobs label names the jobs on the node)"},
    {"cpu_cycles", Unit::count, Kind::counter, "CPU cycles (PERF_COUNT_HW_CPU_CYCLES)"},
    {"instructions", Unit::count, Kind::counter, "instructions retired"},
    {"cache_references", Unit::count, Kind::counter,
     "cache references, usually last-level cache (PERF_COUNT_HW_CACHE_REFERENCES)"},
    {"cache_misses", Unit::count, Kind::counter,
     "cache misses, usually last-level cache (PERF_COUNT_HW_CACHE_MISSES)"},
    {"branch_instructions", Unit::count, Kind::counter, "branch instructions retired"},
    {"branch_misses", Unit::count, Kind::counter, "mispredicted branch instructions"},
    {"bus_cycles", Unit::count, Kind::counter, "bus cycles (PERF_COUNT_HW_BUS_CYCLES)"},
    {"ref_cpu_cycles", Unit::count, Kind::counter,
     "reference cycles, not affected by frequency scaling (PERF_COUNT_HW_REF_CPU_CYCLES)"},
    {"cache_l1d", Unit::count, Kind::counter,
     "L1 data cache read accesses (hw cache L1D/read/access, config 0x0; as colmet)"},
    {"cache_ll", Unit::count, Kind::counter,
     "last-level cache read accesses (LL/read/access, config 0x2; as colmet)"},
    {"cache_dtlb", Unit::count, Kind::counter,
     "data TLB read accesses (DTLB/read/access, config 0x3; as colmet)"},
    {"cache_itlb", Unit::count, Kind::counter,
     "instruction TLB accesses (ITLB/read/access, config 0x4; as colmet)"},
    {"cache_bpu", Unit::count, Kind::counter,
     "branch prediction unit accesses, i.e. predicted branches (BPU/read/access, config 0x5; as "
     "colmet)"},
    {"cache_node", Unit::count, Kind::counter,
     "local NUMA node memory read accesses (NODE/read/access, config 0x6; as colmet)"},
    {"cache_op_read", Unit::count, Kind::counter,
     "L1 data cache read accesses (L1D/read/access, config 0x0): the same count as cache_l1d, as "
     "colmet"},
    {"cache_op_prefetch", Unit::count, Kind::counter,
     "L1 data cache prefetch accesses (L1D/prefetch/access, config 0x200); colmet counted "
     "last-level cache read accesses (config 0x2) under this name"},
    {"cache_result_access", Unit::count, Kind::counter,
     "L1 data cache read accesses (L1D/read/access, config 0x0): the same count as cache_l1d, as "
     "colmet"},
    {"cpu_clock", Unit::seconds, Kind::counter,
     "time by the cpu-clock software event: per job the CPU time of its tasks; per node elapsed "
     "time x online CPUs (idle time included)"},
    {"task_clock", Unit::seconds, Kind::counter,
     "time by the task-clock software event: per job the CPU time of its tasks; per node elapsed "
     "time x online CPUs (the idle task counts too)"},
    {"page_faults", Unit::count, Kind::counter, "page faults, minor and major"},
    {"context_switches", Unit::count, Kind::counter, "context switches"},
    {"cpu_migrations", Unit::count, Kind::counter, "migrations of a task to another CPU"},
    {"page_faults_min", Unit::count, Kind::counter, "minor page faults (no I/O needed)"},
    {"page_faults_maj", Unit::count, Kind::counter, "major page faults (I/O needed)"},
    {"alignment_faults", Unit::count, Kind::counter,
     "alignment faults fixed up by the kernel (0 on x86)"},
    {"emulation_faults", Unit::count, Kind::counter,
     "instructions emulated by the kernel (0 on x86)"},
    {"dummy", Unit::count, Kind::counter,
     "the dummy software event: always 0 (accepted for colmet's configurations)"},
    {"bpf_output", Unit::count, Kind::counter,
     "the bpf-output software event: 0, no BPF program writes to these counters (accepted for "
     "colmet's configurations)"},
    {"cache_*", Unit::count, Kind::counter,
     "hardware cache event cache_<cache>_<op>_<result>: cache l1d, l1i (L1 instructions), ll "
     "(last level), dtlb, itlb, bpu (branch prediction), node (NUMA node memory); op read, write, "
     "prefetch; result access or miss (config cache | op << 8 | result << 16)"},
};

// Errors that mean "no more file descriptors" rather than "this event cannot be counted".
bool out_of_fds(int error) { return error == EMFILE || error == ENFILE; }

std::string errno_text(int error) {
  const char* name = strerrorname_np(error);
  return fmt::format("{} ({})", std::strerror(error), name ? name : "?");
}

// What a refusal usually means, for the log and for SensorUnavailable.
std::string hint(int error) {
  switch (error) {
    case EACCES:
    case EPERM:
      return "; counting per CPU needs root, CAP_PERFMON or kernel.perf_event_paranoid <= 0";
    case ENOENT:
    case EOPNOTSUPP:
    case ENODEV:
      return "; this CPU or kernel does not have the event (no hardware PMU in a VM?)";
    default:
      return "";
  }
}

int perf_event_open(perf_event_attr& attr, int pid, int cpu, unsigned long flags) {
  return static_cast<int>(::syscall(SYS_perf_event_open, &attr, pid, cpu, -1, flags));
}

// One event of one target (a job or the node): its counters, one per CPU.
struct Counter {
  std::vector<Fd> fds;
  double carried = 0;   // counted before the counters were last closed (release)
  double reported = 0;  // the last value reported: values never go down
};

// A job, or the node.
struct Target {
  bool open = false;
  std::string refused;            // why it cannot be counted (not tried again); "" when it can
  std::vector<Counter> counters;  // one per configured event
};

struct Event {
  std::string name;
  std::string scaling_key;  // "scaling." + name (not name + ".scaling": no key may prefix another)
  perf::EventCode code;
  bool available = false;
  std::string reason;  // why not, when not
};

enum class Opened { ok, out_of_fds, refused };

class PerfHwSensor final : public Sensor {
 public:
  explicit PerfHwSensor(const SensorContext& context)
      : online_(context.roots.sys + "/devices/system/cpu/online"),
        per_job_(context.options.get_text("scope") == "job"),
        scaling_(context.options.get_bool("scaling")),
        exclude_kernel_(context.options.get_bool("exclude_kernel")),
        release_file_(context.options.get_text("release_file")),
        jobs_(context.jobs) {
    std::set<std::string> seen;
    std::vector<std::string> unknown;
    for (const auto& name : context.options.get_list("events")) {
      auto code = perf::find_event(name);
      if (!code) {
        unknown.push_back(name);
        continue;
      }
      if (!seen.insert(name).second) continue;  // listed twice: counted once
      events_.push_back({name, "scaling." + name, *code, false, {}});
    }
    if (!unknown.empty())
      throw ConfigError(fmt::format(
          "[sensor:PerfHW] events: unknown perf event(s) {} (known: colmet's names such as "
          "cpu_cycles, task_clock, cache_l1d, and cache_<l1d|l1i|ll|dtlb|itlb|bpu|node>_<read|"
          "write|prefetch>_<access|miss>; `lagent sensors` lists them)",
          fmt::join(unknown, ", ")));
    if (events_.empty()) throw ConfigError("[sensor:PerfHW] events: name at least one event");
  }

  bool sample(SampleWriter& out) override {
    if (per_job_ && !jobs_)
      throw SensorUnavailable("no job discovery (scope = job needs the agent's [jobs])");
    if (released()) return false;
    if (!checked_) check_events();
    if (!started_) {
      // The counters open now and have counted nothing yet: like a rate sensor's first
      // reading, this one only starts them (the next one says what happened in between).
      std::vector<Sample> discarded;
      SampleWriter nowhere(discarded, "", "", 0);
      per_job_ ? sample_jobs(nowhere) : sample_node(nowhere);
      started_ = true;
      return false;
    }
    return per_job_ ? sample_jobs(out) : sample_node(out);
  }

 private:
  // The release switch. True while the release file exists: every counter is closed.
  bool released() {
    if (release_file_.empty()) return false;
    bool exists = ::access(release_file_.c_str(), F_OK) == 0;
    if (exists && !released_) {
      close_all();
      released_ = true;
      started_ = false;
      spdlog::info("PerfHW: released the perf counters while {} exists", release_file_);
    } else if (!exists && released_) {
      released_ = false;
      checked_ = false;  // the PMU may look different now
      spdlog::info("PerfHW: {} is gone: counting again", release_file_);
    }
    return released_;
  }

  void close_all() {
    auto close = [](Target& target) {
      for (auto& counter : target.counters) {
        if (!counter.fds.empty()) counter.carried = counter.reported;
        counter.fds.clear();
      }
      target.open = false;
      target.refused.clear();
    };
    close(node_);
    // PerJob holds only the jobs of the last snapshot (retain), so that is where to look.
    if (last_snapshot_)
      for (const auto& job : last_snapshot_->jobs)
        if (Target* target = jobs_state_.find(job.id)) close(*target);
  }

  // Which events can be opened at all: each is tried system-wide on the first online CPU,
  // disabled, and closed at once.
  void check_events() {
    const std::vector<int>& cpus = online_cpus();
    std::string reasons;
    bool any = false;
    for (auto& event : events_) {
      perf_event_attr attr = attributes(event.code);
      attr.disabled = 1;
      int fd = perf_event_open(attr, -1, cpus.front(), PERF_FLAG_FD_CLOEXEC);
      std::string reason;
      if (fd >= 0) {
        ::close(fd);
      } else {
        int error = errno;
        reason = "perf_event_open: " + errno_text(error) + hint(error);
      }
      event.available = fd >= 0;
      any |= event.available;
      if (!event.available)
        reasons += fmt::format("{}{}: {}", reasons.empty() ? "" : "; ", event.name, reason);
      if (reason != event.reason && !reason.empty())
        spdlog::warn("PerfHW: event {} unavailable: {}", event.name, reason);
      event.reason = reason;
    }
    if (!any) throw SensorUnavailable("no perf event can be opened: " + reasons);
    checked_ = true;
  }

  perf_event_attr attributes(const perf::EventCode& code) const {
    perf_event_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = code.type;
    attr.config = code.config;
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    attr.exclude_kernel = exclude_kernel_;
    attr.exclude_hv = exclude_kernel_;
    return attr;
  }

  // The online CPUs, read when counters are about to be opened.
  const std::vector<int>& online_cpus() {
    auto cpus = perf::parse_cpu_list(online_.read());
    if (!cpus || cpus->empty())
      throw SensorUnavailable(fmt::format("{} is not a CPU list", online_.path()));
    cpus_ = std::move(*cpus);
    return cpus_;
  }

  // Opens the counters of every available event on every CPU, for `pid` (-1: everything; a
  // cgroup directory fd with PERF_FLAG_PID_CGROUP).
  Opened open(Target& target, int pid, unsigned long flags, const std::string& what) {
    target.counters.resize(events_.size());
    bool any = false;
    std::string reasons;
    for (std::size_t i = 0; i < events_.size(); ++i) {
      const Event& event = events_[i];
      Counter& counter = target.counters[i];
      counter.fds.clear();
      if (!event.available) continue;
      perf_event_attr attr = attributes(event.code);
      int failure = 0;
      for (int cpu : cpus_) {
        int fd = perf_event_open(attr, pid, cpu, flags | PERF_FLAG_FD_CLOEXEC);
        if (fd < 0 && out_of_fds(errno) && raise_fd_limit())
          fd = perf_event_open(attr, pid, cpu, flags | PERF_FLAG_FD_CLOEXEC);
        if (fd >= 0) {
          counter.fds.emplace_back(fd);
          continue;
        }
        int error = errno;
        if (out_of_fds(error)) {
          for (auto& other : target.counters) other.fds.clear();  // all of a job, or none
          return Opened::out_of_fds;
        }
        if (error == ENODEV && cpu != cpus_.front()) continue;  // that CPU went offline
        failure = error;
        break;
      }
      if (failure) {
        counter.fds.clear();
        std::string reason = "perf_event_open: " + errno_text(failure) + hint(failure);
        reasons += fmt::format("{}{}: {}", reasons.empty() ? "" : "; ", event.name, reason);
        if (logged_refusals_.insert(event.name + reason).second)
          spdlog::warn("PerfHW: event {} cannot count {}: {}", event.name, what, reason);
        continue;
      }
      any = true;
    }
    if (!any) {
      target.refused = reasons.empty() ? "no event available" : reasons;
      return Opened::refused;
    }
    target.open = true;
    return Opened::ok;
  }

  // On EMFILE/ENFILE, once: the soft limit on open files up to the hard one.
  bool raise_fd_limit() {
    if (fd_limit_raised_) return false;
    fd_limit_raised_ = true;
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return false;
    auto before = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
    spdlog::info("PerfHW: raised the open files limit from {} to {} for the perf counters", before,
                 limit.rlim_cur);
    return true;
  }

  void report(Target& target, SampleWriter& out) {
    for (std::size_t i = 0; i < events_.size(); ++i) {
      Counter& counter = target.counters[i];
      if (counter.fds.empty()) continue;
      double sum = 0;
      std::uint64_t enabled = 0, running = 0;
      for (const auto& fd : counter.fds) {
        std::uint64_t values[3];
        if (::read(fd.get(), values, sizeof values) != static_cast<ssize_t>(sizeof values))
          continue;
        enabled += values[1];
        running += values[2];
        if (values[2] == 0) continue;  // never on the PMU (or the job never ran on this CPU)
        sum += values[2] == values[1]
                   ? static_cast<double>(values[0])
                   : static_cast<double>(values[0]) * static_cast<double>(values[1]) /
                         static_cast<double>(values[2]);
      }
      if (events_[i].code.nanoseconds) sum /= 1e9;
      counter.reported = std::max(counter.reported, counter.carried + sum);
      out.set(events_[i].name, counter.reported);
      if (scaling_ && running > 0)
        out.set(events_[i].scaling_key,
                static_cast<double>(enabled) / static_cast<double>(running));
    }
  }

  bool sample_node(SampleWriter& out) {
    if (!node_.open) {
      online_cpus();
      node_.refused.clear();
      Opened opened = open(node_, -1, 0, "the node");
      if (opened == Opened::out_of_fds)
        throw SensorUnavailable("perf_event_open: " + errno_text(EMFILE) +
                                ": too many open files for the node's counters");
      if (opened == Opened::refused)
        throw SensorUnavailable("no perf event can count the node: " + node_.refused);
    }
    report(node_, out);
    return true;
  }

  bool sample_jobs(SampleWriter& out) {
    auto snapshot = jobs_->snapshot();
    jobs_state_.retain(*snapshot);
    last_snapshot_ = snapshot;
    bool cpus_read = false;
    bool fds_exhausted = false;
    std::size_t counted = 0, not_counted = 0;
    std::string first_refusal;
    for (const auto& job : snapshot->jobs) {
      Target& target = jobs_state_[job.id];
      if (!target.open) {
        if (fds_exhausted) {
          ++not_counted;
          continue;
        }
        if (target.refused.empty()) {
          if (!cpus_read) {
            online_cpus();
            cpus_read = true;
          }
          Opened opened = open_job(job, target);
          if (opened == Opened::out_of_fds) {
            fds_exhausted = true;
            ++not_counted;
            continue;
          }
        }
        if (!target.open) {  // refused now or before, or gone meanwhile
          if (first_refusal.empty() && !target.refused.empty())
            first_refusal = fmt::format("job {}: {}", job.id, target.refused);
          continue;
        }
      }
      out.begin_job(job.id);
      report(target, out);
      ++counted;
    }
    if (fds_exhausted) {
      if (!fds_warned_)
        spdlog::warn(
            "PerfHW: out of file descriptors ({}): {} job(s) not counted; raise "
            "LimitNOFILE or count fewer events",
            errno_text(EMFILE), not_counted);
      fds_warned_ = true;
    } else {
      fds_warned_ = false;
    }
    if (counted == 0 && !first_refusal.empty())
      throw SensorUnavailable("no job's cgroup can be counted: " + first_refusal);
    out.begin_job(0);
    out.set("jobs_counted", static_cast<double>(counted));
    return true;
  }

  Opened open_job(const JobCgroup& job, Target& target) {
    std::string dir = job.dir("perf_event");
    if (dir.empty()) {
      target.refused = "no perf_event cgroup directory (cgroup v1 without a perf_event hierarchy?)";
      return Opened::refused;
    }
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      int error = errno;
      if (error == ENOENT) return Opened::refused;  // the job just ended; not an error
      if (out_of_fds(error)) return Opened::out_of_fds;
      target.refused = fmt::format("cannot open {}: {}", dir, errno_text(error));
      return Opened::refused;
    }
    Fd cgroup(fd);
    return open(target, cgroup.get(), PERF_FLAG_PID_CGROUP, "job cgroups");
  }

  ProcFile online_;
  bool per_job_;
  bool scaling_;
  bool exclude_kernel_;
  std::string release_file_;
  JobDirectory* jobs_;
  std::vector<Event> events_;
  std::vector<int> cpus_;
  bool checked_ = false;
  bool started_ = false;
  bool released_ = false;
  bool fd_limit_raised_ = false;
  bool fds_warned_ = false;
  std::set<std::string> logged_refusals_;
  Target node_;
  PerJob<Target> jobs_state_;
  std::shared_ptr<const JobSnapshot> last_snapshot_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR(
    "PerfHW",
    "Hardware and software perf counters per job cgroup or per node (perf_event_open; colmet's "
    "perfhw)",
    kOptions, kCatalog, PerfHwSensor, .row = DashboardRow::jobs, .node_keys = "jobs_counted", .job_keys = "*", .key_list_option = "events");

}  // namespace fructosa::sensors
