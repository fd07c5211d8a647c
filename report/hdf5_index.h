// lmaster's job index of one HDF5 file (/.jobs, docs/hdf5.md "The job index"): one row per job
// and host with rows in the file, with what the job's rows of each sensor amount to there. Only
// a complete index (complete = 1: the file was closed) says everything about its file; the
// reader scans the tables of other files. Internal to fructosa_report (hdf5_source.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hdf5_tables.h"

namespace fructosa::report::hdf5_read {

struct JobIndex {
  // Row i is (job[i], host[i]); every vector below has a value per row.
  std::vector<std::uint64_t> job;
  std::vector<std::string> host;
  std::vector<std::int64_t> first, last;  // the job's first and last row on the host (any sensor)
  std::vector<std::uint64_t> rows;

  struct Metric {
    std::string key;  // the real key (attribute key)
    std::vector<std::uint64_t> count;
    std::vector<double> max, sum, last, growth;
  };
  struct Label {
    std::string key;
    std::vector<std::string> last;  // the last non-empty value, "" for none
  };
  struct Sensor {
    std::string link;  // the table's link name (per_host: below each host's group)
    std::string name;  // the real name (attribute sensor)
    std::vector<std::int64_t> first, last;
    std::vector<std::uint64_t> rows;  // 0: no row of this sensor
    std::vector<Metric> metrics;      // empty unless read with metrics
    std::vector<Label> labels;
  };
  std::vector<Sensor> sensors;

  // The rows of job `id`, ascending.
  std::vector<std::size_t> rows_of(std::uint64_t id) const;
};

// The file's index when it is complete; nullopt when it has none, one that is not complete (the
// file is being written, or a writer was killed) or one of another version. `metrics`: read the
// metric summaries too (--list's verdicts), not only what locates the job's rows (job()).
// Throws SourceError naming the file for a complete index that is not as documented.
std::optional<JobIndex> read_job_index(const OpenFile& file, bool metrics);

}  // namespace fructosa::report::hdf5_read
