// What lmaster tells its outputs of its own sensor `lmaster` (units, kinds, descriptions), from
// the catalog master_catalog.h that make-dashboard reads too.
#pragma once

#include <string>
#include <vector>

namespace fructosa::master {

class MetricInfoStore;

// The catalog's fixed keys; its `*.` ones once per output in `output_names`; its `agent.*.` ones
// as the columns of the HDF5 output's lmaster_agents table (the per-host keys themselves are
// AgentRegistry::describe's, once an agent is known).
void describe_master_metrics(MetricInfoStore& infos, const std::vector<std::string>& output_names);

}  // namespace fructosa::master
