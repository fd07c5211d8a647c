// JobCgroup: what each batch job's cgroup accounts, from cgroup v2 files or their v1
// equivalents (colmet's cgroup backends, without their OAR/v1-only limits).
//
// Per job (sample attributed to the job id):
//   cpu.usage/.user/.system  v2 cpu.stat usage_usec, user_usec, system_usec;
//                            v1 cpuacct.usage (ns) and cpuacct.stat user/system (USER_HZ ticks);
//                            v1 without a cpuacct directory for the job (Slurm with
//                            jobacct_gather/linux): summed from its processes' /proc/<pid>/stat
//                            (job_process_cpu.h). The label cpu_source says which: "cgroup" or
//                            "processes"; the log says once per job why and how to get the
//                            cgroup's figure (and again if a cpuacct directory appears later).
//   memory.current/.peak     v2 memory.current, memory.peak (kernel >= 5.19; left out before);
//                            v1 memory.usage_in_bytes, memory.max_usage_in_bytes
//   io.read_bytes/.write_bytes/.reads/.writes
//                            v2 io.stat rbytes/wbytes/rios/wios summed over devices;
//                            v1 blkio.throttle.io_service_bytes(_recursive) and io_serviced
//   tasks                    processes in the job's cgroup and below
//   cpus, memory.limit       its allocation: CPUs of its cpuset (v1 cpuset.effective_cpus or
//                            cpuset.cpus, v2 cpuset.cpus.effective), its memory limit (v1
//                            memory.limit_in_bytes, v2 memory.max; left out when unlimited)
//   gpus                     the NVIDIA GPUs its v1 devices cgroup allows (Slurm's
//                            ConstrainDevices, OAR's OAR_USER_GPUDEVICE): the count, and their
//                            /dev/nvidia<minor> numbers in the label gpu_minors ("0,3"; NvidiaGPU
//                            reports each GPU's minor). Left out when the list allows every
//                            device or no GPU; cgroup v2 keeps device rules in an eBPF program
//                            that cannot be read back.
// Labels: cpu_source (above); user, the owner of the job's processes (what fructosa-report
// shows and filters on); gpu_minors.
// The node sample has `jobs`, the number of jobs running. A file the job's cgroup lacks (a
// controller not enabled for it) leaves that metric out, and the log says so once per job, when
// it held for two samples (and again when it changes); a
// job that ended during the reading is left out of the round. A job's files stay open while it runs (HeldFiles: one pread each
// per round instead of a path lookup, an open, reads and a close).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hwmon.h"
#include "job_process_cpu.h"
#include "jobs.h"
#include "perf_events.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors {
namespace {

const OptionTable kOptions{};

const Catalog kCatalog{
    {"jobs", Unit::count, Kind::gauge, "jobs running on the node (node sample)"},
    {"cpu.usage", Unit::seconds, Kind::counter,
     "CPU time used by the job's processes: its cgroup's figure, or their /proc/<pid>/stat summed where the "
     "cgroup accounts none (label cpu_source = cgroup or processes)"},
    {"cpu.user", Unit::seconds, Kind::counter, "CPU time in user mode"},
    {"cpu.system", Unit::seconds, Kind::counter, "CPU time in kernel mode"},
    {"memory.current", Unit::bytes, Kind::gauge, "memory charged to the job now (incl. page cache)"},
    {"memory.peak", Unit::bytes, Kind::gauge, "highest memory charged to the job since it started"},
    {"io.read_bytes", Unit::bytes, Kind::counter, "bytes read from block devices"},
    {"io.write_bytes", Unit::bytes, Kind::counter, "bytes written to block devices"},
    {"io.reads", Unit::count, Kind::counter, "block device read operations"},
    {"io.writes", Unit::count, Kind::counter, "block device write operations"},
    {"tasks", Unit::count, Kind::gauge, "processes in the job's cgroup and its descendants"},
    {"cpus", Unit::count, Kind::gauge, "CPUs the job may run on (its cpuset): its allocation"},
    {"memory.limit", Unit::bytes, Kind::gauge, "the job's memory limit (left out when it has none)"},
    {"gpus", Unit::count, Kind::gauge,
     "NVIDIA GPUs the job's devices cgroup allows (v1; label gpu_minors: their /dev/nvidia<minor>)"},
};

// NVIDIA's GPUs are the character devices 195:<minor> below 254 (254 is nvidia-modeset, 255
// nvidiactl, which every GPU job is allowed too).
constexpr unsigned kNvidiaMajor = 195;
constexpr unsigned kFirstNvidiaControlMinor = 254;

// Per job: its CPU from its processes when its cgroups account none, and whether the log said
// what its cgroups lack.
// What a job's cgroups cannot give (tell_what_is_missing).
constexpr unsigned kNoCpu = 1, kNoMemory = 2, kNoIo = 4, kNotSeen = ~0u;

struct JobState {
  ProcessCpuTime process_cpu;
  unsigned missing_before = kNotSeen;  // at the sample before
  unsigned told = 0;                   // what the log said is missing (nothing yet)
  std::string user;  // the owner of its processes, once one was seen
};

}  // namespace

// The GPU minors a v1 devices.list allows ("c 195:0 rwm" lines), sorted; nullopt when it allows
// every device ("a *:* rwm", the default) or cannot be read.
std::optional<std::vector<unsigned>> allowed_gpu_minors(std::string_view devices_list) {
  std::vector<unsigned> minors;
  std::size_t start = 0;
  while (start < devices_list.size()) {
    std::size_t end = devices_list.find('\n', start);
    if (end == std::string_view::npos) end = devices_list.size();
    std::string_view line = devices_list.substr(start, end - start);
    start = end + 1;
    if (line.starts_with("a ")) return std::nullopt;
    unsigned major = 0, minor = 0;
    char type = 0;
    std::string text(line);
    if (std::sscanf(text.c_str(), "%c %u:%u", &type, &major, &minor) == 3 && type == 'c' &&
        major == kNvidiaMajor && minor < kFirstNvidiaControlMinor)
      minors.push_back(minor);
  }
  std::sort(minors.begin(), minors.end());
  minors.erase(std::unique(minors.begin(), minors.end()), minors.end());
  return minors;
}

namespace {

// v1 memory.limit_in_bytes says "no limit" with the largest page-aligned value (2^63 - 4096 on
// x86-64): anything that large is no limit.
constexpr std::uint64_t kNoMemoryLimit = std::uint64_t{1} << 62;

// The user name of the owner of <proc>/<pid> ("" when the process is gone; the uid when no
// name is known for it).
std::string owner_of(const std::string& proc_root, int pid) {
  struct stat info;
  if (::stat(fmt::format("{}/{}", proc_root, pid).c_str(), &info) != 0) return {};
  struct passwd entry, *found = nullptr;
  char buffer[1024];
  if (::getpwuid_r(info.st_uid, &entry, buffer, sizeof buffer, &found) == 0 && found) return found->pw_name;
  return std::to_string(info.st_uid);
}

// The keys a job's cgroups cannot give that the log has not told yet, why, and what gives them;
// and those it told missing that its cgroups give now.
void tell_what_is_missing(const JobCgroup& job, unsigned missing, unsigned told) {
  const unsigned lost = missing & ~told;
  const bool slurm = job.scheduler == "slurm";
  const bool v2 = !job.unified.empty();
  std::vector<std::string> notes;
  if (lost & kNoCpu)
    notes.push_back(fmt::format(
        "no cpuacct cgroup{}: cpu.* are summed from its processes' /proc/<pid>/stat (label cpu_source=processes; "
        "what a process uses after its last reading is missed when it ends){}",
        slurm ? " (Slurm makes none on cgroup v1 with JobAcctGatherType=jobacct_gather/linux)" : "",
        slurm ? "; JobAcctGatherType=jobacct_gather/cgroup gives the cgroup's exact figure" : ""));
  if (lost & kNoMemory)
    notes.push_back(fmt::format("{}: memory.* left out (JobProc's vm_rss sums its processes' resident memory)",
                                v2 ? "no memory.current (the memory controller is not enabled for its cgroup)"
                                   : "no memory cgroup"));
  if (lost & kNoIo)
    notes.push_back(fmt::format("{}: io.* left out (JobProc's read_bytes and write_bytes count its processes' "
                                "storage I/O)",
                                v2      ? "no io.stat (the io controller is not enabled for its cgroup)"
                                : slurm ? "no blkio cgroup (Slurm makes none on cgroup v1)"
                                        : "no blkio cgroup"));
  const unsigned found = told & ~missing;
  if (found & kNoCpu) notes.push_back("cpu.* now from its cgroup (label cpu_source=cgroup)");
  if (found & kNoMemory) notes.push_back("memory.* now from its cgroup");
  if (found & kNoIo) notes.push_back("io.* now from its cgroup");
  if (!notes.empty()) spdlog::info("JobCgroup: job {} ({}): {}", job.id, job.process_dir(), fmt::join(notes, "; "));
}

std::optional<std::uint64_t> read_number(HeldFiles& files, const std::string& path) {
  auto text = files.read(path);
  if (!text) return std::nullopt;
  std::uint64_t value = 0;
  if (!parse_uint(strip(*text), value)) return std::nullopt;
  return value;
}

// "key value" lines (cpu.stat, cpuacct.stat): the value of `key`.
std::optional<std::uint64_t> keyed(std::string_view text, std::string_view key) {
  Lines lines(text);
  for (std::string_view line; lines.next(line);) {
    std::string_view rest = line;
    if (next_field(rest) != key) continue;
    std::uint64_t value = 0;
    if (parse_uint(next_field(rest), value)) return value;
  }
  return std::nullopt;
}

struct Io {
  double read_bytes = 0, write_bytes = 0, reads = 0, writes = 0;
};

// v2 io.stat: "8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0" per device.
bool read_io_v2(HeldFiles& files, const std::string& dir, Io& io) {
  auto text = files.read(dir + "/io.stat");
  if (!text) return false;
  Lines lines(*text);
  for (std::string_view line; lines.next(line);) {
    std::string_view rest = line;
    next_field(rest);  // the device
    for (auto field = next_field(rest); !field.empty(); field = next_field(rest)) {
      auto eq = field.find('=');
      std::uint64_t value = 0;
      if (eq == std::string_view::npos || !parse_uint(field.substr(eq + 1), value)) continue;
      auto name = field.substr(0, eq);
      if (name == "rbytes") io.read_bytes += value;
      else if (name == "wbytes") io.write_bytes += value;
      else if (name == "rios") io.reads += value;
      else if (name == "wios") io.writes += value;
    }
  }
  return true;
}

// v1 blkio: "8:0 Read 4096" ... "8:0 Total 8192", then "Total 8192": Read and Write summed over
// devices. The recursive file (the job's step cgroups included) when the kernel has it.
bool read_blkio(HeldFiles& files, const std::string& dir, const char* name, double& read, double& write) {
  auto text = files.read(fmt::format("{}/blkio.throttle.{}_recursive", dir, name));
  if (!text) text = files.read(fmt::format("{}/blkio.throttle.{}", dir, name));
  if (!text) return false;
  Lines lines(*text);
  for (std::string_view line; lines.next(line);) {
    std::string_view rest = line;
    auto device = next_field(rest);
    if (device == "Total") continue;
    auto operation = next_field(rest);
    std::uint64_t value = 0;
    if (!parse_uint(next_field(rest), value)) continue;
    if (operation == "Read") read += value;
    else if (operation == "Write") write += value;
  }
  return true;
}

class JobCgroupSensor final : public Sensor {
 public:
  explicit JobCgroupSensor(const SensorContext& context)
      : jobs_(context.jobs), ticks_per_second_(static_cast<double>(::sysconf(_SC_CLK_TCK))) {}

  bool sample(SampleWriter& out) override {
    if (!jobs_) throw SensorUnavailable("no job discovery");
    auto snapshot = jobs_->snapshot();
    out.set("jobs", static_cast<double>(snapshot->jobs.size()));
    for (const auto& job : snapshot->jobs) read_job(job, out);
    files_.sweep();  // the files of jobs that ended
    states_.retain(*snapshot);
    return true;
  }

 private:
  void read_job(const JobCgroup& job, SampleWriter& out) {
    // Read everything first: a job that ended meanwhile reports nothing rather than half.
    struct Value {
      const char* key;
      double value;
    };
    std::vector<Value> values;
    auto put = [&](const char* key, std::optional<double> value) {
      if (value) values.push_back({key, *value});
    };

    JobState& state = states_[job.id];
    std::string cpu = job.dir("cpuacct");
    const bool cpu_from_processes = cpu.empty();  // v1 without cpuacct, and no v2 directory
    std::optional<std::vector<int>> listed;  // the job's processes, when asked
    auto processes = [&]() -> const std::vector<int>& {
      if (!listed) listed = jobs_->processes(job, out.time_ns());
      return *listed;
    };
    if (cpu_from_processes) {
      state.process_cpu.update(jobs_->proc_root(), processes());
      const CpuTicks& used = state.process_cpu.total();
      put("cpu.usage", static_cast<double>(used.user + used.system) / ticks_per_second_);
      put("cpu.user", static_cast<double>(used.user) / ticks_per_second_);
      put("cpu.system", static_cast<double>(used.system) / ticks_per_second_);
    } else if (cpu != job.unified) {
      put("cpu.usage", scaled(read_number(files_, cpu + "/cpuacct.usage"), 1e9));
      if (auto stat = files_.read(cpu + "/cpuacct.stat")) {
        put("cpu.user", scaled(keyed(*stat, "user"), ticks_per_second_));
        put("cpu.system", scaled(keyed(*stat, "system"), ticks_per_second_));
      }
    } else {
      if (auto stat = files_.read(job.unified + "/cpu.stat")) {
        put("cpu.usage", scaled(keyed(*stat, "usage_usec"), 1e6));
        put("cpu.user", scaled(keyed(*stat, "user_usec"), 1e6));
        put("cpu.system", scaled(keyed(*stat, "system_usec"), 1e6));
      }
    }

    const std::size_t before_memory = values.size();
    std::string memory = job.dir("memory");
    if (!memory.empty() && memory != job.unified) {
      put("memory.current", scaled(read_number(files_, memory + "/memory.usage_in_bytes"), 1));
      put("memory.peak", scaled(read_number(files_, memory + "/memory.max_usage_in_bytes"), 1));
    } else if (!job.unified.empty()) {
      put("memory.current", scaled(read_number(files_, job.unified + "/memory.current"), 1));
      put("memory.peak", scaled(read_number(files_, job.unified + "/memory.peak"), 1));
    }

    const bool have_memory = values.size() > before_memory;
    Io io;
    std::string blkio = job.dir("blkio");
    bool have_io = false;
    if (!blkio.empty() && blkio != job.unified) {
      have_io = read_blkio(files_, blkio, "io_service_bytes", io.read_bytes, io.write_bytes);
      read_blkio(files_, blkio, "io_serviced", io.reads, io.writes);
    } else if (!job.unified.empty()) {
      have_io = read_io_v2(files_, job.unified, io);
    }
    if (have_io) {
      values.push_back({"io.read_bytes", io.read_bytes});
      values.push_back({"io.write_bytes", io.write_bytes});
      values.push_back({"io.reads", io.reads});
      values.push_back({"io.writes", io.writes});
    }

    std::string pids = job.dir("pids");
    std::optional<std::uint64_t> tasks;
    if (!pids.empty()) tasks = read_number(files_, pids + "/pids.current");
    if (!tasks) {
      // Without the pids controller: count the processes listed in the job's cgroups.
      if (!processes().empty() || values.size() > (cpu_from_processes ? 3 : 0)) tasks = processes().size();
    }
    put("tasks", scaled(tasks, 1));

    // Ended (its cgroups gone, no process left), or nothing accounted.
    if (values.empty() || (cpu_from_processes && !tasks)) return;
    read_allocation(job, values);
    std::string gpu_minors = read_gpus(job, values);
    if (state.user.empty() && !processes().empty()) state.user = owner_of(jobs_->proc_root(), processes().front());
    // Told once it held for two samples: slurmstepd makes a job's directories one after the
    // other, and a first sample can fall between (the cpuacct directory one sample late).
    const unsigned missing = (cpu_from_processes ? kNoCpu : 0) | (have_memory ? 0 : kNoMemory) | (have_io ? 0 : kNoIo);
    if (missing == state.missing_before && missing != state.told) {
      tell_what_is_missing(job, missing, state.told);
      state.told = missing;
    }
    state.missing_before = missing;
    out.begin_job(job.id);
    for (const auto& value : values) out.set(value.key, value.value);
    out.label("cpu_source", cpu_from_processes ? "processes" : "cgroup");
    if (!state.user.empty()) out.label("user", state.user);
    if (!gpu_minors.empty()) out.label("gpu_minors", gpu_minors);
  }

  // The GPUs the job's devices cgroup allows: the key gpus, and their minors for the label.
  template <class Values>
  std::string read_gpus(const JobCgroup& job, Values& values) {
    std::string devices = job.dir("devices");
    if (devices.empty() || devices == job.unified) return {};
    auto text = files_.read(devices + "/devices.list");
    auto minors = text ? allowed_gpu_minors(*text) : std::nullopt;
    if (!minors || minors->empty()) return {};
    values.push_back({"gpus", static_cast<double>(minors->size())});
    return fmt::format("{}", fmt::join(*minors, ","));
  }

  // What the job was given: the CPUs of its cpuset and its memory limit.
  template <class Values>
  void read_allocation(const JobCgroup& job, Values& values) {
    std::string cpuset = job.dir("cpuset");
    std::vector<std::string> files;  // the first that lists CPUs counts
    if (!cpuset.empty() && cpuset != job.unified)
      files = {cpuset + "/cpuset.effective_cpus", cpuset + "/cpuset.cpus"};
    else if (!job.unified.empty())
      files = {job.unified + "/cpuset.cpus.effective"};
    for (const auto& file : files) {
      auto text = files_.read(file);
      auto list = text ? perf::parse_cpu_list(*text) : std::nullopt;
      if (list && !list->empty()) {
        values.push_back({"cpus", static_cast<double>(list->size())});
        break;
      }
    }

    std::string memory = job.dir("memory");
    std::optional<std::uint64_t> limit;
    if (!memory.empty() && memory != job.unified)
      limit = read_number(files_, memory + "/memory.limit_in_bytes");
    else if (!job.unified.empty())
      limit = read_number(files_, job.unified + "/memory.max");  // "max" is no number: no limit
    if (limit && *limit < kNoMemoryLimit) values.push_back({"memory.limit", static_cast<double>(*limit)});
  }

  // value / divisor (a division: 400000 us is 0.4 s, not 0.39999999999999997).
  static std::optional<double> scaled(std::optional<std::uint64_t> value, double divisor) {
    if (!value) return std::nullopt;
    return static_cast<double>(*value) / divisor;
  }

  JobDirectory* jobs_;
  double ticks_per_second_;
  PerJob<JobState> states_;
  HeldFiles files_;  // each job's files, open while the job runs
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("JobCgroup",
                         "Per batch job CPU time, memory, block I/O and tasks from its cgroup (v2 or v1); CPU "
                         "from the job's processes where its cgroups account none (label cpu_source)",
                         kOptions, kCatalog, JobCgroupSensor, .row = DashboardRow::jobs, .node_keys = "jobs", .job_keys = "*");

}  // namespace fructosa::sensors
