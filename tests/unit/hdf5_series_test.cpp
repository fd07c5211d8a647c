// The HDF5 output's file series: escaped link names, the timestamped files and the link `path`
// that points at the newest, a regular file found at `path`, the lock that keeps a second writer
// out, rotation by size and by age, and errors that name the path. Helpers: hdf5_test_support.h.
#include "hdf5_test_support.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

namespace fructosa::master {
namespace {

using namespace hdf5_test;

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

}  // namespace
}  // namespace fructosa::master
