// per_host files of more datasets than datasets_kept_open: the output closes each
// table's handles once it is written (the HDF5 library's memory then stays that of one table, not
// 10-17 KiB per dataset of the file), and every row still reads back, written over flushes that
// reopen the datasets, with hosts, columns and labels that come later and chunks that fill up.
// A few hosts keep their handles open between flushes (the faster way while they are few). The
// writer runs in a child process (its datasets leave the heap of this one alone: the
// MemoryGuard tests measure it). Helpers: hdf5_test_support.h.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hdf5_test_support.h"

namespace fructosa::master {
namespace {

using namespace hdf5_test;

// Datasets and groups open in this process, all files.
ssize_t open_datasets() {
  return H5Fget_obj_count(static_cast<hid_t>(H5F_OBJ_ALL), H5F_OBJ_DATASET);
}
ssize_t open_groups() { return H5Fget_obj_count(static_cast<hid_t>(H5F_OBJ_ALL), H5F_OBJ_GROUP); }

constexpr int kKeys = 30;  // + time and job: 32 datasets per host
constexpr int kFewHosts = 10;
// datasets_kept_open here (16,384 by default: the same code, in a tenth of the time), and enough
// hosts for the file to go past it after the few hosts' first flush.
constexpr int kKeptOpen = 400;
constexpr int kHosts = kKeptOpen / (kKeys + 2) + 2;
constexpr int kFlushes = 6;
constexpr int kRowsPerFlush = 3;  // 18 rows in all: a second chunk of 16 rows
constexpr int kLateFlush = 3;     // host 0's column `late` and host 1's label `device` come here

std::string host_name(int h) { return "node" + std::to_string(h); }
// Exact in a double: host, key, row.
double value(int h, int k, int row) { return h * 10000.0 + k * 100.0 + row; }
// The flush that brings a host's first rows: the few hosts from the first, the others after.
int first_flush(int h) { return h < kFewHosts ? 0 : 1; }

TEST(Hdf5ManyHostsChild, Write) {
  const char* directory = std::getenv("FRUCTOSA_HDF5_MANY_HOSTS");
  if (!directory) GTEST_SKIP() << "runs as a child of ManyHostsAreWrittenWithTheirDatasets...";
  H5open();
  const ssize_t datasets_before = open_datasets();
  const ssize_t groups_before = open_groups();
  MetricInfoStore infos;
  std::string file;
  {
    Hdf5Output output(options_for(std::string(directory) + "/metrics.h5", {"chunk=16", "datasets_kept_open=" + std::to_string(kKeptOpen)}),
                      infos);
    file = output.file();
    for (int flush = 0; flush < kFlushes; ++flush) {
      std::vector<Sample> samples;
      for (int h = 0; h < (flush == 0 ? kFewHosts : kHosts); ++h)
        for (int r = 0; r < kRowsPerFlush; ++r) {
          const int row = (flush - first_flush(h)) * kRowsPerFlush + r;
          std::vector<MetricValue> metrics;
          for (int k = 0; k < kKeys; ++k)
            metrics.push_back({"k" + std::to_string(k), value(h, k, row)});
          if (h == 0 && flush >= kLateFlush) metrics.push_back({"late", value(h, kKeys, row)});
          Sample sample =
              make_sample(host_name(h), "s", kT0 + (flush * kRowsPerFlush + r) * kSecond, 0,
                          std::move(metrics));
          if (h == 1 && flush >= kLateFlush)
            sample.labels = {{"device", "sda" + std::to_string(row)}};
          samples.push_back(std::move(sample));
        }
      output.write(samples);
      output.flush();
      if (flush == 0) {
        EXPECT_GT(open_datasets(), datasets_before) << "a few hosts keep their datasets open";
      } else {
        EXPECT_EQ(open_datasets(), datasets_before) << "flush " << flush << ": datasets left open";
        EXPECT_EQ(open_groups(), groups_before) << "flush " << flush << ": groups left open";
      }
    }
    EXPECT_EQ(
        output.counters().sent,
        static_cast<std::uint64_t>((kFewHosts * kFlushes + (kHosts - kFewHosts) * (kFlushes - 1)) *
                                       kRowsPerFlush * kKeys +
                                   (kFlushes - kLateFlush) * kRowsPerFlush));
  }  // closes and compresses the file
  EXPECT_EQ(open_datasets(), datasets_before);
  std::printf("MANY file=%s\n", file.c_str());
  std::fflush(stdout);
}

TEST(Hdf5Output, ManyHostsAreWrittenWithTheirDatasetsClosedBetweenFlushes) {
  TempDir dir;
  std::string file;
  {
    Child writer("Hdf5ManyHostsChild.Write", {"FRUCTOSA_HDF5_MANY_HOSTS=" + dir.path()});
    file = writer.line("MANY file=");
    const std::string rest = writer.rest();
    const int status = writer.wait();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << rest;
    ASSERT_FALSE(file.empty()) << rest;
  }
  Reader reader(file);
  EXPECT_EQ(reader.members("/").size(), static_cast<std::size_t>(kHosts) + 1);  // + /.jobs
  for (int h = 0; h < kHosts; ++h) {
    const std::string table = "/" + host_name(h) + "/s";
    const int rows = (kFlushes - first_flush(h)) * kRowsPerFlush;
    const auto times = reader.int64s(table + "/time");
    ASSERT_EQ(times.size(), static_cast<std::size_t>(rows)) << table;
    EXPECT_EQ(times.back(), kT0 + (kFlushes * kRowsPerFlush - 1) * kSecond) << table;
    EXPECT_EQ(reader.length(table + "/job"), static_cast<hsize_t>(rows)) << table;
    for (int k = 0; k < kKeys; ++k) {
      const auto values = reader.doubles(table + "/k" + std::to_string(k));
      ASSERT_EQ(values.size(), static_cast<std::size_t>(rows)) << table << " k" << k;
      for (int row = 0; row < rows; ++row)
        ASSERT_EQ(values[row], value(h, k, row)) << table << " k" << k;
    }
  }
  // A column created once the datasets were closed between flushes: NaN before it came.
  const int late_from = (kLateFlush - first_flush(0)) * kRowsPerFlush;
  const auto late = reader.doubles("/node0/s/late");
  ASSERT_EQ(late.size(), static_cast<std::size_t>(kFlushes * kRowsPerFlush));
  for (int row = 0; row < static_cast<int>(late.size()); ++row)
    if (row < late_from)
      EXPECT_TRUE(std::isnan(late[row])) << row;
    else
      EXPECT_EQ(late[row], value(0, kKeys, row)) << row;
  const auto devices = reader.strings("/node1/s/labels/device");
  ASSERT_EQ(devices.size(), static_cast<std::size_t>(kFlushes * kRowsPerFlush));
  for (int row = 0; row < static_cast<int>(devices.size()); ++row)
    EXPECT_EQ(devices[row], row < late_from ? "" : "sda" + std::to_string(row)) << row;
}

// per_host's flushes of many datasets and every rotation's compression hold the output for
// seconds: its runner holds less of what arrives meanwhile unless the section says otherwise
// (master.cpp reads this when queue_max_points is not set).
TEST(Hdf5Output, PrefersASmallerMemoryQueueInBothLayouts) {
  TempDir dir;
  MetricInfoStore infos;
  Hdf5Output per_host(options_for(dir.path() + "/host.h5", {"layout=per_host"}), infos);
  EXPECT_EQ(per_host.preferred_queue_max_points(), Hdf5Output::kQueueMaxPoints);
  Hdf5Output per_sensor(options_for(dir.path() + "/sensor.h5", {"layout=per_sensor"}), infos);
  EXPECT_EQ(per_sensor.preferred_queue_max_points(), Hdf5Output::kQueueMaxPoints);
  EXPECT_LT(Hdf5Output::kQueueMaxPoints, 1000000u);  // the common default
}

}  // namespace
}  // namespace fructosa::master
