#include "agent_registry.h"

#include <gtest/gtest.h>

#include "metric.h"
#include "output.h"

using namespace fructosa;
using namespace fructosa::master;

// A host with dots (a full name, an IPv4 address) stays one component of agent.<host>.<key>, so
// the catalog's agent.*.up and the dashboards' agent.*.up match it like any other host.
TEST(AgentRegistry, DottedHostsAreOneKeyComponent) {
  AgentRegistry registry("/nonexistent/agents.json", 15);
  registry.seen("10.1.2.3", "tcp://10.1.2.3:40000", 1, 1'000'000'000);
  registry.seen("node07.cluster", "tcp://10.1.2.4:40000", 1, 1'000'000'000);
  Sample sample;
  registry.add_metrics(sample);
  std::vector<std::string> up_keys;
  for (const auto& metric : sample.metrics)
    if (key_matches("agent.*.up", metric.key)) up_keys.push_back(metric.key);
  EXPECT_EQ(up_keys, (std::vector<std::string>{"agent.10_1_2_3.up", "agent.node07_cluster.up"}));

  MetricInfoStore infos;
  AgentRegistry::describe(infos, "lmaster", "10.1.2.3");
  EXPECT_TRUE(infos.find("lmaster", "agent.10_1_2_3.up").has_value());
}
