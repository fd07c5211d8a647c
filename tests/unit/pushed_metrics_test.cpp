// PushedMetrics (sensors/pushed_metrics.h), the per-job store of pushed lines: values as the User
// sensor takes them, the rate and names limits, the counts lagent's own sensor reports, and
// forgetting ended jobs; then the User sensor itself, through the registry.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "job_sensors_test_support.h"
#include "pushed_metrics.h"

// Where ADL finds them for gtest's EXPECT_EQ; static: only this file's.
namespace fructosa::sensors {
static bool operator==(const PushCounts& a, const PushCounts& b) {
  return a.accepted == b.accepted && a.refused == b.refused && a.rate_dropped == b.rate_dropped &&
         a.names_dropped == b.names_dropped;
}
static std::ostream& operator<<(std::ostream& out, const PushCounts& c) {
  return out << "{accepted " << c.accepted << ", refused " << c.refused << ", rate " << c.rate_dropped << ", names "
             << c.names_dropped << "}";
}
}  // namespace fructosa::sensors

using namespace fructosa::sensors;

namespace {

constexpr std::int64_t kSecond = 1'000'000'000;

struct Refusal {
  std::size_t index;
  PushRefusal why;
  std::string reason;
};

// A store of its own, open with `limits`, and what its last push() refused.
struct Store {
  explicit Store(PushLimits limits = {}) { store.open(limits); }
  std::size_t push(std::uint64_t job, const std::vector<std::string_view>& lines, std::int64_t now_ns = 5 * kSecond) {
    refusals.clear();
    return store.push(job, lines, now_ns, [&](std::size_t i, PushRefusal why, std::string_view reason) {
      refusals.push_back({i, why, std::string(reason)});
    });
  }
  // take(), as job -> name -> value (a duplicate name would be a bug: checked).
  std::map<std::uint64_t, std::map<std::string, double>> take() {
    std::map<std::uint64_t, std::map<std::string, double>> taken;
    for (const auto& job : store.take()) {
      EXPECT_FALSE(taken.count(job.job)) << "job " << job.job << " twice";
      for (const auto& [name, value] : job.values) EXPECT_TRUE(taken[job.job].emplace(name, value).second) << name;
    }
    return taken;
  }
  PushedMetrics store;
  std::vector<Refusal> refusals;
};

PushCounts counts(std::uint64_t accepted, std::uint64_t refused, std::uint64_t rate, std::uint64_t names) {
  return PushCounts{accepted, refused, rate, names};
}

}  // namespace

TEST(PushedMetrics, GaugeLastValueIsReportedAtEveryTake) {
  Store s;
  EXPECT_EQ(s.push(3, {"load:1|g", "load:2.5|g"}), 2u);
  EXPECT_TRUE(s.refusals.empty());
  auto first = s.take();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[3], (std::map<std::string, double>{{"load", 2.5}}));
  // Nothing pushed since: the last value again, as statsd does.
  EXPECT_EQ(s.take()[3]["load"], 2.5);
  s.push(3, {"load:-4|g"});
  EXPECT_EQ(s.take()[3]["load"], -4);
}

TEST(PushedMetrics, CounterSumsSinceTheLastTakeThenZero) {
  Store s;
  EXPECT_EQ(s.push(3, {"files:1|c", "files:2|c", "files:1|c|@0.5"}), 3u);
  EXPECT_EQ(s.take()[3]["files"], 5);
  // Reported again, at 0, until the job ends.
  auto second = s.take();
  ASSERT_TRUE(second[3].count("files"));
  EXPECT_EQ(second[3]["files"], 0);
  s.push(3, {"files:4|c"});
  s.push(3, {"files:6|c"});
  EXPECT_EQ(s.take()[3]["files"], 10);
}

TEST(PushedMetrics, ValuesInTheOrderFirstPushedAndPerJob) {
  Store s;
  s.push(1, {"b:1|g", "a:2|c", "b:3|g"});
  s.push(2, {"a:7|g"});
  auto taken = s.store.take();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].job, 1u);
  ASSERT_EQ(taken[0].values.size(), 2u);
  EXPECT_EQ(taken[0].values[0], (std::pair<std::string, double>{"b", 3}));
  EXPECT_EQ(taken[0].values[1], (std::pair<std::string, double>{"a", 2}));
  EXPECT_EQ(taken[1].job, 2u);
  EXPECT_EQ(taken[1].values, (std::vector<std::pair<std::string, double>>{{"a", 7}}));
}

TEST(PushedMetrics, ATypeIsKeptWhileTheJobRuns) {
  Store s;
  s.push(3, {"x:1|g"});
  EXPECT_EQ(s.push(3, {"x:5|c", "x:2|g"}), 1u);
  ASSERT_EQ(s.refusals.size(), 1u);
  EXPECT_EQ(s.refusals[0].index, 0u);
  EXPECT_EQ(s.refusals[0].why, PushRefusal::malformed);
  EXPECT_NE(s.refusals[0].reason.find("gauge"), std::string::npos) << s.refusals[0].reason;
  EXPECT_EQ(s.take()[3]["x"], 2);
  EXPECT_EQ(s.store.per_job()[3], counts(2, 1, 0, 0));
  // Another job may use the name as the other type.
  EXPECT_EQ(s.push(4, {"x:5|c"}), 1u);
}

TEST(PushedMetrics, ACounterSumStaysFinite) {
  Store s;
  EXPECT_EQ(s.push(3, {"big:1e308|c", "big:1e308|c", "big:-1e308|c"}), 2u);
  ASSERT_EQ(s.refusals.size(), 1u);
  EXPECT_EQ(s.refusals[0].index, 1u);
  EXPECT_EQ(s.refusals[0].why, PushRefusal::malformed);
  EXPECT_NE(s.refusals[0].reason.find("not be finite"), std::string::npos) << s.refusals[0].reason;
  EXPECT_EQ(s.take()[3]["big"], 0);
  // After a take the sum starts again.
  EXPECT_EQ(s.push(3, {"big:1e308|c"}), 1u);
  EXPECT_EQ(s.take()[3]["big"], 1e308);
}

TEST(PushedMetrics, MalformedLinesAreRefusedWithTheParsersReason) {
  Store s;
  EXPECT_EQ(s.push(3, {"ok:1|g", "bad.name:1|g", "x:1|ms"}), 1u);
  ASSERT_EQ(s.refusals.size(), 2u);
  EXPECT_EQ(s.refusals[0].index, 1u);
  EXPECT_EQ(s.refusals[0].why, PushRefusal::malformed);
  EXPECT_EQ(s.refusals[0].reason, parse_push_line("bad.name:1|g").reason);
  EXPECT_EQ(s.refusals[1].index, 2u);
  EXPECT_EQ(s.refusals[1].reason, parse_push_line("x:1|ms").reason);
}

TEST(PushedMetrics, RateLimitPerJobAndSecond) {
  Store s(PushLimits{.max_names_per_job = 100, .max_lines_per_second = 10});
  std::vector<std::string> texts;
  for (int i = 0; i < 25; ++i) texts.push_back("n" + std::to_string(i) + ":1|c");
  std::vector<std::string_view> lines(texts.begin(), texts.end());
  const std::int64_t at = 7 * kSecond + 100;
  EXPECT_EQ(s.push(3, lines, at), 10u);
  ASSERT_EQ(s.refusals.size(), 15u);
  for (std::size_t i = 0; i < s.refusals.size(); ++i) {
    EXPECT_EQ(s.refusals[i].index, 10 + i);
    EXPECT_EQ(s.refusals[i].why, PushRefusal::rate);
    EXPECT_NE(s.refusals[i].reason.find("10 lines per second"), std::string::npos) << s.refusals[i].reason;
  }
  EXPECT_EQ(s.store.per_job()[3], counts(10, 0, 15, 0));
  // The rest of the same second: still over.
  EXPECT_EQ(s.push(3, {"n0:1|c"}, at + kSecond - 101), 0u);
  EXPECT_EQ(s.refusals.size(), 1u);
  // Another job has a budget of its own.
  EXPECT_EQ(s.push(4, {"n0:1|c"}, at), 1u);
  // The next second takes again.
  EXPECT_EQ(s.push(3, lines, at + kSecond), 10u);
  EXPECT_EQ(s.refusals.size(), 15u);
  EXPECT_EQ(s.store.per_job()[3], counts(20, 0, 31, 0));
  // Only the taken lines were summed.
  auto taken = s.take();
  EXPECT_EQ(taken[3]["n0"], 2);
  EXPECT_EQ(taken[3]["n9"], 2);
  EXPECT_FALSE(taken[3].count("n10"));
}

TEST(PushedMetrics, MalformedLinesCountTowardTheRate) {
  Store s(PushLimits{.max_names_per_job = 100, .max_lines_per_second = 3});
  EXPECT_EQ(s.push(3, {"bad", "also bad", "a:1|g", "b:1|g"}), 1u);
  ASSERT_EQ(s.refusals.size(), 3u);
  EXPECT_EQ(s.refusals[0].why, PushRefusal::malformed);
  EXPECT_EQ(s.refusals[1].why, PushRefusal::malformed);
  EXPECT_EQ(s.refusals[2].index, 3u);
  EXPECT_EQ(s.refusals[2].why, PushRefusal::rate);
  EXPECT_EQ(s.store.per_job()[3], counts(1, 2, 1, 0));
}

TEST(PushedMetrics, BlankAndCommentLinesCostNothing) {
  Store s(PushLimits{.max_names_per_job = 100, .max_lines_per_second = 2});
  std::vector<std::string_view> lines{"", "   ", "\r", "# HELP a", "  # TYPE a gauge", "\t#", "a:1|g", "b:2|g"};
  EXPECT_EQ(s.push(3, lines), 2u);
  EXPECT_TRUE(s.refusals.empty()) << s.refusals[0].index << ": " << s.refusals[0].reason;
  EXPECT_EQ(s.store.per_job()[3], counts(2, 0, 0, 0));
  // Over the limit now, they are still neither refused nor counted.
  EXPECT_EQ(s.push(3, {"", "# c", "  # c"}), 0u);
  EXPECT_TRUE(s.refusals.empty());
  EXPECT_EQ(s.store.totals(), counts(2, 0, 0, 0));
  // Only blank lines from a job: no values to report for it.
  s.push(9, {"", "#"});
  EXPECT_FALSE(s.take().count(9));
}

TEST(PushedMetrics, NamesLimitDropsNewNamesOnly) {
  Store s;  // 100 names per job
  std::vector<std::string> texts;
  for (int i = 0; i < 101; ++i) texts.push_back("g" + std::to_string(i) + ":" + std::to_string(i) + "|g");
  std::vector<std::string_view> lines(texts.begin(), texts.end());
  EXPECT_EQ(s.push(3, lines), 100u);
  ASSERT_EQ(s.refusals.size(), 1u);
  EXPECT_EQ(s.refusals[0].index, 100u);
  EXPECT_EQ(s.refusals[0].why, PushRefusal::names);
  EXPECT_NE(s.refusals[0].reason.find("g100"), std::string::npos) << s.refusals[0].reason;
  EXPECT_NE(s.refusals[0].reason.find("100 allowed"), std::string::npos) << s.refusals[0].reason;
  // Known names still update; new ones are still dropped.
  EXPECT_EQ(s.push(3, {"g0:42|g", "g99:43|g", "other:1|c"}), 2u);
  ASSERT_EQ(s.refusals.size(), 1u);
  EXPECT_EQ(s.refusals[0].index, 2u);
  EXPECT_EQ(s.refusals[0].why, PushRefusal::names);
  auto taken = s.take()[3];
  EXPECT_EQ(taken.size(), 100u);
  EXPECT_EQ(taken["g0"], 42);
  EXPECT_EQ(taken["g99"], 43);
  EXPECT_FALSE(taken.count("g100"));
  EXPECT_FALSE(taken.count("other"));
  EXPECT_EQ(s.store.per_job()[3], counts(102, 0, 0, 2));
  // The limit is per job.
  EXPECT_EQ(s.push(4, {"other:1|c"}), 1u);
}

TEST(PushedMetrics, CountsPerJobAndTotals) {
  Store s(PushLimits{.max_names_per_job = 1, .max_lines_per_second = 3});
  s.push(0, {"node:1|g", "bad"});
  s.push(5, {"a:1|g", "b:1|g", "x", "a:2|g"});
  s.push(6, {"c:1|c"});
  s.store.count_connection();
  s.store.count_connection();
  s.store.count_outside_job();
  auto per_job = s.store.per_job();
  // The node (job 0) is in the totals only.
  EXPECT_EQ(per_job.size(), 2u);
  EXPECT_FALSE(per_job.count(0));
  EXPECT_EQ(per_job[5], counts(1, 1, 1, 1));
  EXPECT_EQ(per_job[6], counts(1, 0, 0, 0));
  EXPECT_EQ(s.store.totals(), counts(3, 2, 1, 1));
  EXPECT_EQ(s.store.connections(), 2u);
  EXPECT_EQ(s.store.outside_job_refusals(), 1u);
}

TEST(PushedMetrics, ForgetEndedJobsButNeverTheNode) {
  Store s;
  s.push(0, {"node:1|g"});
  s.push(5, {"a:1|g", "bad"});
  s.push(6, {"b:2|g"});
  // Even when `running` says the node is not running.
  s.store.forget_ended([](std::uint64_t job) { return job == 6; });
  auto taken = s.take();
  EXPECT_EQ(taken.size(), 2u);
  EXPECT_TRUE(taken.count(0));
  EXPECT_FALSE(taken.count(5));
  EXPECT_EQ(taken[6]["b"], 2);
  auto per_job = s.store.per_job();
  EXPECT_FALSE(per_job.count(5));
  EXPECT_EQ(per_job[6], counts(1, 0, 0, 0));
  // The forgotten job's lines stay in the totals.
  EXPECT_EQ(s.store.totals(), counts(3, 1, 0, 0));
  // A job id seen again starts afresh (its old names do not count toward its limit).
  s.push(5, {"other:3|c"});
  EXPECT_EQ(s.take()[5], (std::map<std::string, double>{{"other", 3}}));
}

TEST(PushedMetrics, OpenCloseAndReset) {
  PushedMetrics store;
  EXPECT_FALSE(store.is_open());
  EXPECT_NE(store.why_closed().find("[sensor:User]"), std::string::npos);
  store.open({});
  EXPECT_TRUE(store.is_open());
  store.close("the socket path is taken");
  EXPECT_FALSE(store.is_open());
  EXPECT_EQ(store.why_closed(), "the socket path is taken");
  store.open({});
  store.push(3, {"a:1|g"}, kSecond, [](std::size_t, PushRefusal, std::string_view) {});
  store.count_connection();
  store.reset();
  EXPECT_FALSE(store.is_open());
  EXPECT_TRUE(store.take().empty());
  EXPECT_EQ(store.totals(), counts(0, 0, 0, 0));
  EXPECT_EQ(store.connections(), 0u);
}

// ---- the User sensor (it reads PushedMetrics::instance()) ----

namespace {

class UserSensor : public ::testing::Test {
 protected:
  void SetUp() override { PushedMetrics::instance().reset(); }
  void TearDown() override { PushedMetrics::instance().reset(); }
  static void push(std::uint64_t job, const std::vector<std::string_view>& lines) {
    PushedMetrics::instance().push(job, lines, kSecond, [](std::size_t i, PushRefusal, std::string_view reason) {
      ADD_FAILURE() << "line " << i << " refused: " << reason;
    });
  }
  static JobCgroup job(std::uint64_t id) {
    JobCgroup cgroup;
    cgroup.id = id;
    cgroup.name = "job_" + std::to_string(id);
    return cgroup;
  }
};

}  // namespace

TEST_F(UserSensor, UnavailableWhileTheStoreIsClosed) {
  fructosa::test::Rig rig("User", {job(7)}, Roots{});
  auto reading = fructosa::test::read(rig);
  EXPECT_NE(reading.unavailable.find("[sensor:User]"), std::string::npos) << reading.unavailable;
  PushedMetrics::instance().close("push_socket /x: permission denied");
  EXPECT_EQ(fructosa::test::read(rig).unavailable, "push_socket /x: permission denied");
}

TEST_F(UserSensor, ReportsEachJobsValues) {
  PushedMetrics::instance().open({});
  fructosa::test::Rig rig("User", {job(7)}, Roots{});
  push(7, {"step:12|g", "files:2|c", "files:3|c"});
  push(0, {"node_temp:40.5|g"});
  auto reading = fructosa::test::read(rig);
  ASSERT_EQ(reading.unavailable, "");
  EXPECT_EQ(reading.values.size(), 2u);
  EXPECT_EQ(reading.values[7], (std::map<std::string, double>{{"step", 12}, {"files", 5}}));
  EXPECT_EQ(reading.values[0], (std::map<std::string, double>{{"node_temp", 40.5}}));
  // Next interval: the gauges again, the counters from 0.
  push(7, {"files:1|c"});
  reading = fructosa::test::read(rig);
  EXPECT_EQ(reading.values[7], (std::map<std::string, double>{{"step", 12}, {"files", 1}}));
  EXPECT_EQ(reading.at(0, "node_temp"), 40.5);
}

TEST_F(UserSensor, AJobNotRunningIsReportedOnceMoreThenForgotten) {
  PushedMetrics::instance().open({});
  // Job 7 is not (or no longer) in the directory; job 8 is.
  fructosa::test::Rig rig("User", {job(8)}, Roots{});
  push(7, {"step:3|g", "files:4|c"});
  push(8, {"step:1|g"});
  push(0, {"node_temp:40|g"});
  auto reading = fructosa::test::read(rig);
  ASSERT_EQ(reading.unavailable, "");
  // What it pushed in its last interval is still reported...
  EXPECT_EQ(reading.values[7], (std::map<std::string, double>{{"step", 3}, {"files", 4}}));
  EXPECT_EQ(reading.at(8, "step"), 1);
  EXPECT_FALSE(PushedMetrics::instance().per_job().count(7));
  EXPECT_TRUE(PushedMetrics::instance().per_job().count(8));
  // ...and then nothing: its gauge is not repeated as a running job's is.
  reading = fructosa::test::read(rig);
  EXPECT_FALSE(reading.values.count(7));
  EXPECT_EQ(reading.at(8, "step"), 1);
  EXPECT_EQ(reading.at(0, "node_temp"), 40);
  EXPECT_EQ(PushedMetrics::instance().totals().accepted, 4u);
}
