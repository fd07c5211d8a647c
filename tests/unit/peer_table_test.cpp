// lmaster's table of connections (peer_table.h) and its own sensor's readings (own_metrics.h).
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "agent_registry.h"
#include "master_catalog.h"
#include "memory_guard.h"
#include "output_runner.h"
#include "own_metrics.h"
#include "peer_table.h"
#include "test_support.h"

namespace fructosa::master {
namespace {

using Clock = PeerTable::Clock;

TEST(PeerTable, MakesAPeerOnceAndFindsItAgain) {
  PeerTable peers;
  EXPECT_EQ(peers.find("a"), nullptr);
  Peer* made = peers.find_or_add("a");
  ASSERT_NE(made, nullptr);
  made->host = "node01";
  EXPECT_EQ(peers.find_or_add("a"), made);
  EXPECT_EQ(peers.find("a"), made);
  EXPECT_EQ(peers.find("a")->host, "node01");
}

TEST(PeerTable, RefusesANewConnectionBeyondTheLimitButNotAKnownOne) {
  PeerTable peers;
  for (std::size_t i = 0; i < AgentAdmission::kMaxPeers; ++i) ASSERT_NE(peers.find_or_add(std::to_string(i)), nullptr);
  EXPECT_EQ(peers.find_or_add("one too many"), nullptr);
  EXPECT_EQ(peers.find("one too many"), nullptr);
  EXPECT_NE(peers.find_or_add("0"), nullptr);
}

TEST(PeerTable, ForgetsHellolessConnectionsInSecondsAndAgentsAfterTheirSilence) {
  PeerTable peers;
  auto start = Clock::now();
  Peer& helloless = *peers.find_or_add("helloless");
  helloless.first_seen = helloless.last_seen = start;
  Peer& refused = *peers.find_or_add("refused");  // kept while it is told why
  refused.first_seen = refused.last_seen = start;
  refused.refusal.reason = "key node02 does not speak for node01";
  Peer& agent = *peers.find_or_add("agent");
  agent.host = "node01";
  agent.first_seen = agent.last_seen = start;

  peers.forget_silent(start + AgentAdmission::kForgetHellolessPeerAfter);
  EXPECT_NE(peers.find("helloless"), nullptr);
  peers.forget_silent(start + AgentAdmission::kForgetHellolessPeerAfter + std::chrono::seconds(1));
  EXPECT_EQ(peers.find("helloless"), nullptr);
  EXPECT_NE(peers.find("refused"), nullptr);
  EXPECT_NE(peers.find("agent"), nullptr);

  peers.find("agent")->last_seen = start + std::chrono::minutes(10);
  peers.forget_silent(start + PeerTable::kForgetPeerAfter + std::chrono::seconds(1));
  EXPECT_EQ(peers.find("refused"), nullptr);
  EXPECT_NE(peers.find("agent"), nullptr);
  peers.forget_silent(start + std::chrono::minutes(10) + PeerTable::kForgetPeerAfter + std::chrono::seconds(1));
  EXPECT_EQ(peers.find("agent"), nullptr);
}

TEST(PeerTable, ConnectedAgentsAreThoseWhoseHelloWasTaken) {
  PeerTable peers;
  auto now = Clock::now();
  for (const char* identity : {"a", "b", "c"}) peers.find_or_add(identity)->last_seen = now;
  peers.find("a")->host = "node01";
  peers.find("c")->host = "node03";
  peers.find("c")->last_seen = now - std::chrono::minutes(1);
  EXPECT_EQ(peers.connected(), (ConnectedAgents{{"a", "node01"}, {"c", "node03"}}));
  EXPECT_EQ(peers.heard_since(now - std::chrono::seconds(10)), 1u);
  EXPECT_EQ(peers.heard_since(now - std::chrono::minutes(2)), 2u);
}

struct OwnStatsSources {
  test::TempDir dir;
  AgentRegistry registry{dir.file("agents.json"), 60};
  MemoryGuard memory{0};
  std::vector<std::unique_ptr<OutputRunner>> runners;

  MasterMetricSources sources(std::uint64_t received) const {
    MasterMetricSources from;
    from.received_points = received;
    from.registry = &registry;
    from.runners = &runners;
    from.memory = &memory;
    return from;
  }
};

double value_of(const Sample& sample, const std::string& key) {
  for (const auto& metric : sample.metrics)
    if (metric.key == key) return metric.value;
  ADD_FAILURE() << "no " << key;
  return -1;
}

TEST(OwnStats, ReadsAtMultiplesOfTheIntervalAndSchedulesTheNext) {
  OwnStatsSources state;
  OwnStats stats("master01", 0.5, "");
  EXPECT_EQ(stats.metrics_url(), "");
  auto due = stats.next();
  auto since_epoch = std::chrono::duration_cast<std::chrono::milliseconds>(due.time_since_epoch()).count();
  EXPECT_EQ(since_epoch % 500, 0);
  EXPECT_GT(due, std::chrono::system_clock::now() - std::chrono::milliseconds(500));

  Sample sample = stats.take(state.sources(1234));
  EXPECT_EQ(sample.host, "master01");
  EXPECT_EQ(sample.sensor, std::string(kMasterSensorName));
  EXPECT_EQ(sample.time_ns, std::chrono::duration_cast<std::chrono::nanoseconds>(due.time_since_epoch()).count());
  EXPECT_EQ(value_of(sample, "received"), 1234);
  EXPECT_GT(stats.next(), due);
}

TEST(OwnStats, ServesMetricsListenAndNamesAnAddressItCannotUse) {
  OwnStats served("master01", 10, "127.0.0.1:0");
  EXPECT_TRUE(served.metrics_url().starts_with("http://127.0.0.1:")) << served.metrics_url();
  EXPECT_FALSE(served.metrics_url().ends_with(":0/metrics")) << served.metrics_url();
  try {
    OwnStats wrong("master01", 10, "no port here");
    FAIL() << "an address without a port was taken";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("no port here"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace fructosa::master
