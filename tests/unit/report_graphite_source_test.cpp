// fructosa-report's Graphite source (report/graphite_source.h) on fixed answers of graphite-web:
// /render JSON into JobData (series names of several depths mapped back to host and
// "<Sensor>.<key>", null datapoints skipped, other jobs and prefixes left out), the figures equal
// to those of the same data with NaN holes (as the HDF5 source reads it), /metrics/find's
// completer answer, and errors that name the URL. tests/integration/test_report_graphite.py
// runs it against the real carbon-cache and graphite-web.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "analysis.h"
#include "graphite_source.h"

namespace fructosa::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::int64_t kS = 1'000'000'000;

// Job 77 on node01 and node02 under prefix site1, as graphite-web answers
// target=site1.jobs.77.*.*.* & target=site1.jobs.77.*.*.*.*; with a null (a missed second), a
// series with no point at all, and series of another job and of the node itself (not asked for
// by such targets, but left out whatever a server sends).
const char* kRender = R"([
  {"target": "site1.jobs.77.node01.JobCgroup.cpus", "tags": {"name": "site1.jobs.77.node01.JobCgroup.cpus"},
   "datapoints": [[4.0, 1700000000], [4.0, 1700000001], [4.0, 1700000002], [4.0, 1700000003]]},
  {"target": "site1.jobs.77.node01.JobCgroup.cpu.usage", "tags": {},
   "datapoints": [[10.5, 1700000000], [12.5, 1700000001], [null, 1700000002], [16.5, 1700000003]]},
  {"target": "site1.jobs.77.node01.JobCgroup.memory.current", "tags": {},
   "datapoints": [[1048576.0, 1700000000], [2097152.0, 1700000001], [null, 1700000002], [1572864.0, 1700000003]]},
  {"target": "site1.jobs.77.node01.JobCgroup.memory.limit",
   "datapoints": [[4194304.0, 1700000000], [4194304.0, 1700000001], [4194304.0, 1700000002], [4194304.0, 1700000003]]},
  {"target": "site1.jobs.77.node01.JobCgroup.memory.peak", "datapoints": [[null, 1700000000], [null, 1700000003]]},
  {"target": "site1.jobs.77.node02.JobProc.read_bytes", "datapoints": [[0, 1700000001], [4096, 1700000003]]},
  {"target": "site1.jobs.77.node02.GPU.gpu0.mem.used", "datapoints": [[1e9, 1700000002]]},
  {"target": "site1.jobs.78.node01.JobCgroup.cpus", "datapoints": [[8.0, 1700000000]]},
  {"target": "site1.node01.JobCgroup.cpus", "datapoints": [[8.0, 1700000000]]}
])";

TEST(ReportGraphiteSource, RenderAnswerBecomesJobDataWithDottedKeysAndNullsSkipped) {
  const auto series = parse_graphite_render(kRender, "http://graphite/render");
  ASSERT_EQ(series.size(), 9u);
  EXPECT_EQ(series[1].name, "site1.jobs.77.node01.JobCgroup.cpu.usage");
  EXPECT_EQ(series[1].points.time_ns, (std::vector<std::int64_t>{1700000000 * kS, 1700000001 * kS, 1700000003 * kS}));
  EXPECT_EQ(series[1].points.values, (std::vector<double>{10.5, 12.5, 16.5}));
  EXPECT_TRUE(series[4].points.values.empty());

  const auto data = graphite_job_data(77, series, "site1.jobs.77.");
  ASSERT_TRUE(data);
  EXPECT_EQ(data->id, 77u);
  ASSERT_EQ(data->hosts.size(), 2u);
  const HostData& node01 = data->hosts[0];
  EXPECT_EQ(node01.host, "node01");
  EXPECT_EQ(node01.sensors, std::vector<std::string>{"JobCgroup"});
  std::vector<std::string> names;
  for (const auto& [name, values] : node01.metrics) names.push_back(name);
  // memory.peak has no point: left out, as the HDF5 source leaves out an all-NaN column.
  EXPECT_EQ(names, (std::vector<std::string>{"JobCgroup.cpu.usage", "JobCgroup.cpus", "JobCgroup.memory.current",
                                              "JobCgroup.memory.limit"}));
  EXPECT_TRUE(node01.labels.empty());  // Graphite keeps no labels
  const HostData& node02 = data->hosts[1];
  EXPECT_EQ(node02.host, "node02");
  EXPECT_EQ(node02.sensors, (std::vector<std::string>{"GPU", "JobProc"}));
  ASSERT_TRUE(node02.metrics.contains("GPU.gpu0.mem.used"));
  EXPECT_EQ(node02.metrics.at("GPU.gpu0.mem.used").values, std::vector<double>{1e9});
  EXPECT_EQ(node02.metrics.at("JobProc.read_bytes").time_ns.front(), 1700000001 * kS);

  EXPECT_FALSE(graphite_job_data(79, series, "site1.jobs.79."));
  EXPECT_FALSE(graphite_job_data(77, series, "jobs.77."));  // another prefix
  const auto other = graphite_job_data(78, series, "site1.jobs.78.");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->hosts.size(), 1u);
}

TEST(ReportGraphiteSource, FiguresEqualThoseOfTheSameDataWithNanHoles) {
  const auto from_graphite = graphite_job_data(77, parse_graphite_render(kRender, "render"), "site1.jobs.77.");
  ASSERT_TRUE(from_graphite);
  // node01 as the HDF5 source reads it: one time column for the sensor, NaN where a value is missing.
  const std::vector<std::int64_t> times{1700000000 * kS, 1700000001 * kS, 1700000002 * kS, 1700000003 * kS};
  JobData from_hdf5;
  from_hdf5.id = 77;
  HostData node01;
  node01.host = "node01";
  node01.sensors = {"JobCgroup"};
  node01.metrics["JobCgroup.cpus"] = {times, {4, 4, 4, 4}};
  node01.metrics["JobCgroup.cpu.usage"] = {times, {10.5, 12.5, kNaN, 16.5}};
  node01.metrics["JobCgroup.memory.current"] = {times, {1048576, 2097152, kNaN, 1572864}};
  node01.metrics["JobCgroup.memory.limit"] = {times, {4194304, 4194304, 4194304, 4194304}};
  from_hdf5.hosts.push_back(node01);
  from_hdf5.hosts.push_back(from_graphite->hosts[1]);

  const JobFigures a = analyse(*from_graphite), b = analyse(from_hdf5);
  EXPECT_EQ(a.first_ns, b.first_ns);
  EXPECT_EQ(a.last_ns, b.last_ns);
  EXPECT_EQ(a.elapsed_s, 3.0);
  EXPECT_EQ(a.cpu_seconds, b.cpu_seconds);
  EXPECT_EQ(a.cpu_seconds, 6.0);
  EXPECT_EQ(a.cpus, b.cpus);
  EXPECT_EQ(a.cores_used, b.cores_used);
  EXPECT_EQ(a.cpu_efficiency, b.cpu_efficiency);
  EXPECT_EQ(a.memory_peak, b.memory_peak);
  EXPECT_EQ(a.memory_limit, b.memory_limit);
  EXPECT_EQ(a.read_bytes, b.read_bytes);
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[0].cores_over_time.values, b.nodes[0].cores_over_time.values);
  EXPECT_EQ(judge(a).word, judge(b).word);
}

TEST(ReportGraphiteSource, FindAnswer) {
  // graphite-web's format=completer: a branch's path ends in '.', is_leaf a string.
  const auto nodes = parse_graphite_find(R"({"metrics": [
      {"path": "jobs.77.node01.", "name": "node01", "is_leaf": "0"},
      {"path": "jobs.77.node01.JobCgroup.cpus", "name": "cpus", "is_leaf": "1"},
      {"path": "jobs.77.node02", "name": "node02", "is_leaf": false},
      {"path": "jobs.77.node02.Energy", "name": "Energy", "is_leaf": 1},
      {"name": "*"}]})",
                                         "find");
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes[0].path, "jobs.77.node01");
  EXPECT_FALSE(nodes[0].leaf);
  EXPECT_TRUE(nodes[1].leaf);
  EXPECT_FALSE(nodes[2].leaf);
  EXPECT_TRUE(nodes[3].leaf);
  EXPECT_TRUE(parse_graphite_find(R"({"metrics": []})", "find").empty());
}

void expect_source_error(const std::function<void()>& call, const std::string& part) {
  try {
    call();
    ADD_FAILURE() << "no SourceError; expected one saying " << part;
  } catch (const SourceError& error) {
    EXPECT_NE(std::string(error.what()).find(part), std::string::npos) << error.what();
  }
}

TEST(ReportGraphiteSource, AnswersThatAreNotGraphitesNameTheUrl) {
  const std::string where = "http://graphite:8080/render";
  expect_source_error([&] { parse_graphite_render("<html>Bad gateway</html>", where); },
                      where + ": not JSON (is this graphite-web's render API?): \"<html>Bad gateway</html>\"");
  expect_source_error([&] { parse_graphite_render(R"({"error": "x"})", where); }, where + ": not a /render JSON answer");
  expect_source_error([&] { parse_graphite_render(R"([{"target": "a.b"}])", where); }, "without target or datapoints");
  expect_source_error([&] { parse_graphite_render(R"([{"target": "a.b", "datapoints": [[1]]}])", where); },
                      "not [value, timestamp] in a.b");
  expect_source_error([&] { parse_graphite_find("", "http://g/metrics/find"); }, "http://g/metrics/find: not JSON");
  expect_source_error([&] { parse_graphite_find("[]", "http://g/metrics/find"); }, "not a /metrics/find answer");
}

GraphiteSettings at(std::string url) {
  GraphiteSettings settings;
  settings.url = std::move(url);
  return settings;
}

TEST(ReportGraphiteSource, AGraphiteThatDoesNotAnswerIsNamedWithoutCredentials) {
  expect_source_error([] { GraphiteSource(at("ftp://graphite/")); }, "ftp://graphite/: not a Graphite URL");
  expect_source_error([] { GraphiteSource(at("graphite:8080")); }, "not a Graphite URL");
  // A loopback port nothing listens on: bound, then closed.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size), 0);
  ::close(fd);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  GraphiteSource source(at("http://reader:secret@127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "/"));
  EXPECT_EQ(source.describe(), "Graphite at " + url);
  expect_source_error([&] { source.job(77); }, url + "/metrics/find: ");
  expect_source_error([&] { source.jobs(); }, url + "/metrics/find: ");
  try {
    source.jobs();
  } catch (const SourceError& error) {
    EXPECT_EQ(std::string(error.what()).find("secret"), std::string::npos) << error.what();
  }
  EXPECT_FALSE(source.job(0));  // not a job: nothing asked
}

}  // namespace
}  // namespace fructosa::report
