// Small things several unit tests need.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "metric.h"

namespace fructosa::test {

// A fresh directory under /tmp, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/fructosa-unit.XXXXXX";
    if (!::mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A reading time of its own for each reading a test takes (sensors that share a file read it
// once per reading time: procfs.h, SharedReading).
inline std::int64_t next_reading_time() {
  static std::int64_t instant = 0;
  return ++instant;
}

inline Sample make_sample(std::string host, std::string sensor, std::int64_t time_ns, std::uint64_t job,
                          std::vector<MetricValue> metrics) {
  return Sample{std::move(host), std::move(sensor), time_ns, job, std::move(metrics), {}};
}

// What `action` throws (its what()), or "no error".
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "no error";
}

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace fructosa::test
