// Files a writer killed outside SWMR mode left behind: while it adds tables (the file reopened
// without SWMR) and right after it created the file. lmaster must repair the first, set the second
// aside, and start writing either way. The writers are Hdf5KilledWriterChild.* tests run as children.
#include "hdf5_test_support.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace fructosa::master {
namespace {

using namespace hdf5_test;

// Stores rows 0..9 of h/s and closes the file as lmaster does; then opens it again without SWMR,
// as lmaster does to add a table, adds one (flushed) and a second (not), and is killed.
TEST(Hdf5KilledWriterChild, AddingTables) {
  const char* path = std::getenv("FRUCTOSA_HDF5_KILLED_ADDING_TABLES");
  if (!path) GTEST_SKIP() << "runs as a child of AFileKilledWhileTablesWereAddedIsRepaired";
  std::string file;
  {
    MetricInfoStore infos;
    Hdf5Output output(options_for(path, {"chunk=16"}), infos);
    for (int i = 0; i < 10; ++i) output.write(std::vector<Sample>{make_sample("h", "s", kT0 + i, 0, {{"v", i * 1.0}})});
    output.flush();
    file = output.file();
  }
  hid_t access = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_libver_bounds(access, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  H5Pset_file_locking(access, false, true);
  hid_t opened = H5Fopen(file.c_str(), H5F_ACC_RDWR, access);
  if (opened < 0) return;  // the parent sees no KILLED line
  H5Gcreate2(opened, "h2", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Fflush(opened, H5F_SCOPE_GLOBAL);
  H5Gcreate2(opened, "h3", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::printf("KILLED file=%s\n", file.c_str());
  std::fflush(stdout);
  raise(SIGKILL);
}

// Creates a file of the series and is killed before anything else reaches it.
TEST(Hdf5KilledWriterChild, AtCreation) {
  const char* path = std::getenv("FRUCTOSA_HDF5_KILLED_AT_CREATION");
  if (!path) GTEST_SKIP() << "runs as a child of AFileKilledAtItsCreationIsSetAside";
  hid_t access = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_libver_bounds(access, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  if (H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, access) < 0) return;
  std::printf("KILLED created\n");
  std::fflush(stdout);
  raise(SIGKILL);
}

TEST(Hdf5Output, AFileKilledWhileTablesWereAddedIsRepaired) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  std::string killed_file;
  {
    Child writer("Hdf5KilledWriterChild.AddingTables", {"FRUCTOSA_HDF5_KILLED_ADDING_TABLES=" + path});
    killed_file = writer.line("KILLED file=");
    const int status = writer.wait();
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  }
  ASSERT_FALSE(killed_file.empty());
  // "Open for write" without "SWMR write": a SWMR reader, as lmaster's repair was, refuses it.
  ASSERT_EQ(superblock_flags(killed_file), 0x01);
  EXPECT_THROW(Reader(killed_file, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ), std::runtime_error);

  MetricInfoStore infos;
  std::string new_file;
  {
    Hdf5Output output(options_for(path, {"chunk=16"}), infos);
    new_file = output.file();
    // The journal's replay: the rows the killed file holds are not stored twice.
    std::vector<Sample> replay;
    for (int i = 8; i < 12; ++i) replay.push_back(make_sample("h", "s", kT0 + i, 0, {{"v", i * 1.0}}));
    output.write(replay);
    output.flush();
  }
  EXPECT_NE(new_file, killed_file);
  EXPECT_FALSE(fs::exists(killed_file + ".damaged")) << "repaired, not set aside";
  EXPECT_EQ(superblock_flags(killed_file), 0);
  Reader repaired(killed_file);
  std::vector<std::int64_t> times;
  for (int i = 0; i < 10; ++i) times.push_back(kT0 + i);
  EXPECT_EQ(repaired.int64s("/h/s/time"), times);
  EXPECT_TRUE(repaired.exists("/h2")) << "the flushed table's group came through";
  Reader newer(new_file);
  EXPECT_EQ(newer.int64s("/h/s/time"), (std::vector<std::int64_t>{kT0 + 10, kT0 + 11}));
}

// A series whose only file is one a writer was killed creating (its superblock alone: nothing to
// repair): set aside, and a new file is written.
TEST(Hdf5Output, AFileKilledAtItsCreationIsSetAside) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  const std::string killed_file = dir.file("metrics-20200101T000000Z.h5");
  {
    Child writer("Hdf5KilledWriterChild.AtCreation", {"FRUCTOSA_HDF5_KILLED_AT_CREATION=" + killed_file});
    ASSERT_EQ(writer.line("KILLED "), "created");
    writer.wait();
  }
  ASSERT_NE(superblock_flags(killed_file), 0);
  MetricInfoStore infos;
  std::string new_file;
  {
    Hdf5Output output(options_for(path, {"chunk=16"}), infos);
    new_file = output.file();
    output.write(std::vector<Sample>{make_sample("h", "s", kT0, 0, {{"v", 1.0}})});
    output.flush();
  }
  EXPECT_FALSE(fs::exists(killed_file));
  EXPECT_TRUE(fs::exists(killed_file + ".damaged"));
  EXPECT_EQ(dir.series(), std::vector<std::string>{new_file});
  Reader reader(new_file);
  EXPECT_EQ(reader.int64s("/h/s/time"), (std::vector<std::int64_t>{kT0}));
}

}  // namespace
}  // namespace fructosa::master
