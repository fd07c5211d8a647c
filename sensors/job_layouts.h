// How the batch systems lay out their jobs' cgroups, as job discovery (JobDirectory, jobs.cpp)
// needs it: one file per scheduler, job_layout_<scheduler>.cpp. Internal to the sensors.
#pragma once

#include <cstdint>
#include <functional>
#include <regex>
#include <string>
#include <vector>

namespace fructosa::sensors {

// One cgroup hierarchy: a v2 tree (name "") or a v1 one named after its controllers.
struct CgroupHierarchy {
  std::string name;
  std::string path;
};

// Where a scheduler puts its jobs, relative to a hierarchy: directory globs, then the job's
// own directory as a regex whose one group is the id.
struct JobPattern {
  const char* scheduler;  // "slurm", "oar", "pbs"
  std::vector<std::string> parents;
  std::regex job;
  // Globs relative to a job directory whose own processes are the scheduler's
  // (JobCgroup::scheduler_cgroups).
  std::vector<std::string> scheduler_cgroups = {};
};

// What a scan of one hierarchy reports to JobDirectory.
struct JobScan {
  // Each directory listed: watched with inotify, so that a job appearing in it is noticed.
  std::function<void(const std::string& dir)> watch;
  // A job's directory: `rel` its path relative to `hierarchy`, `name` its own name, `pattern`
  // the layout it matched (null for scheduler = regex).
  std::function<void(const CgroupHierarchy& hierarchy, const std::string& rel, const std::string& name,
                     std::uint64_t id, const JobPattern* pattern)>
      add;
};

// Slurm (job_layout_slurm.cpp); `slurm_node` "" for every slurmd of this host.
std::vector<JobPattern> slurm_patterns(const std::string& slurm_node);
// OAR (job_layout_oar.cpp).
std::vector<JobPattern> oar_patterns();
extern const char* const kOarDefaultRoot;
// PBS/Torque (job_layout_pbs.cpp).
std::vector<JobPattern> pbs_patterns();
// scheduler = regex (job_layout_regex.cpp). check_job_regex throws ConfigError.
void check_job_regex(const std::string& regex);
void find_regex_jobs(const CgroupHierarchy& hierarchy, const std::regex& regex, int max_depth, JobScan& scan);

// jobs.cpp, for the layouts: subdirectory names of `dir`, sorted (empty when it vanished or
// cannot be read: jobs end at any moment); a job id from text (0 is none).
std::vector<std::string> subdirectories(const std::string& dir);
bool parse_job_id(const std::string& text, std::uint64_t& id);

}  // namespace fructosa::sensors
