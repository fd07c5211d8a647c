// What fructosa-report reads of a job, whatever the source (HDF5 files: hdf5_source.h; the
// Graphite render API: graphite_source.h): per host, the series of every metric of every sensor
// that attributed samples to the job, and the job's labels.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fructosa::report {

// A source that cannot be read: names the file (or URL) and what went wrong.
class SourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One metric of one host: times (ns since the epoch, ascending) and values (NaN where a row had
// none), as stored.
struct Series {
  std::vector<std::int64_t> time_ns;
  std::vector<double> values;
};

struct HostData {
  std::string host;
  // "<Sensor>.<key>" ("JobCgroup.cpu.usage") -> its series on this host.
  std::map<std::string, Series> metrics;
  // "<Sensor>.<label key>" ("JobCgroup.user") -> the label's last non-empty value.
  std::map<std::string, std::string> labels;
  // The sensors that attributed samples to the job on this host.
  std::vector<std::string> sensors;
};

struct JobData {
  std::uint64_t id = 0;
  std::vector<HostData> hosts;  // sorted by host name
};

// A job as --list shows it, without its series.
struct JobSummary {
  std::uint64_t id = 0;
  std::string user;                 // "" when no sample said (JobCgroup's label `user`)
  std::vector<std::string> hosts;   // sorted
  std::int64_t first_ns = 0, last_ns = 0;  // its first and last sample, all hosts
};

class JobSource {
 public:
  virtual ~JobSource() = default;
  // Every job (id != 0) with at least one sample, sorted by id. Throws SourceError.
  virtual std::vector<JobSummary> jobs() = 0;
  // Everything stored about `id`; nullopt when no sample is attributed to it. Throws SourceError.
  virtual std::optional<JobData> job(std::uint64_t id) = 0;
  // What was read, for messages ("data/fructosa-*.h5 (3 files)").
  virtual std::string describe() const = 0;
};

}  // namespace fructosa::report
