// What an HDF5 output file holds, in both layouts: self-describing tables (attributes, escaped
// names, on-disk types and storage), every value bit for bit, labels as fixed-length strings, and
// the per_sensor layout's host column. Helpers: hdf5_test_support.h.
#include "hdf5_test_support.h"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <regex>
#include <string>
#include <vector>

namespace fructosa::master {
namespace {

using namespace hdf5_test;

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
  // The tables, and the job index (hdf5_job_index_test.cpp).
  EXPECT_EQ(reader.members("/"), (std::vector<std::string>{".jobs", "other", "s"}));
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

TEST(Hdf5Output, KeysInAnyOrderMissingOrTwiceLandInTheirColumns) {
  // Columns are found by the position of a key in the last row (column_of): rows whose keys
  // come in another order, lack one, add one or repeat one must still land right.
  TempDir dir;
  MetricInfoStore infos;
  std::string file;
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"chunk=16", "layout=per_sensor"}), infos);
    file = output.file();
    output.write(std::vector<Sample>{
        make_sample("n0", "s", kT0, 0, {{"a", 1}, {"b", 2}}),
        make_sample("n1", "s", kT0, 0, {{"b", 20}, {"a", 10}}),
        make_sample("n0", "s", kT0 + 1, 0, {{"b", 3}}),
        make_sample("n1", "s", kT0 + 1, 0, {{"a", 11}, {"c", 12}, {"b", 13}}),
        make_sample("n0", "s", kT0 + 2, 0, {{"a", 4}, {"a", 5}, {"b", 6}}),
    });
  }
  Reader reader(file);
  expect_values(reader.doubles("/s/a"), {1, 10, kNaN, 11, 5}, "a");
  expect_values(reader.doubles("/s/b"), {2, 20, 3, 13, 6}, "b");
  expect_values(reader.doubles("/s/c"), {kNaN, kNaN, kNaN, 12, kNaN}, "c");
}

TEST(Hdf5Output, LabelsAndTablesInAnyOrderLandInTheirPlaces) {
  // The table of a row is guessed from the one that followed the last row's table, a label's
  // column from its position in the last row, and a label's strings are reused across flushes:
  // rows that change the order, skip a label or repeat one must still land right, and a row
  // without a label after a flush must not show the value the row before the flush had.
  for (const char* layout : {"layout=per_sensor", "layout=per_host"}) {
    SCOPED_TRACE(layout);
    TempDir dir;
    MetricInfoStore infos;
    const std::string long_value(40, 'x');
    std::string file;
    auto labelled = [](std::string host, std::string sensor, std::int64_t time, std::vector<Label> labels) {
      Sample sample = make_sample(std::move(host), std::move(sensor), time, 0, {{"v", static_cast<double>(time)}});
      sample.labels = std::move(labels);
      return sample;
    };
    {
      Hdf5Output output(options_for(dir.file("metrics.h5"), {"chunk=16", layout}), infos);
      file = output.file();
      output.write(std::vector<Sample>{
          labelled("n0", "s", kT0, {{"a", long_value}, {"b", "b0"}}),
          labelled("n0", "t", kT0, {}),
          labelled("n1", "s", kT0, {{"b", "n1b0"}}),
          labelled("n0", "s", kT0 + 1, {{"b", "b1"}, {"a", "a1"}}),
          labelled("n0", "u", kT0 + 1, {}),
          labelled("n0", "t", kT0 + 1, {}),
          labelled("n0", "s", kT0 + 2, {{"a", "dup1"}, {"a", "dup2"}}),
      });
      output.flush();
      output.write(std::vector<Sample>{
          labelled("n0", "t", kT0 + 3, {}),
          labelled("n0", "s", kT0 + 3, {}),
          labelled("n0", "s", kT0 + 4, {{"b", "b4"}}),
          labelled("n1", "s", kT0 + 4, {{"b", "n1b4"}}),
      });
    }
    Reader reader(file);
    if (std::string(layout) == "layout=per_host") {
      EXPECT_EQ(reader.int64s("/n0/s/time"), (std::vector<std::int64_t>{kT0, kT0 + 1, kT0 + 2, kT0 + 3, kT0 + 4}));
      EXPECT_EQ(reader.strings("/n0/s/labels/a"), (std::vector<std::string>{long_value, "a1", "dup2", "", ""}));
      EXPECT_EQ(reader.strings("/n0/s/labels/b"), (std::vector<std::string>{"b0", "b1", "", "", "b4"}));
      EXPECT_EQ(reader.strings("/n1/s/labels/b"), (std::vector<std::string>{"n1b0", "n1b4"}));
      EXPECT_EQ(reader.int64s("/n0/t/time"), (std::vector<std::int64_t>{kT0, kT0 + 1, kT0 + 3}));
      EXPECT_EQ(reader.int64s("/n0/u/time"), (std::vector<std::int64_t>{kT0 + 1}));
    } else {
      EXPECT_EQ(reader.strings("/s/host"), (std::vector<std::string>{"n0", "n1", "n0", "n0", "n0", "n0", "n1"}));
      EXPECT_EQ(reader.int64s("/s/time"),
                (std::vector<std::int64_t>{kT0, kT0, kT0 + 1, kT0 + 2, kT0 + 3, kT0 + 4, kT0 + 4}));
      EXPECT_EQ(reader.strings("/s/labels/a"),
                (std::vector<std::string>{long_value, "", "a1", "dup2", "", "", ""}));
      EXPECT_EQ(reader.strings("/s/labels/b"),
                (std::vector<std::string>{"b0", "n1b0", "b1", "", "", "b4", "n1b4"}));
      EXPECT_EQ(reader.int64s("/t/time"), (std::vector<std::int64_t>{kT0, kT0 + 1, kT0 + 3}));
      EXPECT_EQ(reader.int64s("/u/time"), (std::vector<std::int64_t>{kT0 + 1}));
    }
  }
}

TEST(Hdf5Output, LmastersPerAgentKeysAreRowsOfTheirOwnTableNotColumns) {
  // agent.<host>.<key> of lmaster's own sensor: four columns per agent would be 20,000 datasets
  // at 5000 agents; they are a row per agent of lmaster_agents, the master in a label.
  TempDir dir;
  MetricInfoStore infos;
  infos.remember("lmaster_agents", "up", {.unit = "bool", .kind = Kind::gauge, .description = "up"});
  std::string file;
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"chunk=16", "layout=per_sensor"}), infos);
    file = output.file();
    for (int i = 0; i < 2; ++i)
      output.write(std::vector<Sample>{make_sample(
          "head", "lmaster", kT0 + i * kSecond, 0,
          {{"received", 100.0 + i}, {"agent.n1.up", 1}, {"agent.n1.rate", 20.0 + i}, {"agent.n2_example_org.up", 0},
           {"agent.n2_example_org.rate", 0}, {"hdf5.sent", 7}})});
  }
  Reader reader(file);
  EXPECT_EQ(reader.members("/"), (std::vector<std::string>{".jobs", "lmaster", "lmaster_agents"}));
  EXPECT_EQ(reader.members("/lmaster"), (std::vector<std::string>{"hdf5.sent", "host", "job", "received", "time"}));
  EXPECT_EQ(reader.doubles("/lmaster/received"), (std::vector<double>{100, 101}));
  EXPECT_EQ(reader.strings("/lmaster_agents/host"),
            (std::vector<std::string>{"n1", "n2_example_org", "n1", "n2_example_org"}));
  EXPECT_EQ(reader.int64s("/lmaster_agents/time"), (std::vector<std::int64_t>{kT0, kT0, kT0 + kSecond, kT0 + kSecond}));
  EXPECT_EQ(reader.doubles("/lmaster_agents/up"), (std::vector<double>{1, 0, 1, 0}));
  EXPECT_EQ(reader.doubles("/lmaster_agents/rate"), (std::vector<double>{20, 0, 21, 0}));
  EXPECT_EQ(reader.strings("/lmaster_agents/labels/master"), (std::vector<std::string>{"head", "head", "head", "head"}));
  EXPECT_EQ(reader.attribute("/lmaster_agents/up", "unit"), "bool");
}

}  // namespace
}  // namespace fructosa::master
