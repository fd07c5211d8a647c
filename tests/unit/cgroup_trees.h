// The cgroup fixture trees of the job tests: tests/fixtures/cgroups/NAME/{proc,sys}, one per
// scheduler and cgroup version.
#pragma once

#include <string>

#include "sensor.h"

namespace fructosa::test {

inline const std::string kTrees = std::string(FRUCTOSA_FIXTURES) + "/cgroups";

// The /proc and /sys roots of the tree NAME.
inline sensors::Roots tree(const std::string& name) {
  return sensors::Roots{kTrees + "/" + name + "/proc", kTrees + "/" + name + "/sys"};
}

}  // namespace fructosa::test
