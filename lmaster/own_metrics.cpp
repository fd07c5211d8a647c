#include "own_metrics.h"

#include <string_view>

#include "master_catalog.h"
#include "output.h"

namespace fructosa::master {

void describe_master_metrics(MetricInfoStore& infos, const std::vector<std::string>& output_names) {
  constexpr std::string_view kAgentPrefix = "agent.*.";
  for (const auto& entry : master_catalog().entries()) {
    MetricInfo info{std::string(to_string(entry.unit)), entry.kind, entry.description};
    if (entry.pattern.starts_with(kAgentPrefix)) {  // rows of their own in HDF5 (hdf5_output.cpp)
      infos.remember(kAgentsTableName, entry.pattern.substr(kAgentPrefix.size()), info);
    } else if (!entry.pattern.starts_with("*.")) {
      infos.remember(kMasterSensorName, entry.pattern, info);
    } else {
      for (const auto& output : output_names) infos.remember(kMasterSensorName, output + entry.pattern.substr(1), info);
    }
  }
}

}  // namespace fructosa::master
