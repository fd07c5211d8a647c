// lmaster's job index (docs/hdf5.md, "The job index"): for each (job, host) with rows in the file
// being written, what its rows of each sensor amount to (first and last times, rows, and per
// metric key count, max, sum, last and growth; per label its last non-empty value), so that a
// job's report need not scan every table. Tallied in memory as samples are buffered (a hash
// lookup per job sample; per value, an array index: the caller keeps each key's number beside
// its column, and nothing is allocated once a job's keys are known), written as the group
// /.jobs whenever the file's jobs attributes are (outside SWMR, at most once a minute) and when
// the file is closed, which alone sets `complete = 1`.
//
// The tallies count samples when they are buffered: the rare rows that a failing file never
// stores (dropped after repeated failures, or carried to the next file after a failed flush) stay
// counted in the file they were buffered for.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "metric.h"

namespace fructosa::master {

class MetricInfoStore;

namespace hdf5 {

// No table has this link name: a host or sensor named ".jobs" is linked as "%2Ejobs".
inline constexpr const char* kJobIndexLink = ".jobs";
inline constexpr int kJobIndexVersion = 1;

// Names numbered in the order they first come, found by a string_view without allocating.
class Names {
 public:
  // The name's number; a new name gets the next one.
  std::size_t number(std::string_view name);
  const std::string& operator[](std::size_t number) const { return names_[number]; }
  std::size_t size() const { return names_.size(); }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const {
      return std::hash<std::string_view>{}(name);
    }
  };
  std::unordered_map<std::string, std::size_t, Hash, std::equal_to<>> numbers_;
  std::vector<std::string> names_;
};

// One metric key of one (job, host, sensor) in the current file.
struct MetricTally {
  std::uint64_t count = 0;  // numbers (NaN skipped)
  double max = std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  double growth = 0;  // the sum of the rises, a fall counting as a restart from 0
  // The last number, kept across files: the next file's first rise starts from it. (The file's
  // `last` when count > 0: one field less to touch per value.)
  double previous = std::numeric_limits<double>::quiet_NaN();

  void add(double value) {
    if (std::isnan(value)) return;
    if (!std::isnan(previous)) growth += value >= previous ? value - previous : value;
    previous = value;
    max = count == 0 ? value : std::max(max, value);
    sum += value;
    ++count;
  }
  double last() const { return count > 0 ? previous : std::numeric_limits<double>::quiet_NaN(); }
  void start_file();
};

// One sensor of one (job, host) in the current file (rows = 0: none).
struct SensorTally {
  std::int64_t first = 0, last = 0;
  std::uint64_t rows = 0;
  std::vector<MetricTally> metrics;  // by the sensor's key number
  std::vector<std::string> labels;   // by the sensor's label number: the last non-empty value
};

// One (job, host): a row of the index once it has rows in the current file.
struct JobHostTally {
  std::uint64_t job = 0;
  std::string host;
  std::int64_t first = 0, last = 0;
  std::uint64_t rows = 0;            // in the current file; 0: not in its index
  std::vector<SensorTally> sensors;  // by sensor number
};

// A sensor that attributed rows to jobs: its keys and labels, numbered once for all files.
struct IndexedSensor {
  std::string name;
  std::string link;  // its group under /.jobs
  Names keys;
  Names labels;
  // In the current file: whether the sensor, each key and each label had a job's rows, and
  // whether a key's kind attribute came from the catalog.
  bool in_file = false;
  std::vector<char> keys_in_file;
  std::vector<char> labels_in_file;
  std::vector<char> kinds_written;

  std::size_t key_number(const std::string& key);
  std::size_t label_number(const std::string& label);
};

// Where the metrics and labels of one job sample go (JobIndex::add_row).
struct JobRow {
  SensorTally* tally = nullptr;
  IndexedSensor* sensor = nullptr;
};

class JobIndex {
 public:
  // The numbers of sensors, keys and labels in the index, which callers keep beside their tables
  // and columns (kUnnumbered until the first sample that has them; they never change).
  static constexpr std::size_t kUnnumbered = static_cast<std::size_t>(-1);

  // A sample of a job (job != 0) that is buffered for the current file: counts its row; its
  // metrics and labels then go to add_metric() and add_label() (before the next add_row()).
  // `sensor`: the number of the sample's sensor.
  JobRow add_row(const Sample& sample, std::size_t& sensor);
  // `key`: the number of the metric's (label's) key in the sensor.
  static void add_metric(const JobRow& row, std::size_t& key, const std::string& name,
                         double value);
  static void add_label(const JobRow& row, std::size_t& key, const Label& label);
  // Whether add_row() changed anything since the index was last written.
  bool stale() const { return stale_; }
  // Makes /.jobs of `file` (open outside SWMR; `path` names it in errors) hold the tallies of
  // the current file; `complete` when the file is being closed. Throws std::runtime_error.
  void write(const std::string& path, hid_t file, bool complete, const MetricInfoStore& infos);
  // A new file: its index starts empty. The (job, host)s that had no rows during the whole file
  // that ended are forgotten, so memory holds the jobs of at most two files; the others keep
  // each key's last number, so that the growth of the new file includes the rise from it.
  void start_file();

 private:
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(const std::pair<std::uint64_t, std::string_view>& key) const {
      return std::hash<std::string_view>{}(key.second) * 31 + std::hash<std::uint64_t>{}(key.first);
    }
    std::size_t operator()(const std::pair<std::uint64_t, std::string>& key) const {
      return (*this)({key.first, std::string_view(key.second)});
    }
  };
  struct KeyEqual {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return a.first == b.first && std::string_view(a.second) == std::string_view(b.second);
    }
  };

  JobHostTally& entry(std::uint64_t job, const std::string& host);
  std::size_t number_sensor(const std::string& sensor);
  void write_sensor(const std::string& path, hid_t index, IndexedSensor& sensor, std::size_t number,
                    const MetricInfoStore& infos);

  std::vector<JobHostTally> entries_;
  std::unordered_map<std::pair<std::uint64_t, std::string>, std::size_t, KeyHash, KeyEqual>
      numbers_;
  std::size_t last_entry_ = static_cast<std::size_t>(-1);  // consecutive samples share it
  std::vector<std::size_t> order_;  // entries with rows in the current file, as first seen
  Names sensor_names_;
  std::vector<IndexedSensor> sensors_;
  bool stale_ = false;
};

}  // namespace hdf5
}  // namespace fructosa::master
