// The job dashboard: the per-job samples of $job on each of its hosts, then the node samples of
// those hosts.
#include "dashboard_builder.h"

namespace fructosa::dashboards {

DashboardName add_job_dashboard(DashboardBuilder& builder, const Settings& settings) {
  std::string prefix = graphite_prefix_text(settings);
  json& variables = builder.variables();
  // Prometheus names them by its labels: $job_id, and $host (the hosts with series of the job).
  bool prometheus = settings.datasource == Datasource::prometheus;
  variables.push_back(query_variable(settings, prometheus ? "job_id" : "job", "Job",
                                     {.graphite = prefix + "jobs.*",
                                      .graphite_regex = "",
                                      .elasticsearch = R"({"find": "terms", "field": "job", "query": "job:>0"})",
                                      .prometheus = R"(label_values({__name__=~"fructosa_.+", job_id!=""}, job_id))"},
                                     false));
  variables.push_back(
      query_variable(settings, prometheus ? "host" : "jobhost", "Hosts of the job",
                     {.graphite = prefix + "jobs.$job.*",
                      .graphite_regex = "",
                      .elasticsearch = R"({"find": "terms", "field": "host", "query": "job:$job"})",
                      .prometheus = R"(label_values({__name__=~"fructosa_.+", job_id="$job_id"}, host))"},
                     true));
  add_sensor_rows(builder, settings.sensors, Scope::job, "", true, " (job)");
  add_sensor_rows(builder, settings.sensors, Scope::job_node, "", false, " (nodes of the job)");
  return {"fructosa job", "fructosa-job-" + uid_word(settings.datasource)};
}

}  // namespace fructosa::dashboards
