// The job dashboard: the per-job samples of $job on each of its hosts, then the node samples of
// those hosts.
#include "dashboard_builder.h"

namespace fructosa::dashboards {

DashboardName add_job_dashboard(DashboardBuilder& builder, const Settings& settings) {
  std::string prefix = graphite_prefix_text(settings);
  json& variables = builder.variables();
  variables.push_back(query_variable(settings, "job", "Job", prefix + "jobs.*", "",
                                     R"({"find": "terms", "field": "job", "query": "job:>0"})", false));
  variables.push_back(query_variable(settings, "jobhost", "Hosts of the job", prefix + "jobs.$job.*", "",
                                     R"({"find": "terms", "field": "host", "query": "job:$job"})", true));
  add_sensor_rows(builder, settings.sensors, Scope::job, "", true, " (job)");
  add_sensor_rows(builder, settings.sensors, Scope::job_node, "", false, " (nodes of the job)");
  return {"fructosa job", "fructosa-job-" + uid_word(settings.datasource)};
}

}  // namespace fructosa::dashboards
