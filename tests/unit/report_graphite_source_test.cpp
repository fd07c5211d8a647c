// fructosa-report's Graphite source (report/graphite_source.h) on fixed answers of graphite-web:
// /render JSON into JobData (series names of several depths mapped back to host and
// "<Sensor>.<key>", null datapoints skipped, other jobs and prefixes left out), the figures equal
// to those of the same data with NaN holes (as the HDF5 source reads it), /metrics/find's
// completer answer, and errors that name the URL; the source against a fake graphite-web (the
// job's series and its nodes' series around it, the metrics it pushed).
// tests/integration/test_report_graphite.py runs it against the real carbon-cache and graphite-web.
#include <arpa/inet.h>
#include <fnmatch.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
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

void expect_graphite_error(const std::function<void()>& call, const std::string& part) {
  try {
    call();
    ADD_FAILURE() << "no SourceError; expected one saying " << part;
  } catch (const SourceError& error) {
    EXPECT_NE(std::string(error.what()).find(part), std::string::npos) << error.what();
  }
}

TEST(ReportGraphiteSource, AnswersThatAreNotGraphitesNameTheUrl) {
  const std::string where = "http://graphite:8080/render";
  expect_graphite_error([&] { parse_graphite_render("<html>Bad gateway</html>", where); },
                      where + ": not JSON (is this graphite-web's render API?): \"<html>Bad gateway</html>\"");
  expect_graphite_error([&] { parse_graphite_render(R"({"error": "x"})", where); }, where + ": not a /render JSON answer");
  expect_graphite_error([&] { parse_graphite_render(R"([{"target": "a.b"}])", where); }, "without target or datapoints");
  expect_graphite_error([&] { parse_graphite_render(R"([{"target": "a.b", "datapoints": [[1]]}])", where); },
                      "not [value, timestamp] in a.b");
  expect_graphite_error([&] { parse_graphite_find("", "http://g/metrics/find"); }, "http://g/metrics/find: not JSON");
  expect_graphite_error([&] { parse_graphite_find("[]", "http://g/metrics/find"); }, "not a /metrics/find answer");
}

GraphiteSettings at(std::string url) {
  GraphiteSettings settings;
  settings.url = std::move(url);
  return settings;
}

TEST(ReportGraphiteSource, AGraphiteThatDoesNotAnswerIsNamedWithoutCredentials) {
  expect_graphite_error([] { GraphiteSource(at("ftp://graphite/")); }, "ftp://graphite/: not a Graphite URL");
  expect_graphite_error([] { GraphiteSource(at("graphite:8080")); }, "not a Graphite URL");
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
  expect_graphite_error([&] { source.job(77); }, url + "/metrics/find: ");
  expect_graphite_error([&] { source.jobs(); }, url + "/metrics/find: ");
  try {
    source.jobs();
  } catch (const SourceError& error) {
    EXPECT_EQ(std::string(error.what()).find("secret"), std::string::npos) << error.what();
  }
  EXPECT_FALSE(source.job(0));  // not a job: nothing asked
}

// --- against a fake graphite-web -----------------------------------------------------------------

using Points = std::vector<std::pair<std::int64_t, double>>;  // (seconds, value)

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t at; (at = text.find(by, start)) != std::string::npos; start = at + 1)
    parts.push_back(text.substr(start, at - start));
  parts.push_back(text.substr(start));
  return parts;
}

std::string url_decoded(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += text[i] == '+' ? ' ' : text[i];
    }
  }
  return out;
}

// Whether a name's components match a pattern's, graphite-web's way: * and {a,b} per component.
bool matches(const std::vector<std::string>& pattern, const std::vector<std::string>& name) {
  if (pattern.size() > name.size()) return false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const std::string& part = pattern[i];
    if (part.size() > 1 && part.front() == '{' && part.back() == '}') {
      const auto choices = split(part.substr(1, part.size() - 2), ',');
      if (std::find(choices.begin(), choices.end(), name[i]) == choices.end()) return false;
    } else if (fnmatch(part.c_str(), name[i].c_str(), 0) != 0) {
      return false;
    }
  }
  return true;
}

// graphite-web's /metrics/find (format=completer) and /render (format=json) over fixed series,
// on a loopback port, one request per connection; it keeps each request's parameters.
class FakeGraphite {
 public:
  explicit FakeGraphite(std::map<std::string, Points> series) : series_(std::move(series)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener_, 16) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size) != 0)
      throw std::runtime_error("cannot listen");
    url_ = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeGraphite() {
    ::shutdown(listener_, SHUT_RDWR);  // accept() returns
    thread_.join();
    ::close(listener_);
  }
  const std::string& url() const { return url_; }
  // The parameters of every request to `path`, in order.
  std::vector<std::multimap<std::string, std::string>> requests(const std::string& path) {
    std::lock_guard lock(mutex_);
    std::vector<std::multimap<std::string, std::string>> found;
    for (const auto& [at, query] : requests_)
      if (at == path) found.push_back(query);
    return found;
  }

 private:
  void serve() {
    for (int client; (client = ::accept(listener_, nullptr, nullptr)) >= 0; ::close(client)) {
      std::string request;
      char buffer[4096];
      for (ssize_t n; request.find("\r\n\r\n") == std::string::npos && (n = ::read(client, buffer, sizeof buffer)) > 0;)
        request.append(buffer, static_cast<std::size_t>(n));
      const auto words = split(request.substr(0, request.find("\r\n")), ' ');
      if (words.size() < 2) continue;
      const auto question = words[1].find('?');
      const std::string path = words[1].substr(0, question);
      std::multimap<std::string, std::string> query;
      if (question != std::string::npos)
        for (const auto& pair : split(words[1].substr(question + 1), '&')) {
          const auto equals = pair.find('=');
          query.emplace(url_decoded(pair.substr(0, equals)), url_decoded(pair.substr(equals + 1)));
        }
      {
        std::lock_guard lock(mutex_);
        requests_.emplace_back(path, query);
      }
      const std::string body = path == "/metrics/find" ? find(query) : render(query);
      const std::string answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      for (std::size_t sent = 0; sent < answer.size();) {
        const ssize_t n = ::write(client, answer.data() + sent, answer.size() - sent);
        if (n <= 0) break;
        sent += static_cast<std::size_t>(n);
      }
    }
  }

  std::string find(const std::multimap<std::string, std::string>& query) const {
    const auto pattern = split(query.find("query")->second, '.');
    std::map<std::string, bool> nodes;  // path -> leaf
    for (const auto& [name, points] : series_) {
      const auto parts = split(name, '.');
      if (!matches(pattern, parts)) continue;
      std::string path;
      for (std::size_t i = 0; i < pattern.size(); ++i) path += (i ? "." : "") + parts[i];
      nodes[path] = nodes[path] || parts.size() == pattern.size();
    }
    nlohmann::json metrics = nlohmann::json::array();
    for (const auto& [path, leaf] : nodes)
      metrics.push_back({{"path", leaf ? path : path + "."}, {"is_leaf", leaf ? "1" : "0"}});
    return nlohmann::json{{"metrics", metrics}}.dump();
  }

  std::string render(const std::multimap<std::string, std::string>& query) const {
    auto bound = [&](const char* key, std::int64_t otherwise) {
      const std::string value = query.find(key)->second;
      return !value.empty() && std::all_of(value.begin(), value.end(), ::isdigit) ? std::stoll(value) : otherwise;
    };
    const std::int64_t from = bound("from", 0), until = bound("until", std::numeric_limits<std::int64_t>::max());
    nlohmann::json answer = nlohmann::json::array();
    auto [first, last] = query.equal_range("target");
    for (auto target = first; target != last; ++target) {
      const auto pattern = split(target->second, '.');
      for (const auto& [name, points] : series_) {
        if (split(name, '.').size() != pattern.size() || !matches(pattern, split(name, '.'))) continue;
        nlohmann::json datapoints = nlohmann::json::array();
        for (const auto& [time, value] : points)
          if (time > from && time <= until) datapoints.push_back({value, time});
        answer.push_back({{"target", name}, {"datapoints", datapoints}});
      }
    }
    return answer.dump();
  }

  std::map<std::string, Points> series_;
  int listener_ = -1;
  std::string url_;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::pair<std::string, std::multimap<std::string, std::string>>> requests_;
};

std::vector<std::int64_t> ns(std::initializer_list<std::int64_t> seconds) {
  std::vector<std::int64_t> out;
  for (auto s : seconds) out.push_back(s * kS);
  return out;
}

// Job 77 on node01 (T to T+20) and node02 (T+10 to T+20), and what Graphite has of their nodes:
// node sensors at every depth (a sensor without keys, keys of one and two components), points
// long before the job, a sensor the analysis does not read and a host the job did not use.
TEST(ReportGraphiteSource, ReadsTheJobAndItsNodesSeriesAroundIt) {
  constexpr std::int64_t T = 1'700'000'000;
  FakeGraphite graphite({
      {"site1.jobs.77.node01.JobCgroup.cpu.usage", {{T, 1}, {T + 10, 2}, {T + 20, 3}}},
      {"site1.jobs.77.node02.JobCgroup.cpu.usage", {{T + 10, 5}, {T + 20, 6}}},
      {"site1.jobs.78.node01.JobCgroup.cpu.usage", {{T, 9}}},
      {"site1.node01.CPUTimes.user", {{T - 900, 0}, {T - 120, 1}, {T - 60, 2}, {T + 5, 3}, {T + 25, 4}, {T + 100, 5}}},
      {"site1.node01.RAPL.package-0.energy", {{T, 10}, {T + 20, 30}}},
      {"site1.node01.IPMIPower", {{T - 5, 200}, {T + 30, 210}}},
      {"site1.node01.VirtualMemory.used", {{T, 1}}},
      {"site1.node02.NvidiaGPU.gpu0.utilization", {{T, 0}, {T + 10, 90}, {T + 20, 95}, {T + 30, 0}}},
      {"site1.node03.CPUTimes.user", {{T, 1}}},
      {"node01.CPUTimes.user", {{T, 1}}},  // another prefix
  });
  GraphiteSettings settings = at(graphite.url());
  settings.prefix = "site1";
  GraphiteSource source(settings);
  const auto job = source.job(77);
  ASSERT_TRUE(job);
  ASSERT_EQ(job->hosts.size(), 2u);
  const HostData& node01 = job->hosts[0];
  EXPECT_EQ(node01.metrics.at("JobCgroup.cpu.usage").time_ns, ns({T, T + 10, T + 20}));
  std::vector<std::string> names;
  for (const auto& [name, series] : node01.node_metrics) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"CPUTimes.user", "IPMIPower.", "RAPL.package-0.energy"}));
  // From the point at or before the job's first sample to the first at or after its last.
  EXPECT_EQ(node01.node_metrics.at("CPUTimes.user").time_ns, ns({T - 60, T + 5, T + 25}));
  EXPECT_EQ(node01.node_metrics.at("CPUTimes.user").values, (std::vector<double>{2, 3, 4}));
  EXPECT_EQ(node01.node_metrics.at("RAPL.package-0.energy").values, (std::vector<double>{10, 30}));
  EXPECT_EQ(node01.node_metrics.at("IPMIPower.").time_ns, ns({T - 5, T + 30}));
  const HostData& node02 = job->hosts[1];
  ASSERT_EQ(node02.node_metrics.size(), 1u);
  EXPECT_EQ(node02.node_metrics.at("NvidiaGPU.gpu0.utilization").time_ns, ns({T + 10, T + 20}));
  // The node series are asked for over the job's span and kNodeSlackS around it.
  const auto renders = graphite.requests("/render");
  ASSERT_FALSE(renders.empty());
  const auto& nodes = renders.back();
  EXPECT_EQ(nodes.find("from")->second, std::to_string(T - kNodeSlackS - 1));
  EXPECT_EQ(nodes.find("until")->second, std::to_string(T + 20 + kNodeSlackS + 1));
  for (auto [target, end] = nodes.equal_range("target"); target != end; ++target)
    EXPECT_EQ(target->second.rfind("site1.{node01,node02}.{", 0), 0u) << target->second;

  const auto jobs = source.jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id, 77u);
  EXPECT_EQ(jobs[0].hosts, (std::vector<std::string>{"node01", "node02"}));
  EXPECT_EQ(jobs[0].first_ns, T * kS);
  EXPECT_EQ(jobs[0].last_ns, (T + 20) * kS);
}

// What a job's processes pushed (sensor User) is among the job's series Graphite keeps,
// jobs.<id>.<host>.User.<name>: read with the rest, summed up over the nodes; a node's own pushes
// (<host>.User.<name>) are no job's and not asked for.
TEST(ReportGraphiteSource, ReadsTheMetricsTheJobPushed) {
  constexpr std::int64_t T = 1'700'000'000;
  FakeGraphite graphite({
      {"jobs.77.node01.JobCgroup.cpu.usage", {{T, 1}, {T + 10, 2}, {T + 20, 3}}},
      {"jobs.77.node01.User.loss", {{T, 0.8}, {T + 10, 0.4}, {T + 20, 0.2}}},
      {"jobs.77.node01.User.images", {{T + 10, 64}, {T + 20, 32}}},
      {"jobs.77.node02.User.images", {{T + 10, 64}}},
      {"node01.User.scratch_free", {{T, 1e12}}},
  });
  GraphiteSource source(at(graphite.url()));
  const auto job = source.job(77);
  ASSERT_TRUE(job);
  for (const auto& host : job->hosts) EXPECT_TRUE(host.node_metrics.empty()) << host.host;
  const JobFigures figures = analyse(*job);
  ASSERT_EQ(figures.user_metrics.size(), 2u);
  const UserMetric& images = figures.user_metrics[0];
  EXPECT_EQ(images.name, "images");
  EXPECT_EQ(images.summary.count, 3u);
  EXPECT_DOUBLE_EQ(images.summary.sum, 160);
  EXPECT_EQ(images.min, 32);
  const UserMetric& loss = figures.user_metrics[1];
  EXPECT_EQ(loss.name, "loss");
  EXPECT_DOUBLE_EQ(loss.summary.last, 0.2);
  EXPECT_DOUBLE_EQ(loss.summary.max, 0.8);
  EXPECT_NEAR(loss.mean(), 1.4 / 3, 1e-12);
  ASSERT_EQ(figures.nodes.size(), 2u);
  EXPECT_EQ(figures.nodes[1].user_metrics.size(), 1u);
}

}  // namespace
}  // namespace fructosa::report
