// Slurm's cgroups: cgroup v1 slurm[_<node>]/uid_<uid>/job_<id>, v2
// system.slice/[<node>_]slurmstepd.scope/job_<id>.
#include "job_layouts.h"

namespace fructosa::sensors {

std::vector<JobPattern> slurm_patterns(const std::string& slurm_node) {
  std::vector<JobPattern> patterns;
  std::string suffixed = slurm_node.empty() ? "slurm_*" : "slurm_" + slurm_node;
  std::string scope = slurm_node.empty() ? "*_slurmstepd.scope" : slurm_node + "_slurmstepd.scope";
  std::regex job(R"(job_(\d+))");
  patterns.push_back({{"slurm", "uid_*"}, job});  // cgroup v1
  patterns.push_back({{suffixed, "uid_*"}, job});  // v1, multiple slurmd
  patterns.push_back({{"system.slice", "slurmstepd.scope"}, job});  // v2
  patterns.push_back({{"system.slice", scope}, job});  // v2, multiple slurmd
  return patterns;
}

}  // namespace fructosa::sensors
