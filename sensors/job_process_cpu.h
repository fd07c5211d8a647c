// A job's CPU time summed from its processes' /proc/<pid>/stat, for jobs whose cgroups account
// no CPU (Slurm on cgroup v1 with JobAcctGatherType=jobacct_gather/linux makes the job no
// cpuacct directory). Internal to the sensors (job_cgroup.cpp).
//
// The total only grows, as the cgroup's counter would: each process adds what its own time
// (utime, stime) and its reaped children's (cutime, cstime) grew since the last reading. A
// child that ended shows up again in its parent's cutime/cstime once reaped; what the child was
// already counted for is remembered against the parent, so that it is not counted twice. A
// process whose parent is not the job's (the first process of a Slurm step, reaped by
// slurmstepd) keeps what it was counted for; what it used after its last reading is missed.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace fructosa::sensors {

struct CpuTicks {
  std::uint64_t user = 0, system = 0;
};

// What one /proc/<pid>/stat says of a process's CPU (fields 4, 14-17 and 22).
struct ProcessStat {
  int ppid = 0;
  CpuTicks self, children;  // utime/stime; cutime/cstime
  std::uint64_t start = 0;  // clock ticks after boot: a pid with another start is another process
};
// Parses a /proc/<pid>/stat line; false when it is not one.
bool parse_process_stat(std::string_view stat, ProcessStat& out);

class ProcessCpuTime {
 public:
  // Reads the stat of each of `pids` under `proc_root` and adds what they used since the last
  // call. A pid that cannot be read counts as ended.
  void update(const std::string& proc_root, const std::vector<int>& pids);
  // The same from stats already read (for tests): `now` holds every process of the job now.
  void update(const std::unordered_map<int, ProcessStat>& now);

  // Clock ticks (USER_HZ) used by the job's processes since the first update.
  const CpuTicks& total() const { return total_; }

 private:
  std::unordered_map<int, ProcessStat> processes_;  // as last read
  std::unordered_map<int, CpuTicks> counted_reaped_;  // per parent: its ended children's counted time
  std::unordered_map<int, ProcessStat> now_;        // update()'s buffer
  std::string buffer_;
  CpuTicks total_;
};

}  // namespace fructosa::sensors
