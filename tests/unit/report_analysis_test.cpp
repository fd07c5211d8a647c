// fructosa-report's figures, rules and renderings (report/analysis.*, report/render.*) on jobs
// made here, whose figures follow from how they were made.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "analysis.h"
#include "render.h"
#include "report_test_support.h"

namespace fructosa::report {
namespace {

using test::expect_80_columns;
using test::kGiB;
using test::kT0;

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
  // Nothing JobCgroup collects is missing; JobProc's I/O is.
  std::vector<std::string> missing;
  for (const auto& [what, enable] : figures.not_collected) missing.push_back(what);
  EXPECT_EQ(missing, (std::vector<std::string>{"I/O", "IPC", "delays", "energy", "network"}));
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
  EXPECT_NE(text.find("  CPU      not collected (enable [sensor:JobCgroup])\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  Memory   not collected (enable [sensor:JobCgroup] and a memory cgroup)\n"), std::string::npos)
      << text;
  // What has no line of its own is listed at the end.
  EXPECT_NE(text.find("  CPU allocation: not collected (enable [sensor:JobCgroup] and a cpuset cgroup)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("0 of"), std::string::npos) << text;
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

// PerfHW per job: IPC and the cache-miss ratio from the counters' growth, per node and (as
// ratios of the sums) in all.
TEST(ReportFigures, IpcAndCacheMissesAreRatiosOfTheCountersGrowth) {
  using test::add_series, test::rising;
  HostData a = test::job_host("a", 2, 4), b = test::job_host("b", 2, 4);
  add_series(a.metrics, "PerfHW.instructions", rising(1e9));
  add_series(a.metrics, "PerfHW.cpu_cycles", rising(2e9));
  add_series(a.metrics, "PerfHW.cache_references", rising(1e8));
  add_series(a.metrics, "PerfHW.cache_misses", rising(3e7));
  add_series(b.metrics, "PerfHW.instructions", rising(3e9));
  add_series(b.metrics, "PerfHW.cpu_cycles", rising(2e9));
  JobFigures figures = analyse(job({a, b}));
  EXPECT_DOUBLE_EQ(*figures.nodes[0].ipc, 0.5);
  EXPECT_DOUBLE_EQ(*figures.nodes[1].ipc, 1.5);
  EXPECT_DOUBLE_EQ(*figures.ipc, (1e9 + 3e9) / (2e9 + 2e9));
  EXPECT_DOUBLE_EQ(*figures.nodes[0].cache_miss_ratio, 0.3);
  EXPECT_FALSE(figures.nodes[1].cache_miss_ratio.has_value());
  EXPECT_DOUBLE_EQ(*figures.cache_miss_ratio, 0.3);  // of the nodes that count both
  std::string text = render_text(figures, judge(figures));
  EXPECT_NE(text.find("  IPC      1 instructions per cycle, 30% of cache references missed\n"), std::string::npos)
      << text;
  auto document = nlohmann::json::parse(render_json(figures, judge(figures)));
  EXPECT_DOUBLE_EQ(document["figures"]["ipc"].get<double>(), 1.0);
  EXPECT_TRUE(document["nodes"][1]["cache_miss_ratio"].is_null());
  // Without PerfHW: not collected, never 0.
  JobFigures none = analyse(job({test::job_host("a", 2, 4)}));
  EXPECT_FALSE(none.ipc.has_value());
  EXPECT_NE(render_text(none, judge(none)).find("  IPC      not collected (enable [sensor:PerfHW] with scope = job)"),
            std::string::npos);
}

// Taskstats per job: each delay's growth in seconds, and its share of the time the tasks ran
// (ac_utime + ac_stime) or waited (the delays).
TEST(ReportFigures, DelaysAreSharesOfTheTimeTheTasksRanOrWaited) {
  using test::add_series, test::rising;
  HostData host = test::job_host("n", 4, 4);
  add_series(host.metrics, "Taskstats.ac_utime", rising(3));
  add_series(host.metrics, "Taskstats.ac_stime", rising(1));
  add_series(host.metrics, "Taskstats.blkio_delay_total", rising(1));
  add_series(host.metrics, "Taskstats.cpu_delay_total", rising(0.5));
  add_series(host.metrics, "Taskstats.swapin_delay_total", rising(0));
  add_series(host.metrics, "Taskstats.freepages_delay_total", rising(0.1));
  add_series(host.metrics, "Taskstats.thrashing_delay_total", rising(0.1));
  JobFigures figures = analyse(job({host}));
  const double active = 600 * (3 + 1 + 1 + 0.5 + 0 + 0.2);
  EXPECT_NEAR(*figures.delays.active_s, active, 1e-6);
  EXPECT_NEAR(*figures.delays.blkio_s, 600, 1e-6);
  EXPECT_NEAR(*figures.delays.memory_s, 120, 1e-6);
  EXPECT_NEAR(*figures.delays.share(figures.delays.blkio_s), 600 / active, 1e-12);
  EXPECT_NEAR(*figures.delays.share(figures.delays.cpu_s), 300 / active, 1e-12);
  EXPECT_DOUBLE_EQ(*figures.delays.share(figures.delays.swapin_s), 0);
  std::string text = render_text(figures, judge(figures));
  EXPECT_NE(text.find("  Delays   waiting for block I/O 18% (0:10:00), CPU 9% (0:05:00), swap-in 0%,"), std::string::npos)
      << text;
  EXPECT_NE(text.find("memory reclaim 4% (0:02:00) of the time its tasks ran or waited"), std::string::npos) << text;
  auto document = nlohmann::json::parse(render_json(figures, judge(figures)));
  EXPECT_NEAR(document["figures"]["delays"]["blkio_share"].get<double>(), 600 / active, 1e-12);
  // Delay accounting off (Taskstats' node key): the delays it would count are unknown, not 0.
  host.node_metrics["Taskstats.delay_accounting"] = Series{{test::at(0), test::at(600)}, {0, 0}};
  JobFigures off = analyse(job({host}));
  EXPECT_FALSE(off.delays.blkio_s.has_value());
  EXPECT_NEAR(*off.delays.cpu_s, 300, 1e-6);
  EXPECT_EQ(render_text(off, judge(off)).find("block I/O 0%"), std::string::npos);
}

TEST(ReportFigures, IoRatesAreBytesOverTheElapsedTime) {
  HostData host = test::job_host("n", 4, 4);
  test::add_series(host.metrics, "JobProc.read_bytes", test::rising(1 << 20));
  test::add_series(host.metrics, "JobProc.write_bytes", test::rising(1 << 10));
  JobFigures figures = analyse(job({host}));
  EXPECT_DOUBLE_EQ(*figures.read_rate, 1 << 20);
  EXPECT_DOUBLE_EQ(*figures.nodes[0].write_rate, 1 << 10);
  EXPECT_NE(render_text(figures, judge(figures)).find("  I/O      read 600 MiB (1 MiB/s), written 600 KiB (1 KiB/s)\n"),
            std::string::npos);
}

// --list's verdicts from the job index's summaries: the same figures as from the series.
TEST(ReportFigures, SummariesGiveTheFiguresOfTheSeries) {
  using test::add_series, test::rising, test::constant;
  HostData a = test::job_host("a", 3.5, 4, 1.5 * test::kGiB, 2 * test::kGiB);
  HostData b = test::job_host("b", 0.5, 4, 0.2 * test::kGiB, 2 * test::kGiB);
  for (HostData* host : {&a, &b}) {
    add_series(host->metrics, "JobProc.read_bytes", rising(1e6));
    add_series(host->metrics, "JobProc.write_bytes", rising(2e6));
    add_series(host->metrics, "PerfHW.instructions", rising(1e9));
    add_series(host->metrics, "PerfHW.cpu_cycles", rising(3e9));
    add_series(host->metrics, "Taskstats.ac_utime", rising(1));
    add_series(host->metrics, "Taskstats.blkio_delay_total", rising(0.5));
    add_series(host->metrics, "NvidiaGPU.processes", constant(1));
    add_series(host->metrics, "NvidiaGPU.0.processes", constant(1));
    add_series(host->metrics, "NvidiaGPU.0.process_memory", [](double t) { return 1e9 + t; });
    host->labels["JobCgroup.gpu_minors"] = "0,1";
    host->labels["JobProc.commands"] = "gmx_mpi";
  }
  // A restart of a counter and a missing value: summaries and series agree on those too.
  a.metrics["JobCgroup.cpu.usage"].values[30] = 5;
  a.metrics["JobProc.read_bytes"].values[10] = NAN;
  JobData data = job({a, b});
  JobFigures series = analyse(data);
  JobFigures summaries = analyse(test::summary_of(data));
  ASSERT_EQ(series.nodes.size(), summaries.nodes.size());
  auto same = [](const std::optional<double>& x, const std::optional<double>& y, const char* what) {
    ASSERT_EQ(x.has_value(), y.has_value()) << what;
    if (x) {
      EXPECT_NEAR(*x, *y, 1e-9 * std::max(1.0, std::fabs(*x))) << what;
    }
  };
  for (std::size_t i = 0; i < series.nodes.size(); ++i) {
    const NodeFigures &s = series.nodes[i], &m = summaries.nodes[i];
    EXPECT_EQ(s.host, m.host);
    EXPECT_EQ(s.elapsed_s, m.elapsed_s);
    EXPECT_EQ(s.cpu_source, m.cpu_source);
    same(s.cpu_seconds, m.cpu_seconds, "cpu_seconds");
    same(s.cpu_efficiency, m.cpu_efficiency, "cpu_efficiency");
    same(s.memory_peak, m.memory_peak, "memory_peak");
    same(s.read_bytes, m.read_bytes, "read_bytes");
    same(s.ipc, m.ipc, "ipc");
    same(s.delays.share(s.delays.blkio_s), m.delays.share(m.delays.blkio_s), "blkio share");
    same(s.gpus_without_process, m.gpus_without_process, "gpus_without_process");
    ASSERT_EQ(s.gpus.size(), m.gpus.size());
    same(s.gpus[0].process_memory_peak, m.gpus[0].process_memory_peak, "process memory");
  }
  EXPECT_EQ(series.user, summaries.user);
  EXPECT_EQ(series.application, "gromacs");
  EXPECT_EQ(series.application, summaries.application);
  EXPECT_EQ(series.elapsed_s, summaries.elapsed_s);
  same(series.cpu_efficiency, summaries.cpu_efficiency, "job cpu_efficiency");
  same(series.efficiency_min, summaries.efficiency_min, "efficiency_min");
  same(series.memory_peak, summaries.memory_peak, "job memory_peak");
  same(series.write_rate, summaries.write_rate, "write_rate");
  same(series.ipc, summaries.ipc, "job ipc");
  same(series.gpus_allocated, summaries.gpus_allocated, "gpus_allocated");
  same(series.gpus_used, summaries.gpus_used, "gpus_used");
  EXPECT_DOUBLE_EQ(*summaries.gpus_without_process, 2);  // one of two on each node
  Verdict from_series = judge(series), from_summaries = judge(summaries);
  EXPECT_EQ(from_series.word, from_summaries.word);
  ASSERT_EQ(from_series.notes.size(), from_summaries.notes.size());
  for (std::size_t i = 0; i < from_series.notes.size(); ++i) EXPECT_EQ(from_series.notes[i].text, from_summaries.notes[i].text);
  EXPECT_EQ(from_series.word, "gpu_idle");
}

}  // namespace

}  // namespace fructosa::report
