// Which agents lmaster knows, and whether they still report: last-seen time, address, rate and
// backlog per host. A host that falls silent for `timeout` seconds is "down" (a log line and
// `agent.<host>.up` = 0 in the lmaster sensor) until it is heard again. The table is written to
// <data_dir>/agents.json, which `lmaster status` prints and the next lmaster reads back, so a
// node that never returns after a master restart is still reported down.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include "metric.h"

namespace fructosa::master {

class MetricInfoStore;

struct AgentRecord {
  std::string address;          // last peer address
  std::uint64_t session = 0;
  std::int64_t last_seen_ns = 0;  // wall clock, 0: not since this master started
  std::uint64_t points = 0;     // accepted since this master started
  std::uint64_t batches = 0;
  std::uint64_t accepted_sequence = 0;  // last batch accepted (this session)
  std::uint64_t sent_sequence = 0;      // last batch the agent says it sent (heartbeat)
  double rate = 0;              // points per second over the last interval
  bool up = false;
  // For the rate.
  std::uint64_t points_at_mark = 0;
  std::int64_t mark_ns = 0;

  // Batches the agent sent that this master has not accepted yet.
  std::uint64_t backlog() const { return sent_sequence > accepted_sequence ? sent_sequence - accepted_sequence : 0; }
};

class AgentRegistry {
 public:
  AgentRegistry(std::string status_path, double timeout_seconds);

  // Reads the hosts a previous lmaster knew (they count as down until heard). A missing file
  // is normal; a damaged one is logged and ignored.
  void load();
  // Any message from `host` (after its Hello).
  void seen(const std::string& host, const std::string& address, std::uint64_t session, std::int64_t now_ns);
  void accepted(const std::string& host, std::uint64_t sequence, std::size_t points);
  void heartbeat(const std::string& host, std::uint64_t sent_sequence);
  // Marks silent hosts down (with a log line), updates rates; call about once a second.
  void check(std::int64_t now_ns);
  // agent.<host>.up/.last_seen/.rate/.backlog into the lmaster sensor's sample, and their catalog.
  void add_metrics(Sample& sample) const;
  static void describe(MetricInfoStore& infos, const std::string& sensor, const std::string& host);
  // Writes the status file (atomically: a reader never sees half of it).
  void save(std::int64_t now_ns) const;

  const std::map<std::string, AgentRecord>& agents() const { return agents_; }

 private:
  std::string status_path_;
  std::int64_t timeout_ns_;
  std::map<std::string, AgentRecord> agents_;
};

// `lmaster status`: the table of the status file at `path` (exit code as the caller decides).
// Returns false when there is no readable status file.
bool print_agent_table(const std::string& path, std::ostream& out, std::int64_t now_ns);

}  // namespace fructosa::master
