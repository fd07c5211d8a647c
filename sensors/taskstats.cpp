// Taskstats: colmet's taskstats backend, per job, over generic netlink (taskstats_netlink.h).
//
// Every round, for each job of the JobDirectory's snapshot: its processes (cgroup.procs of
// the job's cgroup), then every thread of each (<proc>/<pid>/task/), and one
// TASKSTATS_CMD_GET with TASKSTATS_CMD_ATTR_PID per thread. Per-thread queries, not
// TASKSTATS_CMD_ATTR_TGID: for a thread group the kernel only adds up delay accounting,
// elapsed/user/system time and context switches, while I/O, page faults and the memory
// integrals are only filled in for a single task. Each task's counters are kept per
// (job, thread), and what they grew since the previous round is added to the job's total,
// so a job's counters never go down when its processes or threads end (colmet's approach).
// A thread id seen again is the same task when its start time (the monotonic clock at the
// reply minus ac_etime) is within a second of the one seen before and its thread group (v12+)
// is the same; otherwise the id was reused and the new task counts from zero. What a task
// does between its last reading and its end, and tasks that live less than one interval,
// are not seen (as in colmet). A job's first reading counts its tasks' whole lives so far.
//
// Values are converted to seconds and bytes; coremem/virtmem stay in the kernel's MiB·µs.
// The kernel rounds read_char ... cancelled_write_bytes and (oddly) read_syscalls /
// write_syscalls down to multiples of 1024 per task. The blkio, swapin, freepages,
// thrashing, compact and wpcopy delays are 0 unless delay accounting is on (delayacct boot
// option or kernel.task_delayacct = 1; the node sample's delay_accounting says which); recent
// kernels fill the cpu_* ones from the scheduler's statistics either way, older ones do not.
// Fields a kernel's struct version does not have are left out.
// Needs CAP_NET_ADMIN; tasks are looked up in the agent's pid namespace.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "jobs.h"
#include "procfs.h"
#include "sensor.h"
#include "taskstats_netlink.h"

namespace fructosa::sensors::taskstats_file {
namespace {

const OptionTable kOptions{};

struct Field {
  std::string_view key;
  std::size_t offset;
  std::size_t size;
  double scale;  // kernel unit -> reported unit
};

#define FRUCTOSA_TASKSTATS_FIELD(name, scale) \
  Field { #name, offsetof(taskstats, name), sizeof(taskstats::name), scale }

constexpr double kNs = 1e-9;
constexpr double kUs = 1e-6;

// The cumulative fields, in struct order (the order the keys are reported in).
const std::array kFields{
    FRUCTOSA_TASKSTATS_FIELD(cpu_count, 1),
    FRUCTOSA_TASKSTATS_FIELD(cpu_delay_total, kNs),
    FRUCTOSA_TASKSTATS_FIELD(blkio_count, 1),
    FRUCTOSA_TASKSTATS_FIELD(blkio_delay_total, kNs),
    FRUCTOSA_TASKSTATS_FIELD(swapin_count, 1),
    FRUCTOSA_TASKSTATS_FIELD(swapin_delay_total, kNs),
    FRUCTOSA_TASKSTATS_FIELD(cpu_run_real_total, kNs),
    FRUCTOSA_TASKSTATS_FIELD(cpu_run_virtual_total, kNs),
    FRUCTOSA_TASKSTATS_FIELD(ac_etime, kUs),
    FRUCTOSA_TASKSTATS_FIELD(ac_utime, kUs),
    FRUCTOSA_TASKSTATS_FIELD(ac_stime, kUs),
    FRUCTOSA_TASKSTATS_FIELD(ac_minflt, 1),
    FRUCTOSA_TASKSTATS_FIELD(ac_majflt, 1),
    FRUCTOSA_TASKSTATS_FIELD(coremem, 1),
    FRUCTOSA_TASKSTATS_FIELD(virtmem, 1),
    FRUCTOSA_TASKSTATS_FIELD(read_char, 1),
    FRUCTOSA_TASKSTATS_FIELD(write_char, 1),
    FRUCTOSA_TASKSTATS_FIELD(read_syscalls, 1),
    FRUCTOSA_TASKSTATS_FIELD(write_syscalls, 1),
    FRUCTOSA_TASKSTATS_FIELD(read_bytes, 1),
    FRUCTOSA_TASKSTATS_FIELD(write_bytes, 1),
    FRUCTOSA_TASKSTATS_FIELD(cancelled_write_bytes, 1),
    FRUCTOSA_TASKSTATS_FIELD(nvcsw, 1),
    FRUCTOSA_TASKSTATS_FIELD(nivcsw, 1),
    FRUCTOSA_TASKSTATS_FIELD(freepages_count, 1),
    FRUCTOSA_TASKSTATS_FIELD(freepages_delay_total, kNs),
    FRUCTOSA_TASKSTATS_FIELD(thrashing_count, 1),
    FRUCTOSA_TASKSTATS_FIELD(thrashing_delay_total, kNs),
    FRUCTOSA_TASKSTATS_FIELD(compact_count, 1),
    FRUCTOSA_TASKSTATS_FIELD(compact_delay_total, kNs),
    FRUCTOSA_TASKSTATS_FIELD(wpcopy_count, 1),
    FRUCTOSA_TASKSTATS_FIELD(wpcopy_delay_total, kNs),
};
#undef FRUCTOSA_TASKSTATS_FIELD

const Catalog kCatalog{
    {"jobs", Unit::count, Kind::gauge,
     "jobs running on the node (node sample; the agent labels it involved_jobs with their ids)"},
    {"delay_accounting", Unit::boolean, Kind::gauge,
     "node sample: kernel.task_delayacct (0: the blkio, swapin, freepages, thrashing, compact "
     "and wpcopy counts and delays stay 0)"},
    {"tasks", Unit::count, Kind::gauge, "threads of the job that answered this round"},
    {"processes", Unit::count, Kind::gauge, "processes of the job that answered this round"},
    {"hiwater_rss", Unit::bytes, Kind::gauge,
     "sum over the job's processes of each one's peak resident set size (not the job's peak)"},
    {"hiwater_vm", Unit::bytes, Kind::gauge,
     "sum over the job's processes of each one's peak virtual memory size"},
    {"cpu_count", Unit::count, Kind::counter, "times the job's tasks were scheduled in (scheduler statistics; some kernels only with delay accounting)"},
    {"cpu_delay_total", Unit::seconds, Kind::counter,
     "time the job's tasks were runnable but waiting for a CPU (scheduler statistics; some kernels only with delay accounting)"},
    {"blkio_count", Unit::count, Kind::counter, "synchronous block I/O waits (delay accounting)"},
    {"blkio_delay_total", Unit::seconds, Kind::counter,
     "time spent waiting for synchronous block I/O (delay accounting)"},
    {"swapin_count", Unit::count, Kind::counter, "waits for swap-in page faults (delay accounting)"},
    {"swapin_delay_total", Unit::seconds, Kind::counter,
     "time spent waiting for pages to be swapped in (delay accounting)"},
    {"cpu_run_real_total", Unit::seconds, Kind::counter,
     "CPU time, user + system (steal-adjusted on some architectures; some kernels only with delay accounting)"},
    {"cpu_run_virtual_total", Unit::seconds, Kind::counter,
     "CPU time as the scheduler measured it (some kernels only with delay accounting)"},
    {"ac_etime", Unit::seconds, Kind::counter, "elapsed time of the job's threads, summed over threads"},
    {"ac_utime", Unit::seconds, Kind::counter, "user CPU time"},
    {"ac_stime", Unit::seconds, Kind::counter, "system CPU time"},
    {"ac_minflt", Unit::count, Kind::counter, "minor page faults"},
    {"ac_majflt", Unit::count, Kind::counter, "major page faults"},
    {"coremem", Unit::none, Kind::counter,
     "resident set size integrated over CPU time, in MiB·µs (the kernel's unit)"},
    {"virtmem", Unit::none, Kind::counter,
     "virtual memory size integrated over CPU time, in MiB·µs (the kernel's unit)"},
    {"read_char", Unit::bytes, Kind::counter,
     "bytes read by read()-like calls, page cache included (multiples of 1 KiB per task)"},
    {"write_char", Unit::bytes, Kind::counter,
     "bytes written by write()-like calls (multiples of 1 KiB per task)"},
    {"read_syscalls", Unit::count, Kind::counter,
     "read()-like system calls (the kernel rounds them down to multiples of 1024 per task)"},
    {"write_syscalls", Unit::count, Kind::counter,
     "write()-like system calls (the kernel rounds them down to multiples of 1024 per task)"},
    {"read_bytes", Unit::bytes, Kind::counter, "bytes fetched from storage (multiples of 1 KiB per task)"},
    {"write_bytes", Unit::bytes, Kind::counter,
     "bytes sent to storage, dirtied page cache included (multiples of 1 KiB per task)"},
    {"cancelled_write_bytes", Unit::bytes, Kind::counter,
     "bytes whose write-out was cancelled (truncated dirty pages; multiples of 1 KiB per task)"},
    {"nvcsw", Unit::count, Kind::counter, "voluntary context switches"},
    {"nivcsw", Unit::count, Kind::counter, "involuntary context switches"},
    {"freepages_count", Unit::count, Kind::counter, "waits for memory reclaim (delay accounting; kernels whose struct has it)"},
    {"freepages_delay_total", Unit::seconds, Kind::counter,
     "time spent waiting for memory reclaim (delay accounting; kernels whose struct has it)"},
    {"thrashing_count", Unit::count, Kind::counter, "waits on thrashing pages (delay accounting; kernels whose struct has it)"},
    {"thrashing_delay_total", Unit::seconds, Kind::counter,
     "time spent waiting on thrashing pages (delay accounting; kernels whose struct has it)"},
    {"compact_count", Unit::count, Kind::counter, "waits for memory compaction (delay accounting; kernels whose struct has it)"},
    {"compact_delay_total", Unit::seconds, Kind::counter,
     "time spent waiting for memory compaction (delay accounting; kernels whose struct has it)"},
    {"wpcopy_count", Unit::count, Kind::counter,
     "waits for write-protect copies (delay accounting; kernels whose struct has it)"},
    {"wpcopy_delay_total", Unit::seconds, Kind::counter,
     "time spent waiting for write-protect copies (delay accounting; kernels whose struct has it)"},
};

using Counters = std::array<std::uint64_t, kFields.size()>;

std::uint64_t field_value(const taskstats& stats, const Field& field) {
  const char* at = reinterpret_cast<const char*>(&stats) + field.offset;
  if (field.size == sizeof(std::uint64_t)) {
    std::uint64_t value;
    std::memcpy(&value, at, sizeof value);
    return value;
  }
  std::uint32_t value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

std::int64_t monotonic_us() {
  timespec now;
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000 + now.tv_nsec / 1000;
}

// Two readings of one thread id are the same task when their start times agree this well.
constexpr std::int64_t kSameStartUs = 1000000;

struct Task {
  std::int64_t start_us = 0;  // monotonic clock at start (estimated from ac_etime)
  std::uint32_t tgid = 0;     // 0 when the kernel's struct has no ac_tgid
  Counters last{};
  std::uint64_t round = 0;
};

// A process's <proc>/<pid>/task directory, held between rounds (list_threads).
struct TaskDirectory {
  HeldFd held;
  std::uint64_t round = 0;  // the last round the process was listed in
};

struct JobState {
  Counters total{};
  std::unordered_map<int, Task> tasks;
  std::unordered_map<int, TaskDirectory> task_directories;  // by pid
};

// Thread ids of process `pid` from <proc>/<pid>/task; empty when it is gone. The directory's
// link count is 2 + the process's threads: a single-threaded process (most are) is its own only
// thread, and its directory is not listed. `held`: the directory, kept open between rounds on a
// real procfs (an fstat instead of a path lookup through /proc); a held directory counts no
// thread once its process is gone, and it is then looked up again by path (the pid may be
// another process's by now).
void list_threads(const std::string& proc, int pid, HeldFd& held, bool hold, std::vector<int>& tids) {
  tids.clear();
  struct stat info;
  if (held && (::fstat(held.get(), &info) != 0 || info.st_nlink <= 2)) held.reset();
  std::string path;
  if (!held) {
    path = fmt::format("{}/{}/task", proc, pid);
    if (hold) held.open_at(AT_FDCWD, path.c_str(), O_RDONLY | O_DIRECTORY);
    if (held ? ::fstat(held.get(), &info) != 0 : ::stat(path.c_str(), &info) != 0) return;
  }
  if (info.st_nlink == 3) {
    tids.push_back(pid);
    return;
  }
  Fd once(held ? -1 : ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  int dir = held ? held.get() : once.get();
  if (dir < 0 || ::lseek(dir, 0, SEEK_SET) != 0) return;
  alignas(8) char buffer[4096];
  for (long got; (got = ::syscall(SYS_getdents64, dir, buffer, sizeof buffer)) > 0;) {
    for (long at = 0; at < got;) {
      const auto* entry = reinterpret_cast<const dirent64*>(buffer + at);
      std::uint64_t tid;
      if (entry->d_name[0] != '.' && parse_uint(entry->d_name, tid)) tids.push_back(static_cast<int>(tid));
      at += entry->d_reclen;
    }
  }
  std::sort(tids.begin(), tids.end());
}

class TaskstatsSensor final : public Sensor {
 public:
  explicit TaskstatsSensor(const SensorContext& context)
      : jobs_(context.jobs), hold_(jobs_ && kernel_generated(jobs_->proc_root())) {}

  bool sample(SampleWriter& out) override {
    if (!jobs_) throw SensorUnavailable("no job discovery");
    if (!socket_) open();
    auto snapshot = jobs_->snapshot();
    const std::string& proc = jobs_->proc_root();
    ++round_;

    out.set("jobs", static_cast<double>(snapshot->jobs.size()));
    if (!delayacct_) delayacct_ = std::make_unique<ProcFile>(proc + "/sys/kernel/task_delayacct");
    if (auto flag = read_delayacct(*delayacct_)) out.set("delay_accounting", *flag);

    for (const auto& job : snapshot->jobs) {
      JobState& state = states_[job.id];
      std::uint64_t processes = 0, threads = 0, hiwater_rss = 0, hiwater_vm = 0;
      for (int pid : jobs_->processes(job, out.time_ns())) {
        TaskDirectory& directory = state.task_directories[pid];
        directory.round = round_;
        list_threads(proc, pid, directory.held, hold_, tids_);
        std::uint64_t process_rss = 0, process_vm = 0;
        bool any = false;
        for (int tid : tids_) {
          if (!read_task(state, tid)) continue;
          any = true;
          ++threads;
          process_rss = std::max<std::uint64_t>(process_rss, stats_.hiwater_rss);
          process_vm = std::max<std::uint64_t>(process_vm, stats_.hiwater_vm);
        }
        if (!any) continue;
        ++processes;
        hiwater_rss += process_rss * 1024;
        hiwater_vm += process_vm * 1024;
      }
      // Tasks that ended took their counts (up to their last reading) into the total.
      std::erase_if(state.tasks, [this](const auto& entry) { return entry.second.round != round_; });
      std::erase_if(state.task_directories, [this](const auto& entry) { return entry.second.round != round_; });

      out.begin_job(job.id);
      out.set("tasks", static_cast<double>(threads));
      out.set("processes", static_cast<double>(processes));
      out.set("hiwater_rss", static_cast<double>(hiwater_rss));
      out.set("hiwater_vm", static_cast<double>(hiwater_vm));
      for (std::size_t i = 0; i < kFields.size(); ++i)
        if (present_[i]) out.set(kFields[i].key, static_cast<double>(state.total[i]) * kFields[i].scale);
    }
    states_.retain(*snapshot);
    return true;
  }

 private:
  void open() {
    auto socket = std::make_unique<TaskstatsSocket>();
    // Ask about this thread once: says at once whether the agent may ask (CAP_NET_ADMIN)
    // and which fields this kernel's struct has.
    int self = static_cast<int>(::syscall(SYS_gettid));
    if (socket->query(self, stats_) != TaskstatsSocket::Result::ok)
      throw SensorUnavailable(fmt::format("TASKSTATS_CMD_GET for the agent's own thread {} found no task", self));
    for (std::size_t i = 0; i < kFields.size(); ++i) present_[i] = socket->covers(kFields[i].offset, kFields[i].size);
    has_tgid_ = socket->covers(offsetof(taskstats, ac_tgid), sizeof(stats_.ac_tgid));
    socket_ = std::move(socket);
  }

  // Reads one thread and adds what it did since its last reading to the job's total.
  bool read_task(JobState& state, int tid) {
    if (socket_->query(tid, stats_) != TaskstatsSocket::Result::ok) return false;
    std::int64_t start = monotonic_us() - static_cast<std::int64_t>(stats_.ac_etime);
    std::uint32_t tgid = has_tgid_ ? stats_.ac_tgid : 0;
    auto [it, fresh] = state.tasks.try_emplace(tid);
    Task& task = it->second;
    if (!fresh && (std::llabs(start - task.start_us) > kSameStartUs || tgid != task.tgid)) {
      task = Task{};  // the thread id now belongs to a new task: it counts from zero
      fresh = true;
    }
    for (std::size_t i = 0; i < kFields.size(); ++i) {
      std::uint64_t now = field_value(stats_, kFields[i]);
      // A counter that went down (a delay total that overflowed and restarted) counts from 0.
      std::uint64_t grew = fresh || now < task.last[i] ? now : now - task.last[i];
      state.total[i] += grew;
      task.last[i] = now;
    }
    if (fresh) task.start_us = start;
    task.tgid = tgid;
    task.round = round_;
    return true;
  }

  static std::optional<double> read_delayacct(ProcFile& file) {
    try {
      std::string_view text = file.read();
      std::uint64_t value;
      while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
      if (parse_uint(text, value)) return value ? 1.0 : 0.0;
    } catch (const SensorUnavailable&) {
    }
    return std::nullopt;
  }

  JobDirectory* jobs_;
  bool hold_;  // a real procfs: task directories are held (a fixture tree is read afresh)
  std::unique_ptr<TaskstatsSocket> socket_;
  std::unique_ptr<ProcFile> delayacct_;
  std::array<bool, kFields.size()> present_{};
  bool has_tgid_ = false;
  taskstats stats_{};
  std::uint64_t round_ = 0;
  PerJob<JobState> states_;
  std::vector<int> tids_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("Taskstats",
                         "Per-job task statistics over generic netlink TASKSTATS (colmet's taskstats "
                         "backend): delays, CPU times, I/O, faults, context switches; job totals "
                         "keep what ended tasks did",
                         kOptions, kCatalog, TaskstatsSensor, .row = DashboardRow::jobs, .node_keys = "jobs,delay_accounting", .job_keys = "*");

}  // namespace fructosa::sensors::taskstats_file
