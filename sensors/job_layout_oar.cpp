// OAR's cgroups: oar/<user>_<id> in each v1 hierarchy (job_resource_manager_cgroups.pl, OAR 2.5
// and OAR 3); on cgroup v2, OAR 3's systemd manager (job_resource_manager_systemd.pl, its default):
// oar.slice/oar-u<uid>.slice/oar-u<uid>-j<id>.slice, whose processes are in *.scope children.
#include "job_layouts.h"

namespace fructosa::sensors {

// colmet's default for OAR: the links OAR's job manager makes to each job's cpuset cgroup.
const char* const kOarDefaultRoot = "/dev/oar_cgroups_links/cpuset";

std::vector<JobPattern> oar_patterns() {
  std::vector<JobPattern> patterns;
  patterns.push_back({"oar", {"oar"}, std::regex(R"(.+_(\d+))")});
  // "oar" is CPUSET_PATH ("/oar" by default) without its slash.
  patterns.push_back({"oar", {"oar.slice", "oar-u*.slice"}, std::regex(R"(oar-u\d+-j(\d+)\.slice)")});
  return patterns;
}

}  // namespace fructosa::sensors
