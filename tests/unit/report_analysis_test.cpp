// fructosa-report's figures, rules and renderings (report/analysis.*, report/render.*) on jobs
// made here, whose figures follow from how they were made.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "analysis.h"
#include "render.h"

using namespace fructosa::report;

namespace {

constexpr std::int64_t kT0 = 1'795'600'000'000'000'000;  // 2026-11-25T09:46:40Z
constexpr double kGiB = 1 << 30;

// `seconds` of samples every `step` s: cpu.usage growing at `cores` CPU-s/s, `memory` bytes
// charged, on a node of `cpus` allocated CPUs with a `limit` memory limit (0: none).
HostData host(const std::string& name, double seconds, double cores, double cpus, double memory, double limit,
              double step = 10) {
  HostData data;
  data.host = name;
  for (double t = 0; t <= seconds; t += step) {
    auto ns = kT0 + static_cast<std::int64_t>(t * 1e9);
    auto add = [&](const std::string& key, double value) {
      data.metrics[key].time_ns.push_back(ns);
      data.metrics[key].values.push_back(value);
    };
    add("JobCgroup.cpu.usage", 100 + cores * t);
    add("JobCgroup.cpus", cpus);
    add("JobCgroup.memory.current", memory);
    if (limit > 0) add("JobCgroup.memory.limit", limit);
  }
  data.labels["JobCgroup.user"] = "alice";
  data.labels["JobCgroup.cpu_source"] = "cgroup";
  data.sensors = {"JobCgroup"};
  return data;
}

JobData job(std::vector<HostData> hosts) { return JobData{4242, std::move(hosts)}; }

TEST(ReportFigures, CounterGrowthSumsTheRisesAndCountsAFallAsARestart) {
  Series series{{1, 2, 3, 4, 5}, {10, 15, NAN, 3, 8}};
  EXPECT_DOUBLE_EQ(*counter_growth(series), 5 + 3 + 5);
  EXPECT_FALSE(counter_growth(Series{{1}, {10}}).has_value());
}

TEST(ReportFigures, EfficiencyIsCoresUsedOverCoresAllocated) {
  JobFigures figures = analyse(job({host("node01", 3600, 3.1, 32, 2.1 * kGiB, 64 * kGiB)}));
  EXPECT_EQ(figures.user, "alice");
  EXPECT_DOUBLE_EQ(figures.elapsed_s, 3600);
  EXPECT_NEAR(*figures.cpu_seconds, 3.1 * 3600, 1e-6);
  EXPECT_NEAR(*figures.cpu_efficiency, 3.1 / 32, 1e-9);
  EXPECT_DOUBLE_EQ(*figures.memory_peak, 2.1 * kGiB);
  EXPECT_TRUE(figures.not_collected.size() == 1 && figures.not_collected[0].first == "I/O");
  Verdict verdict = judge(figures);
  EXPECT_EQ(verdict.word, "cpu_underused");
  ASSERT_EQ(verdict.notes.size(), 2u);
  EXPECT_EQ(verdict.notes[0].text, "used 3.1 of 32 allocated cores on average: ask for 4");
  EXPECT_EQ(verdict.notes[1].rule, "memory_over_requested");
  EXPECT_EQ(verdict.notes[1].text, "peak memory 2.1 GiB of 64 GiB requested: ask for 3 GiB");
}

TEST(ReportFigures, TheApplicationIsWhatMostNodesRan) {
  HostData a = host("a", 600, 1, 4, kGiB, 2 * kGiB), b = a, c = a;
  b.host = "b";
  c.host = "c";
  a.labels["JobProc.commands"] = "python3,srun";
  b.labels["JobProc.commands"] = "srun,gmx_mpi,bash";
  c.labels["JobProc.commands"] = "gmx_mpi";
  JobFigures figures = analyse(job({a, b, c}));
  EXPECT_EQ(figures.application, "gromacs");
  EXPECT_NE(render_text(figures, judge(figures)).find("ran gromacs"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(render_json(figures, judge(figures)))["application"], "gromacs");
  // A site's own entry comes first.
  EXPECT_EQ(analyse(job({c}), {AppPattern{"our-gromacs", {"gmx_*"}}}).application, "our-gromacs");
  EXPECT_EQ(analyse(job({host("d", 600, 1, 4, kGiB, 2 * kGiB)})).application, "");
}

TEST(ReportRules, EachRuleFiresOnTheJobItDescribes) {
  EXPECT_EQ(judge(analyse(job({host("n", 600, 0.01, 4, kGiB, 2 * kGiB)}))).word, "idle");
  EXPECT_EQ(judge(analyse(job({host("n", 600, 3.9, 4, 1.9 * kGiB, 2 * kGiB)}))).word, "memory_near_limit");
  EXPECT_EQ(judge(analyse(job({host("n", 600, 3.9, 4, 1.0 * kGiB, 2 * kGiB)}))).word, "healthy");
  EXPECT_EQ(judge(analyse(job({host("a", 600, 3.9, 4, kGiB, 2 * kGiB), host("b", 600, 1.0, 4, kGiB, 2 * kGiB)})))
                .word,
            "imbalanced");
  // Memory near its limit: the advice asks for more than the limit.
  Verdict near = judge(analyse(job({host("n", 600, 3.9, 4, 1.9 * kGiB, 2 * kGiB)})));
  EXPECT_EQ(near.notes[0].text, "peak memory 1.9 GiB of its 2 GiB limit: it may be killed when it needs more; ask for 3 GiB");
}

TEST(ReportRules, WithoutAllocationOrLimitNoRuleGuesses) {
  JobFigures figures = analyse(job({host("n", 600, 2, 0, kGiB, 0)}));
  figures.cpus.reset();
  figures.cpu_efficiency.reset();
  EXPECT_EQ(judge(figures).word, "healthy");
}

TEST(ReportRender, JsonSaysNullForWhatWasNotCollectedNeverZero) {
  HostData bare;
  bare.host = "node01";
  bare.metrics["JobProc.read_bytes"] = Series{{kT0, kT0 + 10'000'000'000}, {0, 4096}};
  JobFigures figures = analyse(job({bare}));
  auto document = nlohmann::json::parse(render_json(figures, judge(figures)));
  EXPECT_EQ(document["schema"], kJsonSchema);
  EXPECT_EQ(document["job"], 4242);
  EXPECT_TRUE(document["figures"]["cpu_seconds"].is_null());
  EXPECT_TRUE(document["figures"]["memory_peak_bytes"].is_null());
  EXPECT_EQ(document["figures"]["read_bytes"], 4096);
  EXPECT_EQ(document["not_collected"][0]["what"], "CPU time");
  EXPECT_EQ(document["not_collected"][0]["enable"], "[sensor:JobCgroup]");
  std::string text = render_text(figures, judge(figures));
  EXPECT_NE(text.find("CPU time: not collected (enable [sensor:JobCgroup])"), std::string::npos) << text;
  EXPECT_EQ(text.find("0 of"), std::string::npos) << text;
}

void expect_80_columns(const std::string& text) {
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    std::string line = text.substr(start, end - start);
    std::size_t columns = 0;  // UTF-8 characters
    for (unsigned char c : line) columns += (c & 0xC0) != 0x80;
    EXPECT_LE(columns, 80u) << line;
    start = end == std::string::npos ? text.size() : end + 1;
  }
}

TEST(ReportRender, TextFitsIn80Columns) {
  JobFigures figures = analyse(job({host("node01.cluster.example.org", 86400 * 2, 3.1, 32, 2.1 * kGiB, 64 * kGiB, 60)}));
  std::string text = render_text(figures, judge(figures));
  expect_80_columns(text);
  EXPECT_NE(text.find("elapsed 2-00:00:00"), std::string::npos) << text;
  // A long note is wrapped under its first word.
  Verdict long_note{"idle", {{"idle", std::string(70, 'x') + " and more words that go on past the eightieth column"}}};
  std::string wrapped = render_text(figures, long_note);
  expect_80_columns(wrapped);
  EXPECT_NE(wrapped.find("  - " + std::string(70, 'x') + " and\n    more words"), std::string::npos) << wrapped;
}

TEST(ReportRender, SummaryIsOneLineWithTheVerdictAdviceAndFigures) {
  JobFigures figures = analyse(job({host("node01", 3723, 3.1, 32, 2.1 * kGiB, 64 * kGiB, 3)}));
  EXPECT_EQ(render_summary(figures, judge(figures)),
            "cpu_underused: used 3.1 of 32 allocated cores on average: ask for 4; peak memory 2.1 GiB of 64 GiB "
            "requested: ask for 3 GiB | CPU 3.1 of 32 cores (10%), memory peak 2.1 GiB of 64 GiB (3%), "
            "elapsed 1:02:03\n");
}

TEST(ReportRender, SparklineScalesToTheGivenHigh) {
  EXPECT_EQ(sparkline({0, 4}, 2, 4), "▁█");
  EXPECT_EQ(sparkline({0, 0, 4, 4}, 2, 8), "▁▅");
  EXPECT_EQ(sparkline({1, NAN, 1}, 10, 1), "██");
  EXPECT_EQ(sparkline({}, 10), "");
}

TEST(ReportFormat, FiguresAreRoundedAsAPersonWritesThem) {
  EXPECT_EQ(round_figure(3.14159), "3.1");
  EXPECT_EQ(round_figure(32), "32");
  EXPECT_EQ(round_figure(4.0), "4");
  EXPECT_EQ(round_figure(0.253), "0.25");
  EXPECT_EQ(round_figure(0.401), "0.4");
  EXPECT_EQ(round_figure(0), "0");
  EXPECT_EQ(format_bytes(2.1 * kGiB), "2.1 GiB");
  EXPECT_EQ(format_bytes(512.0 * (1 << 20)), "512 MiB");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(2 * 86400), "2-00:00:00");
  EXPECT_EQ(utc_time(kT0), "2026-11-25T09:46:40Z");
}

}  // namespace
