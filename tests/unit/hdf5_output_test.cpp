#include "hdf5_output.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "config.h"

namespace fructosa::master {
namespace {

// A fresh directory under /tmp, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/hdf5_output_test.XXXXXX";
    if (!mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

Options options_for(const std::string& path, std::vector<std::string> more = {}) {
  more.push_back("path=" + path);
  return parse_pairs(Hdf5Output::hdf5_options(), more, "test");
}

Sample sample(std::string host, std::string sensor, std::int64_t time_ns, std::uint64_t job,
              std::vector<MetricValue> metrics) {
  Sample result;
  result.host = std::move(host);
  result.sensor = std::move(sensor);
  result.time_ns = time_ns;
  result.job = job;
  result.metrics = std::move(metrics);
  return result;
}

// Reads the file back with the HDF5 C API, independently of the code under test.
class Reader {
 public:
  explicit Reader(const std::string& path) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file_ < 0) throw std::runtime_error("cannot open " + path);
  }
  ~Reader() { H5Fclose(file_); }

  bool exists(const std::string& path) const {
    // Checks each component, as H5Lexists needs its parents to exist.
    std::string partial;
    std::size_t start = 1;
    while (start <= path.size()) {
      std::size_t slash = path.find('/', start);
      if (slash == std::string::npos) slash = path.size();
      partial = path.substr(0, slash);
      if (H5Lexists(file_, partial.c_str(), H5P_DEFAULT) <= 0) return false;
      start = slash + 1;
    }
    return true;
  }

  hsize_t length(const std::string& path) const {
    hid_t dataset = open(path);
    hid_t space = H5Dget_space(dataset);
    hsize_t dims = 0;
    H5Sget_simple_extent_dims(space, &dims, nullptr);
    H5Sclose(space);
    H5Dclose(dataset);
    return dims;
  }

  template <typename T>
  std::vector<T> read(const std::string& path, hid_t memory_type) const {
    std::vector<T> values(length(path));
    hid_t dataset = open(path);
    herr_t status = H5Dread(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(dataset);
    if (status < 0) throw std::runtime_error("cannot read " + path);
    return values;
  }
  std::vector<double> doubles(const std::string& path) const {
    return read<double>(path, H5T_NATIVE_DOUBLE);
  }
  std::vector<std::int64_t> int64s(const std::string& path) const {
    return read<std::int64_t>(path, H5T_NATIVE_INT64);
  }
  std::vector<std::uint64_t> uint64s(const std::string& path) const {
    return read<std::uint64_t>(path, H5T_NATIVE_UINT64);
  }

  std::string attribute(const std::string& object_path, const std::string& name) const {
    hid_t object = H5Oopen(file_, object_path.c_str(), H5P_DEFAULT);
    if (object < 0) throw std::runtime_error("no object " + object_path);
    hid_t attribute = H5Aopen(object, name.c_str(), H5P_DEFAULT);
    if (attribute < 0) {
      H5Oclose(object);
      throw std::runtime_error("no attribute " + name + " on " + object_path);
    }
    hid_t type = H5Aget_type(attribute);
    bool variable = H5Tis_variable_str(type) > 0;
    H5T_cset_t cset = H5Tget_cset(type);
    char* text = nullptr;
    herr_t status = H5Aread(attribute, type, &text);
    std::string value = (status >= 0 && text) ? text : "<unreadable>";
    H5free_memory(text);
    H5Tclose(type);
    H5Aclose(attribute);
    H5Oclose(object);
    if (!variable) return "<not a variable-length string>";
    if (cset != H5T_CSET_UTF8) return "<not UTF-8>";
    return value;
  }

  // Number of filters and chunk rows of a dataset.
  std::pair<int, hsize_t> layout(const std::string& path) const {
    hid_t dataset = open(path);
    hid_t properties = H5Dget_create_plist(dataset);
    int filters = H5Pget_nfilters(properties);
    hsize_t chunk = 0;
    H5Pget_chunk(properties, 1, &chunk);
    H5Pclose(properties);
    H5Dclose(dataset);
    return {filters, chunk};
  }

  bool unlimited(const std::string& path) const {
    hid_t dataset = open(path);
    hid_t space = H5Dget_space(dataset);
    hsize_t dims = 0, max_dims = 0;
    int rank = H5Sget_simple_extent_dims(space, &dims, &max_dims);
    H5Sclose(space);
    H5Dclose(dataset);
    return rank == 1 && max_dims == H5S_UNLIMITED;
  }

  H5T_class_t type_class(const std::string& path, std::size_t* size, H5T_sign_t* sign) const {
    hid_t dataset = open(path);
    hid_t type = H5Dget_type(dataset);
    H5T_class_t result = H5Tget_class(type);
    *size = H5Tget_size(type);
    *sign = result == H5T_INTEGER ? H5Tget_sign(type) : H5T_SGN_ERROR;
    H5Tclose(type);
    H5Dclose(dataset);
    return result;
  }

 private:
  hid_t open(const std::string& path) const {
    hid_t dataset = H5Dopen2(file_, path.c_str(), H5P_DEFAULT);
    if (dataset < 0) throw std::runtime_error("no dataset " + path);
    return dataset;
  }
  hid_t file_;
};

// Open HDF5 files, datasets, groups, committed datatypes and attributes, across all files.
// (HDF5 1.10 has no public count of dataspaces, property lists or transient datatypes:
// H5Inmembers refuses library types; the output owns those through RAII handles.)
std::vector<ssize_t> open_file_objects() {
  std::vector<ssize_t> counts;
  for (unsigned types :
       {H5F_OBJ_FILE, H5F_OBJ_DATASET, H5F_OBJ_GROUP, H5F_OBJ_DATATYPE, H5F_OBJ_ATTR})
    counts.push_back(H5Fget_obj_count(static_cast<hid_t>(H5F_OBJ_ALL), types));
  return counts;
}

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kT0 = 1'700'000'000 * kSecond;

TEST(Hdf5LinkName, EscapesSlashPercentAndLeadingDot) {
  EXPECT_EQ(hdf5_link_name("cpu0"), "cpu0");
  EXPECT_EQ(hdf5_link_name("/home.percent"), "%2Fhome.percent");
  EXPECT_EQ(hdf5_link_name("a/b%c"), "a%2Fb%25c");
  EXPECT_EQ(hdf5_link_name(".hidden.x"), "%2Ehidden.x");
  EXPECT_EQ(hdf5_link_name("%2F"), "%252F");
  EXPECT_EQ(hdf5_link_name(""), "%");
  EXPECT_EQ(hdf5_link_name("time"), "time");
  EXPECT_EQ(hdf5_link_name("time", true), "%74ime");
  EXPECT_EQ(hdf5_link_name("job", true), "%6Aob");
  EXPECT_EQ(hdf5_link_name("jobs", true), "jobs");
}

TEST(Hdf5Output, OptionsHaveTheDocumentedDefaultsAndLimits) {
  Options options = options_for("/tmp/unused.h5");
  EXPECT_EQ(options.get_int("complevel"), 4);
  EXPECT_EQ(options.get_int("chunk"), 1024);
  EXPECT_DOUBLE_EQ(options.get_real("flush_interval"), 5.0);
  EXPECT_THROW(parse_pairs(Hdf5Output::hdf5_options(), {}, "test"), ConfigError);
  EXPECT_THROW(options_for("/tmp/x.h5", {"complevel=10"}), ConfigError);
  EXPECT_THROW(options_for("/tmp/x.h5", {"chunk=8"}), ConfigError);
  EXPECT_THROW(options_for("/tmp/x.h5", {"flush_interval=0.01"}), ConfigError);
}

TEST(Hdf5Output, WritesFlushesReopensAppendsAndReadsBack) {
  H5open();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::vector<ssize_t> objects_before = open_file_objects();
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  MetricInfoStore infos;
  infos.remember("CPUPercent", "0", {"percent", Kind::gauge, "busy time of CPU 0"});
  infos.remember("CPUPercent", "1", {"percent", Kind::gauge, "busy time of CPU 1"});
  infos.remember("DiskUsage", "/home.percent", {"percent", Kind::gauge, "used space of /home"});
  infos.remember("DiskUsage", "sda.read_bytes", {"bytes", Kind::counter, "bytes read from sda"});
  // "2" is not in the store when its column is created, and "time" never is.

  {
    Hdf5Output output(options_for(path, {"chunk=16", "flush_interval=2.5"}), infos);
    EXPECT_EQ(output.name(), "hdf5");
    EXPECT_DOUBLE_EQ(output.flush_period(), 2.5);
    EXPECT_EQ(output.path(), path);
    for (int i = 0; i < 3; ++i) {
      output.write(std::vector<Sample>{
          sample("node1", "CPUPercent", kT0 + i * kSecond, 0, {{"0", 10.0 + i}, {"1", 20.0 + i}}),
          sample("n%2", "CPUPercent", kT0 + i * kSecond, 77, {{"0", 30.0 + i}}),
          sample("node1", "DiskUsage", kT0 + i * kSecond, 0,
                 {{"/home.percent", 50.5 + i}, {"sda.read_bytes", 1e12 + i}, {"time", 0.25 * i}}),
      });
    }
    output.flush();
    output.write(std::vector<Sample>
        {sample("node1", "CPUPercent", kT0 + 3 * kSecond, 12345, {{"0", 13.0}, {"1", 23.0}})});
    output.write(std::vector<Sample>{sample("node1", "CPUPercent", kT0 + 4 * kSecond, 0, {{"1", 24.0}})});  // no "0"
    output.reopen();
    // A new key mid-way: its earlier rows read as NaN.
    output.write(std::vector<Sample>{sample("node1", "CPUPercent", kT0 + 5 * kSecond, 0,
                         {{"0", 15.0}, {"1", 25.0}, {"2", 35.0}})});
    output.flush();
    infos.remember("CPUPercent", "2", {"percent", Kind::gauge, "busy time of CPU 2"});
    output.write(std::vector<Sample>{sample("node1", "CPUPercent", kT0 + 6 * kSecond, 0,
                         {{"2", 36.0}, {"0", 16.0}, {"1", 26.0}})});
  }  // the destructor flushes
  {
    // Appending with a new output object continues the existing tables.
    Hdf5Output output(options_for(path, {"chunk=16"}), infos);
    output.write(std::vector<Sample>{
        sample("node1", "CPUPercent", kT0 + 7 * kSecond, 0, {{"1", 27.0}, {"3", 47.0}}),
        sample("n%2", "DiskUsage", kT0 + 7 * kSecond, 0, {{"sda.read_bytes", 5.0}}),
    });
  }
  EXPECT_EQ(open_file_objects(), objects_before) << "HDF5 handles left open";
  EXPECT_EQ(objects_before, (std::vector<ssize_t>{0, 0, 0, 0, 0}));

  Reader file(path);
  const double nan = std::nan("");
  auto expect_values = [](const std::vector<double>& actual, const std::vector<double>& expected,
                          const std::string& what) {
    ASSERT_EQ(actual.size(), expected.size()) << what;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if (std::isnan(expected[i]))
        EXPECT_TRUE(std::isnan(actual[i])) << what << " row " << i << " = " << actual[i];
      else
        EXPECT_EQ(actual[i], expected[i]) << what << " row " << i;
    }
  };

  // node1/CPUPercent: 3 + 2 + 2 rows from the first output, 1 from the second.
  const std::string cpu = "/node1/CPUPercent";
  EXPECT_EQ(file.attribute(cpu, "host"), "node1");
  EXPECT_EQ(file.attribute(cpu, "sensor"), "CPUPercent");
  std::vector<std::int64_t> times;
  for (int i = 0; i < 8; ++i) times.push_back(kT0 + i * kSecond);
  EXPECT_EQ(file.int64s(cpu + "/time"), times);
  EXPECT_EQ(file.attribute(cpu + "/time", "unit"), "ns since epoch");
  EXPECT_EQ(file.uint64s(cpu + "/job"), (std::vector<std::uint64_t>{0, 0, 0, 12345, 0, 0, 0, 0}));
  expect_values(file.doubles(cpu + "/0"), {10, 11, 12, 13, nan, 15, 16, nan}, "CPUPercent/0");
  expect_values(file.doubles(cpu + "/1"), {20, 21, 22, 23, 24, 25, 26, 27}, "CPUPercent/1");
  expect_values(file.doubles(cpu + "/2"), {nan, nan, nan, nan, nan, 35, 36, nan}, "CPUPercent/2");
  expect_values(file.doubles(cpu + "/3"), {nan, nan, nan, nan, nan, nan, nan, 47}, "CPUPercent/3");
  EXPECT_EQ(file.attribute(cpu + "/0", "key"), "0");
  EXPECT_EQ(file.attribute(cpu + "/0", "unit"), "percent");
  EXPECT_EQ(file.attribute(cpu + "/0", "kind"), "gauge");
  EXPECT_EQ(file.attribute(cpu + "/0", "description"), "busy time of CPU 0");
  // Described once the store knew it.
  EXPECT_EQ(file.attribute(cpu + "/2", "description"), "busy time of CPU 2");
  // Never described: empty strings.
  EXPECT_EQ(file.attribute(cpu + "/3", "unit"), "");
  EXPECT_EQ(file.attribute(cpu + "/3", "kind"), "");
  EXPECT_EQ(file.attribute(cpu + "/3", "description"), "");

  // Escaped host name, job column.
  const std::string other = "/n%252/CPUPercent";
  ASSERT_TRUE(file.exists(other));
  EXPECT_EQ(file.attribute(other, "host"), "n%2");
  EXPECT_EQ(file.attribute("/n%252", "host"), "n%2");
  EXPECT_EQ(file.uint64s(other + "/job"), (std::vector<std::uint64_t>{77, 77, 77}));
  expect_values(file.doubles(other + "/0"), {30, 31, 32}, "n%2 CPUPercent/0");
  const std::string other_disk = "/n%252/DiskUsage";
  EXPECT_EQ(file.int64s(other_disk + "/time"), (std::vector<std::int64_t>{kT0 + 7 * kSecond}));
  expect_values(file.doubles(other_disk + "/sda.read_bytes"), {5}, "n%2 DiskUsage");

  // Escaped key names; the key attribute holds the real name.
  const std::string disk = "/node1/DiskUsage";
  EXPECT_EQ(file.length(disk + "/time"), 3u);
  ASSERT_TRUE(file.exists(disk + "/%2Fhome.percent"));
  EXPECT_EQ(file.attribute(disk + "/%2Fhome.percent", "key"), "/home.percent");
  EXPECT_EQ(file.attribute(disk + "/%2Fhome.percent", "description"), "used space of /home");
  expect_values(file.doubles(disk + "/%2Fhome.percent"), {50.5, 51.5, 52.5}, "/home.percent");
  EXPECT_EQ(file.attribute(disk + "/sda.read_bytes", "kind"), "counter");
  EXPECT_EQ(file.attribute(disk + "/sda.read_bytes", "unit"), "bytes");
  expect_values(file.doubles(disk + "/sda.read_bytes"), {1e12, 1e12 + 1, 1e12 + 2},
                "sda.read_bytes");
  // A key called "time" does not clash with the time column.
  EXPECT_EQ(file.attribute(disk + "/%74ime", "key"), "time");
  expect_values(file.doubles(disk + "/%74ime"), {0, 0.25, 0.5}, "key time");
  EXPECT_EQ(file.int64s(disk + "/time"),
            (std::vector<std::int64_t>{kT0, kT0 + kSecond, kT0 + 2 * kSecond}));

  // Storage: chunked, unlimited, shuffle + gzip, the on-disk types.
  EXPECT_EQ(file.layout(cpu + "/0"), (std::pair<int, hsize_t>{2, 16}));
  EXPECT_EQ(file.layout(cpu + "/time"), (std::pair<int, hsize_t>{2, 16}));
  EXPECT_TRUE(file.unlimited(cpu + "/0"));
  EXPECT_TRUE(file.unlimited(cpu + "/job"));
  std::size_t size = 0;
  H5T_sign_t sign = H5T_SGN_ERROR;
  EXPECT_EQ(file.type_class(cpu + "/time", &size, &sign), H5T_INTEGER);
  EXPECT_EQ(size, 8u);
  EXPECT_EQ(sign, H5T_SGN_2);
  EXPECT_EQ(file.type_class(cpu + "/job", &size, &sign), H5T_INTEGER);
  EXPECT_EQ(size, 8u);
  EXPECT_EQ(sign, H5T_SGN_NONE);
  EXPECT_EQ(file.type_class(cpu + "/0", &size, &sign), H5T_FLOAT);
  EXPECT_EQ(size, 8u);
}

TEST(Hdf5Output, AppendsAFullChunkWithoutWaitingForFlush) {
  TempDir dir;
  const std::string path = dir.file("chunk.h5");
  MetricInfoStore infos;
  Hdf5Output output(options_for(path, {"chunk=16", "complevel=0"}), infos);
  auto batch = [](int first) {
    std::vector<Sample> samples;
    for (int i = first; i < first + 10; ++i)
      samples.push_back(sample("h", "s", kT0 + i, 0, {{"v", static_cast<double>(i)}}));
    return samples;
  };
  output.write(batch(0));
  output.write(batch(10));  // 20 rows buffered >= 16: written now
  output.write(batch(20));  // 10 rows stay buffered
  {
    // The same process may open the file again, read-only, while the output holds it.
    Reader file(path);
    EXPECT_EQ(file.length("/h/s/time"), 20u);
    EXPECT_EQ(file.length("/h/s/v"), 20u);
    EXPECT_EQ(file.layout("/h/s/v"), (std::pair<int, hsize_t>{0, 16}));
  }
  output.flush();
  Reader file(path);
  std::vector<double> expected;
  for (int i = 0; i < 30; ++i) expected.push_back(i);
  EXPECT_EQ(file.doubles("/h/s/v"), expected);
}

TEST(Hdf5Output, ReopenStartsANewFileWhenTheOldOneWasMovedAway) {
  TempDir dir;
  const std::string path = dir.file("current.h5");
  const std::string rotated = dir.file("rotated.h5");
  MetricInfoStore infos;
  {
    Hdf5Output output(options_for(path), infos);
    output.write(std::vector<Sample>
        {sample("h", "s", kT0, 0, {{"a", 1.0}}), sample("h", "s", kT0 + 1, 0, {{"a", 2.0}})});
    output.flush();
    std::filesystem::rename(path, rotated);
    output.write(std::vector<Sample>{sample("h", "s", kT0 + 2, 0, {{"a", 3.0}})});  // still goes to the old file
    output.reopen();
    output.write(std::vector<Sample>{sample("h", "s", kT0 + 3, 0, {{"b", 4.0}})});
  }
  Reader old_file(rotated);
  EXPECT_EQ(old_file.doubles("/h/s/a"), (std::vector<double>{1.0, 2.0, 3.0}));
  Reader new_file(path);
  EXPECT_EQ(new_file.int64s("/h/s/time"), (std::vector<std::int64_t>{kT0 + 3}));
  EXPECT_EQ(new_file.doubles("/h/s/b"), (std::vector<double>{4.0}));
  // Column "a" had no value in the new file's rows: it exists there, all NaN.
  ASSERT_TRUE(new_file.exists("/h/s/a"));
  ASSERT_EQ(new_file.length("/h/s/a"), 1u);
  EXPECT_TRUE(std::isnan(new_file.doubles("/h/s/a")[0]));
}

TEST(Hdf5Output, ConstructorErrorsNameThePath) {
  MetricInfoStore infos;
  try {
    Hdf5Output output(options_for("/nonexistent-dir/x.h5"), infos);
    FAIL() << "no exception";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent-dir/x.h5"), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("cannot create"), std::string::npos) << error.what();
  }

  TempDir dir;
  const std::string not_hdf5 = dir.file("text.h5");
  std::ofstream(not_hdf5) << "not an HDF5 file\n";
  try {
    Hdf5Output output(options_for(not_hdf5), infos);
    FAIL() << "no exception";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find(not_hdf5), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("cannot open"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace fructosa::master

namespace fructosa::master {
namespace {

// Reads a variable-length string dataset written by the output.
std::vector<std::string> read_strings(const std::string& path, const std::string& dataset_path) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t dataset = H5Dopen2(file, dataset_path.c_str(), H5P_DEFAULT);
  hid_t space = H5Dget_space(dataset);
  std::vector<char*> raw(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  std::vector<std::string> values;
  if (H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) >= 0) {
    for (char* value : raw) values.emplace_back(value ? value : "");
    H5Dvlen_reclaim(type, space, H5P_DEFAULT, raw.data());
  }
  H5Tclose(type);
  H5Sclose(space);
  H5Dclose(dataset);
  H5Fclose(file);
  return values;
}

}  // namespace

TEST(Hdf5Output, StoresLabelsAsStringsAlignedWithTheRows) {
  TempDir dir;
  const std::string path = dir.file("labels.h5");
  MetricInfoStore infos;
  {
    Hdf5Output output(options_for(path), infos);
    Sample first = sample("h", "DiskPartitions", kT0, 0, {{"/.readonly", 0}});
    first.labels = {{"/.device", "/dev/sda1"}, {"/.fstype", "ext4"}};
    Sample unlabelled = sample("h", "DiskPartitions", kT0 + 1, 0, {{"/.readonly", 1}});
    output.write(std::vector<Sample>{first, unlabelled});
    output.flush();
  }
  {
    // A later run appends a row without labels and one with a new label key.
    Hdf5Output output(options_for(path), infos);
    Sample later = sample("h", "DiskPartitions", kT0 + 2, 0, {{"/.readonly", 0}});
    later.labels = {{"/home.device", "/dev/sdb1 (ünïcode)"}};
    output.write(std::vector<Sample>{sample("h", "DiskPartitions", kT0 + 3, 0, {{"/.readonly", 0}}), later});
  }
  EXPECT_EQ(read_strings(path, "/h/DiskPartitions/labels/%2F.device"),
            (std::vector<std::string>{"/dev/sda1", "", "", ""}));
  EXPECT_EQ(read_strings(path, "/h/DiskPartitions/labels/%2F.fstype"),
            (std::vector<std::string>{"ext4", "", "", ""}));
  EXPECT_EQ(read_strings(path, "/h/DiskPartitions/labels/%2Fhome.device"),
            (std::vector<std::string>{"", "", "", "/dev/sdb1 (ünïcode)"}));
}

}  // namespace fructosa::master
