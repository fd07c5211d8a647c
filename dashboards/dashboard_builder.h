// Internal to make-dashboard: lays a dashboard's rows and panels on Grafana's 24-column grid and
// writes each panel's JSON, its targets from the datasource's TargetBuilder (targets.h). The
// dashboard kinds (node_dashboard.cpp, job_dashboard.cpp, cluster_dashboard.cpp) use it.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "panel_spec.h"
#include "targets.h"

namespace fructosa::dashboards {

// Places panels of the given sizes left to right, rows below rows.
class GridLayout {
 public:
  json place(int width, int height) {
    if (x_ + width > 24) new_line();
    json position = {{"h", height}, {"w", width}, {"x", x_}, {"y", y_}};
    x_ += width;
    line_height_ = std::max(line_height_, height);
    return position;
  }
  json row() {
    new_line();
    json position = {{"h", 1}, {"w", 24}, {"x", 0}, {"y", y_}};
    y_ += 1;
    return position;
  }

 private:
  void new_line() {
    if (x_ > 0) y_ += line_height_;
    x_ = 0;
    line_height_ = 0;
  }
  int x_ = 0;
  int y_ = 0;
  int line_height_ = 0;
};

class DashboardBuilder {
 public:
  explicit DashboardBuilder(const Settings& settings);

  void add_row(std::string_view title);
  void add_panel(const PanelSpec& panel, Scope scope, const std::string& host);

  json& variables() { return variables_; }
  json panels() { return std::move(panels_); }

 private:
  const Settings& settings_;
  std::unique_ptr<TargetBuilder> targets_;
  GridLayout layout_;
  json panels_ = json::array();
  json variables_ = json::array();
  int next_id_ = 1;
};

// The dashboard's first variable: which Grafana datasource of the plugin its panels query.
json datasource_variable(Datasource datasource);
// A variable whose values a query finds (the one of the settings' datasource).
struct VariableQueries {
  std::string graphite;
  std::string graphite_regex;
  std::string elasticsearch;
  std::string prometheus;
};
json query_variable(const Settings& settings, std::string name, std::string label, const VariableQueries& queries,
                    bool multi);
std::string graphite_prefix_text(const Settings& settings);
// The datasource in dashboard uids.
std::string uid_word(Datasource datasource);

// A row per DashboardRow (title + row_suffix), the sensors' panels in it.
void add_sensor_rows(DashboardBuilder& builder, const std::vector<ShownSensor>& sensors, Scope scope,
                     const std::string& host, bool job_samples, std::string_view row_suffix = "");

// The dashboard kinds: each adds its variables, rows and panels, and names the dashboard.
struct DashboardName {
  std::string title;
  std::string uid_text;  // made into the uid by make_dashboard
};
DashboardName add_node_dashboard(DashboardBuilder& builder, const Settings& settings, const std::string& fixed_host);
DashboardName add_job_dashboard(DashboardBuilder& builder, const Settings& settings);
DashboardName add_cluster_dashboard(DashboardBuilder& builder, const Settings& settings);

}  // namespace fructosa::dashboards
