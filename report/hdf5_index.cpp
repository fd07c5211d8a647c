// hdf5_index.h: the job index read whole (it is small: a row per job and host of the file).
#include "hdf5_index.h"

#include <algorithm>

#include "hdf5_source.h"

namespace fructosa::report::hdf5_read {

namespace {

constexpr const char* kIndexName = "fructosa job index";
constexpr long long kIndexVersion = 1;

// A whole dataset of the index, which must have `rows` rows.
template <typename T>
std::vector<T> numbers(const OpenFile& file, hid_t group, const std::string& link,
                       const std::string& where, hid_t type, hsize_t rows) {
  if (!has_link(group, link.c_str())) fail(file.path, "job index: no " + where);
  const NumberColumn column = open_numbers(file, group, link, where);
  if (column.rows != rows)
    fail(file.path, "job index: " + where + " has " + std::to_string(column.rows) + " rows, not " +
                        std::to_string(rows));
  std::vector<T> values(rows);
  column.read_block(file, type, sizeof(T), 0, rows, values.data());
  return values;
}

std::vector<std::string> texts(const OpenFile& file, hid_t group, const std::string& link,
                               const std::string& where, hsize_t rows) {
  if (!has_link(group, link.c_str())) fail(file.path, "job index: no " + where);
  const TextColumn column = open_text(file, group, link, where);
  if (column.rows != rows)
    fail(file.path, "job index: " + where + " has " + std::to_string(column.rows) + " rows, not " +
                        std::to_string(rows));
  std::vector<std::string> values(rows);
  column.read(file, 0, rows, [&](hsize_t row, std::string_view text) { values[row] = text; });
  return values;
}

// A group's real name: its attribute `attribute`, else its link unescaped.
std::string real_name(hid_t object, const char* attribute, const std::string& link) {
  return text_attribute(object, attribute).value_or(hdf5_unescape(link));
}

JobIndex::Sensor read_sensor(const OpenFile& file, hid_t group, const std::string& link,
                             const std::string& where, hsize_t rows, bool metrics) {
  JobIndex::Sensor sensor;
  sensor.link = link;
  sensor.name = real_name(group, "sensor", link);
  sensor.first = numbers<std::int64_t>(file, group, "first", where + "/first", H5T_NATIVE_INT64, rows);
  sensor.last = numbers<std::int64_t>(file, group, "last", where + "/last", H5T_NATIVE_INT64, rows);
  sensor.rows = numbers<std::uint64_t>(file, group, "rows", where + "/rows", H5T_NATIVE_UINT64, rows);
  if (Handle labels = open_object(file, group, "labels", H5I_GROUP, where + "/labels")) {
    for (const auto& key_link : hard_links(file, labels.get(), where + "/labels")) {
      const std::string key_where = where + "/labels/" + key_link;
      Handle dataset = open_object(file, labels.get(), key_link, H5I_DATASET, key_where);
      if (!dataset) continue;
      JobIndex::Label label;
      label.key = real_name(dataset.get(), "key", key_link);
      dataset.reset();
      label.last = texts(file, labels.get(), key_link, key_where, rows);
      sensor.labels.push_back(std::move(label));
    }
  }
  if (!metrics) return sensor;
  if (Handle keys = open_object(file, group, "metrics", H5I_GROUP, where + "/metrics")) {
    for (const auto& key_link : hard_links(file, keys.get(), where + "/metrics")) {
      const std::string key_where = where + "/metrics/" + key_link;
      Handle key = open_object(file, keys.get(), key_link, H5I_GROUP, key_where);
      if (!key) continue;
      JobIndex::Metric metric;
      metric.key = real_name(key.get(), "key", key_link);
      const hid_t at = key.get();
      metric.count = numbers<std::uint64_t>(file, at, "count", key_where + "/count", H5T_NATIVE_UINT64, rows);
      metric.max = numbers<double>(file, at, "max", key_where + "/max", H5T_NATIVE_DOUBLE, rows);
      metric.sum = numbers<double>(file, at, "sum", key_where + "/sum", H5T_NATIVE_DOUBLE, rows);
      metric.last = numbers<double>(file, at, "last", key_where + "/last", H5T_NATIVE_DOUBLE, rows);
      metric.growth = numbers<double>(file, at, "growth", key_where + "/growth", H5T_NATIVE_DOUBLE, rows);
      sensor.metrics.push_back(std::move(metric));
    }
  }
  return sensor;
}

}  // namespace

std::vector<std::size_t> JobIndex::rows_of(std::uint64_t id) const {
  std::vector<std::size_t> found;
  for (std::size_t i = 0; i < job.size(); ++i)
    if (job[i] == id) found.push_back(i);
  return found;
}

std::optional<JobIndex> read_job_index(const OpenFile& file, bool metrics) {
  const hid_t root = file.file.get();
  if (!file.closed) return std::nullopt;  // complete only once closed: a writer may rewrite it
  const std::string where = std::string("/") + kJobIndexLink;
  Handle group = open_object(file, root, kJobIndexLink, H5I_GROUP, where);
  if (!group || text_attribute(group.get(), "index") != kIndexName ||
      integer_attribute(group.get(), "index_version") != kIndexVersion ||
      integer_attribute(group.get(), "complete") != 1)
    return std::nullopt;
  const hid_t at = group.get();
  if (!has_link(at, "job")) fail(file.path, "job index: no " + where + "/job");
  const hsize_t rows = open_numbers(file, at, "job", where + "/job").rows;
  JobIndex index;
  index.job = numbers<std::uint64_t>(file, at, "job", where + "/job", H5T_NATIVE_UINT64, rows);
  index.host = texts(file, at, "host", where + "/host", rows);
  index.first = numbers<std::int64_t>(file, at, "first", where + "/first", H5T_NATIVE_INT64, rows);
  index.last = numbers<std::int64_t>(file, at, "last", where + "/last", H5T_NATIVE_INT64, rows);
  index.rows = numbers<std::uint64_t>(file, at, "rows", where + "/rows", H5T_NATIVE_UINT64, rows);
  for (const auto& link : hard_links(file, at, where)) {
    const std::string sensor_where = where + "/" + link;
    Handle sensor = open_object(file, at, link, H5I_GROUP, sensor_where);
    if (sensor) index.sensors.push_back(read_sensor(file, sensor.get(), link, sensor_where, rows, metrics));
  }
  return index;
}

}  // namespace fructosa::report::hdf5_read
