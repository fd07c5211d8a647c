// The HDF5 output as an Output: its options, flushes that fail (a full disk) and the rows they
// keep, the limit on what waits in memory, and a SWMR reader (the Hdf5SwmrReaderChild.Read test,
// run as a child) that sees the rows while they are written. Helpers: hdf5_test_support.h.
#include "hdf5_test_support.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace fructosa::master {
namespace {

using namespace hdf5_test;

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

// --- a SWMR reader in another process ----------------------------------------------------------

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

}  // namespace
}  // namespace fructosa::master
