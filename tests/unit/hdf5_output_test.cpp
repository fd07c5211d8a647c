#include "test_support.h"
#include "hdf5_output.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "config.h"

extern char** environ;

namespace fructosa::master {
namespace {

using test::make_sample;

namespace fs = std::filesystem;

// A temporary directory that also lists the HDF5 files of a series.
class TempDir : public test::TempDir {
 public:
  // The files of the series <stem>-<UTC time>[-N].h5, sorted by name (= by start time).
  std::vector<std::string> series(const std::string& stem = "metrics") const {
    const std::regex member(stem + R"(-\d{8}T\d{6}Z(-\d+)?\.h5)");
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(path()))
      if (std::regex_match(entry.path().filename().string(), member) &&
          !fs::is_symlink(entry.symlink_status()))
        files.push_back(entry.path().string());
    // "-1" sorts before "-2" and after the plain name of the same second.
    std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
      auto key = [](const std::string& name) {
        auto stamp = name.find_last_of('Z');
        std::string suffix = name.substr(stamp + 1, name.size() - stamp - 4);
        return std::make_pair(name.substr(0, stamp),
                              suffix.empty() ? 0 : std::stoi(suffix.substr(1)));
      };
      return key(a) < key(b);
    });
    return files;
  }
};

// The tests read tables at /<host>/<sensor> unless they ask for layout=per_sensor.
Options options_for(const std::string& path, std::vector<std::string> more = {}) {
  if (std::none_of(more.begin(), more.end(),
                   [](const std::string& pair) { return pair.starts_with("layout="); }))
    more.push_back("layout=per_host");
  more.push_back("path=" + path);
  return parse_pairs(Hdf5Output::hdf5_options(), more, "test");
}


// The file consistency flags in a version 2/3 superblock: non-zero while a writer has it open.
int superblock_flags(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<char, 12> head{};
  in.read(head.data(), head.size());
  return static_cast<unsigned char>(head[11]);
}

// Reads a file back with the HDF5 C API, independently of the code under test.
class Reader {
 public:
  explicit Reader(const std::string& path, unsigned flags = H5F_ACC_RDONLY) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    file_ = H5Fopen(path.c_str(), flags, H5P_DEFAULT);
    if (file_ < 0) throw std::runtime_error("cannot open " + path);
  }
  ~Reader() { H5Fclose(file_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  bool exists(const std::string& path) const {
    // Checks each component, as H5Lexists needs its parents to exist.
    std::size_t start = 1;
    while (start <= path.size()) {
      std::size_t slash = path.find('/', start);
      if (slash == std::string::npos) slash = path.size();
      if (H5Lexists(file_, path.substr(0, slash).c_str(), H5P_DEFAULT) <= 0) return false;
      start = slash + 1;
    }
    return true;
  }

  std::vector<std::string> members(const std::string& group_path) const {
    std::vector<std::string> names;
    hid_t group = H5Gopen2(file_, group_path.c_str(), H5P_DEFAULT);
    if (group < 0) throw std::runtime_error("no group " + group_path);
    H5G_info_t info{};
    H5Gget_info(group, &info);
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      char name[256] = {};
      H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
      names.push_back(name);
    }
    H5Gclose(group);
    return names;
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
  // A fixed-length string dataset, each row without its padding.
  std::vector<std::string> strings(const std::string& path) const {
    hid_t dataset = open(path);
    hid_t type = H5Dget_type(dataset);
    std::size_t width = H5Tget_size(type);
    bool fixed = H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) == 0;
    std::vector<char> raw(length(path) * width);
    herr_t status = fixed ? H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) : -1;
    H5Tclose(type);
    H5Dclose(dataset);
    if (status < 0) throw std::runtime_error("cannot read strings " + path);
    std::vector<std::string> values;
    for (std::size_t i = 0; i < raw.size(); i += width) {
      std::string value(raw.data() + i, width);
      value.resize(std::strlen(value.c_str()));
      values.push_back(value);
    }
    return values;
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
    herr_t status = variable ? H5Aread(attribute, type, &text) : -1;
    std::string value = (status >= 0 && text) ? text : "<unreadable>";
    if (text) H5free_memory(text);
    H5Tclose(type);
    H5Aclose(attribute);
    H5Oclose(object);
    if (!variable) return "<not a variable-length string>";
    if (cset != H5T_CSET_UTF8) return "<not UTF-8>";
    return value;
  }

  std::vector<std::uint64_t> jobs(const std::string& object_path) const {
    hid_t object = H5Oopen(file_, object_path.c_str(), H5P_DEFAULT);
    if (object < 0) throw std::runtime_error("no object " + object_path);
    hid_t attribute = H5Aopen(object, "jobs", H5P_DEFAULT);
    std::vector<std::uint64_t> values;
    if (attribute >= 0) {
      hid_t space = H5Aget_space(attribute);
      values.resize(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
      if (!values.empty()) H5Aread(attribute, H5T_NATIVE_UINT64, values.data());
      H5Sclose(space);
      H5Aclose(attribute);
    }
    H5Oclose(object);
    if (attribute < 0) throw std::runtime_error("no jobs attribute on " + object_path);
    return values;
  }

  // Filters, chunk rows and whether partial edge chunks stay unfiltered.
  struct Layout {
    int filters = 0;
    hsize_t chunk = 0;
    bool unfiltered_edges = false;
    bool operator==(const Layout&) const = default;
  };
  Layout layout(const std::string& path) const {
    hid_t dataset = open(path);
    hid_t properties = H5Dget_create_plist(dataset);
    Layout result;
    result.filters = H5Pget_nfilters(properties);
    H5Pget_chunk(properties, 1, &result.chunk);
    unsigned options = 0;
    H5Pget_chunk_opts(properties, &options);
    result.unfiltered_edges = options & H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS;
    H5Pclose(properties);
    H5Dclose(dataset);
    return result;
  }

  // Bytes each stored chunk takes (compressed ones are smaller than rows * 8).
  std::vector<hsize_t> chunk_sizes(const std::string& path) const {
    hid_t dataset = open(path);
    hid_t space = H5Dget_space(dataset);
    hsize_t chunks = 0;
    H5Dget_num_chunks(dataset, space, &chunks);
    std::vector<hsize_t> sizes;
    for (hsize_t i = 0; i < chunks; ++i) {
      hsize_t offset = 0, size = 0;
      unsigned mask = 0;
      haddr_t address = 0;
      H5Dget_chunk_info(dataset, space, i, &offset, &mask, &address, &size);
      sizes.push_back(size);
    }
    H5Sclose(space);
    H5Dclose(dataset);
    return sizes;
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
std::vector<ssize_t> open_file_objects() {
  std::vector<ssize_t> counts;
  for (unsigned types :
       {H5F_OBJ_FILE, H5F_OBJ_DATASET, H5F_OBJ_GROUP, H5F_OBJ_DATATYPE, H5F_OBJ_ATTR})
    counts.push_back(H5Fget_obj_count(static_cast<hid_t>(H5F_OBJ_ALL), types));
  return counts;
}

void expect_values(const std::vector<double>& actual, const std::vector<double>& expected,
                   const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (std::isnan(expected[i]))
      EXPECT_TRUE(std::isnan(actual[i])) << what << " row " << i << " = " << actual[i];
    else
      EXPECT_EQ(actual[i], expected[i]) << what << " row " << i;
  }
}

// A file the output gives up after write errors cannot be closed; HDF5 1.10.8 would crash when
// it tries again at exit (the output calls this too, but other tests use HDF5 first).
const bool kNoHdf5ShutdownAtExit = (H5dont_atexit(), true);

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kT0 = 1'700'000'000 * kSecond;
const double kNaN = std::nan("");

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
  EXPECT_EQ(hdf5_link_name("host", true), "%68ost");
  EXPECT_EQ(hdf5_link_name("host"), "host");
}

TEST(Hdf5Output, OptionsHaveTheDocumentedDefaultsAndLimits) {
  Options options = parse_pairs(Hdf5Output::hdf5_options(), {"path=/tmp/unused.h5"}, "test");
  EXPECT_EQ(options.get_int("complevel"), 4);
  EXPECT_EQ(options.get_int("chunk"), 4096);
  EXPECT_DOUBLE_EQ(options.get_real("flush_interval"), 5.0);
  EXPECT_EQ(options.get_int("rotate_size"), 0);
  EXPECT_DOUBLE_EQ(options.get_real("rotate_age"), 3600.0);
  EXPECT_EQ(options.get_text("layout"), "per_sensor");
  EXPECT_THROW(options_for("/tmp/x.h5", {"layout=per_job"}), ConfigError);
  EXPECT_THROW(parse_pairs(Hdf5Output::hdf5_options(), {}, "test"), ConfigError);
  EXPECT_THROW(options_for("/tmp/x.h5", {"complevel=10"}), ConfigError);
  EXPECT_THROW(options_for("/tmp/x.h5", {"chunk=8"}), ConfigError);
  EXPECT_THROW(options_for("/tmp/x.h5", {"flush_interval=0.01"}), ConfigError);
  EXPECT_THROW(options_for("/tmp/x.h5", {"rotate_size=-1"}), ConfigError);
  EXPECT_THROW(options_for("/tmp/x.h5", {"rotate_age=-5"}), ConfigError);
}

TEST(Hdf5Output, WritesSelfDescribingTablesAndReadsThemBack) {
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
  std::string file;
  {
    Hdf5Output output(options_for(path, {"chunk=16", "flush_interval=2.5"}), infos);
    EXPECT_EQ(output.name(), "hdf5");
    EXPECT_DOUBLE_EQ(output.flush_period(), 2.5);
    EXPECT_EQ(output.path(), path);
    file = output.file();
    ASSERT_EQ(dir.series(), std::vector<std::string>{file});
    EXPECT_EQ(fs::read_symlink(path), fs::path(file).filename()) << "a relative link";
    for (int i = 0; i < 3; ++i) {
      output.write(std::vector<Sample>{
          make_sample("node1", "CPUPercent", kT0 + i * kSecond, 0,
                      {{"0", 10.0 + i}, {"1", 20.0 + i}}),
          make_sample("n%2", "CPUPercent", kT0 + i * kSecond, 77, {{"0", 30.0 + i}}),
          make_sample(
              "node1", "DiskUsage", kT0 + i * kSecond, 0,
              {{"/home.percent", 50.5 + i}, {"sda.read_bytes", 1e12 + i}, {"time", 0.25 * i}}),
      });
    }
    EXPECT_EQ(output.counters().sent, 0u) << "counted when written to the file, not when buffered";
    output.flush();
    EXPECT_EQ(output.counters().sent, 18u);
    output.write(std::vector<Sample>{
        make_sample("node1", "CPUPercent", kT0 + 3 * kSecond, 12345, {{"0", 13.0}, {"1", 23.0}})});
    output.write(std::vector<Sample>{
        make_sample("node1", "CPUPercent", kT0 + 4 * kSecond, 0, {{"1", 24.0}})});  // no "0"
    output.flush();
    // A new key mid-way: its earlier rows read as NaN.
    output.write(std::vector<Sample>{make_sample("node1", "CPUPercent", kT0 + 5 * kSecond, 0,
                                                 {{"0", 15.0}, {"1", 25.0}, {"2", 35.0}})});
    output.flush();
    infos.remember("CPUPercent", "2", {"percent", Kind::gauge, "busy time of CPU 2"});
    output.write(std::vector<Sample>{make_sample("node1", "CPUPercent", kT0 + 6 * kSecond, 0,
                                                 {{"2", 36.0}, {"0", 16.0}, {"1", 26.0}})});
    output.write(std::vector<Sample>{
        make_sample("node1", "CPUPercent", kT0 + 7 * kSecond, 0, {{"1", 27.0}, {"3", 47.0}})});
  }  // the destructor flushes and writes the final attributes
  EXPECT_EQ(open_file_objects(), objects_before) << "HDF5 handles left open";
  EXPECT_EQ(objects_before, (std::vector<ssize_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(superblock_flags(file), 0) << "closed properly";

  Reader reader(path);  // through the link
  EXPECT_EQ(reader.attribute("/", "format"), "fructosa lmaster HDF5 output");
  EXPECT_EQ(reader.attribute("/", "writer").rfind("lmaster ", 0), 0u);
  EXPECT_TRUE(std::regex_match(reader.attribute("/", "created"),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  EXPECT_EQ(reader.jobs("/"), (std::vector<std::uint64_t>{0, 77, 12345}));

  const std::string cpu = "/node1/CPUPercent";
  EXPECT_EQ(reader.attribute("/node1", "host"), "node1");
  EXPECT_EQ(reader.jobs("/node1"), (std::vector<std::uint64_t>{0, 12345}));
  EXPECT_EQ(reader.attribute(cpu, "host"), "node1");
  EXPECT_EQ(reader.attribute(cpu, "sensor"), "CPUPercent");
  EXPECT_EQ(reader.jobs(cpu), (std::vector<std::uint64_t>{0, 12345}));
  std::vector<std::int64_t> times;
  for (int i = 0; i < 8; ++i) times.push_back(kT0 + i * kSecond);
  EXPECT_EQ(reader.int64s(cpu + "/time"), times);
  EXPECT_EQ(reader.attribute(cpu + "/time", "unit"), "ns since epoch");
  EXPECT_EQ(reader.uint64s(cpu + "/job"), (std::vector<std::uint64_t>{0, 0, 0, 12345, 0, 0, 0, 0}));
  expect_values(reader.doubles(cpu + "/0"), {10, 11, 12, 13, kNaN, 15, 16, kNaN}, "CPUPercent/0");
  expect_values(reader.doubles(cpu + "/1"), {20, 21, 22, 23, 24, 25, 26, 27}, "CPUPercent/1");
  expect_values(reader.doubles(cpu + "/2"), {kNaN, kNaN, kNaN, kNaN, kNaN, 35, 36, kNaN},
                "CPUPercent/2");
  expect_values(reader.doubles(cpu + "/3"), {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, 47},
                "CPUPercent/3");
  EXPECT_EQ(reader.attribute(cpu + "/0", "key"), "0");
  EXPECT_EQ(reader.attribute(cpu + "/0", "unit"), "percent");
  EXPECT_EQ(reader.attribute(cpu + "/0", "kind"), "gauge");
  EXPECT_EQ(reader.attribute(cpu + "/0", "description"), "busy time of CPU 0");
  // Described once the store knew it (at the latest when the file was closed).
  EXPECT_EQ(reader.attribute(cpu + "/2", "description"), "busy time of CPU 2");
  // Never described: empty strings.
  EXPECT_EQ(reader.attribute(cpu + "/3", "unit"), "");
  EXPECT_EQ(reader.attribute(cpu + "/3", "kind"), "");
  EXPECT_EQ(reader.attribute(cpu + "/3", "description"), "");

  // Escaped host name, job column.
  const std::string other = "/n%252/CPUPercent";
  ASSERT_TRUE(reader.exists(other));
  EXPECT_EQ(reader.attribute(other, "host"), "n%2");
  EXPECT_EQ(reader.attribute("/n%252", "host"), "n%2");
  EXPECT_EQ(reader.jobs(other), (std::vector<std::uint64_t>{77}));
  EXPECT_EQ(reader.uint64s(other + "/job"), (std::vector<std::uint64_t>{77, 77, 77}));
  expect_values(reader.doubles(other + "/0"), {30, 31, 32}, "n%2 CPUPercent/0");

  // Escaped key names; the key attribute holds the real name.
  const std::string disk = "/node1/DiskUsage";
  EXPECT_EQ(reader.length(disk + "/time"), 3u);
  ASSERT_TRUE(reader.exists(disk + "/%2Fhome.percent"));
  EXPECT_EQ(reader.attribute(disk + "/%2Fhome.percent", "key"), "/home.percent");
  EXPECT_EQ(reader.attribute(disk + "/%2Fhome.percent", "description"), "used space of /home");
  expect_values(reader.doubles(disk + "/%2Fhome.percent"), {50.5, 51.5, 52.5}, "/home.percent");
  EXPECT_EQ(reader.attribute(disk + "/sda.read_bytes", "kind"), "counter");
  EXPECT_EQ(reader.attribute(disk + "/sda.read_bytes", "unit"), "bytes");
  expect_values(reader.doubles(disk + "/sda.read_bytes"), {1e12, 1e12 + 1, 1e12 + 2},
                "sda.read_bytes");
  // A key called "time" does not clash with the time column.
  EXPECT_EQ(reader.attribute(disk + "/%74ime", "key"), "time");
  expect_values(reader.doubles(disk + "/%74ime"), {0, 0.25, 0.5}, "key time");
  EXPECT_EQ(reader.int64s(disk + "/time"),
            (std::vector<std::int64_t>{kT0, kT0 + kSecond, kT0 + 2 * kSecond}));

  // Storage once closed: chunked, unlimited, shuffle + gzip, the on-disk types.
  EXPECT_EQ(reader.layout(cpu + "/0"), (Reader::Layout{2, 16, false}));
  EXPECT_EQ(reader.layout(cpu + "/time"), (Reader::Layout{2, 16, false}));
  EXPECT_TRUE(reader.unlimited(cpu + "/0"));
  EXPECT_TRUE(reader.unlimited(cpu + "/job"));
  std::size_t size = 0;
  H5T_sign_t sign = H5T_SGN_ERROR;
  EXPECT_EQ(reader.type_class(cpu + "/time", &size, &sign), H5T_INTEGER);
  EXPECT_EQ(size, 8u);
  EXPECT_EQ(sign, H5T_SGN_2);
  EXPECT_EQ(reader.type_class(cpu + "/job", &size, &sign), H5T_INTEGER);
  EXPECT_EQ(size, 8u);
  EXPECT_EQ(sign, H5T_SGN_NONE);
  EXPECT_EQ(reader.type_class(cpu + "/0", &size, &sign), H5T_FLOAT);
  EXPECT_EQ(size, 8u);
}

TEST(Hdf5Output, StoresEveryValueBitForBit) {
  TempDir dir;
  MetricInfoStore infos;
  const std::vector<double> values = {0.1,
                                      -0.0,
                                      1e308,
                                      -4.9e-324,  // the smallest denormal
                                      std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity(),
                                      123456789012345678.0,
                                      3.141592653589793,
                                      9007199254740993.0,  // 2^53 + 1 rounds to 2^53
                                      std::numeric_limits<double>::quiet_NaN(),
                                      -std::numeric_limits<double>::quiet_NaN()};
  std::string file;
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"chunk=16"}), infos);
    file = output.file();
    // 40 rows: two full (compressed) chunks and a partial one, over several flushes.
    for (int i = 0; i < 40; ++i) {
      output.write(std::vector<Sample>{make_sample(
          "h", "s", kT0 + i, 0,
          {{"v", values[i % values.size()]}, {"count", static_cast<double>(i) * 4096}})});
      if (i % 7 == 6) output.flush();
    }
  }
  Reader reader(file);
  auto stored = reader.doubles("/h/s/v");
  ASSERT_EQ(stored.size(), 40u);
  for (std::size_t i = 0; i < stored.size(); ++i)
    EXPECT_EQ(std::memcmp(&stored[i], &values[i % values.size()], sizeof(double)), 0)
        << "row " << i << ": " << stored[i];
  auto counts = reader.doubles("/h/s/count");
  for (std::size_t i = 0; i < counts.size(); ++i) EXPECT_EQ(counts[i], i * 4096.0);
  // Compressed when the file was closed, the last (partial) chunk too.
  auto sizes = reader.chunk_sizes("/h/s/count");
  ASSERT_EQ(sizes.size(), 3u);
  for (auto size : sizes) EXPECT_LT(size, 16u * 8);
}

TEST(Hdf5Output, EachStartAndReopenStartsATimestampedFileAndMovesTheLink) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  MetricInfoStore infos;
  std::string first, second, third;
  {
    Hdf5Output output(options_for(path), infos);
    first = output.file();
    output.write(std::vector<Sample>{make_sample("h", "s", kT0, 0, {{"a", 1.0}}),
                                     make_sample("h", "s", kT0 + 1, 0, {{"a", 2.0}})});
    output.flush();
    output.write(std::vector<Sample>{make_sample("h", "s", kT0 + 2, 0, {{"a", 3.0}})});  // buffered
    output.reopen();  // flushes to the old file first
    second = output.file();
    EXPECT_NE(second, first);
    EXPECT_EQ(fs::read_symlink(path), fs::path(second).filename());
    EXPECT_EQ(superblock_flags(first), 0) << "the old file is closed";
    output.write(std::vector<Sample>{make_sample("h", "s", kT0 + 3, 0, {{"b", 4.0}})});
    EXPECT_EQ(output.counters().sent, 3u);
  }
  {
    // A new start never appends: it starts a third file.
    Hdf5Output output(options_for(path), infos);
    third = output.file();
    output.write(std::vector<Sample>{make_sample("h", "s", kT0 + 4, 0, {{"a", 5.0}})});
  }
  EXPECT_EQ(dir.series(), (std::vector<std::string>{first, second, third}));
  EXPECT_EQ(fs::read_symlink(path), fs::path(third).filename());
  const std::regex name(R"(metrics-\d{8}T\d{6}Z(-\d+)?\.h5)");
  for (const auto& file : {first, second, third})
    EXPECT_TRUE(std::regex_match(fs::path(file).filename().string(), name)) << file;
  EXPECT_FALSE(fs::exists(dir.file(".metrics.h5." + std::to_string(getpid()) + ".tmp")));

  Reader old_file(first);
  EXPECT_EQ(old_file.int64s("/h/s/time"), (std::vector<std::int64_t>{kT0, kT0 + 1, kT0 + 2}));
  EXPECT_EQ(old_file.doubles("/h/s/a"), (std::vector<double>{1.0, 2.0, 3.0}));
  Reader new_file(second);
  EXPECT_EQ(new_file.int64s("/h/s/time"), (std::vector<std::int64_t>{kT0 + 3}));
  EXPECT_EQ(new_file.doubles("/h/s/b"), (std::vector<double>{4.0}));
  EXPECT_FALSE(new_file.exists("/h/s/a")) << "a new file only has the columns of its rows";
  Reader last_file(path);
  EXPECT_EQ(last_file.doubles("/h/s/a"), (std::vector<double>{5.0}));
}

TEST(Hdf5Output, RotatesBySizeAndKeepsEveryRowOnce) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  MetricInfoStore infos;
  std::string last;
  const int rows = 3000;
  {
    Hdf5Output output(options_for(path, {"chunk=64", "rotate_size=60000"}), infos);
    for (int i = 0; i < rows; ++i) {
      std::vector<MetricValue> metrics;
      for (int k = 0; k < 4; ++k)
        metrics.push_back({"k" + std::to_string(k), std::sin(i * 0.1 + k) * 1e6});
      output.write(std::vector<Sample>{make_sample("h", "s", kT0 + i * kSecond, 0, metrics)});
      if (i % 10 == 9) output.flush();
    }
    last = output.file();
    EXPECT_EQ(output.counters().sent, rows * 4u);
  }
  auto files = dir.series();
  ASSERT_GE(files.size(), 3u);
  EXPECT_EQ(files.back(), last);
  EXPECT_EQ(fs::read_symlink(path), fs::path(last).filename());
  std::vector<std::int64_t> times;
  std::vector<double> values;
  for (const auto& file : files) {
    Reader reader(file);
    auto part = reader.int64s("/h/s/time");
    times.insert(times.end(), part.begin(), part.end());
    auto k2 = reader.doubles("/h/s/k2");
    ASSERT_EQ(k2.size(), part.size()) << file;
    values.insert(values.end(), k2.begin(), k2.end());
    // A file is rotated at the first flush past the size: it stays near rotate_size.
    if (file != last) {
      EXPECT_LT(fs::file_size(file), 60000u + 40000u) << file;
    }
  }
  ASSERT_EQ(times.size(), static_cast<std::size_t>(rows));
  for (int i = 0; i < rows; ++i) {
    EXPECT_EQ(times[i], kT0 + i * kSecond);
    EXPECT_EQ(values[i], std::sin(i * 0.1 + 2) * 1e6);
  }
}

TEST(Hdf5Output, RotatesByAgeAtAFlush) {
  TempDir dir;
  MetricInfoStore infos;
  int rows = 0;
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"rotate_age=0.05"}), infos);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (dir.series().size() < 3 && std::chrono::steady_clock::now() < deadline) {
      output.write(std::vector<Sample>{make_sample("h", "s", kT0 + rows, 0, {{"v", rows * 1.0}})});
      ++rows;
      output.flush();
    }
  }
  auto files = dir.series();
  ASSERT_GE(files.size(), 3u);
  std::vector<std::int64_t> times;
  for (const auto& file : files) {
    Reader reader(file);
    if (file == files.back() && !reader.exists("/h/s/time")) continue;  // started, no rows yet
    auto part = reader.int64s("/h/s/time");
    EXPECT_FALSE(part.empty()) << file << ": a file is rotated only once it has rows";
    times.insert(times.end(), part.begin(), part.end());
  }
  ASSERT_EQ(times.size(), static_cast<std::size_t>(rows));
  for (int i = 0; i < rows; ++i) EXPECT_EQ(times[i], kT0 + i);
}

TEST(Hdf5Output, KeepsARegularFileFoundAtPathUnderATimestampedName) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  MetricInfoStore infos;
  {
    // What an older lmaster left at `path`: a regular HDF5 file.
    hid_t old = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(old, 0);
    hid_t group = H5Gcreate2(old, "oldhost", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(group);
    H5Fclose(old);
    // Its modification time names it: 2021-06-01T12:00:00Z.
    fs::last_write_time(path, fs::file_time_type::clock::from_sys(
                                  std::chrono::sys_seconds{std::chrono::seconds{1622548800}}));
  }
  std::string file;
  {
    Hdf5Output output(options_for(path), infos);
    file = output.file();
    output.write(std::vector<Sample>{make_sample("h", "s", kT0, 0, {{"a", 1.0}})});
  }
  const std::string kept = dir.file("metrics-20210601T120000Z.h5");
  ASSERT_TRUE(fs::is_regular_file(kept));
  EXPECT_TRUE(Reader(kept).exists("/oldhost"));
  EXPECT_TRUE(fs::is_symlink(path));
  EXPECT_EQ(dir.series(), (std::vector<std::string>{kept, file}));
  EXPECT_EQ(Reader(path).doubles("/h/s/a"), (std::vector<double>{1.0}));
}

TEST(Hdf5Output, ASecondWriterOfTheSameSeriesIsRefused) {
  TempDir dir;
  MetricInfoStore infos;
  Hdf5Output first(options_for(dir.file("metrics.h5")), infos);
  try {
    Hdf5Output second(options_for(dir.file("metrics.h5")), infos);
    FAIL() << "no exception";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("another lmaster"), std::string::npos) << error.what();
  }
}

TEST(Hdf5Output, ConstructorErrorsNameThePath) {
  MetricInfoStore infos;
  try {
    Hdf5Output output(options_for("/nonexistent-dir/x.h5"), infos);
    FAIL() << "no exception";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent-dir/x.h5"), std::string::npos)
        << error.what();
  }
  TempDir dir;
  fs::create_directory(dir.file("metrics.h5"));
  try {
    Hdf5Output output(options_for(dir.file("metrics.h5")), infos);
    FAIL() << "no exception";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find(dir.file("metrics.h5")), std::string::npos)
        << error.what();
  }
}

TEST(Hdf5Output, StoresLabelsAsFixedLengthStringsAlignedWithTheRows) {
  TempDir dir;
  MetricInfoStore infos;
  std::string file;
  const std::string long_value(100, 'x');
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"chunk=16"}), infos);
    file = output.file();
    Sample first = make_sample("h", "DiskPartitions", kT0, 0, {{"/.readonly", 0}});
    first.labels = {{"/.device", "/dev/sda1"}, {"/.fstype", "ext4"}};
    Sample unlabelled = make_sample("h", "DiskPartitions", kT0 + 1, 0, {{"/.readonly", 1}});
    output.write(std::vector<Sample>{first, unlabelled});
    output.flush();
    Sample later = make_sample("h", "DiskPartitions", kT0 + 2, 0, {{"/.readonly", 0}});
    later.labels = {{"/home.device", "/dev/sdb1 (ünïcode)"}};
    output.write(std::vector<Sample>{
        make_sample("h", "DiskPartitions", kT0 + 3, 0, {{"/.readonly", 0}}), later});
    output.flush();
    // Longer than the dataset's width so far: the dataset is widened, its rows kept.
    Sample wide = make_sample("h", "DiskPartitions", kT0 + 4, 0, {{"/.readonly", 0}});
    wide.labels = {{"/.device", long_value}};
    output.write(std::vector<Sample>{wide});
  }
  Reader reader(file);
  EXPECT_EQ(reader.strings("/h/DiskPartitions/labels/%2F.device"),
            (std::vector<std::string>{"/dev/sda1", "", "", "", long_value}));
  EXPECT_EQ(reader.strings("/h/DiskPartitions/labels/%2F.fstype"),
            (std::vector<std::string>{"ext4", "", "", "", ""}));
  EXPECT_EQ(reader.strings("/h/DiskPartitions/labels/%2Fhome.device"),
            (std::vector<std::string>{"", "", "", "/dev/sdb1 (ünïcode)", ""}));
  EXPECT_EQ(reader.attribute("/h/DiskPartitions/labels/%2F.device", "key"), "/.device");
  EXPECT_EQ(reader.members("/h/DiskPartitions/labels"),
            (std::vector<std::string>{"%2F.device", "%2F.fstype", "%2Fhome.device"}));
}

// Bytes per point on disk stay small although every flush appends a few rows to every dataset
// in SWMR mode, which never reuses freed space: the file is written uncompressed (no chunk is
// ever written elsewhere) and compressed once closed (docs/hdf5.md).
TEST(Hdf5Output, FrequentSmallFlushesDoNotBloatTheFile) {
  TempDir dir;
  MetricInfoStore infos;
  std::string file;
  const int keys = 20, rows = 4000;
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"chunk=256"}), infos);
    file = output.file();
    std::uintmax_t live_size = 0;
    for (int i = 0; i < rows; ++i) {
      std::vector<MetricValue> metrics;
      for (int k = 0; k < keys; ++k)  // slowly changing gauges with one decimal
        metrics.push_back(
            {"k" + std::to_string(k), std::round(500 + 400 * std::sin(i / 300.0 + k)) / 10});
      output.write(std::vector<Sample>{make_sample("h", "s", kT0 + i * kSecond, 0, metrics)});
      if (i % 5 == 4) output.flush();
    }
    live_size = fs::file_size(file);
    // While written: uncompressed (8 bytes per value and per time and job), nothing more.
    EXPECT_LT(live_size, rows * (keys + 2) * 8.0 * 1.1);
  }
  const double bytes_per_point = static_cast<double>(fs::file_size(file)) / (keys * rows);
  // Compressed while written (a new copy of the partial chunk at every flush, as SWMR never
  // reuses space) this is ~100 B/point; uncompressed ~9.
  EXPECT_LT(bytes_per_point, 2.0) << fs::file_size(file) << " bytes";
}

// --- failures ----------------------------------------------------------------------------------

// Limits the size of files this process writes, as a full disk would (EFBIG, not a signal).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, previous_handler_);
  }

 private:
  rlimit saved_{};
  sighandler_t previous_handler_;
};

// Flushes as the runner does after a failure: again, up to 4 times (the output gives a file up
// for a new one after 3 failures in a row). True once a flush succeeded.
bool flush_with_retries(Hdf5Output& output) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    try {
      output.flush();
      return true;
    } catch (const std::runtime_error&) {
    }
  }
  return false;
}

TEST(Hdf5Output, AFailedFlushKeepsTheRowsAndALaterOneWritesThemOnce) {
  TempDir dir;
  MetricInfoStore infos;
  std::string first_file;
  std::uint64_t sent_after_failure = 0;
  auto batch = [](int first, int count) {
    std::vector<Sample> samples;
    for (int i = first; i < first + count; ++i) {
      std::vector<MetricValue> metrics;
      for (int k = 0; k < 50; ++k)
        metrics.push_back({"k" + std::to_string(k), std::sin(i * 1.7 + k) * 1e9});
      samples.push_back(make_sample("h", "s", kT0 + i, 0, metrics));
    }
    return samples;
  };
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"chunk=256"}), infos);
    first_file = output.file();
    output.write(batch(0, 10));
    output.flush();
    {
      FileSizeLimit full(fs::file_size(first_file) + 4096);  // the "disk" is full
      output.write(batch(10, 1000));
      EXPECT_THROW(output.flush(), std::runtime_error);
      sent_after_failure = output.counters().sent;
    }
    output.write(batch(1010, 10));
    // Room again: every buffered row goes out (to a new file if HDF5 could not recover the old
    // file's handle).
    EXPECT_TRUE(flush_with_retries(output));
    EXPECT_EQ(output.counters().sent, 1020u * 50);
  }
  EXPECT_EQ(sent_after_failure, 10u * 50);
  std::vector<std::int64_t> times;
  std::vector<double> values;
  for (const auto& file : dir.series()) {
    if (superblock_flags(file) != 0) {
      // A file given up: HDF5 may still hold it in this process after its failed close; it
      // keeps the 10 rows flushed before the failure (the repair test reads such files).
      EXPECT_EQ(file, first_file);
      times = {kT0,     kT0 + 1, kT0 + 2, kT0 + 3, kT0 + 4,
               kT0 + 5, kT0 + 6, kT0 + 7, kT0 + 8, kT0 + 9};
      for (int i = 0; i < 10; ++i) values.push_back(std::sin(i * 1.7 + 7) * 1e9);
      continue;
    }
    Reader reader(file);
    auto part = reader.int64s("/h/s/time");
    times.insert(times.end(), part.begin(), part.end());
    auto column = reader.doubles("/h/s/k7");
    values.insert(values.end(), column.begin(), column.end());
  }
  ASSERT_EQ(times.size(), 1020u);
  for (int i = 0; i < 1020; ++i) {
    EXPECT_EQ(times[i], kT0 + i);
    EXPECT_EQ(values[i], std::sin(i * 1.7 + 7) * 1e9);
  }
}

TEST(Hdf5Output, WriteRefusesSamplesOnceTooManyWaitForAFailingFile) {
  TempDir dir;
  MetricInfoStore infos;
  int accepted = 0;
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"max_buffered_points=1000000"}), infos);
    output.write(std::vector<Sample>{make_sample("h", "s", kT0, 0, {{"v", 1.0}})});
    output.flush();
    bool refused = false;
    {
      FileSizeLimit full(fs::file_size(output.file()) + 1024);
      // 1,000,000 points are accepted into memory; past that write() must refuse.
      for (int round = 0; round < 20 && !refused; ++round) {
        std::vector<Sample> batch;
        for (int i = 0; i < 100; ++i) {
          std::vector<MetricValue> metrics;
          for (int k = 0; k < 1000; ++k) metrics.push_back({"k" + std::to_string(k), i + k * 0.5});
          batch.push_back(make_sample("h", "wide", kT0 + round * 100 + i, 0, metrics));
        }
        try {
          output.write(batch);
          ++accepted;
          if (round % 3 == 2) {
            EXPECT_THROW(output.flush(), std::runtime_error);
          }
        } catch (const OutputError& error) {
          refused = true;
          EXPECT_TRUE(error.undelivered.empty()) << "none of them was taken";
          EXPECT_NE(std::string(error.what()).find(output.path()), std::string::npos)
              << error.what();
        }
      }
    }
    EXPECT_TRUE(refused);
    EXPECT_EQ(accepted, 10);
    // Room again: what was accepted is written, to a new file when HDF5 cannot recover the file
    // handle (it gives a file up after 3 failed flushes in a row; the runner retries).
    EXPECT_TRUE(flush_with_retries(output));
    EXPECT_EQ(output.counters().sent, 1u + accepted * 100'000u);
  }
  std::size_t rows = 0;
  std::size_t files_given_up = 0;
  for (const auto& file : dir.series()) {
    if (superblock_flags(file) != 0) {
      // Given up while its flushes failed: no "wide" row was ever committed there (and HDF5
      // may still hold it in this process after its failed close).
      ++files_given_up;
      continue;
    }
    Reader reader(file);
    if (reader.exists("/h/wide/time")) rows += reader.length("/h/wide/time");
  }
  EXPECT_GE(files_given_up, 1u);
  EXPECT_EQ(rows, accepted * 100u);
}

// --- other processes: a SWMR reader, a writer killed with SIGKILL -------------------------------

// Runs this test program again as a child with `environment` added, and the gtest filter
// `filter`; its stdout comes back through a pipe.
class Child {
 public:
  Child(const std::string& filter, const std::vector<std::string>& environment) {
    int pipe_ends[2];
    if (pipe(pipe_ends) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], 1);
    posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
    std::vector<std::string> variables = environment;
    for (char** entry = environ; *entry; ++entry) variables.emplace_back(*entry);
    std::vector<char*> envp;
    for (auto& variable : variables) envp.push_back(variable.data());
    envp.push_back(nullptr);
    std::string self = fs::read_symlink("/proc/self/exe").string();
    std::string filter_arg = "--gtest_filter=" + filter;
    char* argv[] = {self.data(), filter_arg.data(), nullptr};
    if (posix_spawn(&pid_, self.c_str(), &actions, nullptr, argv, envp.data()) != 0)
      throw std::runtime_error("posix_spawn failed");
    posix_spawn_file_actions_destroy(&actions);
    close(pipe_ends[1]);
    out_ = fdopen(pipe_ends[0], "r");
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_) fclose(out_);
  }
  // The next line the child printed that starts with `prefix` (without it); "" at its end.
  std::string line(const std::string& prefix) {
    char buffer[4096];
    while (fgets(buffer, sizeof buffer, out_)) {
      std::string text = buffer;
      if (!text.empty() && text.back() == '\n') text.pop_back();
      if (text.rfind(prefix, 0) == 0) return text.substr(prefix.size());
    }
    return "";
  }
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

bool wait_for_file(const std::string& path) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// The reader's side of SwmrReaderSeesRowsWhileTheOutputWrites, in a process of its own (in one
// process HDF5 would share the writer's open file instead of reading the disk).
TEST(Hdf5SwmrReaderChild, Read) {
  const char* path = std::getenv("FRUCTOSA_HDF5_SWMR_READER");
  if (!path) GTEST_SKIP() << "runs as a child of SwmrReaderSeesRowsWhileTheOutputWrites";
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t plain = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  std::printf("SWMR plain-open=%s\n", plain >= 0 ? "ok" : "refused");
  if (plain >= 0) H5Fclose(plain);
  // Open, retrying while the writer is outside SWMR mode for a moment.
  hid_t file = -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((file = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT)) < 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (file < 0) {
    std::printf("SWMR open-failed\n");
    return;
  }
  hid_t time = H5Dopen2(file, "/h/s/time", H5P_DEFAULT);
  hid_t value = H5Dopen2(file, "/h/s/v", H5P_DEFAULT);
  auto report = [&] {
    H5Drefresh(time);
    H5Drefresh(value);
    // len(time) first: the other datasets may be a flush ahead of it.
    hid_t space = H5Dget_space(time);
    hsize_t rows = 0;
    H5Sget_simple_extent_dims(space, &rows, nullptr);
    H5Sclose(space);
    std::vector<double> values(rows);
    hid_t file_space = H5Dget_space(value);
    hsize_t start = 0;
    if (rows > 0) {
      H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, nullptr, &rows, nullptr);
      hid_t memory_space = H5Screate_simple(1, &rows, nullptr);
      H5Dread(value, H5T_NATIVE_DOUBLE, memory_space, file_space, H5P_DEFAULT, values.data());
      H5Sclose(memory_space);
    }
    H5Sclose(file_space);
    std::string text;
    for (double v : values) text += " " + std::to_string(static_cast<int>(v));
    std::printf("SWMR rows=%llu values=%s\n", static_cast<unsigned long long>(rows), text.c_str());
    std::fflush(stdout);
  };
  report();
  if (!wait_for_file(std::string(path) + ".go")) return;
  report();
  H5Dclose(value);
  H5Dclose(time);
  H5Fclose(file);
}

TEST(Hdf5Output, SwmrReaderSeesRowsWhileTheOutputWrites) {
  TempDir dir;
  MetricInfoStore infos;
  Hdf5Output output(options_for(dir.file("metrics.h5"), {"chunk=16"}), infos);
  for (int i = 0; i < 3; ++i)
    output.write(std::vector<Sample>{make_sample("h", "s", kT0 + i, 0, {{"v", i * 10.0}})});
  output.flush();
  Child reader("Hdf5SwmrReaderChild.Read", {"FRUCTOSA_HDF5_SWMR_READER=" + output.path()});
  EXPECT_EQ(reader.line("SWMR plain-open="), "refused")
      << "a reader without SWMR cannot open a file being written";
  EXPECT_EQ(reader.line("SWMR rows="), "3 values= 0 10 20");
  // More rows over several chunks, a new table and a new column (created outside SWMR mode).
  for (int i = 3; i < 20; ++i)
    output.write(std::vector<Sample>{make_sample("h", "s", kT0 + i, 0, {{"v", i * 10.0}}),
                                     make_sample("h", "other", kT0 + i, 0, {{"w", 1.0}})});
  output.write(
      std::vector<Sample>{make_sample("h", "s", kT0 + 20, 0, {{"v", 200.0}, {"new", 1.0}})});
  output.flush();
  std::ofstream(output.path() + ".go") << "go\n";
  std::string expected = "21 values=";
  for (int i = 0; i <= 20; ++i) expected += " " + std::to_string(i * 10);
  EXPECT_EQ(reader.line("SWMR rows="), expected);
  int status = reader.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// The writer's side of RepairsAFileLeftByAKilledWriter: writes, flushes, buffers more, and is
// killed with SIGKILL (no destructor, no close).
TEST(Hdf5KilledWriterChild, Write) {
  const char* path = std::getenv("FRUCTOSA_HDF5_KILLED_WRITER");
  if (!path) GTEST_SKIP() << "runs as a child of RepairsAFileLeftByAKilledWriter";
  MetricInfoStore infos;
  auto* output = new Hdf5Output(options_for(path, {"chunk=16"}), infos);
  for (int i = 0; i < 40; ++i) {
    output->write(
        std::vector<Sample>{make_sample("h", "s", kT0 + i, i < 20 ? 0 : 5, {{"v", i * 1.0}})});
    if (i % 5 == 4) output->flush();
  }
  output->write(
      std::vector<Sample>{make_sample("h", "s", kT0 + 40, 0, {{"v", 40.0}})});  // never flushed
  std::printf("KILLED file=%s\n", output->file().c_str());
  std::fflush(stdout);
  raise(SIGKILL);
}

// The per_sensor layout: hosts a (kT0 .. +29) and b (kT0+100 .. +109, job 7 from +105) in one
// table, flushed every 5 rounds, then killed with one round buffered.
TEST(Hdf5KilledWriterChild, WritePerSensor) {
  const char* path = std::getenv("FRUCTOSA_HDF5_KILLED_PER_SENSOR");
  if (!path) GTEST_SKIP() << "runs as a child of PerSensorLayoutIsRepairedAndNotStoredTwice";
  MetricInfoStore infos;
  auto* output = new Hdf5Output(options_for(path, {"chunk=16", "layout=per_sensor"}), infos);
  for (int i = 0; i < 30; ++i) {
    std::vector<Sample> round{make_sample("a", "s", kT0 + i, 0, {{"v", i * 1.0}})};
    if (i < 10) round.push_back(make_sample("b", "s", kT0 + 100 + i, i < 5 ? 0 : 7, {{"v", -i * 1.0}}));
    output->write(round);
    if (i % 5 == 4) output->flush();
  }
  output->write(std::vector<Sample>{make_sample("a", "s", kT0 + 30, 0, {{"v", 30.0}})});  // never flushed
  std::printf("KILLED file=%s\n", output->file().c_str());
  std::fflush(stdout);
  raise(SIGKILL);
}

// A table whose last flush was cut short: `v` and `job` hold 5 rows, `time` grew to 4 rows
// but its 4th value was never written (it reads as the fill value 0).
TEST(Hdf5KilledWriterChild, HalfFlush) {
  const char* path = std::getenv("FRUCTOSA_HDF5_HALF_FLUSH");
  if (!path) GTEST_SKIP() << "runs as a child of RepairsAFileLeftByAKilledWriter";
  hid_t access = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_libver_bounds(access, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, access);
  hid_t host = H5Gcreate2(file, "h", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t group = H5Gcreate2(host, "s", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  auto dataset = [&](const char* name, hid_t type, const void* data, hsize_t extent,
                     hsize_t written) {
    hsize_t dims = 0, max_dims = H5S_UNLIMITED, chunk = 16;
    hid_t space = H5Screate_simple(1, &dims, &max_dims);
    hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(properties, 1, &chunk);
    hid_t id = H5Dcreate2(group, name, type, space, H5P_DEFAULT, properties, H5P_DEFAULT);
    H5Dset_extent(id, &written);
    H5Dwrite(id, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dset_extent(id, &extent);
    H5Pclose(properties);
    H5Sclose(space);
    return id;
  };
  const std::int64_t times[] = {kT0, kT0 + 1, kT0 + 2};
  const std::uint64_t jobs[] = {0, 3, 3, 9, 9};
  const double values[] = {1, 2, 3, 4, 5};
  dataset("time", H5T_NATIVE_INT64, times, 4, 3);
  dataset("job", H5T_NATIVE_UINT64, jobs, 5, 5);
  dataset("v", H5T_NATIVE_DOUBLE, values, 5, 5);
  H5Fstart_swmr_write(file);
  H5Fflush(file, H5F_SCOPE_GLOBAL);
  std::printf("KILLED half\n");
  std::fflush(stdout);
  raise(SIGKILL);
}

TEST(Hdf5Output, RepairsAFileLeftByAKilledWriter) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  std::string killed_file;
  {
    Child writer("Hdf5KilledWriterChild.Write", {"FRUCTOSA_HDF5_KILLED_WRITER=" + path});
    killed_file = writer.line("KILLED file=");
    int status = writer.wait();
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  }
  const std::string half_file = dir.file("metrics-20200101T000000Z.h5");
  {
    Child writer("Hdf5KilledWriterChild.HalfFlush", {"FRUCTOSA_HDF5_HALF_FLUSH=" + half_file});
    EXPECT_EQ(writer.line("KILLED "), "half");
    writer.wait();
  }
  ASSERT_FALSE(killed_file.empty());
  EXPECT_NE(superblock_flags(killed_file), 0) << "left marked open for write";
  EXPECT_NE(superblock_flags(half_file), 0);
  EXPECT_THROW(Reader{killed_file}, std::runtime_error) << "plain readers refuse it";
  {
    // A SWMR reader can read it as it is.
    Reader swmr(killed_file, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ);
    EXPECT_EQ(swmr.length("/h/s/time"), 40u);
  }

  MetricInfoStore infos;
  std::string new_file;
  {
    Hdf5Output output(options_for(path, {"chunk=16"}), infos);  // repairs, then starts anew
    new_file = output.file();
  }
  EXPECT_NE(new_file, killed_file);
  EXPECT_EQ(superblock_flags(killed_file), 0);
  EXPECT_EQ(superblock_flags(half_file), 0);
  {
    Reader reader(killed_file);
    std::vector<std::int64_t> times;
    std::vector<double> values;
    for (int i = 0; i < 40; ++i) {
      times.push_back(kT0 + i);
      values.push_back(i);
    }
    EXPECT_EQ(reader.int64s("/h/s/time"), times) << "every flushed row, the unflushed one lost";
    EXPECT_EQ(reader.doubles("/h/s/v"), values);
    EXPECT_EQ(reader.length("/h/s/job"), 40u);
    EXPECT_EQ(reader.jobs("/h/s"), (std::vector<std::uint64_t>{0, 5}));
    EXPECT_EQ(reader.jobs("/"), (std::vector<std::uint64_t>{0, 5}));
  }
  {
    Reader reader(half_file);
    EXPECT_EQ(reader.int64s("/h/s/time"), (std::vector<std::int64_t>{kT0, kT0 + 1, kT0 + 2}));
    EXPECT_EQ(reader.doubles("/h/s/v"), (std::vector<double>{1, 2, 3}));
    EXPECT_EQ(reader.uint64s("/h/s/job"), (std::vector<std::uint64_t>{0, 3, 3}));
    EXPECT_EQ(reader.jobs("/h/s"), (std::vector<std::uint64_t>{0, 3}));
  }
}

// After a crash lmaster replays its journal from each output's last saved position, which can be
// older than the last flush that reached the file: those rows are not stored twice.
TEST(Hdf5Output, AfterACrashRowsAlreadyInTheFileAreNotStoredAgain) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  {
    // Stores kT0 .. kT0+39 (job 0 below +20, job 5 from +20 on), then is killed.
    Child writer("Hdf5KilledWriterChild.Write", {"FRUCTOSA_HDF5_KILLED_WRITER=" + path});
    writer.line("KILLED file=");
    writer.wait();
  }
  MetricInfoStore infos;
  std::string new_file;
  {
    Hdf5Output output(options_for(path, {"chunk=16"}), infos);
    new_file = output.file();
    std::vector<Sample> replay;
    for (int i = 15; i < 23; ++i) replay.push_back(make_sample("h", "s", kT0 + i, 0, {{"v", i * 1.0}}));
    for (int i = 35; i < 45; ++i) replay.push_back(make_sample("h", "s", kT0 + i, 5, {{"v", i * 1.0}}));
    replay.push_back(make_sample("h", "other", kT0 + 1, 0, {{"v", 1.0}}));  // a table it never had
    replay.push_back(make_sample("h", "s", kT0 + 16, 0, {{"v", 16.0}}));     // past its mark: stored
    output.write(replay);
    output.flush();
  }
  Reader reader(new_file);
  EXPECT_EQ(reader.int64s("/h/s/time"),
            (std::vector<std::int64_t>{kT0 + 20, kT0 + 21, kT0 + 22, kT0 + 40, kT0 + 41, kT0 + 42, kT0 + 43,
                                       kT0 + 44, kT0 + 16}));
  EXPECT_EQ(reader.uint64s("/h/s/job"), (std::vector<std::uint64_t>{0, 0, 0, 5, 5, 5, 5, 5, 0}));
  EXPECT_EQ(reader.int64s("/h/other/time"), (std::vector<std::int64_t>{kT0 + 1}));
}

// layout = per_sensor: one table per sensor at the root, whose `host` column names each row's
// host; the same rows, columns, labels and attributes as per_host otherwise.
TEST(Hdf5Output, PerSensorLayoutKeepsOneTablePerSensorWithAHostColumn) {
  TempDir dir;
  MetricInfoStore infos;
  infos.remember("s", "v", {.unit = "bytes", .kind = Kind::gauge, .description = "a value"});
  const std::string long_host = "a-host-name-longer-than-sixteen-bytes.example.org";
  std::string file;
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"chunk=16", "layout=per_sensor"}),
                      infos);
    file = output.file();
    Sample labelled = make_sample("n/1", "s", kT0 + 1, 3, {{"v", 1.5}, {"host", 9}});
    labelled.labels = {{"device", "sda"}};
    output.write(std::vector<Sample>{make_sample("n0", "s", kT0, 0, {{"v", 0.5}}), labelled,
                                     make_sample("n0", "other", kT0, 0, {{"w", 7}})});
    output.flush();
    // A longer host name widens the host column; its rows are kept.
    output.write(std::vector<Sample>{make_sample(long_host, "s", kT0 + 2, 0, {{"v", 2.5}}),
                                     make_sample("n0", "s", kT0 + 3, 0, {{"v", 3.5}})});
    output.flush();
    output.write(std::vector<Sample>{make_sample("n/1", "s", kT0 + 4, 0, {{"v", 4.5}})});
  }  // flushed, closed and compressed
  Reader reader(file);
  EXPECT_EQ(reader.attribute("/", "layout"), "per_sensor");
  EXPECT_EQ(reader.members("/"), (std::vector<std::string>{"other", "s"}));
  EXPECT_EQ(reader.strings("/s/host"),
            (std::vector<std::string>{"n0", "n/1", long_host, "n0", "n/1"}));
  EXPECT_EQ(reader.int64s("/s/time"),
            (std::vector<std::int64_t>{kT0, kT0 + 1, kT0 + 2, kT0 + 3, kT0 + 4}));
  EXPECT_EQ(reader.uint64s("/s/job"), (std::vector<std::uint64_t>{0, 3, 0, 0, 0}));
  EXPECT_EQ(reader.doubles("/s/v"), (std::vector<double>{0.5, 1.5, 2.5, 3.5, 4.5}));
  EXPECT_EQ(reader.attribute("/s/v", "unit"), "bytes");
  // A metric key named like the host column is escaped, as time and job are.
  EXPECT_EQ(reader.attribute("/s/%68ost", "key"), "host");
  const auto hosts_key = reader.doubles("/s/%68ost");
  ASSERT_EQ(hosts_key.size(), 5u);
  EXPECT_EQ(hosts_key[1], 9);
  EXPECT_TRUE(std::isnan(hosts_key[0]));
  EXPECT_EQ(reader.strings("/s/labels/device"), (std::vector<std::string>{"", "sda", "", "", ""}));
  EXPECT_EQ(reader.strings("/other/host"), (std::vector<std::string>{"n0"}));
  EXPECT_EQ(reader.attribute("/s", "sensor"), "s");
  EXPECT_EQ(reader.jobs("/s"), (std::vector<std::uint64_t>{0, 3}));
  EXPECT_EQ(reader.jobs("/"), (std::vector<std::uint64_t>{0, 3}));
}

TEST(Hdf5Output, PerSensorLayoutIsRepairedAndNotStoredTwiceAfterACrash) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  std::string killed_file;
  {
    Child writer("Hdf5KilledWriterChild.WritePerSensor", {"FRUCTOSA_HDF5_KILLED_PER_SENSOR=" + path});
    killed_file = writer.line("KILLED file=");
    int status = writer.wait();
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  }
  MetricInfoStore infos;
  std::string new_file;
  {
    // Repairs the killed file, then takes the journal's replay: per host, rows up to what the
    // file holds are skipped.
    Hdf5Output output(options_for(path, {"chunk=16", "layout=per_sensor"}), infos);
    new_file = output.file();
    std::vector<Sample> replay;
    for (int i = 27; i < 32; ++i) replay.push_back(make_sample("a", "s", kT0 + i, 0, {{"v", i * 1.0}}));
    for (int i = 8; i < 12; ++i) replay.push_back(make_sample("b", "s", kT0 + 100 + i, 7, {{"v", -i * 1.0}}));
    replay.push_back(make_sample("c", "s", kT0 + 1, 0, {{"v", 1.0}}));  // a host it never had
    output.write(replay);
  }
  Reader repaired(killed_file);
  std::vector<std::string> hosts;
  std::vector<std::int64_t> times;
  for (int i = 0; i < 30; ++i) {
    hosts.push_back("a");
    times.push_back(kT0 + i);
    if (i < 10) {
      hosts.push_back("b");
      times.push_back(kT0 + 100 + i);
    }
  }
  EXPECT_EQ(repaired.strings("/s/host"), hosts) << "every flushed row, the unflushed one lost";
  EXPECT_EQ(repaired.int64s("/s/time"), times);
  EXPECT_EQ(repaired.length("/s/v"), times.size());
  EXPECT_EQ(repaired.jobs("/s"), (std::vector<std::uint64_t>{0, 7}));

  Reader reader(new_file);
  EXPECT_EQ(reader.strings("/s/host"), (std::vector<std::string>{"a", "a", "b", "b", "c"}));
  EXPECT_EQ(reader.int64s("/s/time"),
            (std::vector<std::int64_t>{kT0 + 30, kT0 + 31, kT0 + 110, kT0 + 111, kT0 + 1}));
}

}  // namespace
}  // namespace fructosa::master
