// An lmaster output: where received samples go (stdout, HDF5, Graphite, Elasticsearch).
//
// Every output runs on its own thread behind its own queue (see output_runner.h): the master's
// receiving loop never waits for a store. An output only has to deliver what it is given and say
// what it could not deliver; queueing, spooling to disk, retries with backoff and the counters
// that become the `lmaster` sensor's metrics are the runner's.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "metric.h"

namespace fructosa::master {

// Catalog metadata of every (sensor, key) the agents have described in their dictionaries.
// Outputs look keys up here when they create columns, mappings or panels. Thread-safe.
class MetricInfoStore {
 public:
  // lmaster's own keys: taken as they are.
  void remember(const std::string& sensor, const std::string& key, const MetricInfo& info) {
    std::lock_guard lock(mutex_);
    infos_[{sensor, key}] = Entry{info, ""};
  }
  // What an agent's dictionary says of (sensor, key). The first agent to describe a key owns the
  // description: another cannot change a unit or kind for every host (it is logged by the
  // caller); the owner can (an upgrade of it). Past kMaxKeys keys nothing new is taken.
  enum class Learned { added, same, replaced, kept_other, full };
  static constexpr std::size_t kMaxKeys = 1 << 20;
  Learned learn(const std::string& host, const std::string& sensor, const std::string& key, const MetricInfo& info,
                std::string* owner = nullptr) {
    std::lock_guard lock(mutex_);
    auto found = infos_.find({sensor, key});
    if (found == infos_.end()) {
      if (infos_.size() >= kMaxKeys) return Learned::full;
      infos_.emplace(std::make_pair(sensor, key), Entry{info, host});
      return Learned::added;
    }
    Entry& entry = found->second;
    if (entry.info.unit == info.unit && entry.info.kind == info.kind && entry.info.description == info.description)
      return Learned::same;
    if (entry.owner != host) {
      if (owner) *owner = entry.owner;
      return Learned::kept_other;
    }
    entry.info = info;
    return Learned::replaced;
  }
  std::optional<MetricInfo> find(const std::string& sensor, const std::string& key) const {
    std::lock_guard lock(mutex_);
    auto found = infos_.find({sensor, key});
    if (found == infos_.end()) return std::nullopt;
    return found->second.info;
  }
  // Every key known for `sensor`, sorted.
  std::vector<std::pair<std::string, MetricInfo>> keys_of(const std::string& sensor) const {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<std::string, MetricInfo>> keys;
    for (auto it = infos_.lower_bound({sensor, ""}); it != infos_.end() && it->first.first == sensor; ++it)
      keys.emplace_back(it->first.second, it->second.info);
    return keys;
  }

 private:
  struct Entry {
    MetricInfo info;
    std::string owner;  // the agent that described it ("": lmaster itself)
  };
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, Entry> infos_;
};

// What an output has done with the points (metric values) it was given. Written by the output's
// thread, read by the master's when it reports the `lmaster` sensor.
struct OutputCounters {
  std::atomic<std::uint64_t> sent{0};     // points the store accepted (HDF5: written to the file)
  std::atomic<std::uint64_t> retried{0};  // points sent again after a failure
  std::atomic<std::uint64_t> dropped{0};  // points given up: refused for good, or over every budget
};

// Thrown by Output::write when the store cannot take the samples now (unreachable, 429, 5xx,
// disk full). The runner waits (exponential backoff) and calls write again with only the
// samples listed in `undelivered` (indices into what write was given; empty: all of them).
class OutputError : public std::runtime_error {
 public:
  explicit OutputError(const std::string& what, std::vector<std::size_t> undelivered = {})
      : std::runtime_error(what), undelivered(std::move(undelivered)) {}
  std::vector<std::size_t> undelivered;
};

class Output {
 public:
  virtual ~Output() = default;
  virtual std::string name() const = 0;
  // Delivers (or buffers, for a file output) `samples`; runs on the output's thread. Points the
  // store refuses for good (a malformed document) are counted in counters().dropped and logged;
  // a temporary failure throws OutputError.
  virtual void write(std::span<const Sample> samples) = 0;
  // Called about every flush_period() seconds and before stop: send or write what is buffered.
  // A failure throws (any exception); the output keeps the data for the next call.
  virtual void flush() {}
  virtual double flush_period() const { return 1.0; }
  // While the runner is behind, flush() may wait up to this long: a file output that writes more
  // rows per flush does less work per point and catches up (HDF5).
  virtual double flush_period_when_behind() const { return flush_period(); }
  // SIGHUP / `lmaster reload`: HDF5 starts a new file, network outputs reconnect.
  virtual void reopen() {}
  // Every record the journal held when lmaster started has been written: what comes next was
  // received after the start, and cannot be in the store already (HDF5 stops looking for rows a
  // crash left in its files: a clock stepped back must not make new samples look stored).
  virtual void journal_replayed() {}
  // The runner, before each flush(): every sample of the journal records up to `record` has been
  // handed to write(). A file output keeps it with the rows that flush() makes durable (HDF5).
  virtual void handed_through(std::uint64_t record) { (void)record; }
  // At start, after a crash: the journal record up to which the store holds every sample for
  // sure (what handed_through() said at its last complete flush); nullopt when it cannot tell.
  // The runner then replays only the records after it: a replay keyed by record, not by time.
  virtual std::optional<std::uint64_t> stored_through() const { return std::nullopt; }
  // Samples the runner hands to one write() call at most.
  virtual std::size_t batch_samples() const { return 1000; }
  // The runner's memory queue when the section does not set queue_max_points; 0: the common
  // default. An output whose flushes take seconds (HDF5 per_host with many hosts) holds less
  // of what arrives meanwhile in memory: the rest waits in the journal, read back in order.
  virtual std::size_t preferred_queue_max_points() const { return 0; }

  OutputCounters& counters() { return counters_; }

 protected:
  OutputCounters counters_;
};

// Points (metric values) in some samples.
inline std::size_t count_points(std::span<const Sample> samples) {
  std::size_t points = 0;
  for (const auto& sample : samples) points += sample.metrics.size();
  return points;
}

}  // namespace fructosa::master
