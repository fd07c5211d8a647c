// fructosa-report's HDF5 source (report/hdf5_source.h) on a file the real HDF5 output is
// writing: a SWMR reader in a child process (in one process HDF5 would share the writer's open
// file instead of reading the disk) sees the rows flushed, the jobs the lagging `jobs` attributes
// lack, and reads on while the output adds columns (reopening the file without SWMR).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hdf5_source.h"
#include "report_hdf5_test_support.h"

namespace fructosa::report {
namespace {

using namespace hdf5_source_test;

// The reader's side of ReadsAFileWhileTheOutputWritesIt, in a process of its own (in one
// process HDF5 would share the writer's open file instead of reading the disk).
TEST(ReportHdf5SourceSwmrChild, Read) {
  const char* path = std::getenv("FRUCTOSA_REPORT_SWMR_READER");
  if (!path) GTEST_SKIP() << "runs as a child of ReadsAFileWhileTheOutputWritesIt";
  try {
    Hdf5Source source(path);  // the same source reads twice: each read opens the file again
    auto report = [&] {
      std::string text = "files=" + std::to_string(source.files().size()) + " jobs=";
      for (const auto& job : source.jobs()) {
        text += std::to_string(job.id) + ":";
        for (const auto& host : job.hosts) text += host + ",";
      }
      if (auto job = source.job(42)) {
        for (const auto& host : job->hosts)
          for (const auto& [name, series] : host.metrics)
            text += " " + host.host + "/" + name + "=" + numbers(series);
      }
      std::printf("REPORT %s\n", text.c_str());
      std::fflush(stdout);
    };
    report();
    if (!wait_for_file(std::string(path) + ".go")) return;
    report();
  } catch (const std::exception& error) {
    std::printf("REPORT error %s\n", error.what());
    std::fflush(stdout);
  }
}

TEST(ReportHdf5Source, ReadsAFileWhileTheOutputWritesIt) {
  TempDir dir;
  MetricInfoStore infos;
  Hdf5Output output(options_for(dir.file("metrics.h5"), {"layout=per_sensor", "chunk=16"}), infos);
  for (int i = 0; i < 3; ++i) write(output, {sample("node1", "S", t0 + i, 42, {{"a", i * 10.0}})});
  output.flush();
  Child reader("ReportHdf5SourceSwmrChild.Read", {"FRUCTOSA_REPORT_SWMR_READER=" + output.path()});
  EXPECT_EQ(reader.line("REPORT "), "files=1 jobs=42:node1, node1/S.a=0,10,20");
  // More rows over several chunks, a new host and a new column (objects created outside SWMR).
  for (int i = 3; i < 20; ++i)
    write(output, {sample("node1", "S", t0 + i, 42, {{"a", i * 10.0}}),
                   sample("node2", "S", t0 + i, 0, {{"a", 1.0}})});
  write(output, {sample("node2", "S", t0 + 20, 42, {{"b", 7.0}})});
  output.flush();
  std::ofstream(output.path() + ".go") << "go\n";
  std::string expected = "files=1 jobs=42:node1,node2, node1/S.a=";
  for (int i = 0; i < 20; ++i) expected += (i ? "," : "") + std::to_string(i * 10);
  expected += " node2/S.b=7";
  EXPECT_EQ(reader.line("REPORT "), expected);
  int status = reader.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// The reader's side of ReadsTheJobsThatTheAttributesOfAFileBeingWrittenLack.
TEST(ReportHdf5SourceSwmrChild, ReadLagging) {
  const char* path = std::getenv("FRUCTOSA_REPORT_LAG_READER");
  if (!path) GTEST_SKIP() << "runs as a child of ReadsTheJobsThatTheAttributesOfAFileBeingWrittenLack";
  try {
    std::string text = "attributes";
    {
      master::hdf5_test::Reader raw(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ);
      for (const std::string object : {"/", "/S"}) {
        text += " " + object + "=";
        for (auto id : raw.jobs(object)) text += std::to_string(id) + ",";
      }
    }
    Hdf5Source source(path);
    text += " jobs=";
    for (const auto& job : source.jobs()) text += std::to_string(job.id) + ",";
    if (auto job = source.job(43))
      for (const auto& host : job->hosts)
        for (const auto& [name, series] : host.metrics)
          text += " " + host.host + "/" + name + "=" + numbers(series);
    std::printf("REPORT %s\n", text.c_str());
  } catch (const std::exception& error) {
    std::printf("REPORT error %s\n", error.what());
  }
  std::fflush(stdout);
}

// While the output writes a file its `jobs` attributes lag (written when it adds objects, or at
// most once a minute): the `job` columns are read whatever they say.
TEST(ReportHdf5Source, ReadsTheJobsThatTheAttributesOfAFileBeingWrittenLack) {
  TempDir dir;
  MetricInfoStore infos;
  Hdf5Output output(options_for(dir.file("metrics.h5"), {"layout=per_sensor", "chunk=16"}), infos);
  write(output, {sample("node1", "S", t0, 42, {{"a", 1}}), sample("node1", "S", t0, 0, {{"a", 2}})});
  output.flush();
  // A new table: the attributes are written (with the jobs of the rows flushed before).
  write(output, {sample("node1", "T", t1, 42, {{"b", 1}})});
  output.flush();
  // Job 43 in the table S that exists: the attributes stay as they were.
  write(output, {sample("node1", "S", t2, 43, {{"a", 3}}), sample("node1", "S", t3, 43, {{"a", 4}})});
  output.flush();
  Child reader("ReportHdf5SourceSwmrChild.ReadLagging",
               {"FRUCTOSA_REPORT_LAG_READER=" + output.path()});
  EXPECT_EQ(reader.line("REPORT "), "attributes /=0,42, /S=0,42, jobs=42,43, node1/S.a=3,4");
  int status = reader.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// The reader's side of ReadsWhileTheOutputAddsColumns: reads until told to stop.
TEST(ReportHdf5SourceSwmrChild, ReadRepeatedly) {
  const char* path = std::getenv("FRUCTOSA_REPORT_SWMR_POLLER");
  if (!path) GTEST_SKIP() << "runs as a child of ReadsWhileTheOutputAddsColumns";
  int reads = 0, errors = 0;
  std::string last_error;
  std::size_t rows = 0;
  auto read = [&] {
    try {
      Hdf5Source source(path);
      auto job = source.job(42);
      rows = job ? job->hosts.at(0).metrics.at("S.a").values.size() : 0;
      for (const auto& summary : source.jobs())
        if (summary.id != 42) throw std::runtime_error("job " + std::to_string(summary.id));
      ++reads;
    } catch (const std::exception& error) {
      ++errors;
      last_error = error.what();
    }
  };
  while (!fs::exists(std::string(path) + ".stop")) read();
  read();
  std::printf("REPORT errors=%d rows=%zu %s\n", errors, rows, last_error.c_str());
  std::printf("READS %d\n", reads);
  std::fflush(stdout);
}

// Every flush here adds a column: lmaster reopens the file without SWMR each time (readers
// cannot open it then, and one that has it open may fail): the source retries. (Without the
// retries, about one read in seven failed here.)
TEST(ReportHdf5Source, ReadsWhileTheOutputAddsColumns) {
  TempDir dir;
  MetricInfoStore infos;
  Hdf5Output output(options_for(dir.file("metrics.h5"), {"layout=per_sensor", "chunk=16"}), infos);
  write(output, {sample("node1", "S", t0, 42, {{"a", 0}})});
  output.flush();
  Child reader("ReportHdf5SourceSwmrChild.ReadRepeatedly",
               {"FRUCTOSA_REPORT_SWMR_POLLER=" + output.path()});
  const int flushes = 60;
  for (int i = 1; i <= flushes; ++i) {
    write(output,
          {sample("node1", "S", t0 + i, 42, {{"a", 1.0 * i}, {"k" + std::to_string(i), 1.0}})});
    output.flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::ofstream(output.path() + ".stop") << "stop\n";
  EXPECT_EQ(reader.line("REPORT "), "errors=0 rows=" + std::to_string(flushes + 1) + " ");
  EXPECT_GT(std::atoi(reader.line("READS ").c_str()), 0);
  int status = reader.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace fructosa::report
