// fructosa-report --format html (report/render_html.cpp): a self-contained document, a plot per
// node and metric whose line has a point per sample, text escaped, missing figures said so.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "analysis.h"
#include "render.h"
#include "report_test_support.h"

using namespace fructosa::report;

namespace {

using fructosa::report::test::kGiB;
using fructosa::report::test::kT0;

// `samples` samples 10 s apart: cpu.usage growing by 2 CPU-s/s, 4 CPUs, memory rising to 1 GiB
// of a 2 GiB limit; `memory` false leaves memory out.
HostData html_host(const std::string& name, int samples, bool memory = true) {
  HostData data;
  data.host = name;
  for (int i = 0; i < samples; ++i) {
    auto ns = kT0 + std::int64_t{i} * 10'000'000'000;
    auto add = [&](const std::string& key, double value) {
      data.metrics[key].time_ns.push_back(ns);
      data.metrics[key].values.push_back(value);
    };
    add("JobCgroup.cpu.usage", 20.0 * i);
    add("JobCgroup.cpus", 4);
    if (memory) {
      add("JobCgroup.memory.current", kGiB * (i + 1) / samples);
      add("JobCgroup.memory.limit", 2 * kGiB);
    }
  }
  data.labels["JobCgroup.user"] = "alice";
  data.sensors = {"JobCgroup"};
  return data;
}

std::pair<JobFigures, Verdict> report(std::vector<HostData> hosts, std::uint64_t id = 4242) {
  JobFigures figures = analyse(JobData{id, std::move(hosts)});
  Verdict verdict = judge(figures);
  return {std::move(figures), std::move(verdict)};
}

std::vector<std::string> all(const std::string& text, const std::string& pattern) {
  std::vector<std::string> found;
  std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    found.push_back(it->size() > 1 ? (*it)[1].str() : it->str());
  return found;
}

// The points of a series path's "d": its M and L commands.
std::size_t points(const std::string& d) { return all(d, "[ML]").size(); }

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ReportHtml, IsOneSelfContainedDocumentWithAPlotPerNodeAndMetric) {
  std::string html = render_html({report({html_host("node01", 30), html_host("node02", 30)})});
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>\n")) << html.substr(0, 100);
  EXPECT_TRUE(html.ends_with("</html>\n"));
  EXPECT_EQ(count(html, "<html"), 1u);
  EXPECT_EQ(count(html, "<body>"), 1u);
  EXPECT_EQ(count(html, "</body>"), 1u);
  for (const char* outside : {"http://", "https://", "<script", "@import", "url("}) EXPECT_EQ(count(html, outside), 0u) << outside;

  EXPECT_EQ(count(html, "<svg"), 4u);  // cores and memory, per node
  EXPECT_EQ(count(html, "</svg>"), 4u);
  auto series = all(html, "<path class=\"series\" d=\"([^\"]*)\"");
  ASSERT_EQ(series.size(), 4u);
  // Cores busy: a rate between consecutive samples (29 of 30); memory: a point per sample.
  EXPECT_EQ(points(series[0]), 29u);
  EXPECT_EQ(points(series[1]), 30u);
  EXPECT_EQ(points(series[2]), 29u);
  EXPECT_EQ(points(series[3]), 30u);
  // The memory limit is drawn, and the header and the figures are as the text report says them.
  EXPECT_EQ(count(html, "class=\"limit\""), 2u);
  EXPECT_NE(html.find("<h1>Job 4242</h1>"), std::string::npos);
  EXPECT_NE(html.find("alice"), std::string::npos);
  EXPECT_NE(html.find("2026-11-25T09:46:40Z"), std::string::npos);
  EXPECT_NE(html.find("0:04:50"), std::string::npos);  // elapsed
  EXPECT_NE(html.find("2 of 4 cores (50%)"), std::string::npos);
  EXPECT_NE(html.find("peak 1 GiB of 2 GiB (50%)"), std::string::npos);
  EXPECT_NE(html.find("node01: cores busy (of 4 allocated)"), std::string::npos);
  EXPECT_NE(html.find("node02: memory (limit 2 GiB)"), std::string::npos);
}

TEST(ReportHtml, AxesHaveUtcClockTicksAndRoundValues) {
  std::string html = render_html({report({html_host("node01", 30)})});
  // 290 s of samples from 09:46:40: a tick a minute.
  for (const char* tick : {">09:47:00<", ">09:48:00<", ">09:51:00<"}) EXPECT_NE(html.find(tick), std::string::npos) << tick;
  // Cores 0..4 allocated; memory in round GiB.
  for (const char* tick : {">0<", ">1<", ">4<", ">2 GiB<", ">512 MiB<"}) EXPECT_NE(html.find(tick), std::string::npos) << tick;
  EXPECT_NE(html.find(">limit 2 GiB<"), std::string::npos);
}

TEST(ReportHtml, PathBreaksAtMissingSamples) {
  auto job = report({html_host("node01", 10)});
  Series& memory = job.first.nodes[0].memory_over_time;
  memory.values[4] = NAN;
  auto series = all(render_html({job}), "<path class=\"series\" d=\"([^\"]*)\"");
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(points(series[1]), 9u);
  EXPECT_EQ(all(series[1], "M").size(), 2u);  // two segments
}

TEST(ReportHtml, EscapesHostNamesUserAndNotes) {
  auto job = report({html_host("<b>&\"", 30)});
  job.first.user = "<i>o'brien";
  job.second.notes.push_back({"x<y", "a <script>alert(1)</script> & more"});
  std::string html = render_html({job});
  EXPECT_EQ(html.find("<b>"), std::string::npos);
  EXPECT_EQ(html.find("<i>"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("&\""), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;&amp;&quot;"), std::string::npos);
  EXPECT_NE(html.find("&lt;i&gt;o&#39;brien"), std::string::npos);
  EXPECT_NE(html.find("a &lt;script&gt;alert(1)&lt;/script&gt; &amp; more"), std::string::npos);
  EXPECT_NE(html.find("data-rule=\"x&lt;y\""), std::string::npos);
}

TEST(ReportHtml, MissingFiguresAreNotCollectedNeverZero) {
  std::string html = render_html({report({html_host("node01", 30, false)})});
  EXPECT_NE(html.find("<td class=\"missing\">not collected (enable [sensor:JobCgroup] and a memory cgroup)</td>"),
            std::string::npos);
  EXPECT_NE(html.find("<td class=\"missing\">not collected (enable [sensor:JobProc])</td>"), std::string::npos);
  EXPECT_NE(html.find("memory: not collected"), std::string::npos);
  EXPECT_EQ(html.find("0 B"), std::string::npos);
  EXPECT_EQ(count(html, "<svg"), 1u);  // cores only
}

TEST(ReportHtml, SeveralJobsMakeOneDocumentWithASectionEach) {
  std::string html = render_html({report({html_host("node01", 30)}, 1), report({html_host("node02", 30)}, 2)});
  EXPECT_EQ(count(html, "<!DOCTYPE html>"), 1u);
  EXPECT_EQ(count(html, "<section class=\"job\""), 2u);
  EXPECT_NE(html.find("<title>fructosa-report: jobs 1, 2</title>"), std::string::npos);
  EXPECT_LT(html.find("id=\"job-1\""), html.find("id=\"job-2\""));
}

}  // namespace
