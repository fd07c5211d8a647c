// OAR's cgroups: oar/<user>_<id> in each hierarchy.
#include "job_layouts.h"

namespace fructosa::sensors {

// colmet's default for OAR: the links OAR's job manager makes to each job's cpuset cgroup.
const char* const kOarDefaultRoot = "/dev/oar_cgroups_links/cpuset";

std::vector<JobPattern> oar_patterns() {
  std::vector<JobPattern> patterns;
  patterns.push_back({{"oar"}, std::regex(R"(.+_(\d+))")});
  return patterns;
}

}  // namespace fructosa::sensors
