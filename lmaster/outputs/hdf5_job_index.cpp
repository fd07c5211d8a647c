// The job index declared (and described) in hdf5_job_index.h: tallying job samples, and writing
// them as /.jobs in the format docs/hdf5.md gives ("The job index").
#include "hdf5_job_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "hdf5_output.h"
#include "hdf5_support.h"

namespace fructosa::master::hdf5 {

namespace {

constexpr double kNoNumber = std::numeric_limits<double>::quiet_NaN();
constexpr std::size_t kNone = static_cast<std::size_t>(-1);
// Rows per chunk of the index's datasets: the index of a few jobs stays small in the
// (uncompressed) file being written; thousands of (job, host)s take a few chunks.
constexpr hsize_t kIndexChunkRows = 256;

// A sensor's group is linked as its table is, but a sensor named like one of the datasets
// beside it gets its first letter escaped (as a key named `time` does in a table).
std::string sensor_link(const std::string& sensor) {
  std::string link = hdf5_link_name(sensor);
  for (const char* taken : {"job", "host", "first", "last", "rows"})
    if (link == taken)
      return fmt::format("%{:02X}{}", static_cast<unsigned char>(link[0]), link.substr(1));
  return link;
}

void ensure_text_attribute(const std::string& path, hid_t object, const char* name,
                           const std::string& value, const std::string& where) {
  if (H5Aexists(object, name) <= 0) write_text_attribute(path, object, name, value, where);
}

void write_int_attribute(const std::string& path, hid_t object, const char* name, int value,
                         const std::string& where) {
  Handle scalar = check(path, H5Screate(H5S_SCALAR), H5Sclose, "cannot make a dataspace");
  write_attribute(path, object, name, H5T_NATIVE_INT, scalar.get(), &value, where);
}

// The dataset `link` of `group`; created when missing (chunked, unlimited, reading `fill` where
// never written).
Handle open_or_create_dataset(const std::string& path, hid_t group, const std::string& link,
                              hid_t file_type, hid_t fill_type, const void* fill,
                              const std::string& where) {
  const htri_t exists = H5Lexists(group, link.c_str(), H5P_DEFAULT);
  if (exists < 0) fail(path, "cannot look up " + where);
  if (exists > 0)
    return check(path, H5Dopen2(group, link.c_str(), H5P_DEFAULT), H5Dclose,
                 "cannot open " + where);
  return create_dataset(path, group, link, file_type, fill_type, fill, kIndexChunkRows, where);
}

// `values` as the whole of the dataset `link`: every write rewrites the index in place (outside
// SWMR, where no reader can look meanwhile); its rows only grow within a file.
template <typename T>
void put_numbers(const std::string& path, hid_t group, const std::string& link, hid_t file_type,
                 hid_t memory_type, const std::vector<T>& values, T fill,
                 const std::string& where) {
  const std::string dataset_where = where + "/" + link;
  Handle dataset =
      open_or_create_dataset(path, group, link, file_type, memory_type, &fill, dataset_where);
  if (!values.empty())
    append(path, dataset.get(), memory_type, values.data(), 0, values.size(), dataset_where);
}

// Fixed-length strings 16, 32, 64... bytes wide, as the tables' labels; a dataset too narrow for
// a value is replaced by a wider one (its rows are rewritten anyway). Returns the dataset.
Handle put_strings(const std::string& path, hid_t group, const std::string& link,
                   const std::vector<std::string_view>& values, const std::string& where) {
  const std::string dataset_where = where + "/" + link;
  std::size_t longest = 0;
  for (const auto value : values) longest = std::max(longest, value.size());
  std::size_t width = label_width(longest);
  Handle dataset;
  const htri_t exists = H5Lexists(group, link.c_str(), H5P_DEFAULT);
  if (exists < 0) fail(path, "cannot look up " + dataset_where);
  if (exists > 0) {
    dataset = check(path, H5Dopen2(group, link.c_str(), H5P_DEFAULT), H5Dclose,
                    "cannot open " + dataset_where);
    Handle type = check(path, H5Dget_type(dataset.get()), H5Tclose, "cannot read " + dataset_where);
    const std::size_t existing = H5Tget_size(type.get());
    if (existing >= width) {
      width = existing;
    } else {
      dataset.reset();
      check(path, H5Ldelete(group, link.c_str(), H5P_DEFAULT), "cannot replace " + dataset_where);
    }
  }
  Handle type = text_type(width);
  if (!type) fail(path, "cannot make a string type for " + dataset_where);
  // No fill value: rows never written read as zero bytes, that is "".
  if (!dataset)
    dataset = create_dataset(path, group, link, type.get(), type.get(), nullptr, kIndexChunkRows,
                             dataset_where);
  if (!values.empty()) {
    std::vector<char> rows(values.size() * width, '\0');
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!values[i].empty())  // an empty view's data() may be null, which memcpy must not get
        std::memcpy(rows.data() + i * width, values[i].data(), values[i].size());
    append(path, dataset.get(), type.get(), rows.data(), 0, values.size(), dataset_where);
  }
  return dataset;
}

// metrics/<key>/{count,max,sum,last,growth} of one sensor; `tallies` by row (nullptr: no rows).
void write_metric(const std::string& path, hid_t metrics, IndexedSensor& sensor, std::size_t key,
                  const std::vector<const SensorTally*>& tallies, const MetricInfoStore& infos,
                  const std::string& metrics_where) {
  const std::string& name = sensor.keys[key];
  const std::string link = hdf5_link_name(name);
  const std::string where = metrics_where + "/" + link;
  Handle group = open_or_create_group(path, metrics, link, where);
  ensure_text_attribute(path, group.get(), "key", name, where);
  if (!sensor.kinds_written[key]) {
    // "" until the catalog says (as a table column's kind); rewritten once it does.
    const auto info = infos.find(sensor.name, name);
    if (info || H5Aexists(group.get(), "kind") <= 0)
      write_text_attribute(path, group.get(), "kind",
                           info ? std::string(to_string(info->kind)) : "", where);
    sensor.kinds_written[key] = info.has_value();
  }
  const std::size_t rows = tallies.size();
  const MetricTally none;
  std::vector<std::uint64_t> count(rows);
  std::vector<double> max(rows), sum(rows), last(rows), growth(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    const MetricTally& tally =
        tallies[i] && key < tallies[i]->metrics.size() ? tallies[i]->metrics[key] : none;
    count[i] = tally.count;
    max[i] = tally.max;
    sum[i] = tally.sum;
    last[i] = tally.last();
    growth[i] = tally.growth;
  }
  const hid_t id = group.get();
  put_numbers<std::uint64_t>(path, id, "count", H5T_STD_U64LE, H5T_NATIVE_UINT64, count, 0, where);
  put_numbers(path, id, "max", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, max, kNoNumber, where);
  put_numbers(path, id, "sum", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, sum, 0.0, where);
  put_numbers(path, id, "last", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, last, kNoNumber, where);
  put_numbers(path, id, "growth", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, growth, 0.0, where);
}

}  // namespace

// --- tallying ----------------------------------------------------------------------------------

std::size_t Names::number(std::string_view name) {
  auto found = numbers_.find(name);
  if (found != numbers_.end()) return found->second;
  numbers_.emplace(std::string(name), names_.size());
  names_.emplace_back(name);
  return names_.size() - 1;
}

void MetricTally::start_file() {
  count = 0;
  max = kNoNumber;
  sum = growth = 0;
}

std::size_t IndexedSensor::key_number(const std::string& key) {
  const std::size_t number = keys.number(key);
  keys_in_file.resize(keys.size(), 0);
  kinds_written.resize(keys.size(), 0);
  return number;
}

std::size_t IndexedSensor::label_number(const std::string& label) {
  const std::size_t number = labels.number(label);
  labels_in_file.resize(labels.size(), 0);
  return number;
}

JobHostTally& JobIndex::entry(std::uint64_t job, const std::string& host) {
  if (last_entry_ < entries_.size()) {
    JobHostTally& last = entries_[last_entry_];
    if (last.job == job && last.host == host) return last;
  }
  auto found = numbers_.find(std::pair<std::uint64_t, std::string_view>(job, host));
  if (found == numbers_.end()) {
    found = numbers_.emplace(std::pair(job, host), entries_.size()).first;
    JobHostTally& added = entries_.emplace_back();
    added.job = job;
    added.host = host;
  }
  last_entry_ = found->second;
  return entries_[last_entry_];
}

std::size_t JobIndex::number_sensor(const std::string& sensor) {
  const std::size_t number = sensor_names_.number(sensor);
  if (number == sensors_.size()) {
    IndexedSensor& added = sensors_.emplace_back();
    added.name = sensor;
    added.link = sensor_link(sensor);
  }
  return number;
}

JobRow JobIndex::add_row(const Sample& sample, std::size_t& sensor_number) {
  JobHostTally& host = entry(sample.job, sample.host);
  const std::int64_t time = sample.time_ns;
  if (host.rows++ == 0) {
    order_.push_back(last_entry_);
    host.first = host.last = time;
  } else {
    host.first = std::min(host.first, time);
    host.last = std::max(host.last, time);
  }
  if (sensor_number == kUnnumbered) sensor_number = number_sensor(sample.sensor);
  const std::size_t number = sensor_number;
  IndexedSensor& sensor = sensors_[number];
  sensor.in_file = true;
  if (host.sensors.size() <= number) host.sensors.resize(sensors_.size());
  SensorTally& tally = host.sensors[number];
  if (tally.rows++ == 0) {
    tally.first = tally.last = time;
  } else {
    tally.first = std::min(tally.first, time);
    tally.last = std::max(tally.last, time);
  }
  stale_ = true;
  return {&tally, &sensor};
}

// Out of line: the loop that buffers every sample's values stays small for the node's samples
// (most of them).
void JobIndex::add_metric(const JobRow& row, std::size_t& key, const std::string& name,
                          double value) {
  if (key == kUnnumbered) key = row.sensor->key_number(name);
  row.sensor->keys_in_file[key] = 1;
  auto& metrics = row.tally->metrics;
  if (metrics.size() <= key) metrics.resize(row.sensor->keys.size());
  metrics[key].add(value);
}

void JobIndex::add_label(const JobRow& row, std::size_t& key, const Label& label) {
  if (key == kUnnumbered) key = row.sensor->label_number(label.key);
  row.sensor->labels_in_file[key] = 1;
  if (label.value.empty()) return;
  auto& labels = row.tally->labels;
  if (labels.size() <= key) labels.resize(row.sensor->labels.size());
  labels[key] = label.value;  // reuses the string's room: no allocation once it fits
}

void JobIndex::start_file() {
  std::vector<JobHostTally> kept;
  for (auto& host : entries_) {
    if (host.rows == 0) continue;  // no rows during the whole file that ended: forgotten
    host.first = host.last = 0;
    host.rows = 0;
    for (auto& sensor : host.sensors) {
      sensor.first = sensor.last = 0;
      sensor.rows = 0;
      for (auto& metric : sensor.metrics) metric.start_file();
      sensor.labels.clear();
    }
    kept.push_back(std::move(host));
  }
  entries_ = std::move(kept);
  numbers_.clear();
  for (std::size_t i = 0; i < entries_.size(); ++i)
    numbers_.emplace(std::pair(entries_[i].job, entries_[i].host), i);
  last_entry_ = kNone;
  order_.clear();
  for (auto& sensor : sensors_) {
    sensor.in_file = false;
    std::fill(sensor.keys_in_file.begin(), sensor.keys_in_file.end(), 0);
    std::fill(sensor.labels_in_file.begin(), sensor.labels_in_file.end(), 0);
    std::fill(sensor.kinds_written.begin(), sensor.kinds_written.end(), 0);
  }
  stale_ = false;
}

// --- writing -----------------------------------------------------------------------------------

void JobIndex::write(const std::string& path, hid_t file, bool complete,
                     const MetricInfoStore& infos) {
  const std::string where = std::string("/") + kJobIndexLink;
  Handle index = open_or_create_group(path, file, kJobIndexLink, where);
  ensure_text_attribute(path, index.get(), "index", "fructosa job index", where);
  write_int_attribute(path, index.get(), "index_version", kJobIndexVersion, where);
  write_int_attribute(path, index.get(), "complete", complete ? 1 : 0, where);
  const std::size_t rows = order_.size();
  std::vector<std::uint64_t> numbers(rows);
  std::vector<std::int64_t> first(rows), last(rows);
  std::vector<std::string_view> hosts(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    const JobHostTally& host = entries_[order_[i]];
    numbers[i] = host.job;
    hosts[i] = host.host;
    first[i] = host.first;
    last[i] = host.last;
  }
  const hid_t id = index.get();
  put_numbers<std::uint64_t>(path, id, "job", H5T_STD_U64LE, H5T_NATIVE_UINT64, numbers, 0, where);
  put_strings(path, id, "host", hosts, where);
  put_numbers<std::int64_t>(path, id, "first", H5T_STD_I64LE, H5T_NATIVE_INT64, first, 0, where);
  put_numbers<std::int64_t>(path, id, "last", H5T_STD_I64LE, H5T_NATIVE_INT64, last, 0, where);
  for (std::size_t i = 0; i < rows; ++i) numbers[i] = entries_[order_[i]].rows;
  put_numbers<std::uint64_t>(path, id, "rows", H5T_STD_U64LE, H5T_NATIVE_UINT64, numbers, 0, where);
  for (std::size_t number = 0; number < sensors_.size(); ++number)
    if (sensors_[number].in_file) write_sensor(path, id, sensors_[number], number, infos);
  stale_ = false;
}

// <sensor>/{first,last,rows}, metrics/<key>/... and labels/<key> of one sensor.
void JobIndex::write_sensor(const std::string& path, hid_t index, IndexedSensor& sensor,
                            std::size_t number, const MetricInfoStore& infos) {
  const std::string where = std::string("/") + kJobIndexLink + "/" + sensor.link;
  Handle group = open_or_create_group(path, index, sensor.link, where);
  ensure_text_attribute(path, group.get(), "sensor", sensor.name, where);
  const std::size_t rows = order_.size();
  std::vector<const SensorTally*> tallies(rows, nullptr);
  std::vector<std::uint64_t> counts(rows);
  std::vector<std::int64_t> first(rows), last(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    const JobHostTally& host = entries_[order_[i]];
    if (number >= host.sensors.size()) continue;
    const SensorTally& tally = host.sensors[number];
    tallies[i] = &tally;
    counts[i] = tally.rows;
    first[i] = tally.first;
    last[i] = tally.last;
  }
  const hid_t id = group.get();
  put_numbers<std::int64_t>(path, id, "first", H5T_STD_I64LE, H5T_NATIVE_INT64, first, 0, where);
  put_numbers<std::int64_t>(path, id, "last", H5T_STD_I64LE, H5T_NATIVE_INT64, last, 0, where);
  put_numbers<std::uint64_t>(path, id, "rows", H5T_STD_U64LE, H5T_NATIVE_UINT64, counts, 0, where);
  const auto& keys = sensor.keys_in_file;
  if (std::find(keys.begin(), keys.end(), 1) != keys.end()) {
    Handle metrics = open_or_create_group(path, id, "metrics", where + "/metrics");
    for (std::size_t key = 0; key < keys.size(); ++key)
      if (keys[key])
        write_metric(path, metrics.get(), sensor, key, tallies, infos, where + "/metrics");
  }
  const auto& labels = sensor.labels_in_file;
  if (std::find(labels.begin(), labels.end(), 1) == labels.end()) return;
  const std::string labels_where = where + "/labels";
  Handle labels_group = open_or_create_group(path, id, "labels", labels_where);
  std::vector<std::string_view> values(rows);
  for (std::size_t key = 0; key < labels.size(); ++key) {
    if (!labels[key]) continue;
    for (std::size_t i = 0; i < rows; ++i)
      values[i] = tallies[i] && key < tallies[i]->labels.size() ? tallies[i]->labels[key]
                                                                : std::string_view();
    const std::string link = hdf5_link_name(sensor.labels[key]);
    Handle dataset = put_strings(path, labels_group.get(), link, values, labels_where);
    ensure_text_attribute(path, dataset.get(), "key", sensor.labels[key],
                          labels_where + "/" + link);
  }
}

}  // namespace fructosa::master::hdf5
