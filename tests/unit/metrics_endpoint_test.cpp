// [lmaster] metrics_listen: the exposition text of lmaster's own sensor (valid names, # HELP and
// # TYPE before each sample, counters *_total, escaping) and the HTTP endpoint serving it. The
// real Prometheus scrapes it in tests/integration/test_lmaster_metrics.py.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <regex>
#include <sstream>

#include "metrics_endpoint.h"
#include "metrics_exposition.h"

namespace fructosa::master {
namespace {

Sample stats() {
  Sample sample;
  sample.host = "master\"01";
  sample.sensor = "lmaster";
  sample.metrics = {{"received", 1234},          {"batches", 12},
                    {"agents", 2},               {"agent.node07.up", 1},
                    {"agent.node07.last_seen", 1.7e9}, {"prometheus.sent", 1e6},
                    {"prometheus.queued", 5},    {"journal.bytes", 4096},
                    {"no.such.key", NAN}};
  return sample;
}

TEST(MetricsExposition, EveryFamilyHasHelpAndTypeAndValidNames) {
  std::string text = metrics_exposition(stats());
  std::istringstream lines(text);
  const std::regex name_re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  const std::regex sample_re(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)\{host="master\\"01"\} (\S+))");
  std::map<std::string, std::string> types, help, values;
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (line.starts_with("# HELP ")) {
      auto rest = line.substr(7);
      help[rest.substr(0, rest.find(' '))] = rest.substr(rest.find(' ') + 1);
    } else if (line.starts_with("# TYPE ")) {
      auto rest = line.substr(7);
      std::string name = rest.substr(0, rest.find(' '));
      EXPECT_TRUE(std::regex_match(name, name_re)) << name;
      types[name] = rest.substr(rest.find(' ') + 1);
    } else {
      ASSERT_TRUE(std::regex_match(line, match, sample_re)) << line;
      // HELP and TYPE come before the family's sample.
      EXPECT_TRUE(types.count(match[1]) && help.count(match[1])) << line;
      values[match[1]] = match[2];
    }
  }
  EXPECT_EQ(values.size(), 9u) << text;
  EXPECT_EQ(types["fructosa_lmaster_received_total"], "counter");
  EXPECT_EQ(values["fructosa_lmaster_received_total"], "1234");
  EXPECT_EQ(help["fructosa_lmaster_received_total"], "points accepted from agents");
  EXPECT_EQ(types["fructosa_lmaster_prometheus_sent_total"], "counter");
  EXPECT_EQ(values["fructosa_lmaster_prometheus_sent_total"], "1000000");
  EXPECT_EQ(types["fructosa_lmaster_prometheus_queued"], "gauge");
  EXPECT_EQ(types["fructosa_lmaster_agent_node07_up"], "gauge");
  EXPECT_EQ(values["fructosa_lmaster_agent_node07_last_seen_timestamp_seconds"], "1700000000");
  EXPECT_EQ(types["fructosa_lmaster_journal_bytes"], "gauge");
  EXPECT_EQ(values["fructosa_lmaster_no_such_key"], "NaN");  // not in the catalog: a gauge, no unit
  for (const auto& [name, type] : types)
    EXPECT_EQ(type == "counter", name.ends_with("_total")) << name << " " << type;
}

TEST(MetricsExposition, ListenAddresses) {
  std::string host;
  unsigned port = 1;
  EXPECT_TRUE(split_listen_address("127.0.0.1:9108", host, port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 9108u);
  EXPECT_TRUE(split_listen_address("[::1]:0", host, port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 0u);
  EXPECT_TRUE(split_listen_address("localhost:80", host, port));
  for (const char* bad : {"127.0.0.1", ":9108", "::1:9108", "host:", "host:65536", "host:9x", "[]:1"})
    EXPECT_FALSE(split_listen_address(bad, host, port)) << bad;
}

// One HTTP/1.1 request on a fresh connection; the whole answer (the server closes).
std::string http_request(const std::string& url, const std::string& request_line) {
  auto port = std::stoi(url.substr(url.rfind(':') + 1));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return "connect failed";
  }
  std::string request = request_line + "\r\nHost: x\r\nConnection: close\r\n\r\n";
  // The server may close before reading a request it refuses: no SIGPIPE.
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  char buffer[4096];
  for (ssize_t got; (got = ::read(fd, buffer, sizeof buffer)) > 0;) answer.append(buffer, static_cast<std::size_t>(got));
  ::close(fd);
  return answer;
}

TEST(MetricsEndpoint, ServesThePublishedTextOnGetMetricsOnly) {
  MetricsEndpoint endpoint("127.0.0.1:0");
  ASSERT_TRUE(endpoint.url().starts_with("http://127.0.0.1:")) << endpoint.url();
  ASSERT_TRUE(endpoint.url().ends_with("/metrics"));
  std::string base = endpoint.url().substr(0, endpoint.url().size() - 8);
  endpoint.publish("# TYPE a gauge\na 1\n");
  std::string ok = http_request(base, "GET /metrics HTTP/1.1");
  EXPECT_TRUE(ok.starts_with("HTTP/1.1 200")) << ok;
  EXPECT_NE(ok.find("Content-Type: text/plain; version=0.0.4; charset=utf-8"), std::string::npos) << ok;
  EXPECT_TRUE(ok.ends_with("\r\n\r\n# TYPE a gauge\na 1\n")) << ok;
  endpoint.publish("b 2\n");
  EXPECT_TRUE(http_request(base, "GET /metrics HTTP/1.1").ends_with("\r\n\r\nb 2\n"));
  EXPECT_TRUE(http_request(base, "GET /other HTTP/1.1").starts_with("HTTP/1.1 404"));
  EXPECT_TRUE(http_request(base, "POST /metrics HTTP/1.1").starts_with("HTTP/1.1 405"));
  // Headers beyond the limit: refused, the connection closed, the endpoint still serving.
  std::string huge = "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(20000, 'x');
  EXPECT_FALSE(http_request(base, huge).starts_with("HTTP/1.1 200"));
  EXPECT_TRUE(http_request(base, "GET /metrics HTTP/1.1").starts_with("HTTP/1.1 200"));
}

TEST(MetricsEndpoint, AnAddressInUseOrUnknownIsAnErrorNamingIt) {
  MetricsEndpoint first("127.0.0.1:0");
  std::string port = first.url().substr(first.url().rfind(':') + 1);
  port = port.substr(0, port.find('/'));
  try {
    MetricsEndpoint second("127.0.0.1:" + port);
    FAIL() << "bound twice";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("127.0.0.1:" + port), std::string::npos) << error.what();
  }
  EXPECT_THROW(MetricsEndpoint("no-such-host.invalid:9108"), std::runtime_error);
  EXPECT_THROW(MetricsEndpoint("9108"), std::runtime_error);
}

}  // namespace
}  // namespace fructosa::master
