// OAR's cgroups: oar/<user>_<id> in each v1 hierarchy (job_resource_manager_cgroups.pl, OAR 2.5
// and OAR 3); on cgroup v2, OAR 3's systemd manager (job_resource_manager_systemd.pl, its default):
// oar.slice/oar-u<uid>.slice/oar-u<uid>-j<id>.slice, whose processes are in *.scope children.
#include "job_layouts.h"

namespace fructosa::sensors {

// colmet's default for OAR: the links OAR's job manager makes to each job's cpuset cgroup.
const char* const kOarDefaultRoot = "/dev/oar_cgroups_links/cpuset";

std::vector<JobPattern> oar_patterns() {
  std::vector<JobPattern> patterns;
  static const auto v1_job = compile_builtin_job_regex(R"(.+_(\d+))");
  static const auto v2_job = compile_builtin_job_regex(R"(oar-u\d+-j(\d+)\.slice)");
  patterns.push_back({"oar", {"oar"}, v1_job});
  // "oar" is CPUSET_PATH ("/oar" by default) without its slash.
  patterns.push_back({"oar", {"oar.slice", "oar-u*.slice"}, v2_job});
  return patterns;
}

}  // namespace fructosa::sensors
