// lagent: the agent's own health, as an ordinary sensor. Per sensor the duration and success
// of its last read (node_exporter's scrape_collector_duration_seconds / _success), and the
// state of the link to lmaster (or to carbon). The agent always runs it (every 10 s unless a [sensor:lagent]
// section says otherwise).
#include <fmt/format.h>
#include <unistd.h>

#include "agent_stats.h"
#include "metric.h"
#include "procfs.h"
#include "pushed_metrics.h"
#include "sensor.h"

namespace fructosa::sensors {

AgentStats& AgentStats::instance() {
  static AgentStats stats;
  return stats;
}

void AgentStats::record_read(const std::string& sensor, double duration, double cpu, bool success) {
  std::lock_guard lock(mutex_);
  auto& stats = sensors_[sensor];
  stats.last_duration = duration;
  stats.last_cpu = cpu;
  stats.last_success = success;
  ++stats.reads;
  stats.failures += !success;
}

void AgentStats::record_missed(const std::string& sensor, std::uint64_t count) {
  std::lock_guard lock(mutex_);
  sensors_[sensor].missed += count;
}

void AgentStats::set_sender(const SenderStats& stats) {
  std::lock_guard lock(mutex_);
  sender_ = stats;
}

void AgentStats::forget_sensor(const std::string& sensor) {
  std::lock_guard lock(mutex_);
  sensors_.erase(sensor);
}

std::map<std::string, SensorReadStats> AgentStats::sensors() const {
  std::lock_guard lock(mutex_);
  return sensors_;
}

SenderStats AgentStats::sender() const {
  std::lock_guard lock(mutex_);
  return sender_;
}

namespace {

const OptionTable kOptions{};

const Catalog kCatalog{
    {"*.duration", Unit::seconds, Kind::gauge, "wall-clock time the sensor's last read took"},
    {"*.cpu", Unit::seconds, Kind::gauge, "CPU time the sensor's last read took"},
    {"*.success", Unit::boolean, Kind::gauge, "1 if the sensor's last read worked, 0 if it was unavailable or failed"},
    {"*.reads", Unit::count, Kind::counter, "reads of the sensor since lagent started"},
    {"*.failures", Unit::count, Kind::counter, "reads that were unavailable or failed"},
    {"*.missed", Unit::count, Kind::counter, "reading times skipped because the previous read still ran or lagent was late"},
    {"batches_sent", Unit::count, Kind::counter, "batches sent to lmaster, or to carbon with [Graphite] and no [lmaster] (first sends, not resends)"},
    {"sends", Unit::count, Kind::counter,
     "times batches left for lmaster (or carbon), one or several back to back, resends included (with "
     "batch_interval, several rounds' batches leave at once)"},
    {"batches_acked", Unit::count, Kind::counter, "batches lmaster acknowledged (carbon: written and its connection still up replay_window s later)"},
    {"batches_dropped", Unit::count, Kind::counter,
     "unacknowledged batches dropped from the spool beyond spool_max_bytes (or that could not be written to it)"},
    {"samples_dropped", Unit::count, Kind::counter, "samples in the dropped batches"},
    {"resyncs", Unit::count, Kind::counter, "times lmaster asked for the dictionary and unacknowledged batches again (carbon: reconnections after a lost connection)"},
    {"failovers", Unit::count, Kind::counter, "times the agent moved to the next lmaster of [lmaster] host"},
    {"unacked", Unit::count, Kind::gauge, "batches in the spool waiting for lmaster's acknowledgement (or for carbon to take them)"},
    {"spool_bytes", Unit::bytes, Kind::gauge, "bytes of the spool's segment files (spool_dir)"},
    {"rss", Unit::bytes, Kind::gauge, "lagent's resident memory"},
    {"cpu_seconds", Unit::seconds, Kind::counter, "CPU time lagent has used (user + system)"},
    // The push socket of [sensor:User] (docs/push.md): the node's sample counts every job's
    // lines, each job's sample its own.
    {"push_lines", Unit::count, Kind::counter, "lines pushed to the push socket and taken"},
    {"push_refused", Unit::count, Kind::counter, "pushed lines refused as malformed (the client was told why)"},
    {"push_rate_dropped", Unit::count, Kind::counter,
     "pushed lines dropped because their job sent more than push_max_lines_per_second"},
    {"push_names_dropped", Unit::count, Kind::counter,
     "pushed lines dropped because their job already had push_max_names_per_job names"},
    {"push_outside_jobs", Unit::count, Kind::counter,
     "push connections refused because their process was in no job (push_allow_outside_jobs = false)"},
    {"push_connections", Unit::count, Kind::counter, "connections to the push socket"},
};

void set_push_counts(SampleWriter& out, const PushCounts& counts) {
  out.set("push_lines", static_cast<double>(counts.accepted));
  out.set("push_refused", static_cast<double>(counts.refused));
  out.set("push_rate_dropped", static_cast<double>(counts.rate_dropped));
  out.set("push_names_dropped", static_cast<double>(counts.names_dropped));
}

class LagentSelfSensor final : public Sensor {
 public:
  explicit LagentSelfSensor(const SensorContext&) : statm_("/proc/self/statm"), stat_("/proc/self/stat") {}

  bool sample(SampleWriter& out) override {
    for (const auto& [sensor, stats] : AgentStats::instance().sensors()) {
      out.set(sensor + ".duration", stats.last_duration);
      out.set(sensor + ".cpu", stats.last_cpu);
      out.set(sensor + ".success", stats.last_success ? 1 : 0);
      out.set(sensor + ".reads", static_cast<double>(stats.reads));
      out.set(sensor + ".failures", static_cast<double>(stats.failures));
      out.set(sensor + ".missed", static_cast<double>(stats.missed));
    }
    SenderStats sender = AgentStats::instance().sender();
    out.set("batches_sent", static_cast<double>(sender.batches_sent));
    out.set("sends", static_cast<double>(sender.sends));
    out.set("batches_acked", static_cast<double>(sender.batches_acked));
    out.set("batches_dropped", static_cast<double>(sender.batches_dropped));
    out.set("samples_dropped", static_cast<double>(sender.samples_dropped));
    out.set("resyncs", static_cast<double>(sender.resyncs));
    out.set("failovers", static_cast<double>(sender.failovers));
    out.set("unacked", static_cast<double>(sender.unacked));
    out.set("spool_bytes", static_cast<double>(sender.spool_bytes));
    // The agent's own process, always the real /proc/self (proc_root may be a fixture tree).
    std::string_view statm = statm_.read();
    next_field(statm);
    std::uint64_t resident_pages = 0;
    if (parse_uint(next_field(statm), resident_pages))
      out.set("rss", static_cast<double>(resident_pages) * static_cast<double>(::sysconf(_SC_PAGESIZE)));
    std::string_view stat = stat_.read();
    stat.remove_prefix(std::min(stat.size(), stat.rfind(')') + 1));  // the command name may hold spaces
    std::uint64_t utime = 0, stime = 0;
    for (int field = 3; field <= 15; ++field) {  // fields 14 and 15 are utime and stime
      std::string_view value = next_field(stat);
      if (field == 14) parse_uint(value, utime);
      if (field == 15) parse_uint(value, stime);
    }
    out.set("cpu_seconds", static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK)));
    // Always, 0 without [sensor:User]: the dashboards' lagent panels have data on every node.
    auto& pushed = PushedMetrics::instance();
    set_push_counts(out, pushed.totals());
    out.set("push_outside_jobs", static_cast<double>(pushed.outside_job_refusals()));
    out.set("push_connections", static_cast<double>(pushed.connections()));
    for (const auto& [job, counts] : pushed.per_job()) {
      out.begin_job(job);
      set_push_counts(out, counts);
    }
    return true;
  }

 private:
  ProcFile statm_;
  ProcFile stat_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("lagent", "lagent's own health: each sensor's last read duration and success, the link to lmaster or carbon",
                         kOptions, kCatalog, LagentSelfSensor, .row = DashboardRow::lmaster,
                         .job_keys = "push_lines,push_refused,push_rate_dropped,push_names_dropped");

}  // namespace fructosa::sensors
