// The metric catalog of lmaster's own sensor `lmaster` (README "Outputs"): what
// Master::describe_own_metrics and AgentRegistry::describe tell the outputs, as patterns, so
// that make-dashboard can build the "lmaster health" panels from it like any sensor's.
// Header-only: make-dashboard reads it without linking the master.
#pragma once

#include "metric.h"

namespace fructosa::master {

inline constexpr const char* kMasterSensorName = "lmaster";
// The HDF5 output's table of the agent.*.<key> metrics: a row per agent (docs/hdf5.md).
inline constexpr const char* kAgentsTableName = "lmaster_agents";

inline const Catalog& master_catalog() {
  static const Catalog catalog{
      {"received", Unit::count, Kind::counter, "points accepted from agents"},
      {"batches", Unit::count, Kind::counter, "batches accepted from agents"},
      {"agents", Unit::count, Kind::gauge, "agents heard from during the last interval"},
      {"curve.accepted", Unit::count, Kind::counter, "CURVE handshakes of allowed agent keys (curve = true)"},
      {"curve.rejected", Unit::count, Kind::counter, "CURVE clients refused: key not in curve_allowed_keys_dir"},
      {"curve.failed_handshakes", Unit::count, Kind::counter,
       "connections refused before the key check: no CURVE, wrong master key, bad protocol"},
      {"agent.*.up", Unit::boolean, Kind::gauge, "1 while the agent reports, 0 once silent"},
      {"agent.*.last_seen", Unit::timestamp, Kind::gauge, "when the agent was last heard"},
      {"agent.*.rate", Unit::count, Kind::gauge, "points per second accepted from the agent"},
      {"agent.*.backlog", Unit::count, Kind::gauge, "batches the agent sent that lmaster has not accepted yet"},
      // One set per output section: <output> is graphite, hdf5, elasticsearch or stdout.
      {"*.sent", Unit::count, Kind::counter, "points the output delivered"},
      {"*.retried", Unit::count, Kind::counter, "points the output sent again after a failure"},
      {"*.dropped", Unit::count, Kind::counter,
       "points the output gave up (refused for good, or past the memory queue and the journal budget)"},
      {"*.queued", Unit::count, Kind::gauge, "points waiting for the output (memory and journal)"},
      {"journal.bytes", Unit::bytes, Kind::gauge, "bytes in the journal (records some output has not delivered, and the newest)"},
      {"memory.rss", Unit::bytes, Kind::gauge, "lmaster's resident memory"},
      {"memory.holding", Unit::boolean, Kind::gauge, "1 while lmaster is over [lmaster] memory_max and turns batches away"},
      {"memory.holds", Unit::count, Kind::counter, "times lmaster reached memory_max"},
      {"memory.turned_away", Unit::count, Kind::counter,
       "batches turned away over memory_max (the agents keep them and resend them afterwards)"},
  };
  return catalog;
}

}  // namespace fructosa::master
