// Slurm's cgroups: cgroup v1 slurm[_<node>]/uid_<uid>/job_<id>, v2
// system.slice/[<node>_]slurmstepd.scope/job_<id>.
//
// Where slurmstepd sits (Slurm 22.05, recorded in tests/fixtures/cgroups/slurm-v1-debian.md):
// on v1 each step's slurmstepd is in the freezer job directory itself (so that freezing a
// step does not freeze its steward), the job's processes in freezer's step_* below it; on v2
// in job_<id>/step_*/slurm, the tasks in step_*/user/task_*.
#include "job_layouts.h"

namespace fructosa::sensors {

std::vector<JobPattern> slurm_patterns(const std::string& slurm_node) {
  std::vector<JobPattern> patterns;
  std::string suffixed = slurm_node.empty() ? "slurm_*" : "slurm_" + slurm_node;
  std::string scope = slurm_node.empty() ? "*_slurmstepd.scope" : slurm_node + "_slurmstepd.scope";
  static const auto job = compile_builtin_job_regex(R"(job_(\d+))");
  const std::vector<std::string> v1_steward{""}, v2_steward{"step_*/slurm"};
  patterns.push_back({"slurm", {"slurm", "uid_*"}, job, v1_steward});  // cgroup v1
  patterns.push_back({"slurm", {suffixed, "uid_*"}, job, v1_steward});  // v1, multiple slurmd
  patterns.push_back({"slurm", {"system.slice", "slurmstepd.scope"}, job, v2_steward});  // v2
  patterns.push_back({"slurm", {"system.slice", scope}, job, v2_steward});  // v2, multiple slurmd
  return patterns;
}

}  // namespace fructosa::sensors
