// A JobSource over Graphite's render API (graphite-web, or anything that speaks its /render and
// /metrics/find JSON), for sites that keep only lmaster's [Graphite] output. lmaster sends a
// job's samples as [prefix.]jobs.<id>.<short host>.<Sensor>.<key> (graphite_output.h; each
// component mapped by common/graphite_name.h), so:
//   jobs():    /metrics/find of jobs.* and jobs.*.* (ids, hosts), then one render of
//              jobs.*.*.JobCgroup.cpu.usage for first/last (a job without that series: the span
//              of all its series, as job() reads them);
//   job(id):   /metrics/find level by level under jobs.<id> (keys have dots: series have
//              several depths), then one render per phase of jobs.<id>.*.*[.*...], one target
//              per depth that holds series.
//              Then the node series of node_sensors() on the job's hosts,
//              [prefix.]<short host>.<Sensor>.<key> (job 0), found and rendered the same way over
//              the job's span and kNodeSlackS around it, each cut to the point at or before the
//              job's first sample on its host to the first at or after its last.
// Each render of the job's own series is done twice: over the window (from, until), then again
// from the first point found, so that Graphite answers from the finest archive that still holds
// the job's start (whisper picks the archive by how far back `from` is). Null datapoints are skipped (the HDF5
// source's NaN holes; the figures are the same). A series name maps back to its host (the
// short host, as Graphite holds it) and "<Sensor>.<key>" (the key's components joined with
// dots). Graphite keeps no labels: JobSummary::user and the labels stay empty (the report shows
// "?"), as does cpu_source.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "job_data.h"

namespace fructosa::report {

// --- the JSON answers (apart, for tests) -------------------------------------------------------

// One node of a /metrics/find answer (format=completer): its path (without the trailing '.'
// graphite-web adds to a branch) and whether it is a series.
struct GraphiteNode {
  std::string path;
  bool leaf = false;
};
// Throws SourceError naming `where` when `body` is not a find answer.
std::vector<GraphiteNode> parse_graphite_find(std::string_view body, const std::string& where);

// One series of a /render?format=json answer: its name and its non-null points.
struct GraphiteSeries {
  std::string name;
  Series points;  // time_ns: the datapoints' seconds * 1e9
};
// Throws SourceError naming `where` when `body` is not a render answer.
std::vector<GraphiteSeries> parse_graphite_render(std::string_view body, const std::string& where);

// --- the source --------------------------------------------------------------------------------

struct GraphiteSettings {
  std::string url;     // graphite-web's base URL: http://graphite:8080, https://host/graphite
  std::string prefix;  // lmaster's [Graphite] prefix ("" for none), as configured
  std::string from = "-30d", until = "now";  // the window searched, in Graphite's time syntax
  long timeout_ms = 60000;                   // per request
};

class GraphiteSource final : public JobSource {
 public:
  // Checks the URL (http or https); asks nothing yet. Throws SourceError.
  explicit GraphiteSource(GraphiteSettings settings);
  ~GraphiteSource() override;
  GraphiteSource(const GraphiteSource&) = delete;
  GraphiteSource& operator=(const GraphiteSource&) = delete;

  std::vector<JobSummary> jobs() override;
  std::optional<JobData> job(std::uint64_t id) override;
  // "Graphite at http://graphite:8080" (without credentials).
  std::string describe() const override;

 private:
  std::string get(const std::string& path, const std::vector<std::pair<std::string, std::string>>& query);
  std::vector<GraphiteNode> find(const std::string& query);
  std::vector<GraphiteSeries> render(const std::vector<std::string>& targets);
  std::vector<GraphiteSeries> render_between(const std::vector<std::string>& targets, const std::string& from,
                                             const std::string& until);
  // The render targets of every depth that holds series below `level` (a pattern), walking the
  // tree with /metrics/find; `first_depth`: the first depth whose leaves are series.
  std::vector<std::string> series_targets(std::string level, int first_depth);
  // Fills the hosts' node_metrics (hosts: as Graphite names them).
  void add_node_series(JobData& data);

  GraphiteSettings settings_;
  std::string shown_;  // the URL without credentials or trailing '/'
  std::string prefix_;  // graphite_prefix(settings.prefix): "" or "site1."
  void* curl_ = nullptr;
};

// Node series are asked for this far around the job's span (as the HDF5 source reads them), so
// that a sensor read every few minutes still has a point on each side.
inline constexpr std::int64_t kNodeSlackS = 600;

// `series` (as Graphite names it: [prefix.]<host>.<Sensor>[.<key>], `prefix` as it starts the
// names) into each host's node_metrics, "<Sensor>.<key>": only hosts of `data` and sensors of
// node_sensors(), each series cut to the point at or before the host's first sample of the job to
// the first at or after its last.
void add_graphite_node_series(JobData& data, const std::vector<GraphiteSeries>& series, std::string_view prefix);

// The series of jobs.<id>, as `job_prefix` ("[prefix.]jobs.<id>.") names them, as JobData: per
// host (sorted), metric "<Sensor>.<key>" (a scalar sensor: "<Sensor>."), its sensors. Series
// with another prefix, too short a name or no point are left out; nullopt when none is left.
std::optional<JobData> graphite_job_data(std::uint64_t id, const std::vector<GraphiteSeries>& series,
                                         std::string_view job_prefix);

}  // namespace fructosa::report
