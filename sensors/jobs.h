// Job discovery, shared by every per-job sensor (the idea of LDMS's sampler base): one
// JobDirectory per agent finds the batch jobs running on this node from the cgroup tree that
// Slurm, OAR or PBS/Torque make, watches it with inotify, and hands every sensor the same
// snapshot. A sensor only says what it reads from one job; PerJob<T> keeps its state per job
// and forgets jobs that ended.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"

namespace re2 {
class RE2;
}

namespace fructosa::sensors {

struct Roots;

enum class Scheduler { automatic, slurm, oar, pbs, regex };

// [jobs] of lagent.conf.
struct JobSettings {
  Scheduler scheduler = Scheduler::automatic;
  // Where the cgroup hierarchies are. Empty: <sys root>/fs/cgroup (and, for OAR,
  // /dev/oar_cgroups_links/cpuset/ as colmet).
  std::string cgroup_root;
  // scheduler = regex: matched against each cgroup directory's path relative to a hierarchy
  // (e.g. "mybatch/job-(\d+)"); the one capture group is the job id.
  std::string regex;
  int regex_max_depth = 6;
  // Multiple-slurmd nodes: only the slurmd of this node name ("" = every slurmd here).
  std::string slurm_node_name;
  // A full rescan at least this often, in case inotify missed something (seconds).
  double rescan_interval = 60;

  bool operator==(const JobSettings&) const = default;
};

const OptionTable& job_options();  // [jobs]
JobSettings job_settings(const Options& options);

// One job's cgroup directories: in cgroup v2 one directory; in v1 one per hierarchy that has
// the job (cpuacct, memory, cpuset, blkio, perf_event, ...).
struct JobCgroup {
  std::uint64_t id = 0;
  std::string name;     // the directory name as the scheduler made it ("job_42", "alice_42")
  std::string scheduler = {};  // whose layout it matched: "slurm", "oar", "pbs" or "regex"
  std::string unified;  // cgroup v2 directory ("" when the job is only in v1 hierarchies)
  // v1: hierarchy name as mounted ("cpu,cpuacct", "memory", "perf_event") -> the job's directory.
  std::vector<std::pair<std::string, std::string>> v1;

  // The directory holding `controller`'s files ("cpuacct", "memory", "blkio", "pids",
  // "perf_event", "cpuset", "freezer"): the v1 hierarchy that has it, else the v2 directory,
  // else "".
  std::string dir(std::string_view controller) const;
  // Where the job's processes are listed from (cgroup.procs of this directory and every
  // descendant): the v2 directory; on v1 the freezer hierarchy, in which Slurm's
  // proctrack/cgroup holds every process of a job whatever controllers its accounting and
  // task plugins enabled; else the first hierarchy found.
  std::string process_dir() const;
  // Directories under process_dir(), as globs relative to it ("" is process_dir() itself),
  // whose own processes are the scheduler's rather than the job's: Slurm's slurmstepd sits in
  // the v1 freezer job directory and in v2 step_*/slurm. Their subdirectories still count.
  std::vector<std::string> scheduler_cgroups = {};
};

// The /dev/nvidia<minor> GPUs a v1 devices.list allows ("c 195:0 rwm" lines), sorted; nullopt
// when it allows every device ("a *:* rwm") (job_cgroup.cpp).
std::optional<std::vector<unsigned>> allowed_gpu_minors(std::string_view devices_list);

struct JobSnapshot {
  std::vector<JobCgroup> jobs;  // sorted by id, ids unique
  std::string involved_jobs;    // "12,345": the label node samples carry ("" when none)
  const JobCgroup* find(std::uint64_t id) const;
};

class CgroupEntryWatch;  // cgroup_entry_watch.h
struct CgroupWalk;       // cgroup_process_tree.h

class JobDirectory {
 public:
  // Throws ConfigError for a `regex` that job_settings() would refuse (it compiles it once here).
  JobDirectory(JobSettings settings, const Roots& roots);
  // For tests: always answers `jobs`, never scans.
  static std::unique_ptr<JobDirectory> fixed(std::vector<JobCgroup> jobs, const Roots& roots);
  ~JobDirectory();
  JobDirectory(const JobDirectory&) = delete;
  JobDirectory& operator=(const JobDirectory&) = delete;

  // The jobs running now. Cheap when nothing changed: rescans only after inotify reported a
  // change under the watched directories (or rescan_interval passed). Thread-safe.
  std::shared_ptr<const JobSnapshot> snapshot();

  // Processes of a job now (cgroup.procs of its directory and every descendant). A job that
  // ended meanwhile gives an empty list, not an error.
  static std::vector<int> pids(const JobCgroup& job);
  // The same for the sensors of a running agent, at the reading `at_ns`: the sensors reading
  // jobs at the same instant share one listing, and each job's cgroup tree is remembered, a
  // directory listed again only when its link count (2 + subdirectories) changes or a child
  // went; on cgroup v2 the count is asked only of the directories inotify reports changed.
  // Thread-safe.
  std::vector<int> processes(const JobCgroup& job, std::int64_t at_ns);
  // The job process `pid` belongs to, from <proc>/<pid>/cgroup against the current snapshot;
  // 0 when none (or the process is gone).
  std::uint64_t job_of_pid(int pid);

  const std::string& proc_root() const { return proc_root_; }
  // What the last scan looked at, for log lines and `lagent probe`.
  std::string describe() const;

 private:
  struct Watcher;
  JobDirectory(const Roots& roots);
  void rescan_locked();
  bool changed_locked();
  std::vector<std::pair<std::string, std::uint64_t>> relative_paths_of_fixed() const;

  JobSettings settings_;
  std::shared_ptr<const re2::RE2> user_regex_;  // scheduler = regex: settings_.regex, compiled once
  std::string proc_root_;
  std::string sys_root_;
  bool fixed_ = false;
  mutable std::mutex mutex_;
  std::shared_ptr<const JobSnapshot> snapshot_;
  // Each job directory's path inside its hierarchy ("/slurm/uid_0/job_7"), as
  // /proc/<pid>/cgroup names it.
  std::vector<std::pair<std::string, std::uint64_t>> relative_;
  std::unique_ptr<Watcher> watcher_;
  std::int64_t last_scan_ns_ = 0;
  std::string description_;
  // processes(): per job directory, its cgroup tree and the last listing. The watch outlives
  // the trees, whose directories it watches.
  struct ProcessListing;
  std::mutex processes_mutex_;
  std::unique_ptr<CgroupEntryWatch> entry_watch_;
  std::unique_ptr<CgroupWalk> walk_;  // its buffer is kept from walk to walk
  std::int64_t drained_at_ns_ = INT64_MIN;  // the instant entry_watch_ was last asked
  std::map<std::string, std::unique_ptr<ProcessListing>, std::less<>> listings_;
  std::shared_ptr<const JobSnapshot> listings_of_;  // the snapshot whose jobs listings_ keeps
  std::int64_t listed_all_at_ns_ = INT64_MIN;        // the instant every job was last listed for
  // The processes of the job in `dir` at `at_ns` (listed if not yet). Under processes_mutex_.
  const std::vector<int>& list_locked(const JobCgroup& job, std::int64_t at_ns);
};

// Per-job state of a sensor (previous counters, open files): created on first use, dropped
// when a job is no longer in the snapshot.
template <class State>
class PerJob {
 public:
  State& operator[](std::uint64_t id) { return states_[id]; }
  State* find(std::uint64_t id) {
    auto it = states_.find(id);
    return it == states_.end() ? nullptr : &it->second;
  }
  void retain(const JobSnapshot& snapshot) {
    for (auto it = states_.begin(); it != states_.end();)
      it = snapshot.find(it->first) ? std::next(it) : states_.erase(it);
  }
  std::size_t size() const { return states_.size(); }

 private:
  std::map<std::uint64_t, State> states_;
};

}  // namespace fructosa::sensors
