// hdf5_job_rows.h: a file's rows of a job and of its nodes, and HostData from them.
#include "hdf5_job_rows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "hdf5_source.h"

namespace fructosa::report::hdf5_read {

namespace {

bool is_node_sensor(const std::string& sensor) {
  const auto& sensors = node_sensors();
  return std::find(sensors.begin(), sensors.end(), sensor) != sensors.end();
}

// Whether an object's `jobs` attribute names `id`; true without one.
bool may_hold_job(hid_t object, std::uint64_t id) {
  const auto jobs = jobs_attribute(object);
  return !jobs || std::binary_search(jobs->begin(), jobs->end(), id);
}

// The rows of one table wanted: in row order, each with its time, host (index into the table's
// RowKeys::hosts()) and whether it is a node row.
struct Wanted {
  std::vector<hsize_t> rows;
  std::vector<std::int64_t> times;
  std::vector<std::uint32_t> hosts;
  std::vector<char> node;
  void clear() { *this = Wanted(); }
};

// The metric columns of a table (every dataset but time, job and host): link -> real key.
std::vector<std::pair<std::string, std::string>> metric_links(const OpenFile& file, const Table& table) {
  std::vector<std::pair<std::string, std::string>> links;
  for (const auto& link : hard_links(file, table.group.get(), table.where)) {
    if (link == "time" || link == "job" || link == "host") continue;
    Handle dataset = open_object(file, table.group.get(), link, H5I_DATASET, table.where + "/" + link);
    if (!dataset) continue;  // the labels group
    links.emplace_back(link, text_attribute(dataset.get(), "key").value_or(hdf5_unescape(link)));
  }
  return links;
}

// Reads one table's rows of the job and of its nodes, appending them to `into`.
void read_table(const OpenFile& file, const Table& table, const FileRequest& request, bool want_job,
                bool want_node, JobRows& into) {
  const std::uint64_t id = request.id;
  const IndexedJob* indexed = request.indexed;
  RowKeys keys(file, table);
  // Times wanted, where they are known before reading (a complete index, node rows): the rows
  // are looked for there only, by their times (rows are nearly in time order).
  std::int64_t low = std::numeric_limits<std::int64_t>::max();
  std::int64_t high = std::numeric_limits<std::int64_t>::min();
  bool bounded = !want_job || indexed;
  auto widen = [&](std::int64_t first, std::int64_t last) {
    low = std::min(low, first);
    high = std::max(high, last);
  };
  if (want_job && indexed)
    for (const auto& [host, seen] : indexed->hosts)
      if (table.host_column || host == table.host)
        if (auto sensor = seen.sensors.find(table.sensor); sensor != seen.sensors.end())
          widen(sensor->second.span.first, sensor->second.span.last);
  if (want_node)
    for (const auto& [host, span] : request.node_spans)
      if (table.host_column || host == table.host) widen(span.first - kNodeSlackNs, span.last + kNodeSlackNs);
  if (bounded && low > high) return;
  hsize_t begin = 0, end = keys.rows();
  if (bounded) {
    begin = first_row_at(file, keys.time(), keys.rows(), low - kDisorderNs);
    end = first_row_at(file, keys.time(), keys.rows(), high + kDisorderNs + 1);
  }
  // Per host index of the table: its node span (resolved when first seen; null: not wanted).
  std::vector<const Span*> node_span;
  std::vector<char> resolved;
  auto node_span_of = [&](std::uint32_t host) -> const Span* {
    if (host >= resolved.size()) {
      resolved.resize(host + 1, 0);
      node_span.resize(host + 1, nullptr);
    }
    if (!resolved[host]) {
      auto found = request.node_spans.find(keys.hosts()[host]);
      node_span[host] = found == request.node_spans.end() ? nullptr : &found->second;
      resolved[host] = 1;
    }
    return node_span[host];
  };
  Wanted wanted;
  auto scan = [&](hsize_t from, hsize_t to) {
    keys.each([&](std::uint64_t job) { return (want_job && job == id) || (want_node && job == 0); },
              [&](hsize_t row, std::int64_t time, std::uint64_t job, std::uint32_t host) {
                const bool node = job == 0;
                if (node) {
                  const Span* span = node_span_of(host);
                  if (!span || time < span->first - kNodeSlackNs || time > span->last + kNodeSlackNs) return;
                }
                wanted.rows.push_back(row);
                wanted.times.push_back(time);
                wanted.hosts.push_back(host);
                wanted.node.push_back(node);
              },
              from, to);
  };
  scan(begin, end);
  if (want_job && indexed && (begin > 0 || end < keys.rows())) {
    // The index counts the job's rows: fewer found by time means rows far out of order.
    std::map<std::string, std::uint64_t> found;
    for (std::size_t i = 0; i < wanted.rows.size(); ++i)
      if (!wanted.node[i]) ++found[keys.hosts()[wanted.hosts[i]]];
    bool short_of_rows = false;
    for (const auto& [host, seen] : indexed->hosts)
      if (table.host_column || host == table.host)
        if (auto sensor = seen.sensors.find(table.sensor); sensor != seen.sensors.end())
          short_of_rows |= found[host] < sensor->second.rows;
    if (short_of_rows) {
      wanted.clear();
      scan(0, keys.rows());
    }
  }
  if (wanted.rows.empty()) return;

  // The groups of rows: a host's job rows, a host's node rows; each appended to its SensorRows.
  std::vector<std::pair<std::uint32_t, bool>> group_keys;  // (host index, node)
  std::vector<std::vector<std::size_t>> members;           // indexes into `wanted`
  std::vector<std::uint32_t> group_of(wanted.rows.size());
  std::vector<std::uint32_t> number;                       // by host index * 2 + node; 0: none yet
  for (std::size_t i = 0; i < wanted.rows.size(); ++i) {
    const std::size_t slot = std::size_t{wanted.hosts[i]} * 2 + (wanted.node[i] ? 1 : 0);
    if (slot >= number.size()) number.resize(slot + 1, 0);
    if (number[slot] == 0) {
      group_keys.emplace_back(wanted.hosts[i], wanted.node[i] != 0);
      members.emplace_back();
      number[slot] = static_cast<std::uint32_t>(group_keys.size());
    }
    group_of[i] = number[slot] - 1;
    members[group_of[i]].push_back(i);
  }
  std::vector<SensorRows*> targets;
  std::vector<std::size_t> before;  // each target's rows before this table's
  for (std::size_t g = 0; g < group_keys.size(); ++g) {
    const auto [host, node] = group_keys[g];
    SensorRows& target = (node ? into.node : into.job)[keys.hosts()[host]][table.sensor];
    before.push_back(target.time.size());
    target.time.reserve(before.back() + members[g].size());
    for (std::size_t i : members[g]) target.time.push_back(wanted.times[i]);
    targets.push_back(&target);
  }
  for (const auto& [link, key] : metric_links(file, table)) {
    const NumberColumn column = open_numbers(file, table.group.get(), link, table.where + "/" + link);
    const std::vector<double> values = pick_numbers(file, column, wanted.rows);
    for (std::size_t g = 0; g < group_keys.size(); ++g) {
      // A column without a number in these rows is not made for them (NaN if it has other
      // rows): the job's columns in the node rows of the same table, and the other way round.
      const auto& rows = members[g];
      if (std::all_of(rows.begin(), rows.end(), [&](std::size_t i) { return std::isnan(values[i]); })) continue;
      std::vector<double>& into_column = targets[g]->column(key, before[g]);
      for (std::size_t i : rows) into_column.push_back(values[i]);
    }
  }
  for (SensorRows* target : targets) target->fill();
  // Labels: the job's from a complete index; else (and the nodes') the latest non-empty value
  // of each host's rows, read from the end (a node's: at or before the job's last sample there).
  if (want_job && indexed)
    for (std::size_t g = 0; g < group_keys.size(); ++g) {
      if (group_keys[g].second) continue;
      const auto host = indexed->hosts.find(keys.hosts()[group_keys[g].first]);
      if (host == indexed->hosts.end()) continue;
      if (auto sensor = host->second.sensors.find(table.sensor); sensor != host->second.sensors.end())
        for (const auto& [key, value] : sensor->second.labels)
          keep_latest(targets[g]->labels[key], sensor->second.span.last, value);
    }
  Handle labels = open_object(file, table.group.get(), "labels", H5I_GROUP, table.where + "/labels");
  if (!labels) return;
  // The rows whose labels count, in row order, each with its group.
  std::vector<hsize_t> label_rows;
  std::vector<std::int64_t> label_times;
  std::vector<std::uint32_t> label_group;
  for (std::size_t i = 0; i < wanted.rows.size(); ++i) {
    const bool node = wanted.node[i] != 0;
    if (!node && indexed) continue;
    if (node && wanted.times[i] > node_span_of(wanted.hosts[i])->last) continue;
    label_rows.push_back(wanted.rows[i]);
    label_times.push_back(wanted.times[i]);
    label_group.push_back(group_of[i]);
  }
  if (label_rows.empty()) return;
  for (const auto& link : hard_links(file, labels.get(), table.where + "/labels")) {
    const std::string where = table.where + "/labels/" + link;
    Handle dataset = open_object(file, labels.get(), link, H5I_DATASET, where);
    if (!dataset) continue;
    const std::string key = text_attribute(dataset.get(), "key").value_or(hdf5_unescape(link));
    dataset.reset();
    const TextColumn column = open_text(file, labels.get(), link, where);
    const auto latest = latest_texts(file, column, label_rows, label_group, group_keys.size());
    for (std::size_t g = 0; g < group_keys.size(); ++g)
      if (latest[g]) keep_latest(targets[g]->labels[key], label_times[latest[g]->first], latest[g]->second);
  }
}

// The series of one sensor of a host from its rows of every file: one time axis in time order,
// each column with a number, and its labels. Node series (`cut`) keep only the rows from the last
// at or before the span's first to the first at or after its last.
void add_sensor(const std::string& sensor, SensorRows& rows, const Span* cut, std::map<std::string, Series>& metrics,
                std::map<std::string, std::string>& labels) {
  std::vector<std::int64_t> times = std::move(rows.time);
  const std::size_t count = times.size();
  // Time order (rows are stored in the order lmaster received them).
  std::vector<std::size_t> order;
  const bool sorted = std::is_sorted(times.begin(), times.end());
  if (!sorted) {
    order.resize(count);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return times[a] < times[b]; });
    std::vector<std::int64_t> in_order(count);
    for (std::size_t i = 0; i < count; ++i) in_order[i] = times[order[i]];
    times.swap(in_order);
  }
  std::size_t from = 0, to = count;  // the rows kept
  if (cut && count > 0) {
    auto first = std::upper_bound(times.begin(), times.end(), cut->first);
    from = first == times.begin() ? 0 : static_cast<std::size_t>(first - times.begin()) - 1;
    auto last = std::lower_bound(times.begin(), times.end(), cut->last);
    to = last == times.end() ? count : static_cast<std::size_t>(last - times.begin()) + 1;
  }
  auto keep = [&](auto& values) {
    if (from > 0 || to < count) {
      std::move(values.begin() + static_cast<std::ptrdiff_t>(from), values.begin() + static_cast<std::ptrdiff_t>(to),
                values.begin());
      values.resize(to - from);
      values.shrink_to_fit();
    }
  };
  std::vector<std::pair<std::string, std::vector<double>>> kept;
  for (auto& [key, values] : rows.columns) {
    if (!sorted) {
      std::vector<double> in_order(count);
      for (std::size_t i = 0; i < count; ++i) in_order[i] = values[order[i]];
      values.swap(in_order);
    }
    keep(values);
    if (std::all_of(values.begin(), values.end(), [](double v) { return std::isnan(v); })) {
      std::vector<double>().swap(values);
      continue;
    }
    kept.emplace_back(sensor + "." + key, std::move(values));
  }
  rows.columns.clear();
  keep(times);
  const Times shared(std::move(times));  // every series of the sensor holds these times
  for (auto& [name, values] : kept) metrics.emplace(std::move(name), Series{shared, std::move(values)});
  for (const auto& [key, value] : rows.labels)
    if (value) labels.emplace(sensor + "." + key, value->second);
}

}  // namespace

void keep_latest(Latest& latest, std::int64_t time, std::string_view value) {
  if (value.empty() || (latest && time < latest->first)) return;
  latest.emplace(time, std::string(value));
}

void SensorRows::expect(std::size_t count) {
  expected_ = std::max(expected_, time.size()) + count;
  time.reserve(expected_);
}

std::vector<double>& SensorRows::column(const std::string& key, std::size_t before) {
  auto [at, created] = columns.try_emplace(key);
  std::vector<double>& values = at->second;
  if (created) values.reserve(std::max(expected_, time.size()));
  // NaN in the rows it had no value in: before it came, or in rows read without it.
  values.resize(before, kNaN);
  return values;
}

void SensorRows::fill() {
  for (auto& [key, values] : columns) values.resize(time.size(), kNaN);
}

void SensorRows::truncate(std::size_t rows) {
  if (rows >= time.size()) return;
  time.resize(rows);
  for (auto& [key, values] : columns) values.resize(rows, kNaN);
}

JobRows::Mark JobRows::mark() const {
  Mark sizes;
  for (const Rows* rows : {&job, &node})
    for (const auto& [host, sensors] : *rows)
      for (const auto& [sensor, one] : sensors) sizes[&one] = one.time.size();
  return sizes;
}

void JobRows::back_to(const Mark& mark) {
  for (Rows* rows : {&job, &node})
    for (auto& [host, sensors] : *rows)
      for (auto& [sensor, one] : sensors) {
        auto found = mark.find(&one);
        one.truncate(found == mark.end() ? 0 : found->second);
      }
}

IndexedJob indexed_job(const JobIndex& index, std::uint64_t id) {
  IndexedJob job;
  for (std::size_t row : index.rows_of(id)) {
    IndexedJob::Host& host = job.hosts[index.host[row]];
    host.span = {index.first[row], index.last[row]};
    for (const auto& sensor : index.sensors) {
      if (sensor.rows[row] == 0) continue;
      IndexedJob::Sensor& seen = host.sensors[sensor.name];
      seen.rows = sensor.rows[row];
      seen.span = {sensor.first[row], sensor.last[row]};
      for (const auto& label : sensor.labels)
        if (!label.last[row].empty()) seen.labels[label.key] = label.last[row];
    }
  }
  return job;
}

void read_job_file(const OpenFile& file, bool closed, const FileRequest& request, JobRows& rows) {
  const std::uint64_t id = request.id;
  const IndexedJob* indexed = request.indexed;
  const bool job_rows = request.job_rows && (!indexed || !indexed->hosts.empty()) &&
                        (indexed || !closed || may_hold_job(file.file.get(), id));
  const bool node_rows = !request.node_spans.empty();
  if (!job_rows && !node_rows) return;
  std::set<std::string> job_sensors;  // of a complete index
  if (indexed)
    for (const auto& [host, seen] : indexed->hosts)
      for (const auto& [sensor, rows_seen] : seen.sensors) job_sensors.insert(sensor);
  // Whether a table (or a per_host host's group) may hold rows wanted: which the index or the
  // `jobs` attributes say hold the job's, node_sensors() for node rows.
  auto keep = [&](hid_t group, bool table) {
    const auto name = text_attribute(group, table ? "sensor" : "host");
    if (!name) return true;
    bool job = job_rows, node = node_rows;
    if (table) {
      if (indexed) job = job && job_sensors.contains(*name);
      node = node && is_node_sensor(*name);
    } else {
      if (indexed) job = job && indexed->hosts.contains(*name);
      node = node && request.node_spans.contains(*name);
    }
    if (job && !indexed && closed) job = may_hold_job(group, id);
    return job || node;
  };
  for (const Table& table : tables_of(file, keep)) {
    bool want_job = job_rows, want_node = node_rows && is_node_sensor(table.sensor);
    if (indexed && want_job) {
      want_job = false;
      for (const auto& [host, seen] : indexed->hosts)
        if ((table.host_column || host == table.host) && seen.sensors.contains(table.sensor)) want_job = true;
    } else if (want_job && closed && !may_hold_job(table.group.get(), id)) {
      want_job = false;
    }
    if (want_node && !table.host_column) want_node = request.node_spans.contains(table.host);
    if (want_job || want_node) read_table(file, table, request, want_job, want_node, rows);
  }
}

std::map<std::string, Span> spans_of(const Rows& rows) {
  std::map<std::string, Span> spans;
  for (const auto& [host, sensors] : rows)
    for (const auto& [sensor, one] : sensors) {
      if (one.time.empty()) continue;
      const auto [low, high] = std::minmax_element(one.time.begin(), one.time.end());
      auto [at, added] = spans.try_emplace(host, Span{*low, *high});
      if (!added) at->second = {std::min(at->second.first, *low), std::max(at->second.last, *high)};
    }
  return spans;
}

HostData host_data(const std::string& host, std::map<std::string, SensorRows>& job,
                   std::map<std::string, SensorRows>* node, Span span) {
  HostData data;
  data.host = host;
  for (auto& [sensor, rows] : job) {
    data.sensors.push_back(sensor);
    add_sensor(sensor, rows, nullptr, data.metrics, data.labels);
  }
  if (node)
    for (auto& [sensor, rows] : *node) add_sensor(sensor, rows, &span, data.node_metrics, data.node_labels);
  job.clear();
  if (node) node->clear();
  return data;
}

}  // namespace fructosa::report::hdf5_read
