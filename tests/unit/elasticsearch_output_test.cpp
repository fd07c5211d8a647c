// The [elasticsearch] output: document, index and template shapes, and the output itself against
// tests/integration/es_test_server.py (run with /usr/bin/python3 as a child process).
#include "elasticsearch_output.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "config.h"

extern char** environ;

namespace fructosa::master {
namespace {

using Json = nlohmann::json;

// 2024-05-01T23:59:59.900Z
constexpr std::int64_t kLateMay1 = 1714607999'900'000'000;

Sample es_sample(std::string sensor, std::int64_t time_ns, std::vector<MetricValue> metrics,
                   std::vector<Label> labels = {}, std::uint64_t job = 0,
                   std::string host = "node07") {
  return Sample{std::move(host),    std::move(sensor), time_ns, job,
                std::move(metrics), std::move(labels)};
}

TEST(ElasticsearchNames, IndexIsPerSensorAndUtcDay) {
  EXPECT_EQ(elasticsearch_index_name("fructosa_", "CPUPercent", kLateMay1),
            "fructosa_cpupercent-2024.05.01");
  EXPECT_EQ(elasticsearch_index_name("fructosa_", "CPUPercent", kLateMay1 + 100'000'000),
            "fructosa_cpupercent-2024.05.02");
  EXPECT_EQ(elasticsearch_index_name("", "Weird Sensor-1.x", 0), "weird_sensor_1_x-1970.01.01");
  EXPECT_EQ(elasticsearch_index_name("p_", "x", -1), "p_x-1969.12.31");
  EXPECT_EQ(elasticsearch_sensor_part("Sensors\xc3\xa9"), "sensors__");
}

TEST(ElasticsearchNames, DocumentIdIsDeterministicAndUnambiguous) {
  Sample sample = es_sample("VirtualMemory", 1700000000'200'000'000, {{"total", 1}});
  EXPECT_EQ(elasticsearch_document_id(sample), "node07|VirtualMemory|0|1700000000200000000");
  EXPECT_EQ(elasticsearch_document_id(sample),
            elasticsearch_document_id(es_sample("VirtualMemory", sample.time_ns, {{"x", 2}})));
  Sample job = sample;
  job.job = 4242;
  EXPECT_NE(elasticsearch_document_id(job), elasticsearch_document_id(sample));
  Sample odd = es_sample("S", 1, {}, {}, 0, "a|b%");
  EXPECT_EQ(elasticsearch_document_id(odd), "a%7Cb%25|S|0|1");
}

TEST(ElasticsearchNames, FieldNamesKeepDotsAndNameTheScalarValue) {
  EXPECT_EQ(elasticsearch_field_name(""), "value");
  EXPECT_EQ(elasticsearch_field_name("eth0.bytes_sent"), "eth0.bytes_sent");
  EXPECT_EQ(elasticsearch_field_name("coretemp.Core 0.current"), "coretemp.Core 0.current");
  EXPECT_EQ(elasticsearch_field_name("a..b"), "a._.b");
  EXPECT_EQ(elasticsearch_field_name(".x. "), "_.x._");
}

TEST(ElasticsearchDocument, HoldsTimestampHostSensorJobMetricsAndLabels) {
  double tricky = 0.1 + 0.2;
  Sample sample = es_sample("DiskUsage", 1714521600'123'456'789,
                              {{"/.total", 1.0e12},
                               {"/.percent", 12.5},
                               {"/.used", 3.5},
                               {"tricky", tricky},
                               {"tiny", 4.9e-324},
                               {"broken", std::numeric_limits<double>::quiet_NaN()}},
                              {{"/.device", "/dev/sda1"}, {"", "text"}}, 77);
  Json document = Json::parse(elasticsearch_document(sample, {"/.total", "/.used"}));
  EXPECT_EQ(document["@timestamp"], "2024-05-01T00:00:00.123Z");
  EXPECT_EQ(document["host"], "node07");
  EXPECT_EQ(document["sensor"], "DiskUsage");
  EXPECT_EQ(document["job"], 77);
  const Json& metrics = document["metrics"];
  EXPECT_TRUE(metrics["/.total"].is_number_integer());
  EXPECT_EQ(metrics["/.total"].get<std::int64_t>(), 1'000'000'000'000);
  EXPECT_TRUE(metrics["/.used"].is_number_float()) << "3.5 is not a whole number: kept as a double";
  EXPECT_TRUE(metrics["/.percent"].is_number_float());
  // Doubles read back bit for bit.
  EXPECT_EQ(metrics["tricky"].get<double>(), tricky);
  EXPECT_EQ(metrics["tiny"].get<double>(), 4.9e-324);
  EXPECT_TRUE(metrics["broken"].is_null());
  EXPECT_EQ(document["labels"]["/.device"], "/dev/sda1");
  EXPECT_EQ(document["labels"]["value"], "text");
  // A scalar sensor's value; invalid UTF-8 from a node does not stop the document.
  Json scalar = Json::parse(
      elasticsearch_document(es_sample("BootTime", 0, {{"", 1.7e9}}, {}, 0, "bad\xff"), {}));
  EXPECT_EQ(scalar["metrics"]["value"], 1.7e9);
  EXPECT_EQ(scalar["host"], "bad\xef\xbf\xbd");
  EXPECT_FALSE(scalar.contains("labels"));
}

TEST(ElasticsearchTemplate, TypesTheCatalogKeys) {
  std::vector<std::pair<std::string, MetricInfo>> keys = {
      {"eth0.bytes_sent", {"bytes", Kind::counter, "bytes sent"}},
      {"eth0.errin", {"count", Kind::counter, "receive errors"}},
      {"eth0.isup", {"bool", Kind::gauge, "up?"}},
      {"percent",
       {"percent", Kind::gauge,
        "usage in percent of the total, a long description " + std::string(60, 'x')}},
      {"percent.sub", {"percent", Kind::gauge, "a key below a leaf: left to dynamic mapping"}},
  };
  Json body = Json::parse(elasticsearch_index_template("fructosa_", "NetIOCounters", keys));
  EXPECT_EQ(body["index_patterns"], Json::array({"fructosa_netiocounters-*"}));
  EXPECT_EQ(body["priority"], 200);
  const Json& mappings = body["template"]["mappings"];
  const Json& properties = mappings["properties"];
  EXPECT_EQ(properties["@timestamp"]["type"], "date");
  EXPECT_EQ(properties["host"]["type"], "keyword");
  EXPECT_EQ(properties["sensor"]["type"], "keyword");
  EXPECT_EQ(properties["job"]["type"], "long");
  const Json& eth0 = properties["metrics"]["properties"]["eth0"]["properties"];
  EXPECT_EQ(eth0["bytes_sent"],
            Json::parse(R"({"type":"long","meta":{"unit":"bytes","kind":"counter"}})"));
  EXPECT_EQ(eth0["errin"]["type"], "long");
  EXPECT_EQ(eth0["isup"]["type"], "long");
  EXPECT_EQ(properties["metrics"]["properties"]["percent"]["type"], "double");
  EXPECT_FALSE(properties["metrics"]["properties"]["percent"].contains("properties"));
  EXPECT_EQ(mappings["_meta"]["metrics"]["percent"]["description"], keys[3].second.description);
  EXPECT_EQ(mappings["dynamic_templates"].size(), 3u);
  EXPECT_EQ(mappings["dynamic_templates"][2]["labels"]["mapping"]["type"], "keyword");
  EXPECT_EQ(body["template"]["settings"]["index.mapping.total_fields.limit"], 1000);
}

Options es_options_of(std::vector<std::string> pairs) {
  return parse_pairs(elasticsearch_options(), pairs, "test");
}

std::string temporary_file(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "-" + name);
  std::ofstream(path) << text;
  return path.string();
}

TEST(ElasticsearchOptions, DefaultsAndBadValues) {
  MetricInfoStore infos;
  Options defaults = es_options_of({});
  EXPECT_EQ(defaults.get_list("url"), std::vector<std::string>{"http://localhost:9200"});
  auto output = make_elasticsearch_output(defaults, infos);
  EXPECT_EQ(output->name(), "elasticsearch");
  EXPECT_EQ(output->batch_samples(), 1000u);
  EXPECT_EQ(output->flush_period(), 1.0);
  auto refused = [&](std::vector<std::string> pairs, const std::string& expected) {
    try {
      make_elasticsearch_output(es_options_of(pairs), infos);
      ADD_FAILURE() << "accepted " << pairs.front();
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  };
  refused({"index_prefix=Fructosa_"}, "index_prefix");
  refused({"index_prefix=_x"}, "index_prefix");
  refused({"url=ftp://host"}, "ftp://host");
  refused({"url=not a url"}, "not a url");
  refused({"credentials_file=/nonexistent/es-credentials"}, "/nonexistent/es-credentials");
  std::string malformed = temporary_file("es-malformed", "no colon here\n");
  refused({"credentials_file=" + malformed}, malformed);
  std::string good = temporary_file("es-good", "elastic:pa:ss\n");
  refused({"credentials_file=" + good, "api_key=abc"}, "not both");
  refused({"ca_file=/nonexistent/ca.pem"}, "/nonexistent/ca.pem");
  std::filesystem::remove(malformed);
  std::filesystem::remove(good);
}

// ---- against the test server ------------------------------------------------------------

std::pair<long, std::string> http(const std::string& method, const std::string& url,
                                  const std::string& body = "") {
  CURL* curl = curl_easy_init();
  std::string answer;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (!body.empty()) curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char* data, std::size_t size, std::size_t count, void* out) {
        static_cast<std::string*>(out)->append(data, size * count);
        return size * count;
      });
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
  long status = 0;
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return {status, answer};
}

// es_test_server.py as a child process, stopped by its PID.
class TestServer {
 public:
  TestServer() {
    const char* python = "/usr/bin/python3";
    std::string script = FRUCTOSA_SOURCE_DIR "/tests/integration/es_test_server.py";
    if (::access(python, X_OK) != 0) return;
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    std::vector<std::string> args = {python, script, "--port", "0"};
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    int spawned = posix_spawn(&pid_, python, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(pipe_fds[1]);
    if (spawned != 0) {
      pid_ = -1;
      ::close(pipe_fds[0]);
      return;
    }
    FILE* out = ::fdopen(pipe_fds[0], "r");
    char line[32] = {};
    if (std::fgets(line, sizeof line, out)) port_ = std::atoi(line);  // printed once it listens
    std::fclose(out);
  }
  ~TestServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void control(const std::string& what, const Json& body = Json::object()) {
    auto [status, answer] = http("POST", url() + "/_test/" + what, body.dump());
    ASSERT_EQ(status, 200) << answer;
  }
  Json stats() { return Json::parse(http("GET", url() + "/_test/stats").second); }
  // Every stored document, after a refresh.
  std::map<std::string, Json> documents() {
    http("POST", url() + "/_refresh");
    Json hits = Json::parse(
        http("POST", url() + "/fructosa_*/_search?size=10000", "{}").second)["hits"]["hits"];
    std::map<std::string, Json> found;
    for (const auto& hit : hits) found[hit["_id"].get<std::string>()] = hit["_source"];
    return found;
  }
  // TCP connections the output (not this test's own requests) used.
  std::size_t output_connections() {
    std::set<int> used;
    Json log = stats()["log"];
    for (const auto& entry : log)
      if (entry["headers"].value("user-agent", "").rfind("fructosa-lmaster/", 0) == 0)
        used.insert(entry["connection"].get<int>());
    return used.size();
  }
  // (method path) of every request the output made, in order.
  std::vector<std::string> requests() {
    std::vector<std::string> made;
    Json log = stats()["log"];
    for (const auto& entry : log)
      if (entry["headers"].value("user-agent", "").rfind("fructosa-lmaster/", 0) == 0)
        made.push_back(entry["method"].get<std::string>() + " " + entry["path"].get<std::string>());
    return made;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

class ElasticsearchOutputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    curl_global_init(CURL_GLOBAL_DEFAULT);
  }  // lmaster's main does this

  void SetUp() override {
    if (::access("/usr/bin/python3", X_OK) != 0)
      GTEST_SKIP() << "no /usr/bin/python3 to run es_test_server.py";
    ASSERT_NE(server_.port(), 0) << "es_test_server.py did not start";
    infos_.remember("VirtualMemory", "total", {"bytes", Kind::gauge, "total physical memory"});
    infos_.remember("VirtualMemory", "percent", {"percent", Kind::gauge, "used memory in percent"});
    infos_.remember("CPUCount", "", {"count", Kind::gauge, "logical CPUs"});
  }

  std::unique_ptr<Output> output(std::vector<std::string> pairs = {}) {
    if (std::none_of(pairs.begin(), pairs.end(),
                     [](const std::string& p) { return p.rfind("url=", 0) == 0; }))
      pairs.push_back("url=" + server_.url());
    return make_elasticsearch_output(es_options_of(pairs), infos_);
  }

  // `count` VirtualMemory samples 0.2 s apart, and one CPUCount sample.
  static std::vector<Sample> samples(int count, std::int64_t start = 1714521600'000'000'000) {
    std::vector<Sample> made;
    for (int i = 0; i < count; ++i)
      made.push_back(es_sample("VirtualMemory", start + i * 200'000'000,
                                 {{"total", 16e9 + i}, {"percent", 12.5 + i / 10.0}}));
    made.push_back(es_sample("CPUCount", start, {{"", 8}}));
    return made;
  }

  static std::uint64_t points(std::span<const Sample> samples) { return count_points(samples); }

  TestServer server_;
  MetricInfoStore infos_;
};

TEST_F(ElasticsearchOutputTest, DeliversEveryDocumentOnceOverOneConnection) {
  auto out = output();
  auto batch = samples(5);
  out->write(batch);
  EXPECT_EQ(out->counters().sent, points(batch));
  auto stored = server_.documents();
  ASSERT_EQ(stored.size(), batch.size());
  const Json& first = stored.at("node07|VirtualMemory|0|1714521600000000000");
  EXPECT_EQ(first["@timestamp"], "2024-05-01T00:00:00.000Z");
  EXPECT_EQ(first["metrics"]["total"], 16000000000);
  EXPECT_EQ(first["metrics"]["percent"], 12.5);
  EXPECT_EQ(stored.at("node07|CPUCount|0|1714521600000000000")["metrics"]["value"], 8);
  // The same samples again (as after a lost answer): still one document each.
  out->write(batch);
  EXPECT_EQ(server_.documents().size(), batch.size());
  EXPECT_EQ(out->counters().dropped, 0u);
  // A template per sensor, before its first bulk; one TCP connection for everything.
  auto made = server_.requests();
  ASSERT_GE(made.size(), 3u);
  EXPECT_EQ(std::count(made.begin(), made.end(), "PUT /_index_template/fructosa_virtualmemory"), 1);
  EXPECT_EQ(std::count(made.begin(), made.end(), "PUT /_index_template/fructosa_cpucount"), 1);
  EXPECT_EQ(made[2], "POST /_bulk");
  EXPECT_EQ(server_.output_connections(), 1u);
  Json mapping = Json::parse(
      http("GET", server_.url() + "/fructosa_virtualmemory-2024.05.01/_mapping").second);
  const Json& properties = mapping["fructosa_virtualmemory-2024.05.01"]["mappings"]["properties"];
  EXPECT_EQ(properties["metrics"]["properties"]["total"]["type"], "long");
  EXPECT_EQ(properties["metrics"]["properties"]["percent"]["type"], "double");
  EXPECT_EQ(properties["host"]["type"], "keyword");
}

TEST_F(ElasticsearchOutputTest, ANewCatalogKeyPutsTheTemplateAgain) {
  auto out = output();
  out->write(samples(1));
  auto more = samples(1, 1714521700'000'000'000);
  more[0].metrics.push_back({"available", 1e9});
  out->write(more);  // not in the catalog: mapped dynamically, no new template
  Json mapping = Json::parse(
      http("GET", server_.url() + "/fructosa_virtualmemory-2024.05.01/_mapping").second);
  EXPECT_EQ(mapping["fructosa_virtualmemory-2024.05.01"]["mappings"]["properties"]["metrics"]
                   ["properties"]["available"]["type"],
            "double")
      << "a double, not the float Elasticsearch would pick";
  infos_.remember("VirtualMemory", "available", {"bytes", Kind::gauge, "available memory"});
  more = samples(1, 1714521800'000'000'000);
  more[0].metrics.push_back({"available", 2e9});
  out->write(more);
  auto made = server_.requests();
  EXPECT_EQ(std::count(made.begin(), made.end(), "PUT /_index_template/fructosa_virtualmemory"), 2);
  Json stored =
      Json::parse(http("GET", server_.url() + "/_index_template/fructosa_virtualmemory").second);
  EXPECT_EQ(stored["index_templates"][0]["index_template"]["template"]["mappings"]["properties"]
                  ["metrics"]["properties"]["available"]["type"],
            "long");
}

TEST_F(ElasticsearchOutputTest, A429Or500IsTemporaryAndNothingIsLost) {
  auto out = output();
  auto batch = samples(3);
  for (int status : {429, 500, 503}) {
    server_.control("fail", {{"count", 1}, {"status", status}, {"path_contains", "_bulk"}});
    try {
      out->write(batch);
      ADD_FAILURE() << status << " was not reported";
    } catch (const OutputError& error) {
      EXPECT_TRUE(error.undelivered.empty()) << "none delivered";
      EXPECT_NE(std::string(error.what()).find(server_.url()), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find(std::to_string(status)), std::string::npos)
          << error.what();
    }
  }
  EXPECT_EQ(out->counters().sent, 0u);
  out->write(batch);
  EXPECT_EQ(out->counters().sent, points(batch));
  EXPECT_EQ(server_.documents().size(), batch.size());
}

TEST_F(ElasticsearchOutputTest, PerItem429ListsOnlyTheRefusedSamples) {
  auto out = output();
  auto batch = samples(5);                // 6 samples
  out->write(std::span(batch).first(1));  // templates in place
  server_.control("fail_items", {{"every", 2}, {"status", 429}, {"limit", 2}});
  try {
    out->write(std::span(batch).subspan(1));
    ADD_FAILURE() << "the 429 items were not reported";
  } catch (const OutputError& error) {
    EXPECT_EQ(error.undelivered, (std::vector<std::size_t>{1, 3}));
    EXPECT_NE(std::string(error.what()).find("es_rejected_execution_exception"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(out->counters().sent, points(batch) - points(std::span(batch).subspan(2, 1)) -
                                      points(std::span(batch).subspan(4, 1)));
  std::vector<Sample> again = {batch[2], batch[4]};
  out->write(again);
  EXPECT_EQ(out->counters().sent, points(batch));
  EXPECT_EQ(server_.documents().size(), batch.size());
  // The last _bulk request carried exactly the two samples that had failed.
  Json log = server_.stats()["log"];
  Json last;
  for (const auto& entry : log)
    if (entry["path"] == "/_bulk") last = entry;
  ASSERT_EQ(last["items"].size(), 2u);
  EXPECT_EQ(last["items"][0]["id"], elasticsearch_document_id(batch[2]));
  EXPECT_EQ(last["items"][1]["id"], elasticsearch_document_id(batch[4]));
}

TEST_F(ElasticsearchOutputTest, ADocumentRefusedForGoodIsDroppedAndCounted) {
  auto out = output();
  auto batch = samples(3);
  server_.control("fail_items", {{"every", 2}, {"status", 400}, {"limit", 1}});
  out->write(batch);  // no exception: nothing to retry
  EXPECT_EQ(out->counters().dropped, batch[1].metrics.size());
  EXPECT_EQ(out->counters().sent, points(batch) - batch[1].metrics.size());
  EXPECT_EQ(server_.documents().size(), batch.size() - 1);
  // A real mapping conflict: "total" is a number, "total.x" would make it an object.
  auto conflicting = samples(0, 1714521900'000'000'000);
  conflicting.push_back(es_sample("VirtualMemory", 1714521900'000'000'000, {{"total.x", 1}}));
  out->write(conflicting);
  EXPECT_EQ(out->counters().dropped, batch[1].metrics.size() + 1);
}

TEST_F(ElasticsearchOutputTest, OversizedRequestsAreSplitAndAPoisonSampleDropped) {
  auto out = output();
  auto batch = samples(3);  // 4 samples
  out->write(std::span(batch).first(1));
  std::uint64_t sent_before = out->counters().sent;
  server_.control("fail", {{"count", 1}, {"status", 413}, {"path_contains", "_bulk"}});
  out->write(std::span(batch).subspan(1));  // 413 for 3, then 1 + 2
  EXPECT_EQ(out->counters().sent, sent_before + points(std::span(batch).subspan(1)));
  EXPECT_EQ(server_.documents().size(), batch.size());
  // Elasticsearch refusing a whole request: halves until the sample at fault is alone.
  auto more = samples(1, 1714522000'000'000'000);  // 2 samples
  server_.control("fail", {{"count", 3}, {"status", 400}, {"path_contains", "_bulk"}});
  out->write(more);
  EXPECT_EQ(out->counters().dropped, points(more));
}

TEST_F(ElasticsearchOutputTest, TemplateTroubles) {
  auto out = output();
  auto batch = samples(1);
  server_.control("fail", {{"count", 1}, {"status", 500}, {"path_contains", "_index_template"}});
  EXPECT_THROW(out->write(batch), OutputError);
  EXPECT_EQ(server_.documents().size(), 0u);
  // A template the cluster refuses for good: logged, and the documents still go in.
  server_.control("fail", {{"count", 2}, {"status", 400}, {"path_contains", "_index_template"}});
  out->write(batch);
  EXPECT_EQ(server_.documents().size(), batch.size());
}

TEST_F(ElasticsearchOutputTest, TheNextNodeIsTriedWhenOneIsUnreachable) {
  // Port 1 on loopback: nobody listens there, the connection is refused at once.
  auto out = output({"url=http://127.0.0.1:1/, " + server_.url()});
  auto batch = samples(2);
  out->write(batch);
  EXPECT_EQ(out->counters().sent, points(batch));
  EXPECT_EQ(server_.documents().size(), batch.size());
  auto alone = output({"url=http://127.0.0.1:1", "timeout=2"});
  try {
    alone->write(batch);
    ADD_FAILURE() << "an unreachable node was not reported";
  } catch (const OutputError& error) {
    EXPECT_TRUE(error.undelivered.empty());
    EXPECT_NE(std::string(error.what()).find("http://127.0.0.1:1"), std::string::npos)
        << error.what();
  }
}

TEST_F(ElasticsearchOutputTest, ADroppedConnectionLosesAndDuplicatesNothing) {
  auto out = output();
  auto batch = samples(4);
  out->write(std::span(batch).first(1));
  server_.control("drop",
                  {{"count", 2}, {"path_contains", "_bulk"}});  // libcurl itself retries once
  int failures = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    try {
      out->write(std::span(batch).subspan(1));
      break;
    } catch (const OutputError& error) {
      ++failures;
      EXPECT_TRUE(error.undelivered.empty());
    }
  }
  EXPECT_EQ(failures, 1);
  EXPECT_EQ(server_.documents().size(), batch.size());
  EXPECT_EQ(out->counters().sent, points(batch));
}

TEST_F(ElasticsearchOutputTest, BasicAuthFromTheCredentialsFileAndApiKey) {
  server_.control("auth", {{"users", {{"elastic", "pa:ss"}}}, {"api_keys", {"a2V5"}}});
  auto anonymous = output();
  try {
    anonymous->write(samples(1));
    ADD_FAILURE() << "a 401 was not reported";
  } catch (const OutputError& error) {
    EXPECT_NE(std::string(error.what()).find("401"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("security_exception"), std::string::npos)
        << error.what();
  }
  std::string credentials = temporary_file("es-credentials", "elastic:pa:ss\n");
  output({"credentials_file=" + credentials})->write(samples(1));
  std::filesystem::remove(credentials);
  output({"api_key=a2V5"})->write(samples(1, 1714522000'000'000'000));
  server_.control("auth", {{"users", Json::object()}});  // this test's own requests are anonymous
  EXPECT_EQ(server_.documents().size(), 4u);
  std::set<std::string> authorizations;
  Json log = server_.stats()["log"];
  for (const auto& entry : log)
    if (entry["status"] == 200 && entry["headers"].contains("authorization"))
      authorizations.insert(entry["headers"]["authorization"].get<std::string>());
  EXPECT_TRUE(authorizations.count("Basic ZWxhc3RpYzpwYTpzcw==")) << "base64 of elastic:pa:ss";
  EXPECT_TRUE(authorizations.count("ApiKey a2V5"));
}

TEST_F(ElasticsearchOutputTest, ReopenMakesANewConnectionAndPutsTemplatesAgain) {
  auto out = output();
  out->write(samples(1));
  out->reopen();
  out->write(samples(1, 1714522000'000'000'000));
  auto made = server_.requests();
  EXPECT_EQ(std::count(made.begin(), made.end(), "PUT /_index_template/fructosa_virtualmemory"), 2);
  EXPECT_EQ(server_.output_connections(), 2u);
}

}  // namespace
}  // namespace fructosa::master
