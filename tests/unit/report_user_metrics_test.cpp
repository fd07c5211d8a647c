// The metrics a job's processes pushed (sensor User; report/user_metrics.*) in fructosa-report:
// per name and node from the series (NaN skipped, the lowest value too) or from the job index's
// summaries (no min), summed up over the nodes, rendered as text, JSON and HTML (absent when
// nothing was pushed), and read from HDF5 files with and without their job index.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis.h"
#include "render.h"
#include "report_hdf5_test_support.h"
#include "report_test_support.h"
#include "user_metrics.h"

namespace fructosa::report {
namespace {

using test::at;
using test::kT0;
using test::expect_80_columns;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Series user_series(std::vector<double> values, double first_s = 0) {
  Series out;
  for (std::size_t i = 0; i < values.size(); ++i) out.time_ns.push_back(at(first_s + 10.0 * i));
  out.values = std::move(values);
  return out;
}

// node01 pushed a gauge `loss` (with a missed interval) and a counter `images` (each interval's
// increments); node02 only `images`, ending 10 s later.
JobData pushed_job() {
  HostData node01 = test::job_host("node01", 2, 4);
  node01.metrics["User.loss"] = user_series({0.9, 0.5, kNaN, 0.25});
  node01.metrics["User.images"] = user_series({kNaN, 64, 64, 32});
  node01.metrics["Users.count"] = user_series({3, 3, 3, 3});  // another sensor
  node01.sensors.push_back("User");
  HostData node02 = test::job_host("node02", 2, 4);
  node02.metrics["User.images"] = user_series({64, 64, 64, 16}, 10);
  node02.sensors.push_back("User");
  return JobData{4242, {node01, node02}};
}

const UserMetric& metric(const std::vector<UserMetric>& metrics, const std::string& name) {
  for (const auto& one : metrics)
    if (one.name == name) return one;
  throw std::runtime_error("no user metric " + name);
}

std::vector<std::string> names(const std::vector<UserMetric>& metrics) {
  std::vector<std::string> out;
  for (const auto& one : metrics) out.push_back(one.name);
  return out;
}

TEST(ReportUserMetrics, EachNameSummarizedPerNodeAndOverTheNodes) {
  const JobFigures figures = analyse(pushed_job());
  ASSERT_EQ(figures.nodes.size(), 2u);
  const auto& node01 = figures.nodes[0].user_metrics;
  EXPECT_EQ(names(node01), (std::vector<std::string>{"images", "loss"})) << "User. only, sorted; not Users.";
  const UserMetric& loss = metric(node01, "loss");
  EXPECT_EQ(loss.summary.count, 3u) << "the missed interval (NaN) is no sample";
  EXPECT_DOUBLE_EQ(loss.summary.last, 0.25);
  EXPECT_DOUBLE_EQ(loss.summary.max, 0.9);
  EXPECT_DOUBLE_EQ(loss.summary.sum, 1.65);
  EXPECT_DOUBLE_EQ(loss.mean(), 0.55);
  EXPECT_EQ(loss.min, 0.25);
  EXPECT_EQ(names(figures.nodes[1].user_metrics), (std::vector<std::string>{"images"}));

  // In all: counts and sums add (a counter's total: 160 + 208 images), the extremes over the
  // nodes, the last value node02's (its last sample is the latest).
  EXPECT_EQ(names(figures.user_metrics), (std::vector<std::string>{"images", "loss"}));
  const UserMetric& images = metric(figures.user_metrics, "images");
  EXPECT_EQ(images.summary.count, 7u);
  EXPECT_DOUBLE_EQ(images.summary.sum, 368);
  EXPECT_DOUBLE_EQ(images.summary.max, 64);
  EXPECT_EQ(images.min, 16);
  EXPECT_DOUBLE_EQ(images.summary.last, 16);
  EXPECT_DOUBLE_EQ(images.mean(), 368.0 / 7);
  EXPECT_DOUBLE_EQ(metric(figures.user_metrics, "loss").summary.sum, 1.65) << "one node's: unchanged";
  // Optional: a job without them misses nothing for it.
  for (const auto& [what, enable] : analyse(JobData{1, {test::job_host("n", 2, 4)}}).not_collected)
    EXPECT_EQ(enable.find("User"), std::string::npos) << what;
}

TEST(ReportUserMetrics, SummariesGiveTheSameButTheMin) {
  const JobFigures from_series = analyse(pushed_job());
  const JobFigures from_summaries = analyse(test::summary_of(pushed_job()));
  ASSERT_EQ(names(from_summaries.user_metrics), names(from_series.user_metrics));
  for (std::size_t i = 0; i < from_series.user_metrics.size(); ++i) {
    const UserMetric &a = from_series.user_metrics[i], &b = from_summaries.user_metrics[i];
    EXPECT_EQ(a.summary.count, b.summary.count) << a.name;
    EXPECT_DOUBLE_EQ(a.summary.sum, b.summary.sum) << a.name;
    EXPECT_DOUBLE_EQ(a.summary.max, b.summary.max) << a.name;
    EXPECT_DOUBLE_EQ(a.summary.last, b.summary.last) << a.name;
    EXPECT_TRUE(a.min);
    EXPECT_FALSE(b.min) << "the job index keeps no min";
  }
}

TEST(ReportUserMetrics, MinIsKnownOnlyWhenEveryNodesIs) {
  std::vector<UserMetric> all;
  merge_user_metrics(all, user_metrics_of(std::map<std::string, Series>{{"User.a", user_series({5, 3})}}));
  MetricSummary summary = summarize(user_series({1, 2}));
  merge_user_metrics(all, user_metrics_of(std::map<std::string, MetricSummary>{{"User.a", summary},
                                                                               {"User.b", summary}}));
  ASSERT_EQ(names(all), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(all[0].min);
  EXPECT_EQ(all[0].summary.count, 4u);
  EXPECT_FALSE(all[1].min);
  // Names that are only NaN, or no name at all, are no metric.
  EXPECT_TRUE(user_metrics_of(std::map<std::string, Series>{{"User.gone", user_series({kNaN})}, {"User.", user_series({1})}}).empty());
}

TEST(ReportUserMetrics, ValuesKeepTheirSignificantDigits) {
  EXPECT_EQ(user_value(0), "0");
  EXPECT_EQ(user_value(0.0012345), "0.0012");
  EXPECT_EQ(user_value(0.25), "0.25");
  EXPECT_EQ(user_value(-0.5), "-0.5");
  EXPECT_EQ(user_value(3.14159), "3.1");
  EXPECT_EQ(user_value(301.2295), "301");
  EXPECT_EQ(user_value(1234567), "1234567");
  EXPECT_EQ(user_value(1.2345e9), "1.23e+09");
}

TEST(ReportUserMetrics, TextJsonAndHtmlShowThemPerNodeAndInAll) {
  const JobFigures figures = analyse(pushed_job());
  const Verdict verdict = judge(figures);
  const std::string text = render_text(figures, verdict);
  expect_80_columns(text);
  EXPECT_NE(text.find("  User metrics, pushed by the job (lagent push)\n"
                      "    name    node    samples  last  mean   min  max  sum of samples\n"
                      "    images  all           7    16    53    16   64             368\n"
                      "            node01        3    32    53    32   64             160\n"
                      "            node02        4    16    52    16   64             208\n"
                      "    loss    all           3  0.25  0.55  0.25  0.9             1.6\n"
                      "            node01        3  0.25  0.55  0.25  0.9             1.6\n\n"),
            std::string::npos)
      << text;

  const auto document = nlohmann::json::parse(render_json(figures, verdict));
  const auto& images = document["figures"]["user_metrics"]["images"];
  EXPECT_EQ(images["samples"], 7);
  EXPECT_EQ(images["last"], 16);
  EXPECT_EQ(images["min"], 16);
  EXPECT_EQ(images["max"], 64);
  EXPECT_EQ(images["sum"], 368);
  EXPECT_DOUBLE_EQ(images["mean"].get<double>(), 368.0 / 7);
  EXPECT_EQ(document["nodes"][1]["user_metrics"].size(), 1u);
  EXPECT_EQ(document["nodes"][1]["user_metrics"]["images"]["sum"], 208);

  const std::string html = render_html({{figures, verdict}});
  EXPECT_NE(html.find("<h2>User metrics</h2>"), std::string::npos);
  EXPECT_NE(html.find("<tr><th>images</th><td>all nodes</td><td class=\"number\">7</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<tr><th></th><td>node02</td><td class=\"number\">4</td>"), std::string::npos) << html;

  // One node: no node column, no per-node rows. A name too long for 80 columns has a line of its own.
  HostData node02 = pushed_job().hosts[1];
  const std::string long_name(60, 'x');
  node02.metrics["User." + long_name] = user_series({1, 2});
  const JobFigures one = analyse(JobData{4242, {node02}});
  const std::string one_text = render_text(one, judge(one));
  expect_80_columns(one_text);
  EXPECT_NE(one_text.find("    name    samples  last  mean  min  max  sum of samples\n"
                          "    images        4    16    52   16   64             208\n"
                          "    " + long_name + "\n"
                          "                  2     2   1.5    1    2               3\n"),
            std::string::npos)
      << one_text;
}

TEST(ReportUserMetrics, AbsentWhenNothingWasPushed) {
  const JobFigures figures = analyse(JobData{4242, {test::job_host("node01", 2, 4)}});
  const Verdict verdict = judge(figures);
  EXPECT_EQ(render_text(figures, verdict).find("User metrics"), std::string::npos);
  EXPECT_EQ(render_html({{figures, verdict}}).find("User metrics"), std::string::npos);
  const auto document = nlohmann::json::parse(render_json(figures, verdict));
  EXPECT_EQ(document["figures"]["user_metrics"], nlohmann::json::object());
  EXPECT_EQ(document["nodes"][0]["user_metrics"], nlohmann::json::object());
}

// --- from HDF5 files --------------------------------------------------------------------------

// What lmaster stores of lagent's User samples: the job's pushes on two hosts and a node's own
// (job 0), read with the file's job index and, the index taken out, by scanning its tables.
void expect_read_with_and_without_the_index(const std::string& layout) {
  using namespace hdf5_source_test;
  TempDir dir;
  MetricInfoStore infos;
  const std::string path = dir.file("metrics.h5");
  {
    Hdf5Output output(options_for(path, {"layout=" + layout, "chunk=16"}), infos);
    for (int i = 0; i < 6; ++i) {
      const std::int64_t time = t0 + i * kSecond;
      std::vector<Sample> samples{sample("n1", "JobCgroup", time, 42, {{"cpu.usage", 1.0 * i}}, {{"user", "alice"}}),
                                  sample("n2", "JobCgroup", time, 42, {{"cpu.usage", 2.0 * i}}),
                                  sample("n1", "User", time, 0, {{"free_scratch", 1e12}}),
                                  sample("n1", "User", time, 42, {{"loss", 1.0 / (i + 1)}})};
      if (i > 0) samples.push_back(sample("n2", "User", time, 42, {{"images", 32}}));
      write(output, samples);
    }
  }
  auto figures_of = [&] {
    Hdf5Source source(path);
    auto job = source.job(42);
    if (!job) throw std::runtime_error("no job 42");
    for (const auto& host : job->hosts) EXPECT_FALSE(host.metrics.contains("User.free_scratch")) << host.host;
    return analyse(*job);
  };
  ASSERT_TRUE(master::hdf5_test::Reader(path).exists("/.jobs"));
  const JobFigures indexed = figures_of();
  remove_job_index(path);
  const JobFigures scanned = figures_of();
  for (const JobFigures* figures : {&indexed, &scanned}) {
    ASSERT_EQ(names(figures->user_metrics), (std::vector<std::string>{"images", "loss"}));
    const UserMetric& images = metric(figures->user_metrics, "images");
    EXPECT_EQ(images.summary.count, 5u);
    EXPECT_DOUBLE_EQ(images.summary.sum, 160);
    const UserMetric& loss = metric(figures->user_metrics, "loss");
    EXPECT_EQ(loss.summary.count, 6u);
    EXPECT_DOUBLE_EQ(loss.summary.last, 1.0 / 6);
    EXPECT_DOUBLE_EQ(loss.summary.max, 1);
    EXPECT_EQ(loss.min, 1.0 / 6);
    EXPECT_EQ(names(figures->nodes[0].user_metrics), (std::vector<std::string>{"loss"}));
    EXPECT_EQ(names(figures->nodes[1].user_metrics), (std::vector<std::string>{"images"}));
  }
}

TEST(ReportUserMetrics, ReadFromHdf5FilesWithAndWithoutTheirJobIndex) {
  for (const char* layout : {"per_host", "per_sensor"}) {
    SCOPED_TRACE(layout);
    expect_read_with_and_without_the_index(layout);
  }
}

}  // namespace
}  // namespace fructosa::report
