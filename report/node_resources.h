// The figures of a job's node that come from the node's own samples over the job's span
// (HostData::node_metrics): its GPUs' utilization and memory, whether the job had the node
// alone, the node's energy attributed to the job, and its network traffic. docs/report.md.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "analysis.h"

namespace fructosa::report {

// JobCgroup's label gpu_minors: the GPU minors its cgroup allows, "0,3" (ranges "0-3" read too;
// "" or nonsense: nullopt).
std::optional<std::vector<int>> allocated_gpus(std::string_view label);

// Fills `node`'s GPU (per GPU: utilization, memory, allocation), use, energy and network figures
// from `host`'s node samples over [node.first_ns, node.last_ns]; drops the Taskstats delays that
// stay 0 without delay accounting when the node says it is off.
void add_node_resources(NodeFigures& node, const HostData& host);

}  // namespace fructosa::report
