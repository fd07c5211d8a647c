// The HDF5 output's job index, /.jobs (docs/hdf5.md, "The job index"), in both layouts: what it
// says of each job on each host, across a rotation, while the file is written (read by a SWMR
// reader in another process) and once it is closed, compressed or repaired after a crash. The
// expected figures are computed here from the samples the tests write (summarize(), straight
// from the format's definitions). Helpers: hdf5_test_support.h.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "hdf5_test_support.h"

namespace fructosa::master {
namespace {

using namespace hdf5_test;


// What the index says of one series (one key of one job on one host and sensor, in row order,
// NaN where a row has no number): `before` is its last number in the previous file.
struct Summary {
  std::uint64_t count = 0;
  double max = kNaN, sum = 0, last = kNaN, growth = 0;
};
Summary summarize(const std::vector<double>& values, double before = kNaN) {
  Summary summary;
  double previous = before;
  for (double value : values) {
    if (std::isnan(value)) continue;
    // A fall is a restart from 0.
    if (!std::isnan(previous)) summary.growth += value >= previous ? value - previous : value;
    previous = value;
    summary.max = summary.count == 0 || value > summary.max ? value : summary.max;
    summary.sum += value;
    summary.last = value;
    ++summary.count;
  }
  return summary;
}

// The series of `key` in the samples of (job, host, sensor), in the order written.
std::vector<double> series(const std::vector<Sample>& samples, std::uint64_t job,
                           const std::string& host, const std::string& sensor,
                           const std::string& key) {
  std::vector<double> values;
  for (const auto& sample : samples) {
    if (sample.job != job || sample.host != host || sample.sensor != sensor) continue;
    double value = kNaN;
    for (const auto& metric : sample.metrics)
      if (metric.key == key) value = metric.value;
    values.push_back(value);
  }
  return values;
}

void expect_same_values(const std::vector<double>& actual, const std::vector<double>& expected,
                 const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (std::isnan(expected[i]))
      EXPECT_TRUE(std::isnan(actual[i])) << what << " row " << i << " = " << actual[i];
    else
      EXPECT_DOUBLE_EQ(actual[i], expected[i]) << what << " row " << i;
  }
}

// metrics/<link> of a sensor's group against the summaries of its rows.
void expect_metric(const Reader& reader, const std::string& group,
                   const std::vector<Summary>& rows) {
  std::vector<std::uint64_t> count;
  std::vector<double> max, sum, last, growth;
  for (const auto& row : rows) {
    count.push_back(row.count);
    max.push_back(row.max);
    sum.push_back(row.sum);
    last.push_back(row.last);
    growth.push_back(row.growth);
  }
  EXPECT_EQ(reader.uint64s(group + "/count"), count) << group;
  expect_same_values(reader.doubles(group + "/max"), max, group + "/max");
  expect_same_values(reader.doubles(group + "/sum"), sum, group + "/sum");
  expect_same_values(reader.doubles(group + "/last"), last, group + "/last");
  expect_same_values(reader.doubles(group + "/growth"), growth, group + "/growth");
}

Sample job_sample(const std::string& host, const std::string& sensor, std::int64_t time,
                  std::uint64_t job, std::vector<MetricValue> metrics,
                  std::vector<Label> labels = {}) {
  Sample sample = make_sample(host, sensor, time, job, std::move(metrics));
  sample.labels = std::move(labels);
  return sample;
}

class Hdf5JobIndex : public ::testing::TestWithParam<std::string> {
 protected:
  Options options(const std::string& path, std::vector<std::string> more = {}) const {
    more.push_back("layout=" + GetParam());
    more.push_back("chunk=16");
    return options_for(path, more);
  }
};

INSTANTIATE_TEST_SUITE_P(Layouts, Hdf5JobIndex, ::testing::Values("per_host", "per_sensor"));

TEST_P(Hdf5JobIndex, SummarizesEachJobOnEachHostAndSurvivesCompaction) {
  TempDir dir;
  MetricInfoStore infos;
  infos.remember("JobCgroup", "cpu.usage", {"seconds", Kind::counter, "CPU time"});
  infos.remember("JobCgroup", "memory.current", {"bytes", Kind::gauge, "memory"});
  const std::int64_t t = kT0;
  // Job 7 on n1 and n2, job 8 on n1 (two sensors), the node's own rows (job 0) between them.
  // cpu.usage falls once (a restart); memory.current has a row without a number.
  const std::vector<Sample> samples{
      job_sample("n1", "JobCgroup", t, 7, {{"cpu.usage", 10}, {"memory.current", 100}},
                 {{"user", "alice"}, {"cmd", "a"}}),
      make_sample("n1", "CPUPercent", t, 0, {{"0", 50}}),
      job_sample("n1", "JobCgroup", t + kSecond, 7, {{"cpu.usage", 15}, {"memory.current", kNaN}},
                 {{"user", ""}, {"cmd", "b"}}),
      job_sample("n2", "JobCgroup", t + kSecond, 7, {{"cpu.usage", 1}, {"memory.current", 50}}),
      job_sample("n1", "JobCgroup", t + 2 * kSecond, 7, {{"cpu.usage", 3}, {"memory.current", 300}},
                 {{"user", "alice"}, {"cmd", ""}}),
      job_sample("n2", "JobCgroup", t + 2 * kSecond, 7, {{"memory.current", 60}, {"cpu.usage", 2}}),
      job_sample("n1", "JobCgroup", t + 2 * kSecond, 8, {{"cpu.usage", 4}}),
      job_sample("n1", "JobProc", t + 2 * kSecond, 8, {{"processes", 3}, {"io/read", 1}}),
      make_sample("n2", "CPUPercent", t + 3 * kSecond, 0, {{"0", 60}}),
      job_sample("n1", "JobCgroup", t + 3 * kSecond, 7, {{"cpu.usage", 8}, {"memory.current", 200}},
                 {{"user", ""}}),
      job_sample("n1", "JobProc", t + 3 * kSecond, 8, {{"processes", 5}, {"io/read", 4}}),
  };
  std::string file;
  {
    Hdf5Output output(options(dir.file("metrics.h5")), infos);
    file = output.file();
    output.write(std::span(samples).first(4));
    output.flush();
    output.write(std::span(samples).subspan(4));
  }  // flushed, closed (index complete), compressed
  Reader reader(file);
  const std::string index = "/.jobs";
  EXPECT_EQ(reader.attribute(index, "index"), "fructosa job index");
  EXPECT_EQ(reader.integer_attribute(index, "index_version"), 1);
  EXPECT_EQ(reader.integer_attribute(index, "complete"), 1);
  // Rows in the order the (job, host)s came; the node's rows are not a job's.
  EXPECT_EQ(reader.uint64s(index + "/job"), (std::vector<std::uint64_t>{7, 7, 8}));
  EXPECT_EQ(reader.strings(index + "/host"), (std::vector<std::string>{"n1", "n2", "n1"}));
  EXPECT_EQ(reader.int64s(index + "/first"),
            (std::vector<std::int64_t>{t, t + kSecond, t + 2 * kSecond}));
  EXPECT_EQ(reader.int64s(index + "/last"),
            (std::vector<std::int64_t>{t + 3 * kSecond, t + 2 * kSecond, t + 3 * kSecond}));
  EXPECT_EQ(reader.uint64s(index + "/rows"), (std::vector<std::uint64_t>{4, 2, 3}));
  EXPECT_EQ(reader.members(index), (std::vector<std::string>{"JobCgroup", "JobProc", "first",
                                                             "host", "job", "last", "rows"}));

  const std::string cgroup = index + "/JobCgroup";
  EXPECT_EQ(reader.attribute(cgroup, "sensor"), "JobCgroup");
  EXPECT_EQ(reader.int64s(cgroup + "/first"),
            (std::vector<std::int64_t>{t, t + kSecond, t + 2 * kSecond}));
  EXPECT_EQ(reader.int64s(cgroup + "/last"),
            (std::vector<std::int64_t>{t + 3 * kSecond, t + 2 * kSecond, t + 2 * kSecond}));
  EXPECT_EQ(reader.uint64s(cgroup + "/rows"), (std::vector<std::uint64_t>{4, 2, 1}));
  const std::vector<std::pair<std::uint64_t, std::string>> rows{{7, "n1"}, {7, "n2"}, {8, "n1"}};
  for (const std::string key : {"cpu.usage", "memory.current"}) {
    std::vector<Summary> expected;
    for (const auto& [job, host] : rows)
      expected.push_back(summarize(series(samples, job, host, "JobCgroup", key)));
    expect_metric(reader, cgroup + "/metrics/" + key, expected);
    EXPECT_EQ(reader.attribute(cgroup + "/metrics/" + key, "key"), key);
  }
  // The restart: 10 -> 15 -> 3 -> 8 grew by 5 + 3 + 5.
  EXPECT_EQ(reader.doubles(cgroup + "/metrics/cpu.usage/growth")[0], 13);
  EXPECT_EQ(reader.uint64s(cgroup + "/metrics/memory.current/count")[0], 3u) << "NaN skipped";
  EXPECT_EQ(reader.attribute(cgroup + "/metrics/cpu.usage", "kind"), "counter");
  EXPECT_EQ(reader.attribute(cgroup + "/metrics/memory.current", "kind"), "gauge");
  // Labels: the last non-empty value of each row's.
  EXPECT_EQ(reader.strings(cgroup + "/labels/user"), (std::vector<std::string>{"alice", "", ""}));
  EXPECT_EQ(reader.strings(cgroup + "/labels/cmd"), (std::vector<std::string>{"b", "", ""}));
  EXPECT_EQ(reader.attribute(cgroup + "/labels/user", "key"), "user");

  // A sensor only job 8 used: the other rows have none of its rows.
  const std::string proc = index + "/JobProc";
  EXPECT_EQ(reader.uint64s(proc + "/rows"), (std::vector<std::uint64_t>{0, 0, 2}));
  EXPECT_EQ(reader.int64s(proc + "/first"), (std::vector<std::int64_t>{0, 0, t + 2 * kSecond}));
  expect_metric(reader, proc + "/metrics/processes", {{}, {}, summarize({3, 5})});
  // Keys are linked as columns are (the attribute holds the real key); kind "" when unknown.
  expect_metric(reader, proc + "/metrics/io%2Fread", {{}, {}, summarize({1, 4})});
  EXPECT_EQ(reader.attribute(proc + "/metrics/io%2Fread", "key"), "io/read");
  EXPECT_EQ(reader.attribute(proc + "/metrics/processes", "kind"), "");
  EXPECT_FALSE(reader.exists(proc + "/labels"));

  // Compaction copied the index as it was, compressed; the tables are still found as tables.
  EXPECT_GT(reader.layout(index + "/job").filters, 0);
  EXPECT_GT(reader.layout(cgroup + "/metrics/cpu.usage/growth").filters, 0);
  EXPECT_TRUE(reader.unlimited(index + "/host"));
  EXPECT_EQ(reader.jobs("/"), (std::vector<std::uint64_t>{0, 7, 8}));
  EXPECT_EQ(reader.jobs(GetParam() == "per_host" ? "/n1/JobCgroup" : "/JobCgroup"),
            (std::vector<std::uint64_t>{7, 8}));
}

TEST_P(Hdf5JobIndex, GrowthsOfAJobsFilesAddUpAcrossARotation) {
  TempDir dir;
  MetricInfoStore infos;
  std::vector<Sample> before, after, third;
  // Job 5 spans the rotation and falls once in each file; job 9 too, without falling; job 6
  // has rows in the first file only, then again in the third.
  const std::vector<double> first_values{100, 110, 50, 60}, second_values{70, 75, 5, 10};
  for (std::size_t i = 0; i < 4; ++i) {
    const std::int64_t time = kT0 + static_cast<std::int64_t>(i) * kSecond;
    before.push_back(job_sample("h", "JobCgroup", time, 5, {{"c", first_values[i]}}));
    after.push_back(
        job_sample("h", "JobCgroup", time + 10 * kSecond, 5, {{"c", second_values[i]}}));
  }
  before.push_back(job_sample("h", "JobCgroup", kT0, 9, {{"c", 100}}));
  after.push_back(job_sample("h", "JobCgroup", kT0 + 10 * kSecond, 9, {{"c", 120}}));
  before.push_back(job_sample("g", "JobCgroup", kT0, 6, {{"c", 100}}));
  third.push_back(job_sample("g", "JobCgroup", kT0 + 20 * kSecond, 6, {{"c", 150}}));
  // A sensor named like a dataset of the index.
  third.push_back(job_sample("g", "rows", kT0 + 20 * kSecond, 6, {{"x", 2}}));
  std::vector<std::string> files;
  {
    Hdf5Output output(options(dir.file("metrics.h5")), infos);
    output.write(before);
    files.push_back(output.file());
    output.reopen();
    output.write(after);
    files.push_back(output.file());
    output.reopen();
    output.write(third);
    files.push_back(output.file());
  }
  ASSERT_EQ(dir.series(), files);
  Reader first(files[0]), second(files[1]), last(files[2]);
  EXPECT_EQ(first.uint64s("/.jobs/job"), (std::vector<std::uint64_t>{5, 9, 6}));
  EXPECT_EQ(second.uint64s("/.jobs/job"), (std::vector<std::uint64_t>{5, 9}));
  const Summary first_file = summarize(first_values);
  const Summary second_file = summarize(second_values, first_values.back());
  expect_metric(first, "/.jobs/JobCgroup/metrics/c",
                {first_file, summarize({100}), summarize({100})});
  expect_metric(second, "/.jobs/JobCgroup/metrics/c", {second_file, summarize({120}, 100)});
  std::vector<double> whole = first_values;
  whole.insert(whole.end(), second_values.begin(), second_values.end());
  EXPECT_DOUBLE_EQ(first_file.growth + second_file.growth, summarize(whole).growth);
  EXPECT_DOUBLE_EQ(second.doubles("/.jobs/JobCgroup/metrics/c/growth")[0], 10 + 5 + 5 + 5)
      << "includes the rise from the first file's last row";
  EXPECT_EQ(second.int64s("/.jobs/first")[0], kT0 + 10 * kSecond);
  EXPECT_EQ(second.uint64s("/.jobs/rows"), (std::vector<std::uint64_t>{4, 1}));
  // Job 6 had no rows during the whole second file: forgotten (memory stays bounded), so the
  // third file's growth starts from its own first row.
  EXPECT_EQ(last.uint64s("/.jobs/job"), (std::vector<std::uint64_t>{6}));
  expect_metric(last, "/.jobs/JobCgroup/metrics/c", {summarize({150})});
  EXPECT_EQ(last.attribute("/.jobs/%72ows", "sensor"), "rows");
  EXPECT_EQ(last.uint64s("/.jobs/%72ows/rows"), (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(last.uint64s("/.jobs/rows"), (std::vector<std::uint64_t>{2}));
  for (const auto& file : files) EXPECT_EQ(Reader(file).integer_attribute("/.jobs", "complete"), 1);
}

// --- read while the output writes, by a SWMR reader in another process -------------------------

// The reader's side of IsIncompleteWhileWrittenAndCompleteOnceClosed (in one process HDF5 would
// share the writer's open file instead of reading the disk).
TEST(Hdf5JobIndexReaderChild, Read) {
  const char* path = std::getenv("FRUCTOSA_HDF5_JOB_INDEX_READER");
  if (!path)
    GTEST_SKIP()
        << "runs as a child of Hdf5JobIndexFile.IsIncompleteWhileWrittenAndCompleteOnceClosed";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (true) {
    try {
      Reader reader(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ);
      std::string text =
          "complete=" + std::to_string(reader.integer_attribute("/.jobs", "complete"));
      text += " jobs=";
      for (auto job : reader.uint64s("/.jobs/job")) text += std::to_string(job) + ",";
      text += " hosts=";
      for (const auto& host : reader.strings("/.jobs/host")) text += host + ",";
      text += " counts=";
      for (auto count : reader.uint64s("/.jobs/JobCgroup/metrics/v/count"))
        text += std::to_string(count) + ",";
      text += " members=";
      for (const auto& member : reader.members("/.jobs")) text += member + ",";
      std::printf("INDEX %s\n", text.c_str());
      return;
    } catch (const std::exception& error) {
      // The writer is outside SWMR mode for a moment: open again.
      if (std::chrono::steady_clock::now() > deadline) {
        std::printf("INDEX failed: %s\n", error.what());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

std::string read_index_in_child(const std::string& path) {
  Child reader("Hdf5JobIndexReaderChild.Read", {"FRUCTOSA_HDF5_JOB_INDEX_READER=" + path});
  std::string line = reader.line("INDEX ");
  reader.wait();
  return line;
}

TEST(Hdf5JobIndexFile, IsIncompleteWhileWrittenAndCompleteOnceClosed) {
  TempDir dir;
  MetricInfoStore infos;
  std::string file;
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"layout=per_sensor"}), infos);
    file = output.file();
    output.write(std::vector<Sample>{job_sample("a", "JobCgroup", kT0, 7, {{"v", 1}}),
                                     job_sample("a", "JobCgroup", kT0 + 1, 7, {{"v", 2}})});
    output.flush();  // a new table: the file leaves SWMR, and the index is written
    EXPECT_EQ(read_index_in_child(output.path()),
              "complete=0 jobs=7, hosts=a, counts=2, members=JobCgroup,first,host,job,last,rows,");
    // A sensor the index had no group for, and a new (job, host) with a host name wider than the
    // host dataset: the index is rewritten with them when the file next leaves SWMR (here at
    // once, for the new table).
    const std::string long_host = "a-host-name-longer-than-sixteen-bytes";
    output.write(std::vector<Sample>{
        job_sample("a", "JobProc", kT0 + 2, 7, {{"processes", 4}}, {{"cmd", "make"}}),
        job_sample(long_host, "JobCgroup", kT0 + 2, 8, {{"v", 5}})});
    output.flush();
    EXPECT_EQ(read_index_in_child(output.path()),
              "complete=0 jobs=7,8, hosts=a," + long_host +
                  ", counts=2,1, members=JobCgroup,JobProc,first,host,job,last,rows,");
  }
  Reader reader(file);
  EXPECT_EQ(reader.integer_attribute("/.jobs", "complete"), 1);
  // The sensor that came later: fill values for the row without its rows.
  EXPECT_EQ(reader.uint64s("/.jobs/JobProc/rows"), (std::vector<std::uint64_t>{1, 0}));
  EXPECT_EQ(reader.int64s("/.jobs/JobProc/first"), (std::vector<std::int64_t>{kT0 + 2, 0}));
  expect_metric(reader, "/.jobs/JobProc/metrics/processes", {summarize({4}), {}});
  EXPECT_EQ(reader.strings("/.jobs/JobProc/labels/cmd"), (std::vector<std::string>{"make", ""}));
  EXPECT_EQ(reader.uint64s("/.jobs/rows"), (std::vector<std::uint64_t>{3, 1}));
}

TEST(Hdf5JobIndexFile, AFileWithoutJobsHasAnEmptyCompleteIndex) {
  TempDir dir;
  MetricInfoStore infos;
  std::string file;
  {
    Hdf5Output output(options_for(dir.file("metrics.h5"), {"layout=per_sensor"}), infos);
    file = output.file();
    output.write(std::vector<Sample>{make_sample("a", "s", kT0, 0, {{"v", 1}})});
  }
  Reader reader(file);
  EXPECT_EQ(reader.integer_attribute("/.jobs", "complete"), 1);
  EXPECT_EQ(reader.length("/.jobs/job"), 0u);
  EXPECT_EQ(reader.members("/.jobs"),
            (std::vector<std::string>{"first", "host", "job", "last", "rows"}));
}

// --- a writer killed with SIGKILL --------------------------------------------------------------

// The writer's side of ARepairedFileKeepsItsIncompleteIndex: job rows, a flush that writes the
// index (a new table), more rows flushed without it (it lags), then SIGKILL.
TEST(Hdf5KilledWriterChild, WriteJobs) {
  const char* path = std::getenv("FRUCTOSA_HDF5_KILLED_JOBS");
  if (!path) GTEST_SKIP() << "runs as a child of ARepairedFileKeepsItsIncompleteIndex";
  MetricInfoStore infos;
  auto* output = new Hdf5Output(options_for(path, {"chunk=16", "layout=per_sensor"}), infos);
  output->write(std::vector<Sample>{job_sample("a", "JobCgroup", kT0, 3, {{"v", 1}})});
  output->flush();
  output->write(std::vector<Sample>{job_sample("a", "JobCgroup", kT0 + 1, 3, {{"v", 2}})});
  output->flush();
  std::printf("KILLED file=%s\n", output->file().c_str());
  std::fflush(stdout);
  raise(SIGKILL);
}

TEST(Hdf5JobIndexFile, ARepairedFileKeepsItsIncompleteIndex) {
  TempDir dir;
  const std::string path = dir.file("metrics.h5");
  std::string killed_file;
  {
    Child writer("Hdf5KilledWriterChild.WriteJobs", {"FRUCTOSA_HDF5_KILLED_JOBS=" + path});
    killed_file = writer.line("KILLED file=");
    int status = writer.wait();
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  }
  ASSERT_FALSE(killed_file.empty());
  MetricInfoStore infos;
  {
    // Repairs the file and reads its last rows back (the index is no table); then writes the
    // rows a journal replay would bring: the one already stored is not stored again.
    Hdf5Output output(options_for(path, {"chunk=16", "layout=per_sensor"}), infos);
    output.write(std::vector<Sample>{job_sample("a", "JobCgroup", kT0 + 1, 3, {{"v", 2}}),
                                     job_sample("a", "JobCgroup", kT0 + 2, 3, {{"v", 3}})});
  }
  EXPECT_EQ(superblock_flags(killed_file), 0);
  Reader repaired(killed_file);
  EXPECT_EQ(repaired.int64s("/JobCgroup/time"), (std::vector<std::int64_t>{kT0, kT0 + 1}));
  EXPECT_EQ(repaired.integer_attribute("/.jobs", "complete"), 0) << "copied as it was";
  EXPECT_EQ(repaired.uint64s("/.jobs/rows"), (std::vector<std::uint64_t>{1}))
      << "as of the last time the index was written";
  EXPECT_GT(repaired.layout("/.jobs/rows").filters, 0);
  const auto files = dir.series();
  ASSERT_EQ(files.size(), 2u);
  Reader next(files[1]);
  EXPECT_EQ(next.int64s("/JobCgroup/time"), (std::vector<std::int64_t>{kT0 + 2}));
  EXPECT_EQ(next.uint64s("/.jobs/rows"), (std::vector<std::uint64_t>{1}));
  expect_metric(next, "/.jobs/JobCgroup/metrics/v", {summarize({3})});
}

}  // namespace
}  // namespace fructosa::master
