// An lmaster output: where received samples go (stdout, HDF5; Graphite and Elasticsearch later).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "metric.h"

namespace fructosa::master {

// Catalog metadata of every (sensor, key) the agents have described in their dictionaries.
// Outputs look keys up here when they create columns, mappings or panels. Thread-safe.
class MetricInfoStore {
 public:
  void remember(const std::string& sensor, const std::string& key, const MetricInfo& info) {
    std::lock_guard lock(mutex_);
    infos_[{sensor, key}] = info;
  }
  std::optional<MetricInfo> find(const std::string& sensor, const std::string& key) const {
    std::lock_guard lock(mutex_);
    auto found = infos_.find({sensor, key});
    if (found == infos_.end()) return std::nullopt;
    return found->second;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, MetricInfo> infos_;
};

class Output {
 public:
  virtual ~Output() = default;
  virtual std::string name() const = 0;
  // Takes samples the master has accepted. May buffer; must not block for long.
  virtual void write(const std::vector<Sample>& samples) = 0;
  // Called about every `flush_period()` seconds and before shutdown: make buffered data durable.
  virtual void flush() {}
  virtual double flush_period() const { return 1.0; }
  // SIGHUP / `lmaster reload`: reopen files (HDF5 starts a new file; logs are reopened).
  virtual void reopen() {}
};

}  // namespace fructosa::master
