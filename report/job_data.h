// What fructosa-report reads of a job, whatever the source (HDF5 files: hdf5_source.h; the
// Graphite render API: graphite_source.h): per host, the series of every metric of every sensor
// that attributed samples to the job, and the job's labels.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
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

// The times of a series (ns since the epoch, ascending), shared by the series read from one
// table of one host (copying a Times shares them): the 22 metrics of JobCgroup and JobProc on a node then hold one copy
// (docs/performance.md: a 64-node day is 12M points). Reads like a const vector; push_back copies
// first when the times are shared.
class Times {
 public:
  using Vector = std::vector<std::int64_t>;
  Times() = default;
  Times(Vector times) : times_(std::make_shared<Vector>(std::move(times))) {}  // NOLINT: implicit
  Times(std::initializer_list<std::int64_t> times) : Times(Vector(times)) {}

  const Vector& vector() const { return times_ ? *times_ : empty_vector(); }
  operator const Vector&() const { return vector(); }  // NOLINT: implicit
  std::size_t size() const { return vector().size(); }
  bool empty() const { return vector().empty(); }
  std::int64_t operator[](std::size_t i) const { return (*times_)[i]; }
  std::int64_t front() const { return vector().front(); }
  std::int64_t back() const { return vector().back(); }
  Vector::const_iterator begin() const { return vector().begin(); }
  Vector::const_iterator end() const { return vector().end(); }
  bool operator==(const Times& other) const { return vector() == other.vector(); }
  bool operator==(const Vector& other) const { return vector() == other; }

  void push_back(std::int64_t time) {
    if (!times_) {
      times_ = std::make_shared<Vector>();
    } else if (times_.use_count() > 1) {
      times_ = std::make_shared<Vector>(*times_);
    }
    times_->push_back(time);
  }
  // Whether `other` holds the very same times (not a copy).
  bool same_as(const Times& other) const { return times_ == other.times_; }

 private:
  static const Vector& empty_vector() {
    static const Vector empty;
    return empty;
  }
  std::shared_ptr<Vector> times_;
};

// One metric of one host: times and values (NaN where a row had none), as stored.
struct Series {
  Times time_ns;
  std::vector<double> values;
};

// What a series amounts to over a span, for --list's verdicts without the series (lmaster's job
// index in HDF5 files, docs/hdf5.md; or computed from a Series: summarize()). Sums over files and
// hosts add up: count, sum and growth add, max takes the larger, last comes from the latest.
struct MetricSummary {
  // Its first and last row with a number (from lmaster's index: the first and last row of the
  // metric's sensor, which the index keeps per sensor, not per key).
  std::int64_t first_ns = 0, last_ns = 0;
  std::uint64_t count = 0;                 // rows with a number (NaN skipped)
  double max = std::numeric_limits<double>::quiet_NaN();
  double sum = 0;  // of the numbers: mean = sum / count
  double last = std::numeric_limits<double>::quiet_NaN();  // the number of the last row
  // A counter's growth: the sum of its rises, a fall counting as a restart from 0 (as
  // analysis.h's counter_growth); 0 for fewer than two numbers.
  double growth = 0;
};

// The summary of a whole series (job_data.cpp).
MetricSummary summarize(const Series& series);
// Folds `later` (a later span of the same series: the next file) into `into`.
void merge_summary(MetricSummary& into, const MetricSummary& later);

struct HostData {
  std::string host;
  // "<Sensor>.<key>" ("JobCgroup.cpu.usage") -> its series on this host.
  std::map<std::string, Series> metrics;
  // "<Sensor>.<label key>" ("JobCgroup.user") -> the label's last non-empty value.
  std::map<std::string, std::string> labels;
  // The sensors that attributed samples to the job on this host.
  std::vector<std::string> sensors;
  // The node's own samples (job 0) of kNodeSensors on this host over the job's span: from the
  // last row at or before the job's first sample to the first row at or after its last, so that
  // a counter's growth covers the whole job. "<Sensor>.<key>" -> series, as `metrics`.
  std::map<std::string, Series> node_metrics;
  std::map<std::string, std::string> node_labels;
};

// The sensors whose node samples the analysis reads over a job's span: GPU utilization and memory
// of the GPUs the job used, energy (RAPL, IPMIPower) and network (NetIOCounters, InfiniBand) of
// its nodes, the node's CPU time (CPUTimes, to apportion energy) and the number of jobs on the
// node (JobCgroup's and JobProc's node key `jobs`: a node the job had whole), and whether
// Taskstats has delay accounting there (its node key `delay_accounting`).
inline const std::vector<std::string>& node_sensors() {
  static const std::vector<std::string> sensors{"CPUTimes",      "IPMIPower", "InfiniBand", "JobCgroup", "JobProc",
                                                "NetIOCounters", "NvidiaGPU", "RAPL",       "Taskstats"};
  return sensors;
}

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
  // Per host (sorted by host): what --list's verdict needs without the series. Filled from
  // lmaster's job index where files have one; empty when the source has no summaries (the
  // caller then reads job()).
  struct Host {
    std::string host;
    std::int64_t first_ns = 0, last_ns = 0;
    std::map<std::string, MetricSummary> metrics;  // "<Sensor>.<key>"
    std::map<std::string, std::string> labels;      // "<Sensor>.<label>": last non-empty value
    std::vector<std::string> sensors;
  };
  std::vector<Host> per_host;
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
