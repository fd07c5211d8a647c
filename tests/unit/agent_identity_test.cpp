// What a CURVE key may send as (lmaster/agent_identity.h): `hosts =` lines, host patterns, the
// check of a hello, and the rate-limited refusal log (lmaster/refusal_log.h).
#include "agent_identity.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "refusal_log.h"
#include "test_support.h"

namespace fructosa::master {
namespace {

using test::TempDir;
using Clock = std::chrono::steady_clock;
using Patterns = std::vector<std::string>;

using test::error_of;

using test::write_text;

TEST(HostPatterns, AreCommaSeparatedShellPatterns) {
  EXPECT_EQ(parse_host_patterns("node[0-9][0-9], gpu*"), (Patterns{"node[0-9][0-9]", "gpu*"}));
  EXPECT_EQ(parse_host_patterns("  node01 "), (Patterns{"node01"}));
  EXPECT_EQ(parse_host_patterns("*"), (Patterns{"*"}));
  EXPECT_EQ(parse_host_patterns("a,b,c"), (Patterns{"a", "b", "c"}));
  EXPECT_NE(error_of([] { parse_host_patterns(""); }).find("no host pattern"), std::string::npos);
  EXPECT_NE(error_of([] { parse_host_patterns("  "); }).find("no host pattern"), std::string::npos);
  EXPECT_NE(error_of([] { parse_host_patterns("a,,b"); }).find("an empty host pattern"), std::string::npos);
  EXPECT_NE(error_of([] { parse_host_patterns("a,"); }).find("an empty host pattern"), std::string::npos);
  // Blanks would never match a host name: most likely a list without its commas.
  EXPECT_EQ(error_of([] { parse_host_patterns("node01 node02"); }),
            "'node01 node02' is not one host pattern: separate patterns with commas");
}

TEST(HostPatterns, ArePartOfAPubFileThatReadKeyFileStillReads) {
  TempDir dir;
  const std::string key = "public-key = rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n";
  write_text(dir.file("plain.pub"), "# fructosa CURVE public key\n" + key);
  EXPECT_EQ(read_host_patterns(dir.file("plain.pub")), std::nullopt);

  write_text(dir.file("group.pub"), key + "# the nodes of rack 1\n  hosts = node[0-9][0-9], gpu*\n");
  EXPECT_EQ(read_host_patterns(dir.file("group.pub")), (Patterns{"node[0-9][0-9]", "gpu*"}));
  write_text(dir.file("quoted.pub"), key + "hosts = \"node0*\"\n");
  EXPECT_EQ(read_host_patterns(dir.file("quoted.pub")), (Patterns{"node0*"}));
  // Lines of other names (and names that only start like it) are someone else's.
  write_text(dir.file("other.pub"), key + "hostsfile = x\nmetadata\n    host = y\n");
  EXPECT_EQ(read_host_patterns(dir.file("other.pub")), std::nullopt);

  write_text(dir.file("twice.pub"), key + "hosts = a\nhosts = b\n");
  EXPECT_EQ(error_of([&] { read_host_patterns(dir.file("twice.pub")); }),
            dir.file("twice.pub") + ":3: hosts given again (first on line 2)");
  write_text(dir.file("empty.pub"), key + "hosts =\n");
  EXPECT_NE(error_of([&] { read_host_patterns(dir.file("empty.pub")); })
                .find(dir.file("empty.pub") + ":2: hosts: no host pattern"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_host_patterns(dir.file("missing.pub")); }).find("cannot read"), std::string::npos);
}

TEST(HostPatterns, AKeyWithoutThemSpeaksForItsNameAndThatNameWithADomain) {
  KeyHosts key{"node01", {}};
  EXPECT_TRUE(speaks_for(key, "node01"));
  EXPECT_TRUE(speaks_for(key, "NODE01"));  // DNS names do not care about case
  EXPECT_TRUE(speaks_for(key, "node01.cluster.example"));
  EXPECT_FALSE(speaks_for(key, "node02"));
  EXPECT_FALSE(speaks_for(key, "node011"));
  EXPECT_FALSE(speaks_for(key, "node0"));
  EXPECT_FALSE(speaks_for(key, "xnode01"));
  EXPECT_FALSE(speaks_for(key, "cluster.node01"));
  EXPECT_FALSE(speaks_for(key, ""));
  EXPECT_FALSE(speaks_for(key, std::string("node01\0x", 8)));
  // A key named after a full name speaks for that name only.
  KeyHosts full{"node01.cluster", {}};
  EXPECT_TRUE(speaks_for(full, "node01.cluster"));
  EXPECT_FALSE(speaks_for(full, "node01"));
  EXPECT_FALSE(speaks_for(full, "node01.other"));
  // Glob characters in a file name are not patterns.
  KeyHosts star{"node*", {}};
  EXPECT_FALSE(speaks_for(star, "node01"));
  EXPECT_TRUE(speaks_for(star, "node*"));
}

TEST(HostPatterns, AKeyWithThemSpeaksForTheHostsTheyMatchOnly) {
  KeyHosts group{"rack1", {"node[0-9][0-9]", "gpu*"}};
  EXPECT_TRUE(speaks_for(group, "node05"));
  EXPECT_TRUE(speaks_for(group, "Node42"));
  EXPECT_TRUE(speaks_for(group, "node05.cluster"));  // its first label matches
  EXPECT_TRUE(speaks_for(group, "gpu1"));
  EXPECT_TRUE(speaks_for(group, "gpu"));
  EXPECT_FALSE(speaks_for(group, "node5"));
  EXPECT_FALSE(speaks_for(group, "node100"));
  EXPECT_FALSE(speaks_for(group, "rack1"));  // the patterns replace the name
  EXPECT_FALSE(speaks_for(group, "login01"));
  EXPECT_FALSE(speaks_for(group, std::string("node05\0evil", 11)));
  KeyHosts zero{"agents", {"node0*"}};
  EXPECT_TRUE(speaks_for(zero, "node05"));
  EXPECT_FALSE(speaks_for(zero, "gpu1"));
  EXPECT_TRUE(speaks_for(KeyHosts{"all", {"*"}}, "anything.at.all"));
  EXPECT_EQ(describe_hosts(group), "hosts = node[0-9][0-9], gpu*");
  EXPECT_EQ(describe_hosts(KeyHosts{"node01", {}}), "node01");
}

// An AgentAdmission whose log lines are kept, and whose allow-list is a map.
struct Admission {
  std::vector<std::string> lines;
  std::map<std::string, KeyHosts> keys;
  AgentAdmission admission{[this](const std::string& line) { lines.push_back(line); }};
  void use_curve() {
    admission.check_keys_with([this](const std::string& name) -> std::optional<KeyHosts> {
      auto it = keys.find(name);
      if (it == keys.end()) return std::nullopt;
      return it->second;
    });
  }
};

TEST(AgentAdmission, WithoutCurveEveryHelloIsTakenAsSent) {
  Admission test;
  EXPECT_EQ(test.admission.refuse_hello("", "node02", "10.0.0.1"), std::nullopt);
  EXPECT_EQ(test.admission.refuse_hello("node01", "node02", "10.0.0.1"), std::nullopt);
  EXPECT_TRUE(test.lines.empty());
}

TEST(AgentAdmission, WithCurveAHelloForAHostItsKeyDoesNotCoverIsRefusedAndLogged) {
  Admission test;
  test.keys["node01"] = {"node01", {}};
  test.keys["rack1"] = {"rack1", {"node0*"}};
  test.use_curve();
  auto now = Clock::now();
  EXPECT_EQ(test.admission.refuse_hello("node01", "node01", "10.0.0.1", now), std::nullopt);
  EXPECT_EQ(test.admission.refuse_hello("rack1", "node05", "10.0.0.5", now), std::nullopt);
  EXPECT_TRUE(test.lines.empty());

  auto refusal = test.admission.refuse_hello("node01", "node02", "10.0.0.1", now);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(*refusal, "lmaster refuses this agent as host node02: its CURVE key node01 speaks for host node01 only "
                      "(give that node its own key, or list its name in a `hosts =` line of node01.pub); it accepts "
                      "nothing from it until then");
  ASSERT_EQ(test.lines.size(), 1u);
  EXPECT_EQ(test.lines[0], "CURVE: refused a hello from 10.0.0.1 as host node02: its CURVE key node01 speaks for host "
                           "node01 only (give that node its own key, or list its name in a `hosts =` line of "
                           "node01.pub); nothing of that connection is accepted");
  // Again within the minute: refused, not logged; another claim of the same key is.
  EXPECT_TRUE(test.admission.refuse_hello("node01", "node02", "10.0.0.1", now + std::chrono::seconds(5)));
  EXPECT_EQ(test.lines.size(), 1u);
  EXPECT_TRUE(test.admission.refuse_hello("rack1", "gpu1", "10.0.0.9", now + std::chrono::seconds(5)));
  ASSERT_EQ(test.lines.size(), 2u);
  EXPECT_NE(test.lines[1].find("as host gpu1: its CURVE key rack1 speaks for hosts = node0* only (rack1.pub)"),
            std::string::npos)
      << test.lines[1];
  test.admission.flush_log(now + std::chrono::seconds(61));
  ASSERT_EQ(test.lines.size(), 3u);
  EXPECT_NE(test.lines[2].find("as host node02: its CURVE key node01 speaks for host node01 only"), std::string::npos);
  EXPECT_NE(test.lines[2].find("(1 more such refusals in the last 60 s)"), std::string::npos) << test.lines[2];

  // A key removed from the allow-list since its connection was let in speaks for no one.
  test.keys.erase("node01");
  auto removed = test.admission.refuse_hello("node01", "node01", "10.0.0.1", now);
  ASSERT_TRUE(removed);
  EXPECT_NE(removed->find("its CURVE key node01 is no longer in the allow-list"), std::string::npos);
  EXPECT_TRUE(test.admission.refuse_hello("", "node01", "10.0.0.1", now));
}

TEST(AgentAdmission, ANewConnectionOverTheBoundIsLoggedOnceAMinute) {
  Admission test;
  auto now = Clock::now();
  for (int i = 0; i < 100; ++i)
    test.admission.refuse_peer_over_limit("10.0.0." + std::to_string(i), now + std::chrono::milliseconds(i));
  ASSERT_EQ(test.lines.size(), 1u);
  EXPECT_EQ(test.lines[0], "refused a new connection from 10.0.0.0: lmaster already keeps 65536 connections, its "
                           "bound (those silent for 30 minutes, or without a hello for 10 s, are forgotten)");
  test.admission.flush_log(now + std::chrono::seconds(60));
  ASSERT_EQ(test.lines.size(), 2u);
  EXPECT_NE(test.lines[1].find("from 10.0.0.99: "), std::string::npos);
  EXPECT_NE(test.lines[1].find("(99 more such refusals in the last 60 s)"), std::string::npos);
}

TEST(AgentAdmission, ARefusedConnectionIsToldAtMostOnceAMinute) {
  HelloRefusal refusal{"why", std::nullopt};
  EXPECT_TRUE(refusal);
  EXPECT_FALSE(HelloRefusal{});
  auto now = Clock::now();
  EXPECT_TRUE(refusal.tell_now(now));
  EXPECT_FALSE(refusal.tell_now(now + std::chrono::seconds(1)));
  EXPECT_FALSE(refusal.tell_now(now + std::chrono::seconds(59)));
  EXPECT_TRUE(refusal.tell_now(now + std::chrono::seconds(60)));
  EXPECT_FALSE(refusal.tell_now(now + std::chrono::seconds(61)));
}

TEST(RefusalLog, LogsAKindOnceAMinuteWithTheCountHeldBackAndForgetsQuietOnes) {
  std::vector<std::string> lines;
  RefusalLog log([&](const std::string& line) { lines.push_back(line); });
  auto now = Clock::now();
  EXPECT_EQ(log.flush(now), std::nullopt);
  log.refuse("a", "refused a (1)", now);
  log.refuse("a", "refused a (2)", now + std::chrono::seconds(1));
  log.refuse("b", "refused b", now + std::chrono::seconds(2));
  log.refuse("a", "refused a (3)", now + std::chrono::seconds(3));
  EXPECT_EQ(lines, (std::vector<std::string>{"refused a (1)", "refused b"}));
  EXPECT_EQ(log.flush(now + std::chrono::seconds(30)), now + std::chrono::seconds(60));
  EXPECT_EQ(lines.size(), 2u);
  // A minute on: a's held-back refusals are summed up on its last line; b, quiet, is forgotten.
  EXPECT_EQ(log.flush(now + std::chrono::seconds(62)), now + std::chrono::seconds(122));
  EXPECT_EQ(lines.back(), "refused a (3) (2 more such refusals in the last 60 s)");
  EXPECT_EQ(log.kinds(), 1u);
  EXPECT_EQ(log.flush(now + std::chrono::seconds(122)), std::nullopt);
  EXPECT_EQ(log.kinds(), 0u);
  log.refuse("a", "refused a (4)", now + std::chrono::seconds(123));
  EXPECT_EQ(lines.back(), "refused a (4)");
}

TEST(RefusalLog, KindsBeyondItsBoundShareOneLine) {
  std::vector<std::string> lines;
  RefusalLog log([&](const std::string& line) { lines.push_back(line); });
  auto now = Clock::now();
  for (std::size_t i = 0; i < RefusalLog::kMaxKinds + 500; ++i)
    log.refuse("key " + std::to_string(i), "line " + std::to_string(i), now);
  EXPECT_EQ(log.kinds(), RefusalLog::kMaxKinds + 1);
  ASSERT_EQ(lines.size(), RefusalLog::kMaxKinds + 1);
  EXPECT_EQ(lines.back(),
            "line 1024 [refusals of more than 1024 kinds within 60 s: the others are counted on this line]");
  log.flush(now + std::chrono::seconds(60));
  EXPECT_NE(lines.back().find("(499 more such refusals in the last 60 s)"), std::string::npos) << lines.back();
  // Quiet kinds go: the bound is on what is tracked at once, not forever.
  log.flush(now + std::chrono::seconds(120));
  EXPECT_EQ(log.kinds(), 0u);
}

}  // namespace
}  // namespace fructosa::master
