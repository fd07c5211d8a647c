// fructosa-report's HDF5 source (report/hdf5_source.h) on files the real HDF5 output writes:
// both layouts, a series read through its link, a directory, NaN holes, escaped names, labels,
// the `jobs` attributes of files without a job index; and on files made by hand for what the
// output only leaves after a crash (a dataset longer than `time`, unwritten `time` rows) and for
// broken files, with errors that name the file. Files being written: report_hdf5_swmr_test.cpp;
// the job index and node series: report_hdf5_index_test.cpp.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "hdf5_source.h"
#include "report_hdf5_test_support.h"

namespace fructosa::report {
namespace {

using namespace hdf5_source_test;

// --- both layouts --------------------------------------------------------------------------------

class ReportHdf5SourceLayout : public ::testing::TestWithParam<std::string> {
 protected:
  std::vector<std::string> options() const { return {"layout=" + GetParam(), "chunk=16"}; }
};

TEST_P(ReportHdf5SourceLayout, ListsJobsAndReadsTheirSeriesLabelsAndSensors) {
  TempDir dir;
  MetricInfoStore infos;
  const std::string path = dir.file("metrics.h5");
  {
    Hdf5Output output(options_for(path, options()), infos);
    write(output,
          {sample("node2", "JobCgroup", t0, 42, {{"cpu.usage", 1.0}, {"memory.current", 100}},
                  {{"user", "alice"}, {"cpu_source", "cgroup"}}),
           sample("node1", "JobCgroup", t0, 42, {{"cpu.usage", 2.0}, {"memory.current", 200}},
                  {{"user", "alice"}}),
           sample("node1", "VirtualMemory", t0, 0, {{"available", 5}}),
           sample("node1", "JobCgroup", t0, 7, {{"cpu.usage", 9}}, {{"user", "bob"}})});
    output.flush();
    // memory.peak appears later (NaN before); node2's memory.current is missing at t1.
    write(output,
          {sample("node1", "JobCgroup", t1, 42, {{"cpu.usage", 3.0}, {"memory.current", 210}}),
           sample("node2", "JobCgroup", t1, 42, {{"cpu.usage", 1.5}, {"memory.peak", 150}}),
           sample("node1", "JobProc", t1, 42, {{"read_bytes", 10}})});
    output.flush();
    // An empty label does not replace the value before it.
    write(output, {sample("node1", "JobCgroup", t2, 42, {{"cpu.usage", 4}}, {{"user", ""}}),
                   sample("node1", "VirtualMemory", t3, 0, {{"available", 6}})});
  }
  Hdf5Source source(path);
  EXPECT_EQ(source.files().size(), 1u);

  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id, 7u);
  EXPECT_EQ(jobs[0].user, "bob");
  EXPECT_EQ(jobs[0].hosts, (std::vector<std::string>{"node1"}));
  EXPECT_EQ(jobs[0].first_ns, t0);
  EXPECT_EQ(jobs[0].last_ns, t0);
  EXPECT_EQ(jobs[1].id, 42u);
  EXPECT_EQ(jobs[1].user, "alice");
  EXPECT_EQ(jobs[1].hosts, (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(jobs[1].first_ns, t0);
  EXPECT_EQ(jobs[1].last_ns, t2);

  const auto job = source.job(42);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->id, 42u);
  ASSERT_EQ(job->hosts.size(), 2u);
  EXPECT_EQ(job->hosts[0].host, "node1");
  EXPECT_EQ(job->hosts[1].host, "node2");

  const HostData& node1 = job->hosts[0];
  EXPECT_EQ(node1.sensors, (std::vector<std::string>{"JobCgroup", "JobProc"}));
  EXPECT_TRUE(has_series(node1, "JobCgroup.cpu.usage", {t0, t1, t2}, {2, 3, 4}));
  EXPECT_TRUE(has_series(node1, "JobCgroup.memory.current", {t0, t1, t2}, {200, 210, kNaN}));
  EXPECT_TRUE(has_series(node1, "JobProc.read_bytes", {t1}, {10}));
  EXPECT_EQ(node1.metrics.size(), 3u) << "no memory.peak (no value on node1), no VirtualMemory";
  EXPECT_EQ(node1.labels, (std::map<std::string, std::string>{{"JobCgroup.user", "alice"}}));

  const HostData& node2 = job->hosts[1];
  EXPECT_EQ(node2.sensors, (std::vector<std::string>{"JobCgroup"}));
  EXPECT_TRUE(has_series(node2, "JobCgroup.cpu.usage", {t0, t1}, {1, 1.5}));
  EXPECT_TRUE(has_series(node2, "JobCgroup.memory.current", {t0, t1}, {100, kNaN}));
  EXPECT_TRUE(has_series(node2, "JobCgroup.memory.peak", {t0, t1}, {kNaN, 150}));
  EXPECT_EQ(node2.metrics.size(), 3u);
  EXPECT_EQ(node2.labels, (std::map<std::string, std::string>{{"JobCgroup.user", "alice"},
                                                              {"JobCgroup.cpu_source", "cgroup"}}));

  const auto other = source.job(7);
  ASSERT_TRUE(other);
  ASSERT_EQ(other->hosts.size(), 1u);
  EXPECT_TRUE(has_series(other->hosts[0], "JobCgroup.cpu.usage", {t0}, {9}));
  EXPECT_EQ(other->hosts[0].metrics.size(), 1u);
  EXPECT_EQ(other->hosts[0].labels.at("JobCgroup.user"), "bob");

  EXPECT_FALSE(source.job(8)) << "no sample of job 8";
  EXPECT_FALSE(source.job(0)) << "0 is the nodes themselves, not a job";
}

TEST_P(ReportHdf5SourceLayout, UsesTheRealNamesOfEscapedHostsSensorsKeysAndLabels) {
  TempDir dir;
  MetricInfoStore infos;
  const std::string path = dir.file("metrics.h5");
  {
    Hdf5Output output(options_for(path, options()), infos);
    write(output, {sample("rack/1.node%2", ".Disk/Usage", t0, 5,
                          {{"/home.used", 1},
                           {"time", 2},
                           {"job", 3},
                           {"host", 4},
                           {"100%", 5},
                           {".dot", 6},
                           {"", 7}},
                          {{"/.device", "/dev/sda1"}, {"time", "t"}})});
  }
  Hdf5Source source(path);
  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].hosts, (std::vector<std::string>{"rack/1.node%2"}));
  const auto job = source.job(5);
  ASSERT_TRUE(job);
  ASSERT_EQ(job->hosts.size(), 1u);
  const HostData& host = job->hosts[0];
  EXPECT_EQ(host.host, "rack/1.node%2");
  EXPECT_EQ(host.sensors, (std::vector<std::string>{".Disk/Usage"}));
  EXPECT_TRUE(has_series(host, ".Disk/Usage./home.used", {t0}, {1}));
  EXPECT_TRUE(has_series(host, ".Disk/Usage.time", {t0}, {2}));
  EXPECT_TRUE(has_series(host, ".Disk/Usage.job", {t0}, {3}));
  EXPECT_TRUE(has_series(host, ".Disk/Usage.host", {t0}, {4}));
  EXPECT_TRUE(has_series(host, ".Disk/Usage.100%", {t0}, {5}));
  EXPECT_TRUE(has_series(host, ".Disk/Usage..dot", {t0}, {6}));
  EXPECT_TRUE(has_series(host, ".Disk/Usage.", {t0}, {7}));
  EXPECT_EQ(host.metrics.size(), 7u);
  EXPECT_EQ(host.labels, (std::map<std::string, std::string>{{".Disk/Usage./.device", "/dev/sda1"},
                                                             {".Disk/Usage.time", "t"}}));
}

// A job on two hosts across two files of a series (a reload between them), read through the
// link `path`; a column that only the second file has; rows received out of time order.
TEST_P(ReportHdf5SourceLayout, ReadsTheWholeSeriesThroughTheLink) {
  TempDir dir;
  MetricInfoStore infos;
  const std::string path = dir.file("metrics.h5");
  {
    Hdf5Output output(options_for(path, options()), infos);
    write(output,
          {sample("node1", "S", t0, 42, {{"a", 1}}), sample("node2", "S", t0, 42, {{"a", 10}})});
    output.flush();
    output.reopen();
    write(output,
          {sample("node1", "S", t2, 42, {{"a", 3}, {"b", 5}}),
           sample("node1", "S", t1, 42, {{"a", 2}}),  // late
           sample("node2", "S", t1, 42, {{"a", 20}}), sample("node3", "S", t1, 0, {{"a", 99}})});
  }
  const auto series = dir.series();
  ASSERT_EQ(series.size(), 2u);
  Hdf5Source source(path);
  EXPECT_EQ(source.files(), (std::vector<fs::path>{series[0], series[1]}));
  EXPECT_EQ(source.describe(), dir.file("metrics-*.h5") + " (2 files)");

  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].hosts, (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(jobs[0].first_ns, t0);
  EXPECT_EQ(jobs[0].last_ns, t2);
  EXPECT_EQ(jobs[0].user, "");

  const auto job = source.job(42);
  ASSERT_TRUE(job);
  ASSERT_EQ(job->hosts.size(), 2u);
  EXPECT_TRUE(has_series(host_of(*job, "node1"), "S.a", {t0, t1, t2}, {1, 2, 3}));
  EXPECT_TRUE(has_series(host_of(*job, "node1"), "S.b", {t0, t1, t2}, {kNaN, kNaN, 5}));
  EXPECT_TRUE(has_series(host_of(*job, "node2"), "S.a", {t0, t1}, {10, 20}));
  EXPECT_EQ(host_of(*job, "node2").metrics.size(), 1u);

  // One file of the series, by its name: that file only.
  Hdf5Source first(series[0]);
  EXPECT_EQ(first.describe(), series[0]);
  const auto early = first.job(42);
  ASSERT_TRUE(early);
  EXPECT_TRUE(has_series(host_of(*early, "node1"), "S.a", {t0}, {1}));
}

// Closed files without a job index (an lmaster before it): the `jobs` attributes of the file, its
// tables and (per_host) its hosts say which jobs are below them, and what they leave out is not
// read. Here they lie (leave out jobs whose rows are there), to show what is read.
TEST_P(ReportHdf5SourceLayout, SkipsWhatTheJobsAttributesOfClosedFilesLeaveOut) {
  TempDir dir;
  MetricInfoStore infos;
  const std::string path = dir.file("metrics.h5");
  {
    Hdf5Output output(options_for(path, options()), infos);
    write(output, {sample("node1", "S", t0, 42, {{"a", 1}}), sample("node1", "T", t0, 7, {{"b", 1}}),
                   sample("node2", "S", t0, 42, {{"a", 5}})});
    output.flush();
    output.reopen();
    write(output, {sample("node1", "S", t1, 42, {{"a", 2}}), sample("node1", "T", t2, 42, {{"b", 2}}),
                   sample("node2", "S", t1, 42, {{"a", 6}})});
    output.flush();
    output.reopen();
    write(output, {sample("node3", "S", t3, 99, {{"a", 9}})});
  }
  const auto series = dir.series();
  ASSERT_EQ(series.size(), 3u);
  const bool per_host = GetParam() == "per_host";
  {  // What the output wrote: every job, 0 (the nodes' rows) where there are some.
    master::hdf5_test::Reader first(series[0]);
    EXPECT_EQ(first.jobs("/"), (std::vector<std::uint64_t>{7, 42}));
    EXPECT_EQ(first.jobs(per_host ? "/node1/T" : "/T"), (std::vector<std::uint64_t>{7}));
  }
  for (const auto& file : series) remove_job_index(file);
  set_jobs_attribute(series[0], "/", {0, 7});                          // not 42
  set_jobs_attribute(series[1], per_host ? "/node1/T" : "/T", {0});   // no job at all
  if (per_host) set_jobs_attribute(series[1], "/node2", {0});         // no job on node2
  set_jobs_attribute(series[2], "/", {});                             // nothing

  Hdf5Source source(path);
  const auto job = source.job(42);
  ASSERT_TRUE(job);
  ASSERT_EQ(job->hosts.size(), per_host ? 1u : 2u);
  const HostData& node1 = host_of(*job, "node1");
  EXPECT_EQ(node1.sensors, (std::vector<std::string>{"S"})) << "T of the second file: skipped";
  EXPECT_TRUE(has_series(node1, "S.a", {t1}, {2})) << "the first file: skipped";
  EXPECT_EQ(node1.metrics.size(), 1u);
  if (!per_host) {
    EXPECT_TRUE(has_series(host_of(*job, "node2"), "S.a", {t1}, {6}));
  }
  EXPECT_FALSE(source.job(99)) << "the third file: skipped";

  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 2u) << "no 99: the third file has no job";
  EXPECT_EQ(jobs[0].id, 7u);
  EXPECT_EQ(jobs[0].hosts, (std::vector<std::string>{"node1"}));
  EXPECT_EQ(jobs[1].id, 42u);
  EXPECT_EQ(jobs[1].hosts, (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(jobs[1].first_ns, t0) << "the first file's S: its attribute has 42";
  EXPECT_EQ(jobs[1].last_ns, t1) << "not t2: T of the second file has no job";

  // Without the attributes (an older lmaster's files), everything is read.
  for (const auto& file : series) {
    hid_t handle = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(handle, 0);
    H5Adelete(handle, "jobs");
    H5Fclose(handle);
  }
  set_jobs_attribute(series[1], per_host ? "/node1/T" : "/T", {42});
  if (per_host) set_jobs_attribute(series[1], "/node2", {0, 42});
  Hdf5Source unskipped(path);
  const auto all = unskipped.job(42);
  ASSERT_TRUE(all);
  EXPECT_TRUE(has_series(host_of(*all, "node1"), "S.a", {t0, t1}, {1, 2}));
  EXPECT_TRUE(has_series(host_of(*all, "node1"), "T.b", {t2}, {2}));
  EXPECT_TRUE(has_series(host_of(*all, "node2"), "S.a", {t0, t1}, {5, 6}));
  EXPECT_TRUE(unskipped.job(99));
  EXPECT_EQ(unskipped.jobs().size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(ReportHdf5Layouts, ReportHdf5SourceLayout,
                         ::testing::Values("per_sensor", "per_host"));

// --- a directory ---------------------------------------------------------------------------------

TEST(ReportHdf5Source, ReadsEveryLmasterFileOfADirectoryAndIgnoresOthers) {
  TempDir dir;
  MetricInfoStore infos;
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"layout=per_sensor"}), infos);
    write(output, {sample("node1", "S", t0, 3, {{"a", 1}})});
    output.flush();
    output.reopen();
    write(output, {sample("node1", "S", t1, 3, {{"a", 2}})});
  }
  {  // An older lmaster's per_host file under another name.
    TempDir other;
    fs::path written;
    {
      Hdf5Output output(options_for(other.file("old.h5"), {"layout=per_host"}), infos);
      write(output, {sample("node2", "S", t2, 3, {{"a", 3}})});
      written = output.file();
    }
    fs::copy_file(written, dir.file("zzz-old.h5"));
  }
  std::ofstream(dir.file("notes.h5")) << "not HDF5\n";
  std::ofstream(dir.file("readme.txt")) << "hello\n";
  H5Fclose(H5Fcreate(dir.file("foreign.h5").c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT));

  Hdf5Source source(dir.path());
  EXPECT_EQ(source.files().size(), 3u) << "the link metrics.h5 is its target, read once";
  EXPECT_EQ(source.describe(), dir.file("*.h5") + " (3 files)");
  const auto job = source.job(3);
  ASSERT_TRUE(job);
  ASSERT_EQ(job->hosts.size(), 2u);
  EXPECT_TRUE(has_series(host_of(*job, "node1"), "S.a", {t0, t1}, {1, 2}));
  EXPECT_TRUE(has_series(host_of(*job, "node2"), "S.a", {t2}, {3}));
  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].hosts, (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(jobs[0].first_ns, t0);
  EXPECT_EQ(jobs[0].last_ns, t2);
}

// Files come in the order of their `created` attribute, whatever their names.
TEST(ReportHdf5Source, OrdersFilesByTheirCreatedAttribute) {
  TempDir dir;
  MetricInfoStore infos;
  auto make = [&](const std::string& name, const std::string& created, const std::string& user) {
    TempDir scratch;
    fs::path written;
    {
      Hdf5Output output(options_for(scratch.file("m.h5"), {"layout=per_sensor"}), infos);
      written = output.file();
      // The same time in both files: the later file's label wins.
      write(output, {sample("node1", "JobCgroup", t0, 9, {{"cpus", 1}}, {{"user", user}})});
    }
    fs::copy_file(written, dir.file(name));
    hid_t file = H5Fopen(dir.file(name).c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    H5Adelete(file, "created");
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attribute = H5Acreate2(file, "created", type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* text = created.c_str();
    H5Awrite(attribute, type, &text);
    H5Aclose(attribute);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(file);
  };
  make("aaa.h5", "2025-03-01T07:00:00Z", "newer");
  make("zzz.h5", "2025-03-01T06:00:00Z", "older");
  Hdf5Source source(dir.path());
  EXPECT_EQ(source.files(), (std::vector<fs::path>{dir.file("zzz.h5"), dir.file("aaa.h5")}));
  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].user, "newer");
  const auto job = source.job(9);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->hosts[0].labels.at("JobCgroup.user"), "newer");
  EXPECT_TRUE(has_series(job->hosts[0], "JobCgroup.cpus", {t0, t0}, {1, 1}));
}

// What a writer killed mid-flush leaves: datasets longer than `time` (written before it), and
// `time` rows grown but never written (reading 0).
TEST(ReportHdf5Source, ReadsLenTimeRowsAndLeavesUnwrittenRowsOut) {
  TempDir dir;
  const std::string path = dir.file("crashed.h5");
  {
    HandMade file(path);
    hid_t table = file.table("S");
    file.numbers<std::int64_t>(table, "time", H5T_STD_I64LE, H5T_NATIVE_INT64, {t0, t1, 0});
    file.numbers<std::uint64_t>(table, "job", H5T_STD_U64LE, H5T_NATIVE_UINT64, {3, 3, 3, 3});
    file.texts(table, "host", {"n1", "n1", "n1", "n1"});
    file.numbers<double>(table, "v", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {1, 2, 3, 4}, "v");
  }
  Hdf5Source source(path);
  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].first_ns, t0);
  EXPECT_EQ(jobs[0].last_ns, t1);
  const auto job = source.job(3);
  ASSERT_TRUE(job);
  EXPECT_TRUE(has_series(host_of(*job, "n1"), "S.v", {t0, t1}, {1, 2}));
}

TEST(ReportHdf5Source, ErrorsNameTheFileAndTheProblem) {
  TempDir dir;
  const std::string missing = dir.file("missing.h5");
  expect_source_error([&] { Hdf5Source source(missing); }, {missing, "no such file"});
  const std::string dangling = dir.file("dangling.h5");
  fs::create_symlink("nowhere-20250301T060000Z.h5", dangling);
  expect_source_error([&] { Hdf5Source source(dangling); }, {dangling, "does not exist"});

  const std::string text = dir.file("text.h5");
  std::ofstream(text) << "hello\n";
  expect_source_error([&] { Hdf5Source source(text); }, {text, "not an HDF5 file"});

  const std::string foreign = dir.file("foreign.h5");
  H5Fclose(H5Fcreate(foreign.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT));
  expect_source_error([&] { Hdf5Source source(foreign); }, {foreign, "not an lmaster HDF5 file"});

  // A directory with no lmaster file.
  expect_source_error([&] { Hdf5Source source(dir.path()); },
                      {dir.path(), "no lmaster HDF5 files"});

  // A series whose link points at something else than an lmaster file.
  const std::string link = dir.file("series.h5");
  fs::create_symlink("foreign.h5", link);
  expect_source_error([&] { Hdf5Source source(link); }, {foreign, "not an lmaster HDF5 file"});

  const std::string future = dir.file("future.h5");
  { HandMade file(future, 3); }
  expect_source_error([&] { Hdf5Source source(future); }, {future, "format_version 3"});

  // Unreadable datasets: jobs() reads only time, job and host; job() the metric columns too.
  const std::string broken = dir.file("broken.h5");
  {
    HandMade file(broken);
    hid_t table = file.table("S");
    file.numbers<std::int64_t>(table, "time", H5T_STD_I64LE, H5T_NATIVE_INT64, {t0});
    file.numbers<std::uint64_t>(table, "job", H5T_STD_U64LE, H5T_NATIVE_UINT64, {3});
    file.texts(table, "host", {"n1"});
    file.texts(table, "v", {"not a number"});
  }
  Hdf5Source source(broken);
  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 1u) << "jobs() does not read the metric columns";
  expect_source_error([&] { source.job(3); }, {broken, "/S/v", "not a numeric dataset"});

  const std::string bad_time = dir.file("bad-time.h5");
  {
    HandMade file(bad_time);
    hid_t table = file.table("S");
    file.texts(table, "time", {"yesterday"});
    file.numbers<std::uint64_t>(table, "job", H5T_STD_U64LE, H5T_NATIVE_UINT64, {3});
    file.texts(table, "host", {"n1"});
  }
  Hdf5Source bad(bad_time);
  expect_source_error([&] { bad.jobs(); }, {bad_time, "/S/time"});
}

TEST(ReportHdf5Unescape, InvertsTheOutputsLinkNames) {
  for (const std::string name :
       {"cpu0", "/home.percent", "a/b%c", ".hidden.x", "%2F", "", "100%"}) {
    EXPECT_EQ(hdf5_unescape(master::hdf5_link_name(name)), name);
    EXPECT_EQ(hdf5_unescape(master::hdf5_link_name(name, true)), name);
  }
  for (const std::string name : {"time", "job", "host"})
    EXPECT_EQ(hdf5_unescape(master::hdf5_link_name(name, true)), name);
}

}  // namespace
}  // namespace fructosa::report
