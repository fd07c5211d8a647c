// JobProc: per job sums over its processes of /proc/<pid>/io and of the memory sizes in
// /proc/<pid>/status (colmet's procstats backend, per job).
//
// Processes: JobDirectory::processes (cgroup.procs of the job's cgroup and its descendants),
// read under the JobDirectory's proc root. /proc/<pid>/io already includes the process's
// ended threads; its counters are cumulative per process, so by default (monotonic = true)
// the sensor keeps each process's previous values and adds what they grew to a per-job
// total: a job's I/O counters never go down when one of its processes ends (what a process
// did between its last reading and its end is not seen). A pid is the same process while
// its start time (field 22 of /proc/<pid>/stat) stays the same; a reused pid counts from
// zero. monotonic = false gives colmet's plain sums over the processes running now.
// Memory values are gauges summed over the running processes: shared pages (RssShmem, shared
// libraries) count once per process that maps them, and vm_hwm adds up per-process peaks.
//
// /proc/<pid>/io of another user's process needs ptrace-read access (root has it): a process
// whose io cannot be read is counted in unreadable_processes (its memory is still summed),
// never left out silently.
//
// The label `commands` names what the job runs: the distinct command names (`comm`, between
// the parentheses of /proc/<pid>/stat) of its processes, most CPU first, at most 5,
// comma-separated ("gmx_mpi,python3,bash"; a ',' inside a name reads '_'). A name's CPU is the
// utime + stime (fields 14 and 15 of stat) of its processes so far, those that ended included
// (as last read; the job keeps the 64 names that used most); ties go to the name with more
// processes, then to the first in byte order. stat is read when a process's files are opened
// (for its start time) and then again in one round out of kStatRounds, the processes' turns
// spread over the rounds by pid (an open, a read and a close): the order follows CPU at most
// kStatRounds rounds late, and a process that exec()s shows its new name as late. On a
// fixture tree (no held files) stat is read every round. fructosa-report names the job's
// application from this label (report/applications.h).
#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "job_process_cpu.h"
#include "jobs.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::job_proc_file {
namespace {

const OptionTable kOptions{
    {.name = "monotonic",
     .type = OptionType::boolean,
     .default_value = "true",
     .help = "I/O counters keep what ended processes did, so a job's totals never go down; "
             "false: plain sums over the processes running now (colmet), which drop when a "
             "process ends"},
};

// /proc/<pid>/io fields, in the file's order; the keys are the file's names.
constexpr std::array<std::string_view, 7> kIoFields{
    "rchar", "wchar", "syscr", "syscw", "read_bytes", "write_bytes", "cancelled_write_bytes"};

// /proc/<pid>/status lines (kB) -> keys (bytes).
struct MemoryField {
  std::string_view status;
  std::string_view key;
};
constexpr std::array<MemoryField, 5> kMemoryFields{{{"VmRSS", "vm_rss"},
                                                    {"RssShmem", "rss_shmem"},
                                                    {"VmSize", "vm_size"},
                                                    {"VmHWM", "vm_hwm"},
                                                    {"VmSwap", "vm_swap"}}};

const Catalog kCatalog{
    {"jobs", Unit::count, Kind::gauge,
     "jobs running on the node (node sample; the agent labels it involved_jobs with their ids)"},
    {"processes", Unit::count, Kind::gauge,
     "processes of the job read this round (label commands: their command names, most CPU first, "
     "at most 5)"},
    {"unreadable_processes", Unit::count, Kind::gauge,
     "processes of the job whose /proc/<pid>/io could not be read (no ptrace-read access): "
     "their I/O is missing from the sums"},
    {"rchar", Unit::bytes, Kind::counter, "bytes read by read()-like calls, page cache included"},
    {"wchar", Unit::bytes, Kind::counter, "bytes written by write()-like calls"},
    {"syscr", Unit::count, Kind::counter, "read()-like system calls"},
    {"syscw", Unit::count, Kind::counter, "write()-like system calls"},
    {"read_bytes", Unit::bytes, Kind::counter, "bytes fetched from storage"},
    {"write_bytes", Unit::bytes, Kind::counter, "bytes sent to storage (dirtied page cache included)"},
    {"cancelled_write_bytes", Unit::bytes, Kind::counter,
     "bytes whose write-out was cancelled (dirty pages truncated)"},
    {"vm_rss", Unit::bytes, Kind::gauge, "resident set size (VmRSS), summed over the processes"},
    {"rss_shmem", Unit::bytes, Kind::gauge,
     "resident shared memory (RssShmem), summed over the processes (counted once per process)"},
    {"vm_size", Unit::bytes, Kind::gauge, "virtual memory size (VmSize), summed over the processes"},
    {"vm_hwm", Unit::bytes, Kind::gauge,
     "peak resident set size (VmHWM), summed over the processes (not the job's peak)"},
    {"vm_swap", Unit::bytes, Kind::gauge, "swapped-out anonymous memory (VmSwap), summed over the processes"},
};

using IoCounters = std::array<std::uint64_t, kIoFields.size()>;
using Memory = std::array<std::uint64_t, kMemoryFields.size()>;

// A held process's stat is read again in one round out of kStatRounds (its CPU, for the order of
// the label `commands`); kCommands names go in the label; a job remembers the CPU of the
// kEndedNames names whose ended processes used most.
constexpr std::uint64_t kStatRounds = 10;
constexpr std::size_t kCommands = 5;
constexpr std::size_t kEndedNames = 64;

// What JobProc takes from /proc/<pid>/stat.
struct Stat {
  std::string_view comm;    // between the '(' after the pid and the last ')'
  std::uint64_t cpu = 0;    // utime + stime (fields 14, 15), clock ticks
  std::uint64_t start = 0;  // field 22: clock ticks after boot
};

bool parse_stat(std::string_view text, Stat& stat) {
  ProcessStat fields;
  auto open = text.find('(');
  auto close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open ||
      !parse_process_stat(text, fields))
    return false;
  stat.comm = text.substr(open + 1, close - open - 1);
  stat.cpu = fields.self.user + fields.self.system;
  stat.start = fields.start;
  return true;
}

struct Process {
  std::uint64_t start = 0;  // field 22 of stat: clock ticks after boot
  std::string comm;         // stat's command name, as last read
  std::uint64_t cpu = 0;    // utime + stime at the last stat read
  IoCounters last{};
  bool have_io = false;
  std::uint64_t round = 0;  // the last round it was read in (0: never)
  // Its status and io, opened together relative to its /proc directory (so both are of the
  // process whose stat gave `start`) and kept open while it runs and the FdBudget allows: a
  // round costs two preads. A held file answers ESRCH once the process is gone, even when its
  // pid is another's by then, so stat (its start time) is read only when they are opened.
  // io is not held when it cannot be opened (no ptrace-read access).
  HeldFd status, io;
  void close_files() {
    status.reset();
    io.reset();
  }
};

struct JobState {
  IoCounters total{};
  std::unordered_map<int, Process> processes;
  // The CPU of the job's processes that ended (or whose pid went to another), per command name.
  std::unordered_map<std::string, std::uint64_t> ended_cpu;

  void ended(const Process& process) {
    if (process.comm.empty()) return;  // never read
    auto found = ended_cpu.find(process.comm);
    if (found != ended_cpu.end()) {
      found->second += process.cpu;
      return;
    }
    if (ended_cpu.size() >= kEndedNames) {  // forget the name that used least, if it used less
      auto least = std::min_element(ended_cpu.begin(), ended_cpu.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
      if (least->second > process.cpu) return;
      ended_cpu.erase(least);
    }
    ended_cpu.emplace(process.comm, process.cpu);
  }
};

// Reads the small procfs file `name` of the directory `dir` into `buffer`; 0 or the errno.
int read_small(int dir, const char* name, std::string& buffer) {
  const Fd file(::openat(dir, name, O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) return errno;
  return pread_whole(file.get(), buffer, false);
}

// "name:   value[ kB]" -> value (the number only).
bool field_number(std::string_view line, std::string_view name, std::uint64_t& value) {
  if (line.size() <= name.size() || line.compare(0, name.size(), name) != 0 || line[name.size()] != ':')
    return false;
  std::string_view rest = line.substr(name.size() + 1);
  return parse_uint(next_field(rest), value);
}

class JobProcSensor final : public Sensor {
 public:
  explicit JobProcSensor(const SensorContext& context)
      : jobs_(context.jobs),
        monotonic_(context.options.get_bool("monotonic")),
        hold_files_(jobs_ && kernel_generated(jobs_->proc_root())) {}

  bool sample(SampleWriter& out) override {
    if (!jobs_) throw SensorUnavailable("no job discovery");
    auto snapshot = jobs_->snapshot();
    const std::string& proc = jobs_->proc_root();
    ++round_;
    out.set("jobs", static_cast<double>(snapshot->jobs.size()));

    for (const auto& job : snapshot->jobs) {
      JobState& state = states_[job.id];
      IoCounters current{};  // monotonic = false: sums over the processes now
      Memory memory{};
      std::uint64_t processes = 0, unreadable = 0;
      for (int pid : jobs_->processes(job, out.time_ns())) {
        Process& process = state.processes[pid];  // a new entry (round 0) goes at the end if unread
        int io_error = 0;
        Stat stat;  // stat.comm empty: stat not read this round
        if (!read_process(proc, pid, process, io_error, stat)) continue;  // gone
        Memory mine{};
        Lines lines(status_);
        std::string_view line;
        while (lines.next(line))
          for (std::size_t i = 0; i < kMemoryFields.size(); ++i)
            if (field_number(line, kMemoryFields[i].status, mine[i])) break;

        IoCounters io{};
        bool readable = io_error == 0 && parse_io(io_, io);
        ++processes;
        for (std::size_t i = 0; i < memory.size(); ++i) memory[i] += mine[i] * 1024;

        if (process.round != 0 && process.start != stat.start) {  // a reused pid
          state.ended(process);
          process.last = {};
          process.have_io = false;
          process.comm.clear();
          process.cpu = 0;
        }
        process.start = stat.start;
        process.round = round_;
        if (!stat.comm.empty()) {
          process.comm.assign(stat.comm);
          process.cpu = stat.cpu;
        }
        if (!readable) {
          ++unreadable;  // keeps its previous values, if any, for when it can be read again
          continue;
        }
        for (std::size_t i = 0; i < io.size(); ++i) {
          current[i] += io[i];
          std::uint64_t grew = !process.have_io || io[i] < process.last[i] ? io[i] : io[i] - process.last[i];
          state.total[i] += grew;
        }
        process.last = io;
        process.have_io = true;
      }
      std::erase_if(state.processes, [this, &state](const auto& entry) {
        if (entry.second.round == round_) return false;
        state.ended(entry.second);
        return true;
      });

      out.begin_job(job.id);
      out.set("processes", static_cast<double>(processes));
      if (const std::string& names = commands(state); !names.empty()) out.label("commands", names);
      out.set("unreadable_processes", static_cast<double>(unreadable));
      const IoCounters& io = monotonic_ ? state.total : current;
      for (std::size_t i = 0; i < kIoFields.size(); ++i) out.set(kIoFields[i], static_cast<double>(io[i]));
      for (std::size_t i = 0; i < kMemoryFields.size(); ++i)
        out.set(kMemoryFields[i].key, static_cast<double>(memory[i]));
    }
    states_.retain(*snapshot);
    return true;
  }

 private:
  static bool parse_io(std::string_view text, IoCounters& io) {
    std::size_t found = 0;
    Lines lines(text);
    std::string_view line;
    while (lines.next(line))
      for (std::size_t i = 0; i < kIoFields.size(); ++i)
        if (field_number(line, kIoFields[i], io[i])) {
          ++found;
          break;
        }
    return found > 0;
  }

  // The label `commands` of a job: its names, most CPU first (the header comment).
  const std::string& commands(const JobState& state) {
    names_.clear();
    auto add = [this](std::string_view name, std::uint64_t cpu, std::uint64_t processes) {
      for (auto& entry : names_)
        if (entry.name == name) {
          entry.cpu += cpu;
          entry.processes += processes;
          return;
        }
      names_.push_back({name, cpu, processes});
    };
    for (const auto& [pid, process] : state.processes)
      if (!process.comm.empty()) add(process.comm, process.cpu, 1);
    for (const auto& [name, cpu] : state.ended_cpu) add(name, cpu, 0);
    auto first = [](const Name& a, const Name& b) {
      if (a.cpu != b.cpu) return a.cpu > b.cpu;
      if (a.processes != b.processes) return a.processes > b.processes;
      return a.name < b.name;
    };
    auto last = names_.begin() + static_cast<std::ptrdiff_t>(std::min(kCommands, names_.size()));
    std::partial_sort(names_.begin(), last, names_.end(), first);
    label_.clear();
    for (auto entry = names_.begin(); entry != last; ++entry) {
      if (!label_.empty()) label_ += ',';
      std::size_t from = label_.size();
      label_ += entry->name;
      std::replace(label_.begin() + static_cast<std::ptrdiff_t>(from), label_.end(), ',', '_');
    }
    return label_;
  }

  // Reads the process's status and io into status_ and io_ (io_error: io's errno, 0 when it
  // was read) and its stat (stat.comm stays empty when stat was not read this round: a held
  // process between its kStatRounds turns); false when the process is gone.
  bool read_process(const std::string& proc, int pid, Process& process, int& io_error, Stat& stat) {
    if (process.status) {  // held since an earlier round: the same process, its start known
      if (pread_whole(process.status.get(), status_, true) == 0) {
        io_error = process.io ? pread_whole(process.io.get(), io_, true)
                              : read_small(AT_FDCWD, fmt::format("{}/{}/io", proc, pid).c_str(), io_);
        stat.start = process.start;
        if (io_error != ESRCH) {
          // Its turn to read stat again, by path: a pid that went to another process meanwhile
          // shows another start time, and its stat is ignored (the held status fails next round).
          if ((round_ + static_cast<std::uint64_t>(pid)) % kStatRounds == 0) {
            Stat now;
            if (read_small(AT_FDCWD, fmt::format("{}/{}/stat", proc, pid).c_str(), stat_) == 0 &&
                parse_stat(stat_, now) && now.start == process.start)
              stat = now;
          }
          return true;
        }
      }
      // The process went (ESRCH): its pid may be another's by now, whose files are opened below.
      process.close_files();
    }
    std::string base = fmt::format("{}/{}", proc, pid);
    const Fd dir(::open(base.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (dir.get() < 0) return false;  // gone
    int status_error = hold_files_ ? process.status.open_at(dir.get(), "status", O_RDONLY) : ENOBUFS;
    // stat after status: a process whose pid was reused in between fails the held status.
    if (read_small(dir.get(), "stat", stat_) != 0 || !parse_stat(stat_, stat)) {
      process.close_files();
      return false;  // gone
    }
    if (status_error == 0) {
      int io_open = process.io.open_at(dir.get(), "io", O_RDONLY);  // EACCES without ptrace-read access
      if (pread_whole(process.status.get(), status_, true) != 0) {
        process.close_files();
        return false;
      }
      io_error = io_open == 0 ? pread_whole(process.io.get(), io_, true)
                 : io_open == ENOBUFS ? read_small(dir.get(), "io", io_) : io_open;
    } else {
      process.close_files();
      if (status_error != ENOBUFS) return false;  // gone
      // No descriptors left in the budget (or a fixture tree): read the files once.
      if (read_small(dir.get(), "status", status_) != 0) return false;
      io_error = read_small(dir.get(), "io", io_);
    }
    if ((io_error == ENOENT || io_error == ESRCH) && ::access(base.c_str(), F_OK) != 0) return false;  // it ended meanwhile
    return true;
  }

  JobDirectory* jobs_;
  bool monotonic_;
  bool hold_files_;  // a real procfs (a fixture tree's files are read afresh each time)
  std::uint64_t round_ = 0;
  PerJob<JobState> states_;
  std::string stat_, status_, io_;
  struct Name {
    std::string_view name;  // a Process's comm or an ended_cpu key
    std::uint64_t cpu, processes;
  };
  std::vector<Name> names_;  // commands()'s buffers
  std::string label_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("JobProc",
                         "Per-job sums of /proc/<pid>/io and of memory sizes from /proc/<pid>/status "
                         "over each job's processes; I/O totals keep what ended processes did; label "
                         "commands: the processes' command names, most CPU first",
                         kOptions, kCatalog, JobProcSensor, .row = DashboardRow::jobs, .node_keys = "jobs", .job_keys = "*");

}  // namespace fructosa::sensors::job_proc_file
