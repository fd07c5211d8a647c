// PBS Pro and Torque's cgroups: pbs_jobs.service/jobid/<id>, torque/<id>.
#include "job_layouts.h"

namespace fructosa::sensors {

std::vector<JobPattern> pbs_patterns() {
  std::vector<JobPattern> patterns;
  // "123.server", array elements "123[4].server": the id is the leading number.
  static const auto job = compile_builtin_job_regex(R"((\d+)(\[\d*\])?(\..*)?)");
  patterns.push_back({"pbs", {"pbs_jobs.service", "jobid"}, job});
  patterns.push_back({"pbs", {"torque"}, job});
  return patterns;
}

}  // namespace fructosa::sensors
