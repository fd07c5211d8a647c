// make-dashboard: Grafana dashboards generated from the sensors' metric catalogs.
//
// Every panel follows from a catalog entry: its unit gives the Grafana unit, its kind whether
// the values are graphed as they are (gauge) or as a rate (counter), its pattern the Graphite
// path (`*` stays a wildcard), the Elasticsearch field or the Prometheus metric name (a regex
// for `*`), and the sensor's DashboardHints the
// row and which entries a given configuration produces (docs/dashboards.md). The sensors'
// intervals also give carbon's storage schemas (storage_schemas()).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "metric.h"
#include "sensor.h"

namespace fructosa::dashboards {

enum class Datasource { graphite, elasticsearch, prometheus };
enum class DashboardKind { node, job, cluster };

std::string_view to_string(Datasource datasource);
std::string_view to_string(DashboardKind kind);

// A sensor the dashboards show, with the options of its [sensor:Name] section.
struct ShownSensor {
  std::string name;
  const Catalog* catalog = nullptr;
  sensors::DashboardHints hints;
  Options options;
  double interval = 1;  // seconds between readings ([sensor:Name] time_interval)
};

struct Settings {
  Datasource datasource = Datasource::graphite;
  std::string prefix;               // Graphite: lmaster's [Graphite] prefix
  std::vector<ShownSensor> sensors;  // what the agents run
  std::size_t top = 10;             // cluster overview: hosts in each top-N panel
};

// Every registered sensor with its default options.
std::vector<ShownSensor> all_sensors_with_defaults();
// The sensors an lagent.conf enables (lagent's own always). Throws ConfigError.
std::vector<ShownSensor> sensors_of_agent_config(const std::string& path);
// lmaster's own sensor (lmaster/master_catalog.h), shown in the cluster overview.
ShownSensor master_sensor();

// One dashboard. `fixed_host`: FrUCToSA's one dashboard per host (node kind only): the host
// variable is a constant.
nlohmann::ordered_json make_dashboard(DashboardKind kind, const Settings& settings,
                                      const std::string& fixed_host = "");

// The Grafana unit id for values of a catalog unit: as they are (gauge) or per second (counter).
std::string_view grafana_unit(Unit unit, Kind kind);
// Whether `id` is one of the Grafana unit ids make-dashboard uses (all exist in Grafana 9-11).
bool is_grafana_unit(std::string_view id);

// The host names of a FrUCToSA HOSTS file: the keys of its [hosts] section, written without
// values (Python configparser's allow_no_value). Throws ConfigError naming file and line.
std::vector<std::string> read_hosts_file(const std::string& path);
// "node07.cluster.example" -> "node07", "10.1.2.3" -> "10_1_2_3": the host component of the
// Graphite paths, as lmaster's Graphite output writes it (common/graphite_name.h).
std::string short_host(std::string_view host);

// Structural problems of a generated dashboard (empty when none): duplicate panel ids,
// overlapping or out-of-grid gridPos, unknown units, targets that reference no catalog entry of
// `sensors` (or lmaster's), datasource not the variable.
std::vector<std::string> validate_dashboard(const nlohmann::ordered_json& dashboard, const Settings& settings);

// The whisper step for a sensor read every `interval` seconds: the smallest whole number of
// seconds that is a multiple of the interval (10 -> 10, 0.2 -> 1, 2.5 -> 5), so that stored
// points are readings exactly one step apart and a counter's rate is exact.
int storage_step(double interval);
// carbon's storage-schemas.conf rules for the shown sensors' paths (node and per-job, under
// `settings.prefix`): one rule per storage step, its first archive at that step, longer and
// coarser archives after it. Text to put above the catch-all rules of storage-schemas.conf.
std::string storage_schemas(const Settings& settings);

// The metric paths in a Graphite target expression (function names, numbers and quoted
// strings left out): "aliasByNode(perSecond(a.b.*), 2)" -> {"a.b.*"}.
std::vector<std::string> graphite_paths(std::string_view target);

}  // namespace fructosa::dashboards
