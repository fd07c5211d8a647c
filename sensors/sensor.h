// The sensor framework. A sensor is one file in sensors/: an option table, a metric catalog,
// a class with sample(), and one FRUCTOSA_REGISTER_SENSOR line. Timers, validation, help
// text, the wire dictionary and HDF5 attributes all follow from that declaration.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "metric.h"

namespace fructosa::sensors {

// Where procfs and sysfs are: tests and `lagent probe --proc-root` point them at fixture trees.
struct Roots {
  std::string proc = "/proc";
  std::string sys = "/sys";
};

// Thrown by a sensor that cannot work on this node (no such hardware, no permission, missing
// file). The agent reports it once, with the reason, and keeps the other sensors running.
class SensorUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Collects what one sample() call reports: the node's sample, and per-job ones later.
class SampleWriter {
 public:
  SampleWriter(std::vector<Sample>& out, std::string_view host, std::string_view sensor, std::int64_t time_ns);

  void set(std::string_view key, double value);
  void label(std::string_view key, std::string_view value);
  // Values and labels after this call go to a new sample attributed to `job`.
  void begin_job(std::uint64_t job);
  // The reading's time: the agent's aligned instant, the same for every sensor due at it.
  std::int64_t time_ns() const { return time_ns_; }

 private:
  Sample& current();
  std::vector<Sample>& out_;
  std::string_view host_;
  std::string_view sensor_;
  std::int64_t time_ns_;
  std::uint64_t job_ = 0;
  bool open_ = false;
};

class Sensor {
 public:
  virtual ~Sensor() = default;
  // Takes one reading. Returns false when the reading only primed a rate sensor (the first
  // of the two readings psutil also needs), so there is nothing to report yet.
  // Throws SensorUnavailable when the sensor cannot work on this node.
  virtual bool sample(SampleWriter& out) = 0;
};

class JobDirectory;

struct SensorContext {
  Roots roots;
  const Options& options;  // the sensor's own option table, parsed
  // The agent's job discovery (jobs.h), shared by every sensor; per-job sensors read it each
  // round. Null only where no one made one (some unit tests): a per-job sensor then throws.
  JobDirectory* jobs = nullptr;
};

// The row of the generated Grafana dashboards (make-dashboard) a sensor's panels go in, in the
// order the rows appear (FrUCToSA's grouping).
enum class DashboardRow : std::uint8_t {
  unassigned,
  global,
  cpu,
  memory,
  disk,
  network,
  sensors,
  jobs,
  energy,
  gpu,
  interconnect,
  filesystem,
  lmaster,  // the monitoring's own health: lagent's link to lmaster, lmaster's counters
};
std::string_view to_string(DashboardRow row);  // the row's title: "CPU", "lmaster health"

// How make-dashboard shows a sensor: the arguments after the class in FRUCTOSA_REGISTER_SENSOR,
// e.g. `.row = DashboardRow::cpu, .per_item_option = "percpu"`. Patterns are catalog patterns.
struct DashboardHints {
  DashboardRow row = DashboardRow::unassigned;
  // A bool option switching between totals (false: the patterns not starting with `*`) and one
  // set per CPU/disk/NIC (true: the patterns starting with `*`); or a list option: one set per
  // item when it lists several distinct items, the plain keys for one (DiskUsage's `path`).
  std::string_view per_item_option = {};
  // Comma-separated patterns that node samples (job 0) carry; empty: every pattern.
  std::string_view node_keys = {};
  // Comma-separated patterns that per-job samples carry; empty: the sensor makes none; "*":
  // every pattern not in node_keys.
  std::string_view job_keys = {};
  // A list option naming the keys the sensor reports (PerfHW's events): those keys are shown,
  // each with the first catalog entry that matches it.
  std::string_view key_list_option = {};
};

struct SensorDefinition {
  std::string name;
  std::string description;
  const OptionTable* options;
  const Catalog* catalog;
  std::function<std::unique_ptr<Sensor>(const SensorContext&)> make;
  DashboardHints dashboard = {};
};

// Every registered sensor, sorted by name.
const std::vector<const SensorDefinition*>& all_sensors();
const SensorDefinition* find_sensor(std::string_view name);

// Options every [sensor:Name] section has besides the sensor's own (time_interval).
const OptionTable& common_sensor_options();
// common_sensor_options() followed by the sensor's own table: what its section accepts.
OptionTable section_options(const SensorDefinition& sensor);

// The catalog's word on `key` of `sensor` (an empty MetricInfo when the catalog is silent).
MetricInfo metric_info(std::string_view sensor, std::string_view key);

struct Registration {
  explicit Registration(SensorDefinition definition);
};

}  // namespace fructosa::sensors

// Registers a sensor class; `Class` is constructed from a `const SensorContext&`. The optional
// arguments after it initialise its DashboardHints (designated initialisers).
#define FRUCTOSA_REGISTER_SENSOR(Name, Description, OptionTableVar, CatalogVar, Class, ...)     \
  static const ::fructosa::sensors::Registration fructosa_registration_##Class{                 \
      ::fructosa::sensors::SensorDefinition{                                                    \
          Name, Description, &(OptionTableVar), &(CatalogVar),                                  \
          [](const ::fructosa::sensors::SensorContext& context)                                 \
              -> std::unique_ptr<::fructosa::sensors::Sensor> {                                 \
            return std::make_unique<Class>(context);                                            \
          },                                                                                    \
          ::fructosa::sensors::DashboardHints{__VA_ARGS__}}}
