#include <algorithm>

#include "sensor.h"

namespace fructosa::sensors {
namespace {

// A function-local static, so registrations from any translation unit's static
// initialisers find it constructed.
std::vector<const SensorDefinition*>& registry() {
  static std::vector<const SensorDefinition*> sensors;
  return sensors;
}

}  // namespace

Registration::Registration(SensorDefinition definition) {
  auto& sensors = registry();
  static std::vector<std::unique_ptr<SensorDefinition>> storage;
  storage.push_back(std::make_unique<SensorDefinition>(std::move(definition)));
  auto position = std::lower_bound(sensors.begin(), sensors.end(), storage.back().get(),
                                   [](const auto* a, const auto* b) { return a->name < b->name; });
  sensors.insert(position, storage.back().get());
}

const std::vector<const SensorDefinition*>& all_sensors() { return registry(); }

std::string_view to_string(DashboardRow row) {
  switch (row) {
    case DashboardRow::unassigned: return "Other";
    case DashboardRow::global: return "Global";
    case DashboardRow::cpu: return "CPU";
    case DashboardRow::memory: return "Memory";
    case DashboardRow::disk: return "Disk";
    case DashboardRow::network: return "Network";
    case DashboardRow::sensors: return "Sensors";
    case DashboardRow::jobs: return "Jobs";
    case DashboardRow::energy: return "Energy";
    case DashboardRow::gpu: return "GPU";
    case DashboardRow::interconnect: return "Interconnect";
    case DashboardRow::filesystem: return "Filesystem";
    case DashboardRow::lmaster: return "lmaster health";
  }
  return "Other";
}

const SensorDefinition* find_sensor(std::string_view name) {
  for (const auto* sensor : registry())
    if (sensor->name == name) return sensor;
  return nullptr;
}

const OptionTable& common_sensor_options() {
  static const OptionTable table{
      {.name = "time_interval",
       .type = OptionType::real,
       .default_value = "1",
       .help = "seconds between readings; readings fall on multiples of it (wall clock)",
       .min = 0.01,
       .max = 86400},
  };
  return table;
}

OptionTable section_options(const SensorDefinition& sensor) {
  OptionTable table = common_sensor_options();
  table.insert(table.end(), sensor.options->begin(), sensor.options->end());
  return table;
}

MetricInfo metric_info(std::string_view sensor, std::string_view key) {
  const SensorDefinition* definition = find_sensor(sensor);
  const CatalogEntry* entry = definition ? definition->catalog->find(key) : nullptr;
  if (!entry) return {};
  return MetricInfo{std::string(to_string(entry->unit)), entry->kind, entry->description};
}

SampleWriter::SampleWriter(std::vector<Sample>& out, std::string_view host, std::string_view sensor,
                           std::int64_t time_ns)
    : out_(out), host_(host), sensor_(sensor), time_ns_(time_ns) {}

Sample& SampleWriter::current() {
  if (!open_) {
    Sample& sample = out_.emplace_back();
    sample.host = host_;
    sample.sensor = sensor_;
    sample.time_ns = time_ns_;
    sample.job = job_;
    open_ = true;
  }
  return out_.back();
}

void SampleWriter::set(std::string_view key, double value) {
  current().metrics.push_back({std::string(key), value});
}

void SampleWriter::label(std::string_view key, std::string_view value) {
  current().labels.push_back({std::string(key), std::string(value)});
}

void SampleWriter::begin_job(std::uint64_t job) {
  job_ = job;
  open_ = false;
}

}  // namespace fructosa::sensors
