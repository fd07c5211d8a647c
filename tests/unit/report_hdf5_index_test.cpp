// fructosa-report's HDF5 source and lmaster's job index (docs/hdf5.md "The job index"): jobs()
// from a complete index alone (per-host summaries merged over files), job() reading only the
// tables and hosts the index names (and still every row of the job when rows are far out of time
// order), files whose index is not complete scanned as before; on files made by hand in the
// documented layout. And node series (HostData::node_metrics) around a job, on files of the real
// output: cut to the rows just around the job's span, found in the file before the job's.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hdf5_source.h"
#include "report_hdf5_test_support.h"

namespace fructosa::report {
namespace {

using namespace hdf5_source_test;

constexpr std::int64_t s0 = kT0, s1 = kT0 + 10 * kSecond, s2 = kT0 + 20 * kSecond, s3 = kT0 + 30 * kSecond;

// A table row made by hand: values and labels by key.
struct Row {
  std::int64_t time;
  std::uint64_t job;
  std::string host;
  std::map<std::string, double> values;
  std::map<std::string, std::string> labels;
};

// Writes `rows` as a table at `where` (per_sensor: with a host column), compressed in chunks of 4
// rows (several chunks, an edge chunk) as lmaster's closed files are.
void write_table(HandMade& file, const std::string& where, const std::string& sensor,
                 const std::vector<Row>& rows, bool host_column = true) {
  hid_t table = file.group(where);
  HandMade::text_attribute(table, "sensor", sensor);
  std::vector<std::int64_t> times;
  std::vector<std::uint64_t> jobs;
  std::vector<std::string> hosts;
  std::map<std::string, std::vector<double>> columns;
  std::map<std::string, std::vector<std::string>> labels;
  for (const Row& row : rows) {
    for (const auto& [key, value] : row.values) columns[key];
    for (const auto& [key, value] : row.labels) labels[key];
  }
  for (const Row& row : rows) {
    times.push_back(row.time);
    jobs.push_back(row.job);
    hosts.push_back(row.host);
    for (auto& [key, values] : columns) values.push_back(row.values.contains(key) ? row.values.at(key) : kNaN);
    for (auto& [key, values] : labels) values.push_back(row.labels.contains(key) ? row.labels.at(key) : "");
  }
  file.numbers(table, "time", H5T_STD_I64LE, H5T_NATIVE_INT64, times, "", kCompressed);
  file.numbers(table, "job", H5T_STD_U64LE, H5T_NATIVE_UINT64, jobs, "", kCompressed);
  if (host_column) file.texts(table, "host", hosts, {4, false, 4, false});
  for (const auto& [key, values] : columns)
    file.numbers(table, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, values, key, kCompressed);
  if (labels.empty()) return;
  hid_t group = file.group(where + "/labels");
  for (const auto& [key, values] : labels) file.texts(group, key, values, {4, false, 4, false}, key);
}

// Job 42 on n1 and n2 with JobCgroup, n1's node rows, a job 77 and a table "Other" that the
// index below does not name (so that what is read shows).
std::vector<Row> cgroup_rows() {
  return {{s0, 0, "n1", {{"jobs", 1}}, {}},
          {s0, 42, "n1", {{"cpu.usage", 10}, {"memory.current", 100}}, {{"user", "table-user"}}},
          {s0, 42, "n2", {{"cpu.usage", 20}}, {}},
          {s1, 0, "n1", {{"jobs", 1}}, {}},
          {s1, 42, "n1", {{"cpu.usage", 15}}, {}},
          {s1, 42, "n2", {{"cpu.usage", 22}}, {}},
          {s1, 77, "n3", {{"cpu.usage", 1}}, {}}};
}

// What the index says of cgroup_rows()' job 42 (its figures as the writer tallies them).
HandIndex index_of_42(int complete = 1) {
  HandIndex index;
  index.complete = complete;
  index.job = {42, 42};
  index.host = {"n1", "n2"};
  index.first = {s0, s0};
  index.last = {s1, s1};
  index.rows = {2, 2};
  HandIndex::Sensor cgroup{"JobCgroup", "JobCgroup", {s0, s0}, {s1, s1}, {2, 2}, {}, {}};
  cgroup.metrics.push_back({"cpu.usage", "counter", {2, 2}, {15, 22}, {25, 42}, {15, 22}, {5, 2}});
  cgroup.metrics.push_back({"memory.current", "gauge", {1, 0}, {100, kNaN}, {100, 0}, {100, kNaN}, {0, 0}});
  cgroup.labels.push_back({"user", {"alice", "alice"}});
  index.sensors.push_back(cgroup);
  return index;
}

void make_file(const std::string& path, int complete) {
  HandMade file(path);
  write_table(file, "/JobCgroup", "JobCgroup", cgroup_rows());
  write_table(file, "/Other", "Other", {{s1, 42, "n1", {{"x", 5}}, {}}});
  index_of_42(complete).write(file);
}

::testing::AssertionResult same_summary(const MetricSummary& actual, const MetricSummary& expected) {
  auto same = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
  if (actual.first_ns == expected.first_ns && actual.last_ns == expected.last_ns && actual.count == expected.count &&
      same(actual.max, expected.max) && same(actual.sum, expected.sum) && same(actual.last, expected.last) &&
      same(actual.growth, expected.growth))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "summary first " << actual.first_ns << " last " << actual.last_ns
                                       << " count " << actual.count << " max " << actual.max << " sum "
                                       << actual.sum << " last " << actual.last << " growth " << actual.growth;
}

TEST(ReportHdf5Index, JobsComeFromACompleteIndexAlone) {
  TempDir dir;
  const std::string path = dir.file("indexed.h5");
  make_file(path, 1);
  Hdf5Source source(path);
  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 1u) << "job 77 is in the table, not in the index: not listed";
  const JobSummary& job = jobs[0];
  EXPECT_EQ(job.id, 42u);
  EXPECT_EQ(job.user, "alice") << "the index's label, not the table's";
  EXPECT_EQ(job.hosts, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(job.first_ns, s0);
  EXPECT_EQ(job.last_ns, s1);
  ASSERT_EQ(job.per_host.size(), 2u);
  const auto& n1 = job.per_host[0];
  EXPECT_EQ(n1.host, "n1");
  EXPECT_EQ(n1.first_ns, s0);
  EXPECT_EQ(n1.last_ns, s1);
  EXPECT_EQ(n1.sensors, std::vector<std::string>{"JobCgroup"});
  EXPECT_EQ(n1.labels, (std::map<std::string, std::string>{{"JobCgroup.user", "alice"}}));
  ASSERT_EQ(n1.metrics.size(), 2u);
  EXPECT_TRUE(same_summary(n1.metrics.at("JobCgroup.cpu.usage"), {s0, s1, 2, 15, 25, 15, 5}));
  EXPECT_TRUE(same_summary(n1.metrics.at("JobCgroup.memory.current"), {s0, s1, 1, 100, 100, 100, 0}));
  const auto& n2 = job.per_host[1];
  EXPECT_EQ(n2.host, "n2");
  ASSERT_EQ(n2.metrics.size(), 1u) << "memory.current has no number on n2 (count 0)";
  EXPECT_TRUE(same_summary(n2.metrics.at("JobCgroup.cpu.usage"), {s0, s1, 2, 22, 42, 22, 2}));
}

TEST(ReportHdf5Index, AJobReadsOnlyTheTablesTheIndexNames) {
  TempDir dir;
  const std::string path = dir.file("indexed.h5");
  make_file(path, 1);
  Hdf5Source source(path);
  const auto job = source.job(42);
  ASSERT_TRUE(job);
  ASSERT_EQ(job->hosts.size(), 2u);
  const HostData& n1 = host_of(*job, "n1");
  EXPECT_EQ(n1.sensors, std::vector<std::string>{"JobCgroup"}) << "Other is not in the index";
  EXPECT_TRUE(has_series(n1, "JobCgroup.cpu.usage", {s0, s1}, {10, 15}));
  EXPECT_TRUE(has_series(n1, "JobCgroup.memory.current", {s0, s1}, {100, kNaN}));
  EXPECT_EQ(n1.metrics.size(), 2u);
  EXPECT_TRUE(n1.metrics.at("JobCgroup.cpu.usage").time_ns.same_as(n1.metrics.at("JobCgroup.memory.current").time_ns))
      << "a sensor's series share one time axis";
  EXPECT_EQ(n1.labels, (std::map<std::string, std::string>{{"JobCgroup.user", "alice"}})) << "the index's labels";
  ASSERT_EQ(n1.node_metrics.size(), 1u);
  const Series& jobs_on_node = n1.node_metrics.at("JobCgroup.jobs");
  EXPECT_EQ(jobs_on_node.time_ns, (std::vector<std::int64_t>{s0, s1}));
  EXPECT_EQ(jobs_on_node.values, (std::vector<double>{1, 1}));
  EXPECT_TRUE(has_series(host_of(*job, "n2"), "JobCgroup.cpu.usage", {s0, s1}, {20, 22}));
  EXPECT_TRUE(host_of(*job, "n2").node_metrics.empty());
  EXPECT_FALSE(source.job(77)) << "the index has no 77: its file is not read for it";
}

TEST(ReportHdf5Index, FilesWhoseIndexIsNotCompleteAreScanned) {
  TempDir dir;
  const std::string path = dir.file("being-written.h5");
  make_file(path, 0);
  Hdf5Source source(path);
  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id, 42u);
  EXPECT_EQ(jobs[0].user, "table-user");
  EXPECT_TRUE(jobs[0].per_host.empty()) << "no summaries without a complete index: the caller reads job()";
  EXPECT_EQ(jobs[1].id, 77u);
  const auto job = source.job(42);
  ASSERT_TRUE(job);
  const HostData& n1 = host_of(*job, "n1");
  EXPECT_EQ(n1.sensors, (std::vector<std::string>{"JobCgroup", "Other"}));
  EXPECT_EQ(n1.labels.at("JobCgroup.user"), "table-user");
  EXPECT_EQ(n1.node_metrics.at("JobCgroup.jobs").values, (std::vector<double>{1, 1}));
  ASSERT_TRUE(source.job(77));
}

// per_host: /<host>/<sensor>. The index names n1 only: n2's table is not opened.
TEST(ReportHdf5Index, AJobReadsOnlyTheHostsTheIndexNames) {
  TempDir dir;
  const std::string path = dir.file("per-host.h5");
  {
    HandMade file(path, 1, "fructosa lmaster HDF5 output", "per_host");
    for (const std::string host : {"n1", "n2"}) {
      HandMade::text_attribute(file.group("/" + host), "host", host);
      write_table(file, "/" + host + "/JobCgroup", "JobCgroup",
                  {{s0, 42, host, {{"cpu.usage", 1}}, {}}, {s1, 42, host, {{"cpu.usage", 2}}, {}}}, false);
    }
    HandIndex index;
    index.job = {42};
    index.host = {"n1"};
    index.first = {s0};
    index.last = {s1};
    index.rows = {2};
    index.sensors.push_back({"JobCgroup", "JobCgroup", {s0}, {s1}, {2}, {}, {}});
    index.write(file);
  }
  Hdf5Source source(path);
  const auto job = source.job(42);
  ASSERT_TRUE(job);
  ASSERT_EQ(job->hosts.size(), 1u);
  EXPECT_TRUE(has_series(job->hosts[0], "JobCgroup.cpu.usage", {s0, s1}, {1, 2}));
  EXPECT_EQ(source.jobs().at(0).hosts, std::vector<std::string>{"n1"});
}

// Two files: the per-host summaries add up as docs/hdf5.md says (first the smallest, last the
// largest; rows, count, sum and growth add; max the largest; last that of the later file), and a
// label the later file has no value of keeps the earlier one. A third file without a complete
// index holds job 43: its per_host is left empty.
TEST(ReportHdf5Index, SummariesMergeOverFiles) {
  TempDir dir;
  auto file_with = [&](const std::string& name, std::uint64_t id, std::int64_t first, std::int64_t last,
                       HandIndex::Metric usage, const std::string& user, int complete) {
    HandMade file(dir.file(name));
    write_table(file, "/JobCgroup", "JobCgroup", {{first, id, "n1", {{"cpu.usage", usage.last[0]}}, {{"user", user}}}});
    HandIndex index;
    index.complete = complete;
    index.job = {id};
    index.host = {"n1"};
    index.first = {first};
    index.last = {last};
    index.rows = {usage.count[0]};
    HandIndex::Sensor cgroup{"JobCgroup", "JobCgroup", {first}, {last}, {usage.count[0]}, {usage}, {}};
    cgroup.labels.push_back({"user", {user}});
    index.sensors.push_back(cgroup);
    index.write(file);
    hid_t root = file.file();
    H5Adelete(root, "created");
    HandMade::text_attribute(root, "created", name);  // orders the files
  };
  file_with("a.h5", 42, s0, s1, {"cpu.usage", "counter", {2}, {15}, {25}, {15}, {5}}, "alice", 1);
  file_with("b.h5", 42, s2, s3, {"cpu.usage", "counter", {2}, {30}, {55}, {30}, {15}}, "", 1);
  file_with("c.h5", 43, s3, s3, {"cpu.usage", "counter", {1}, {1}, {1}, {1}, {0}}, "bob", 0);
  Hdf5Source source(dir.path());
  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 2u);
  const JobSummary& job = jobs[0];
  EXPECT_EQ(job.first_ns, s0);
  EXPECT_EQ(job.last_ns, s3);
  EXPECT_EQ(job.user, "alice");
  ASSERT_EQ(job.per_host.size(), 1u);
  EXPECT_EQ(job.per_host[0].first_ns, s0);
  EXPECT_EQ(job.per_host[0].last_ns, s3);
  EXPECT_TRUE(same_summary(job.per_host[0].metrics.at("JobCgroup.cpu.usage"), {s0, s3, 4, 30, 80, 30, 20}));
  EXPECT_EQ(job.per_host[0].labels.at("JobCgroup.user"), "alice");
  EXPECT_EQ(jobs[1].id, 43u);
  EXPECT_EQ(jobs[1].user, "bob");
  EXPECT_TRUE(jobs[1].per_host.empty());

  // Job 42 also in a file without a complete index: its summaries would lack that file's rows.
  file_with("d.h5", 42, s3 + kSecond, s3 + kSecond, {"cpu.usage", "counter", {1}, {31}, {31}, {31}, {1}}, "", 0);
  const auto more = Hdf5Source(dir.path()).jobs();
  ASSERT_EQ(more.size(), 2u);
  EXPECT_EQ(more[0].last_ns, s3 + kSecond);
  EXPECT_TRUE(more[0].per_host.empty());
}

// A row of the job stored long after rows of later times (lmaster stores rows as received): the
// index counts it, so the table is read whole when the rows found by time are fewer. (A sensor
// that is not a node sensor: only the job's times are looked for.)
TEST(ReportHdf5Index, RowsFarOutOfTimeOrderAreRead) {
  TempDir dir;
  const std::string path = dir.file("late.h5");
  constexpr std::int64_t kMinute = 60 * kSecond;
  {
    HandMade file(path);
    std::vector<Row> rows;
    for (int m = 0; m < 20; ++m) rows.push_back({s0 + m * kMinute, 0, "n1", {{"a", 1}}, {}});
    rows.insert(rows.begin() + 10, {s0 + 10 * kMinute, 42, "n1", {{"a", 1}}, {}});
    rows.push_back({s0 + 10 * kMinute + kSecond, 42, "n1", {{"a", 2}}, {}});  // late
    write_table(file, "/S", "S", rows);
    HandIndex index;
    index.job = {42};
    index.host = {"n1"};
    index.first = {s0 + 10 * kMinute};
    index.last = {s0 + 10 * kMinute + kSecond};
    index.rows = {2};
    index.sensors.push_back({"S", "S", index.first, index.last, {2}, {}, {}});
    index.write(file);
  }
  Hdf5Source source(path);
  const auto job = source.job(42);
  ASSERT_TRUE(job);
  EXPECT_TRUE(has_series(job->hosts[0], "S.a", {s0 + 10 * kMinute, s0 + 10 * kMinute + kSecond}, {1, 2}));
}

// --- on files of the real output ----------------------------------------------------------------

// Node rows around a job on its host, across a new file started just before the job: CPUTimes
// every minute (its row before the job is in the first file), JobCgroup's node rows every 10 s,
// JobProc's label involved_jobs; rows long before, and another host's, left out.
TEST(ReportHdf5NodeSeries, AreTheNodeRowsJustAroundTheJob) {
  TempDir dir;
  MetricInfoStore infos;
  const std::string path = dir.file("metrics.h5");
  constexpr std::int64_t T = kT0 + 3600 * kSecond, S = kSecond;
  {
    Hdf5Output output(options_for(path, {"layout=per_sensor", "chunk=16"}), infos);
    write(output, {sample("n1", "CPUTimes", T - 3600 * S, 0, {{"user", 1}}),
                   sample("n1", "CPUTimes", T - 120 * S, 0, {{"user", 2}}),
                   sample("n1", "CPUTimes", T - 60 * S, 0, {{"user", 3}}),
                   sample("n2", "CPUTimes", T - 60 * S, 0, {{"user", 30}}),
                   sample("n1", "JobCgroup", T - 10 * S, 0, {{"jobs", 0}})});
    output.flush();
    output.reopen();
    for (int i = 0; i <= 4; ++i) {
      std::vector<Sample> round{sample("n1", "JobCgroup", T + i * 10 * S, 0, {{"jobs", i <= 2 ? 1.0 : 0.0}}),
                                sample("n1", "JobProc", T + i * 10 * S, 0, {{"jobs", 1}},
                                       {{"involved_jobs", i == 1 ? "42" : i == 3 ? "7" : ""}})};
      if (i <= 2)
        round.push_back(sample("n1", "JobCgroup", T + i * 10 * S, 42, {{"cpu.usage", 5.0 * i}}, {{"user", "alice"}}));
      write(output, round);
    }
    write(output, {sample("n1", "CPUTimes", T + 25 * S, 0, {{"user", 4}}),
                   sample("n1", "CPUTimes", T + 85 * S, 0, {{"user", 5}})});
  }
  ASSERT_EQ(dir.series().size(), 2u);
  Hdf5Source source(path);
  const auto job = source.job(42);
  ASSERT_TRUE(job);
  ASSERT_EQ(job->hosts.size(), 1u);
  const HostData& n1 = job->hosts[0];
  EXPECT_TRUE(has_series(n1, "JobCgroup.cpu.usage", {T, T + 10 * S, T + 20 * S}, {0, 5, 10}));
  EXPECT_EQ(n1.metrics.size(), 1u) << "no node key among the job's series";
  const auto& nodes = n1.node_metrics;
  ASSERT_TRUE(nodes.contains("CPUTimes.user"));
  EXPECT_EQ(nodes.at("CPUTimes.user").time_ns, (std::vector<std::int64_t>{T - 60 * S, T + 25 * S}));
  EXPECT_EQ(nodes.at("CPUTimes.user").values, (std::vector<double>{3, 4}));
  EXPECT_EQ(nodes.at("JobCgroup.jobs").time_ns, (std::vector<std::int64_t>{T, T + 10 * S, T + 20 * S}));
  EXPECT_EQ(nodes.at("JobProc.jobs").values, (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(nodes.size(), 3u);
  EXPECT_EQ(n1.node_labels, (std::map<std::string, std::string>{{"JobProc.involved_jobs", "42"}}))
      << "the latest at or before the job's last sample";
}

// What the index gives (the writer's) is what scanning the same files gives: the same JobData
// from job(), and per-host summaries equal to summarize() of its series.
void expect_the_index_and_the_tables_say_the_same(const std::string& layout) {
  TempDir dir;
  MetricInfoStore infos;
  const std::string path = dir.file("metrics.h5");
  {
    Hdf5Output output(options_for(path, {"layout=" + layout, "chunk=16"}), infos);
    for (int i = 0; i < 40; ++i) {
      if (i == 20) output.reopen();
      const std::int64_t time = kT0 + i * kSecond;
      write(output, {sample("n1", "JobCgroup", time, 0, {{"jobs", 1}}),
                     sample("n1", "JobCgroup", time, 42, {{"cpu.usage", i < 30 ? 2.0 * i : i - 30.0}, {"memory.peak", 7.0 * (i % 4)}},
                            {{"user", "alice"}, {"cpu_source", i < 25 ? "cgroup" : "processes"}}),
                     sample("n2", "JobCgroup", time, 42, {{"cpu.usage", 1.0 * i}}, {{"user", "alice"}}),
                     sample("n2", "JobProc", time, 42, {{"read_bytes", i % 3 ? kNaN : 4096.0 * i}})});
    }
  }
  const auto series = dir.series();
  ASSERT_EQ(series.size(), 2u);
  {
    master::hdf5_test::Reader reader(series[0]);
    if (!reader.exists("/.jobs")) GTEST_SKIP() << "the output writes no job index";
  }
  Hdf5Source indexed(path);
  const auto summaries = indexed.jobs();
  const auto from_index = indexed.job(42);
  for (const auto& file : series) remove_job_index(file);
  Hdf5Source scanned(path);
  const auto from_tables = scanned.job(42);
  ASSERT_TRUE(from_index && from_tables);
  ASSERT_EQ(from_index->hosts.size(), from_tables->hosts.size());
  for (std::size_t h = 0; h < from_index->hosts.size(); ++h) {
    const HostData &a = from_index->hosts[h], &b = from_tables->hosts[h];
    EXPECT_EQ(a.host, b.host);
    EXPECT_EQ(a.sensors, b.sensors);
    EXPECT_EQ(a.labels, b.labels);
    EXPECT_EQ(a.node_labels, b.node_labels);
    ASSERT_EQ(a.metrics.size(), b.metrics.size());
    for (const auto& [name, one] : a.metrics) {
      EXPECT_EQ(one.time_ns, b.metrics.at(name).time_ns) << name;
      EXPECT_TRUE(same_values(one.values, b.metrics.at(name).values)) << name;
    }
    ASSERT_EQ(a.node_metrics.size(), b.node_metrics.size());
    for (const auto& [name, one] : a.node_metrics) EXPECT_EQ(one.time_ns, b.node_metrics.at(name).time_ns) << name;
  }
  ASSERT_EQ(summaries.size(), 1u);
  ASSERT_EQ(summaries[0].per_host.size(), 2u);
  for (const auto& host : summaries[0].per_host) {
    const HostData& data = host_of(*from_tables, host.host);
    EXPECT_EQ(host.sensors, data.sensors);
    EXPECT_EQ(host.labels, data.labels);
    ASSERT_EQ(host.metrics.size(), data.metrics.size()) << host.host;
    for (const auto& [name, summary] : host.metrics) {
      MetricSummary expected = summarize(data.metrics.at(name));
      // The index keeps each sensor's first and last rows, not each key's.
      expected.first_ns = summary.first_ns;
      expected.last_ns = summary.last_ns;
      EXPECT_TRUE(same_summary(summary, expected)) << host.host << " " << name;
    }
  }
}

TEST(ReportHdf5Index, TheIndexAndTheTablesSayTheSame) { expect_the_index_and_the_tables_say_the_same("per_sensor"); }
TEST(ReportHdf5Index, TheIndexAndTheTablesSayTheSamePerHost) { expect_the_index_and_the_tables_say_the_same("per_host"); }

}  // namespace
}  // namespace fructosa::report
