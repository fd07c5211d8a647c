// What the HDF5 output does with files a writer killed with SIGKILL left open (the writers are
// the Hdf5KilledWriterChild.* tests, run as children): repairs them, does not store the journal's
// replay twice after a crash, in both layouts; and compaction, which keeps a file written with
// frequent small flushes small. Helpers: hdf5_test_support.h.
#include "hdf5_test_support.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fructosa::master {
namespace {

using namespace hdf5_test;

// --- a writer killed with SIGKILL --------------------------------------------------------------

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
  if (std::getenv("FRUCTOSA_HDF5_FLUSHED_MARK")) {
    // The flush before said: journal records up to 7, 5 rows; the file kept 3 complete ones.
    const std::uint64_t mark[] = {7, 5};
    hsize_t two = 2;
    hid_t space = H5Screate_simple(1, &two, nullptr);
    hid_t id = H5Dcreate2(file, ".flushed", H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(id, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, mark);
    H5Sclose(space);
  }
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

// As Write, with the runner's word before each flush: sample i is journal record i + 1, and
// every 5 records are handed over and flushed; then record 41, from an agent whose clock NTP
// stepped back, is buffered, and the writer is killed.
TEST(Hdf5KilledWriterChild, WriteWithRecords) {
  const char* path = std::getenv("FRUCTOSA_HDF5_KILLED_WITH_RECORDS");
  if (!path) GTEST_SKIP() << "runs as a child of AfterACrashTheReplayIsKeyedByJournalRecordNotByTime";
  MetricInfoStore infos;
  auto* output = new Hdf5Output(options_for(path, {"chunk=16"}), infos);
  for (int i = 0; i < 40; ++i) {
    output->write(std::vector<Sample>{make_sample("h", "s", kT0 + i, 0, {{"v", i * 1.0}})});
    if (i % 5 == 4) {
      output->handed_through(i + 1);
      output->flush();
    }
  }
  output->write(std::vector<Sample>{make_sample("h", "s", kT0 - 100, 0, {{"v", -100.0}})});  // never flushed
  std::printf("KILLED file=%s\n", output->file().c_str());
  std::fflush(stdout);
  raise(SIGKILL);
}

// The newest file says which journal records its last flush held (/.flushed): the runner skips
// those, and every other sample is stored, even one older than the file's rows.
TEST(Hdf5Output, AfterACrashTheReplayIsKeyedByJournalRecordNotByTime) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  std::string killed_file;
  {
    Child writer("Hdf5KilledWriterChild.WriteWithRecords", {"FRUCTOSA_HDF5_KILLED_WITH_RECORDS=" + path});
    killed_file = writer.line("KILLED file=");
    writer.wait();
  }
  MetricInfoStore infos;
  std::string new_file;
  {
    Hdf5Output output(options_for(path, {"chunk=16"}), infos);
    EXPECT_EQ(output.stored_through(), std::optional<std::uint64_t>(40));
    new_file = output.file();
    // The runner's replay: record 41 alone.
    output.write(std::vector<Sample>{make_sample("h", "s", kT0 - 100, 0, {{"v", -100.0}})});
    output.handed_through(41);
    output.flush();
  }
  Reader killed(killed_file);
  EXPECT_EQ(killed.length("/h/s/time"), 40u);
  EXPECT_FALSE(killed.exists("/.flushed")) << "a closed file keeps no /.flushed";
  Reader reader(new_file);
  EXPECT_EQ(reader.int64s("/h/s/time"), (std::vector<std::int64_t>{kT0 - 100}));
}

// A flush cut short (the file holds other rows than /.flushed counted): the record it names
// cannot be trusted, and the replay is compared with the rows' times as before.
TEST(Hdf5Output, AfterAFlushCutShortTheReplayIsComparedByTime) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  const std::string half_file = dir.file("metrics-20200101T000000Z.h5");
  {
    Child writer("Hdf5KilledWriterChild.HalfFlush",
                 {"FRUCTOSA_HDF5_HALF_FLUSH=" + half_file, "FRUCTOSA_HDF5_FLUSHED_MARK=1"});
    EXPECT_EQ(writer.line("KILLED "), "half");
    writer.wait();
  }
  MetricInfoStore infos;
  std::string new_file;
  {
    Hdf5Output output(options_for(path, {"chunk=16"}), infos);
    EXPECT_EQ(output.stored_through(), std::nullopt);
    new_file = output.file();
    output.write(std::vector<Sample>{make_sample("h", "s", kT0 + 1, 3, {{"v", 2.0}}),     // in the file
                                     make_sample("h", "s", kT0 + 5, 3, {{"v", 6.0}})});  // past it
    output.flush();
  }
  Reader reader(new_file);
  EXPECT_EQ(reader.int64s("/h/s/time"), (std::vector<std::int64_t>{kT0 + 5}));
}

// The marks are for the journal's replay only: once it is over, a sample whose clock was stepped
// back below what the file holds is new, and stored.
TEST(Hdf5Output, AfterTheReplayAClockSteppedBackLosesNothing) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  {
    Child writer("Hdf5KilledWriterChild.Write", {"FRUCTOSA_HDF5_KILLED_WRITER=" + path});
    writer.line("KILLED file=");
    writer.wait();
  }
  MetricInfoStore infos;
  std::string new_file;
  {
    Hdf5Output output(options_for(path, {"chunk=16"}), infos);
    new_file = output.file();
    // The replay: job 0's rows up to +19 are in the killed file.
    output.write(std::vector<Sample>{make_sample("h", "s", kT0 + 18, 0, {{"v", 18.0}}),
                                     make_sample("h", "s", kT0 + 20, 0, {{"v", 20.0}})});
    output.journal_replayed();
    // NTP stepped the agent's clock back: its next samples are older than the file's rows.
    output.write(std::vector<Sample>{make_sample("h", "s", kT0 + 5, 0, {{"v", 5.0}}),
                                     make_sample("h", "s", kT0 + 6, 5, {{"v", 6.0}})});
    output.flush();
  }
  Reader reader(new_file);
  EXPECT_EQ(reader.int64s("/h/s/time"), (std::vector<std::int64_t>{kT0 + 20, kT0 + 5, kT0 + 6}));
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

// --- compaction --------------------------------------------------------------------------------

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

}  // namespace
}  // namespace fructosa::master
