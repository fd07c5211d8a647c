// How the batch systems lay out their jobs' cgroups, as job discovery (JobDirectory, jobs.cpp)
// needs it: one file per scheduler, job_layout_<scheduler>.cpp. Internal to the sensors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;  // <re2/re2.h>, included by the .cpp files that match
}

namespace fructosa::sensors {

// One cgroup hierarchy: a v2 tree (name "") or a v1 one named after its controllers.
struct CgroupHierarchy {
  std::string name;
  std::string path;
};

// Where a scheduler puts its jobs, relative to a hierarchy: directory globs, then the job's
// own directory as a regex whose first group is the id (compiled once, shared by every copy).
struct JobPattern {
  const char* scheduler;  // "slurm", "oar", "pbs"
  std::vector<std::string> parents;
  std::shared_ptr<const re2::RE2> job;
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
// Job regexes (job_layout_regex.cpp), RE2 syntax matched byte by byte: linear time in the text,
// bounded memory. compile_job_regex throws ConfigError naming the key `regex` unless the
// pattern compiles within the memory bound and has exactly one capture group.
std::shared_ptr<const re2::RE2> compile_job_regex(const std::string& regex);
void check_job_regex(const std::string& regex);
// A built-in layout's pattern (a constant: several groups allowed, the first is the id).
std::shared_ptr<const re2::RE2> compile_builtin_job_regex(const char* pattern);
// The job id of a directory `name` that `job` matches whole (built-in layouts).
bool match_job_name(const re2::RE2& job, std::string_view name, std::uint64_t& id);
// The job id of a relative path in which `regex` is found anywhere (scheduler = regex).
bool search_job_path(const re2::RE2& regex, std::string_view path, std::uint64_t& id);
// scheduler = regex: the shallowest directories down to `max_depth` whose path matches.
void find_regex_jobs(const CgroupHierarchy& hierarchy, const re2::RE2& regex, int max_depth, JobScan& scan);

// jobs.cpp, for the layouts: subdirectory names of `dir`, sorted (empty when it vanished or
// cannot be read: jobs end at any moment); a job id from text (0 is none).
std::vector<std::string> subdirectories(const std::string& dir);
bool parse_job_id(const std::string& text, std::uint64_t& id);

}  // namespace fructosa::sensors
