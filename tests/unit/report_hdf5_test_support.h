// What the unit tests of fructosa-report's HDF5 source share (report_hdf5_*_test.cpp): samples
// written with the real HDF5 output, the series of a job compared (NaN equal to NaN), errors
// expected, files made by hand with the HDF5 C API (what the output only leaves after a crash,
// broken files, a job index as docs/hdf5.md documents it), and attributes and the job index
// changed or taken out of closed files.
#pragma once

#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "hdf5_source.h"
#include "hdf5_test_support.h"

namespace fructosa::report::hdf5_source_test {

namespace fs = std::filesystem;
using master::Hdf5Output;
using master::MetricInfoStore;
using master::hdf5_test::Child;
using master::hdf5_test::kSecond;
using master::hdf5_test::kT0;
using master::hdf5_test::options_for;
using master::hdf5_test::TempDir;
using master::hdf5_test::wait_for_file;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr std::int64_t t0 = kT0, t1 = kT0 + kSecond, t2 = kT0 + 2 * kSecond, t3 = kT0 + 3 * kSecond;

inline Sample sample(std::string host, std::string sensor, std::int64_t time, std::uint64_t job,
                     std::vector<MetricValue> metrics, std::vector<Label> labels = {}) {
  return Sample{std::move(host),    std::move(sensor), time, job,
                std::move(metrics), std::move(labels)};
}

inline void write(Hdf5Output& output, std::vector<Sample> samples) { output.write(samples); }

inline const HostData& host_of(const JobData& job, const std::string& host) {
  for (const auto& data : job.hosts)
    if (data.host == host) return data;
  throw std::runtime_error("no host " + host);
}

// NaN compares equal to NaN here.
inline ::testing::AssertionResult same_values(const std::vector<double>& actual,
                                       const std::vector<double>& expected) {
  bool same = actual.size() == expected.size();
  for (std::size_t i = 0; same && i < actual.size(); ++i)
    same = (std::isnan(actual[i]) && std::isnan(expected[i])) || actual[i] == expected[i];
  if (same) return ::testing::AssertionSuccess();
  auto text = [](const std::vector<double>& values) {
    std::string out = "[";
    for (double v : values) out += " " + std::to_string(v);
    return out + " ]";
  };
  return ::testing::AssertionFailure()
         << "values " << text(actual) << ", expected " << text(expected);
}

inline ::testing::AssertionResult has_series(const HostData& host, const std::string& metric,
                                      const std::vector<std::int64_t>& times,
                                      const std::vector<double>& values) {
  auto found = host.metrics.find(metric);
  if (found == host.metrics.end()) {
    std::string known;
    for (const auto& [name, series] : host.metrics) known += " " + name;
    return ::testing::AssertionFailure()
           << host.host << " has no " << metric << " (has" << known << ")";
  }
  if (found->second.time_ns != times)
    return ::testing::AssertionFailure() << host.host << " " << metric << ": other times";
  auto same = same_values(found->second.values, values);
  if (!same) return same << " (" << host.host << " " << metric << ")";
  return ::testing::AssertionSuccess();
}

// Runs `make` and expects a SourceError whose message holds every piece of `pieces`.
inline void expect_source_error(const std::function<void()>& make,
                         const std::vector<std::string>& pieces) {
  try {
    make();
    ADD_FAILURE() << "no SourceError";
  } catch (const SourceError& error) {
    const std::string message = error.what();
    for (const auto& piece : pieces)
      EXPECT_NE(message.find(piece), std::string::npos) << message << " lacks " << piece;
  }
}

// Sets the `jobs` attribute of `object` in the closed file `path` (H5S_NULL when empty, as the
// output writes an empty one).
inline void set_jobs_attribute(const std::string& path, const std::string& object,
                        const std::vector<std::uint64_t>& jobs) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  hid_t target = H5Oopen(file, object.c_str(), H5P_DEFAULT);
  ASSERT_GE(target, 0) << object;
  if (H5Aexists(target, "jobs") > 0) H5Adelete(target, "jobs");
  hsize_t count = jobs.size();
  hid_t space = count > 0 ? H5Screate_simple(1, &count, nullptr) : H5Screate(H5S_NULL);
  hid_t attribute = H5Acreate2(target, "jobs", H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  const std::uint64_t none = 0;
  H5Awrite(attribute, H5T_NATIVE_UINT64, jobs.empty() ? &none : jobs.data());
  H5Aclose(attribute);
  H5Sclose(space);
  H5Oclose(target);
  ASSERT_GE(H5Fclose(file), 0);
}

// Takes the job index out of the closed file `path`: what files of lmasters before the index
// look like (their tables are scanned).
inline void remove_job_index(const std::string& path) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  if (H5Lexists(file, ".jobs", H5P_DEFAULT) > 0) {
    ASSERT_GE(H5Ldelete(file, ".jobs", H5P_DEFAULT), 0) << path;
  }
  ASSERT_GE(H5Fclose(file), 0);
}

inline std::string numbers(const Series& series) {
  std::string text;
  for (double v : series.values)
    text +=
        (text.empty() ? "" : ",") + (std::isnan(v) ? "nan" : std::to_string(static_cast<int>(v)));
  return text;
}

// How a dataset made by hand is stored: contiguous (chunk 0), or in chunks of `chunk` rows with
// the filters asked for (in the order shuffle, deflate, fletcher32).
struct Storage {
  hsize_t chunk = 0;
  bool shuffle = false;
  int deflate = -1;  // level; -1: none
  bool fletcher32 = false;
};
// lmaster's closed files: shuffle + gzip (strings without shuffle), here in small chunks.
inline constexpr Storage kCompressed{4, true, 4, false};

// An lmaster-looking file written with the HDF5 C API, for what the output only leaves after a
// crash, for broken files, and for a job index as docs/hdf5.md documents it.
class HandMade {
 public:
  explicit HandMade(const std::string& path, int format_version = 2,
                    const std::string& format = "fructosa lmaster HDF5 output",
                    const std::string& layout = "per_sensor") {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    file_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    text_attribute(file_, "format", format);
    text_attribute(file_, "layout", layout);
    text_attribute(file_, "created", "2025-03-01T06:00:00Z");
    integer_attribute(file_, "format_version", format_version);
  }
  // A closed file to change (a real output's).
  struct Existing {};
  HandMade(const std::string& path, Existing) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    if (file_ < 0) throw std::runtime_error("cannot open " + path);
  }
  ~HandMade() {
    for (auto group = groups_.rbegin(); group != groups_.rend(); ++group) H5Gclose(*group);
    H5Fclose(file_);
  }
  HandMade(const HandMade&) = delete;
  HandMade& operator=(const HandMade&) = delete;

  hid_t file() const { return file_; }
  // A group at `path` (from the root; its parents exist), closed with the file.
  hid_t group(const std::string& path) {
    hid_t group = H5Gcreate2(file_, path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (group < 0) throw std::runtime_error("cannot create " + path);
    groups_.push_back(group);
    return group;
  }
  hid_t table(const std::string& sensor) {
    hid_t table = group(sensor);
    text_attribute(table, "sensor", sensor);
    return table;
  }
  template <typename T>
  void numbers(hid_t group, const std::string& link, hid_t file_type, hid_t memory_type,
               const std::vector<T>& values, const std::string& key = "", Storage storage = {}) {
    hsize_t rows = values.size();
    hid_t dataset = create(group, link, file_type, rows, storage);
    H5Dwrite(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    if (!key.empty()) text_attribute(dataset, "key", key);
    H5Dclose(dataset);
  }
  void texts(hid_t group, const std::string& link, const std::vector<std::string>& values,
             Storage storage = {}, const std::string& key = "") {
    const std::size_t width = 16;
    std::vector<char> raw(values.size() * width, '\0');
    for (std::size_t i = 0; i < values.size(); ++i) values[i].copy(raw.data() + i * width, width);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, width);
    H5Tset_strpad(type, H5T_STR_NULLPAD);
    hid_t dataset = create(group, link, type, values.size(), storage);
    H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data());
    if (!key.empty()) text_attribute(dataset, "key", key);
    H5Dclose(dataset);
    H5Tclose(type);
  }

  static void text_attribute(hid_t object, const char* name, const std::string& value) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attribute = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* text = value.c_str();
    H5Awrite(attribute, type, &text);
    H5Aclose(attribute);
    H5Sclose(space);
    H5Tclose(type);
  }
  static void integer_attribute(hid_t object, const char* name, int value) {
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attribute = H5Acreate2(object, name, H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attribute, H5T_NATIVE_INT, &value);
    H5Aclose(attribute);
    H5Sclose(space);
  }

 private:
  static hid_t create(hid_t group, const std::string& link, hid_t type, hsize_t rows, Storage storage) {
    hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t max_rows = rows;
    if (storage.chunk > 0) {
      max_rows = H5S_UNLIMITED;
      H5Pset_chunk(properties, 1, &storage.chunk);
      if (storage.shuffle) H5Pset_shuffle(properties);
      if (storage.deflate >= 0) H5Pset_deflate(properties, static_cast<unsigned>(storage.deflate));
      if (storage.fletcher32) H5Pset_fletcher32(properties);
    }
    hid_t space = H5Screate_simple(1, &rows, &max_rows);
    hid_t dataset = H5Dcreate2(group, link.c_str(), type, space, H5P_DEFAULT, properties, H5P_DEFAULT);
    H5Sclose(space);
    H5Pclose(properties);
    if (dataset < 0) throw std::runtime_error("cannot create " + link);
    return dataset;
  }
  hid_t file_;
  std::vector<hid_t> groups_;
};

// A job index (/.jobs, docs/hdf5.md "The job index") to write by hand: row i of every vector is
// the (job[i], host[i]) row.
struct HandIndex {
  struct Metric {
    std::string key, kind = "gauge";
    std::vector<std::uint64_t> count;
    std::vector<double> max, sum, last, growth;
  };
  struct Sensor {
    std::string link, name;
    std::vector<std::int64_t> first, last;
    std::vector<std::uint64_t> rows;
    std::vector<Metric> metrics;
    std::vector<std::pair<std::string, std::vector<std::string>>> labels;  // key, last values
  };
  std::vector<std::uint64_t> job;
  std::vector<std::string> host;
  std::vector<std::int64_t> first, last;
  std::vector<std::uint64_t> rows;
  std::vector<Sensor> sensors;
  int complete = 1;
  std::string index = "fructosa job index";
  int version = 1;

  // Writes it into `file` (compressed, as compaction copies it).
  void write(HandMade& file) const {
    hid_t at = file.group("/.jobs");
    HandMade::text_attribute(at, "index", index);
    HandMade::integer_attribute(at, "index_version", version);
    HandMade::integer_attribute(at, "complete", complete);
    file.numbers(at, "job", H5T_STD_U64LE, H5T_NATIVE_UINT64, job, "", kCompressed);
    file.texts(at, "host", host, {4, false, 4, false});
    file.numbers(at, "first", H5T_STD_I64LE, H5T_NATIVE_INT64, first, "", kCompressed);
    file.numbers(at, "last", H5T_STD_I64LE, H5T_NATIVE_INT64, last, "", kCompressed);
    file.numbers(at, "rows", H5T_STD_U64LE, H5T_NATIVE_UINT64, rows, "", kCompressed);
    for (const Sensor& sensor : sensors) {
      const std::string where = "/.jobs/" + sensor.link;
      hid_t group = file.group(where);
      HandMade::text_attribute(group, "sensor", sensor.name);
      file.numbers(group, "first", H5T_STD_I64LE, H5T_NATIVE_INT64, sensor.first);
      file.numbers(group, "last", H5T_STD_I64LE, H5T_NATIVE_INT64, sensor.last);
      file.numbers(group, "rows", H5T_STD_U64LE, H5T_NATIVE_UINT64, sensor.rows);
      if (!sensor.metrics.empty()) file.group(where + "/metrics");
      for (const Metric& metric : sensor.metrics) {
        hid_t key = file.group(where + "/metrics/" + metric.key);
        HandMade::text_attribute(key, "key", metric.key);
        HandMade::text_attribute(key, "kind", metric.kind);
        file.numbers(key, "count", H5T_STD_U64LE, H5T_NATIVE_UINT64, metric.count);
        file.numbers(key, "max", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, metric.max);
        file.numbers(key, "sum", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, metric.sum);
        file.numbers(key, "last", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, metric.last);
        file.numbers(key, "growth", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, metric.growth);
      }
      if (!sensor.labels.empty()) {
        hid_t labels = file.group(where + "/labels");
        for (const auto& [key, values] : sensor.labels) file.texts(labels, key, values, {}, key);
      }
    }
  }
};

}  // namespace fructosa::report::hdf5_source_test
