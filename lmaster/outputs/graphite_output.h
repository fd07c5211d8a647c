// [Graphite]: carbon's pickle protocol (or plaintext) over TCP, FrUCToSA's metric paths.
//
// Paths (DESIGN.md, "Naming in Graphite"):
//   [prefix.]<short host>.<Sensor>[.<key>]                 the node itself (job 0)
//   [prefix.]jobs.<job id>.<short host>.<Sensor>[.<key>]   per-job samples
// A scalar sensor's empty key adds nothing. The short host is the host up to its first dot (an
// IPv4 address keeps all of it, dots made '_'). Every component keeps only [A-Za-z0-9_:#-]:
// each other byte becomes '_' (a dot too, inside a host or sensor name; a key's dots separate
// components), an empty component "_". E.g. DiskUsage of "/scratch+proj(1)@a=b" on node01 is
// node01.DiskUsage._scratch_proj_1__a_b.total. That set passes carbon-c-relay unchanged and
// needs no quoting in graphite-web targets; the mapping is common/graphite_name.h, which
// make-dashboard uses too. Labels are not sent; NaN values are skipped (whisper cannot store
// them).
#pragma once

#include <memory>

#include "carbon_encoder.h"
#include "config.h"
#include "output.h"

namespace fructosa::master {

// The encoding and the option table are shared with lagent (common/carbon_encoder.h).
using graphite::CarbonEncoder;
using graphite::CarbonFrame;
using graphite::CarbonProtocol;
using graphite::graphite_options;

std::unique_ptr<Output> make_graphite_output(const Options& options, const MetricInfoStore& infos);

}  // namespace fructosa::master
