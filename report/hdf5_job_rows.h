// Hdf5Source::job()'s reading of one file (hdf5_source.cpp decides which files, and what of
// each): the job's rows and the node rows (job 0) of node_sensors() around them, per host and
// sensor, as pieces; and a host's HostData made from its pieces of every file. Internal to
// fructosa_report.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hdf5_index.h"
#include "hdf5_tables.h"
#include "job_data.h"

namespace fructosa::report::hdf5_read {

// Node rows are read this far around the job's span on a host, then cut to the last row at or
// before its first sample and the first at or after its last: a node sensor read every minute
// still has a row on each side.
inline constexpr std::int64_t kNodeSlackNs = 10LL * 60 * 1'000'000'000;
// How far a row's time may be out of order in a table (lmaster stores rows as received): rows
// looked for by time are looked for this much wider.
inline constexpr std::int64_t kDisorderNs = 60LL * 1'000'000'000;

struct Span {
  std::int64_t first = 0, last = 0;
};

// (time, value) of a label's latest non-empty value: later rows win (time, then order read).
using Latest = std::optional<std::pair<std::int64_t, std::string>>;
void keep_latest(Latest& latest, std::int64_t time, std::string_view value);

// One sensor's rows of one host (the job's, or the node's), gathered table by table, file by
// file, straight into vectors reserved for the rows the job index says are coming (so that none
// is copied as it grows, and the job's rows are never held twice).
struct SensorRows {
  std::vector<std::int64_t> time;
  std::map<std::string, std::vector<double>> columns;  // each as long as `time` (after fill())
  std::map<std::string, Latest> labels;

  // `count` more rows will come.
  void expect(std::size_t count);
  // The column `key`, NaN in its rows [0, before) that had no value (to be appended to).
  std::vector<double>& column(const std::string& key, std::size_t before);
  // NaN in the rows the last table added to `time` but not to a column.
  void fill();
  // Back to its first `rows` rows (a read that failed half-way).
  void truncate(std::size_t rows);

 private:
  std::size_t expected_ = 0;
};

// host -> sensor -> its rows.
using Rows = std::map<std::string, std::map<std::string, SensorRows>>;

// What job() gathers: the job's rows and the node rows around it.
struct JobRows {
  Rows job, node;
  // How many rows each SensorRows has, to go back to when a file's read fails half-way (and is
  // read again: a file being written) or is read twice.
  using Mark = std::map<const SensorRows*, std::size_t>;
  Mark mark() const;
  void back_to(const Mark& mark);
};

// What a complete index says of one job in its file.
struct IndexedJob {
  struct Sensor {
    std::uint64_t rows = 0;
    Span span;
    std::map<std::string, std::string> labels;  // key -> last non-empty value
  };
  struct Host {
    Span span;
    std::map<std::string, Sensor> sensors;  // real name -> its rows (rows > 0 only)
  };
  std::map<std::string, Host> hosts;  // empty: the job has no row in the file
};
IndexedJob indexed_job(const JobIndex& index, std::uint64_t id);

struct FileRequest {
  std::uint64_t id = 0;
  // Read the job's rows: of the tables and hosts `indexed` names when the file has a complete
  // index; else of every table (a closed file's `jobs` attributes skip those without the job).
  bool job_rows = false;
  const IndexedJob* indexed = nullptr;
  // Read the node rows of node_sensors() of these hosts, kNodeSlackNs around the job's span on
  // each (empty: none).
  std::map<std::string, Span> node_spans;
};

// Appends the file's rows that `request` asks for to `rows`. `closed`: no writer had the file
// open (its `jobs` attributes are complete).
void read_job_file(const OpenFile& file, bool closed, const FileRequest& request, JobRows& rows);

// The span of each host's rows.
std::map<std::string, Span> spans_of(const Rows& rows);

// A host's series and labels from its rows (freed as they are used): the metrics of a sensor
// share one time axis (Times), as do its node series; the node series cut to the rows from the
// last at or before `span`'s first to the first at or after its last (the job's span there).
HostData host_data(const std::string& host, std::map<std::string, SensorRows>& job,
                   std::map<std::string, SensorRows>* node, Span span);

}  // namespace fructosa::report::hdf5_read
