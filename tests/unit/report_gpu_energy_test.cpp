// fructosa-report's figures from a job's node samples (report/node_resources.cpp): GPUs, energy
// (whole node, or apportioned by CPU time on a shared node), network; and how they are shown.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "analysis.h"
#include "node_resources.h"
#include "render.h"
#include "report_test_support.h"

using namespace fructosa::report;
using namespace fructosa::report::test;

namespace {

// Node samples from 10 s before the job's first sample to 10 s after its last (HostData's
// node_metrics reach one row past the job on each side).
void add_node(HostData& host, const std::string& name, const std::function<double(double)>& value) {
  add_series(host.node_metrics, name, value, -10, 610);
}

// `jobs` jobs on the node over the job's span, 3 in the rows just outside it.
void set_jobs(HostData& host, double jobs) {
  add_node(host, "JobCgroup.jobs", [=](double t) { return t < 0 || t > 600 ? 3 : jobs; });
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// `text` with its wrapped lines joined again: a line break and the indent under it (11 blanks
// or more: a continuation, not a new line) as one space.
std::string unwrapped(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' && text.compare(i + 1, 11, std::string(11, ' ')) == 0) {
      out += ' ';
      i = text.find_first_not_of(' ', i + 1) - 1;
    } else {
      out += text[i];
    }
  }
  return out;
}

TEST(ReportWindows, CounterGrowthCountsTheShareOfEachIntervalInside) {
  Series counter{{at(0), at(10), at(20), at(30)}, {0, 100, 50, 150}};  // 100 -> 50: a restart
  EXPECT_DOUBLE_EQ(*window_growth(counter, at(5), at(25)), 100 * 0.5 + 50 + 100 * 0.5);
  EXPECT_DOUBLE_EQ(*window_growth(counter, at(0), at(30)), 100 + 50 + 100);
  EXPECT_FALSE(window_growth(counter, at(30), at(40)).has_value());
  Series power{{at(0), at(10), at(20)}, {100, 200, NAN}};
  EXPECT_DOUBLE_EQ(*window_integral(power, at(0), at(10)), 1500);
  EXPECT_DOUBLE_EQ(*window_integral(power, at(5), at(10)), (150 + 200) / 2.0 * 5);
  Series gauge{{at(0), at(10), at(20), at(30)}, {1, 2, 4, 8}};
  EXPECT_DOUBLE_EQ(*window_mean(gauge, at(10), at(20)), 3);
  EXPECT_DOUBLE_EQ(*window_max(gauge, at(0), at(25)), 4);
  EXPECT_FALSE(window_mean(gauge, at(31), at(40)).has_value());
}

TEST(ReportGpus, TheCgroupsGpuMinorsAreListsAndRanges) {
  EXPECT_EQ(*allocated_gpus("0,1"), (std::vector<int>{0, 1}));
  EXPECT_EQ(*allocated_gpus("0-2, 5"), (std::vector<int>{0, 1, 2, 5}));
  EXPECT_FALSE(allocated_gpus("").has_value());
  EXPECT_FALSE(allocated_gpus("x").has_value());
  EXPECT_FALSE(allocated_gpus("3-1").has_value());
}

// Four GPUs whose minors run backwards (index 3 is /dev/nvidia0); the job is allowed minors 0
// and 1 (GPUs 3 and 2) and runs on GPU 3 only, busy 60%; another job keeps GPUs 0 and 1 busy.
HostData gpu_node() {
  HostData host = job_host("g01", 1, 8);
  add_series(host.metrics, "NvidiaGPU.processes", constant(1));
  add_series(host.metrics, "NvidiaGPU.3.processes", constant(1));
  add_series(host.metrics, "NvidiaGPU.3.process_memory", constant(20 * kGiB));
  host.labels["JobCgroup.gpu_minors"] = "0,1";
  for (int gpu = 0; gpu < 4; ++gpu) {
    const std::string key = "NvidiaGPU." + std::to_string(gpu) + ".";
    add_node(host, key + "minor", constant(3 - gpu));
    const double busy = gpu == 3 ? 60 : gpu == 2 ? 0 : 100;
    // Outside the job's span the GPU does something else: the window leaves it out.
    add_node(host, key + "utilization_gpu", [=](double t) { return t < 0 || t > 600 ? 100 : busy; });
    add_node(host, key + "memory_used", constant(gpu == 3 ? 30 * kGiB : gpu == 2 ? 0 : 70 * kGiB));
    add_node(host, key + "memory_total", constant(80 * kGiB));
  }
  return host;
}

TEST(ReportGpus, EachAllocatedOrUsedGpuHasItsUtilizationAndMemory) {
  JobFigures figures = analyse(JobData{7, {gpu_node()}});
  const NodeFigures& node = figures.nodes[0];
  ASSERT_EQ(node.gpus.size(), 2u);
  EXPECT_EQ(node.gpus[0].gpu, "2");
  EXPECT_TRUE(node.gpus[0].allocated);
  EXPECT_FALSE(node.gpus[0].used);
  EXPECT_DOUBLE_EQ(*node.gpus[0].utilization, 0);
  EXPECT_EQ(node.gpus[1].gpu, "3");
  EXPECT_DOUBLE_EQ(*node.gpus[1].minor, 0);
  EXPECT_TRUE(node.gpus[1].allocated && node.gpus[1].used);
  EXPECT_DOUBLE_EQ(*node.gpus[1].utilization, 0.6);
  EXPECT_DOUBLE_EQ(*node.gpus[1].memory_peak, 30 * kGiB);
  EXPECT_DOUBLE_EQ(*node.gpus[1].process_memory_peak, 20 * kGiB);
  EXPECT_EQ(node.gpus[1].utilization_over_time.values.size(), 61u);  // the job's span only
  EXPECT_DOUBLE_EQ(*figures.gpus_allocated, 2);
  EXPECT_DOUBLE_EQ(*figures.gpus_used, 1);
  EXPECT_DOUBLE_EQ(*figures.gpus_without_process, 1);
  EXPECT_DOUBLE_EQ(*figures.gpu_utilization, 0.3);
  EXPECT_DOUBLE_EQ(*figures.gpu_memory_peak, 30 * kGiB);

  Verdict verdict = judge(figures);
  EXPECT_EQ(verdict.word, "gpu_idle");
  EXPECT_EQ(verdict.notes[0].text, "1 of its 2 GPUs did nothing (1 without a process of the job): ask for 1 GPU");
  std::string text = render_text(figures, verdict);
  expect_80_columns(text);
  EXPECT_TRUE(contains(text, "  GPU      2 allocated, 1 used, 1 without a process of the job, busy 30% on\n"
                             "           average, memory peak 30 GiB\n"))
      << text;
  EXPECT_TRUE(contains(text, "    gpu3   ▅▅▅")) << text;
  EXPECT_TRUE(contains(text, "    GPUs   2: no process of the job, busy 0%, memory peak 0 B of 80 GiB; 3: busy\n"
                             "           60%, memory peak 30 GiB of 80 GiB\n"))
      << text;
  auto document = nlohmann::json::parse(render_json(figures, verdict));
  EXPECT_EQ(document["figures"]["gpus_without_process"], 1);
  EXPECT_EQ(document["nodes"][0]["gpus"][1]["gpu"], "3");
  EXPECT_DOUBLE_EQ(document["nodes"][0]["gpus"][1]["utilization"].get<double>(), 0.6);
  EXPECT_EQ(document["nodes"][0]["gpus"][0]["used"], false);
  std::string html = render_html({{figures, verdict}});
  EXPECT_TRUE(contains(html, "g01: GPU 3 busy (a kernel running)")) << html;
  EXPECT_TRUE(contains(html, ">100%</text>"));
  EXPECT_TRUE(contains(html, "<tr><th>GPU</th><td>2 allocated, 1 used"));
  EXPECT_TRUE(contains(render_summary(figures, verdict), ", 1 of 2 GPUs used (busy 30%), elapsed 0:10:00\n"))
      << render_summary(figures, verdict);
}

TEST(ReportGpus, WithoutMinorsTheAllocationCountsAndNoGpuIsGuessed) {
  HostData host = job_host("g", 1, 8);
  add_series(host.metrics, "NvidiaGPU.processes", constant(2));
  add_series(host.metrics, "NvidiaGPU.0.processes", constant(1));
  add_series(host.metrics, "NvidiaGPU.1.processes", [](double t) { return t < 300 ? 0 : 1; });
  add_series(host.metrics, "NvidiaGPU.2.mig0.processes", constant(1));  // a MIG device counts as its GPU
  add_series(host.metrics, "JobCgroup.gpus", constant(4));                // the count, without its minors
  add_node(host, "NvidiaGPU.0.utilization_gpu", constant(90));
  JobFigures figures = analyse(JobData{7, {host}});
  ASSERT_EQ(figures.nodes[0].gpus.size(), 3u);  // the three it used; which minors they are is unknown
  EXPECT_EQ(figures.nodes[0].gpus[2].gpu, "2");
  EXPECT_FALSE(figures.nodes[0].gpus[0].allocated);
  EXPECT_DOUBLE_EQ(*figures.gpus_allocated, 4);
  EXPECT_DOUBLE_EQ(*figures.gpus_without_process, 1);
  EXPECT_DOUBLE_EQ(*figures.gpu_utilization, 0.9);  // GPUs 1 and 2 have no node samples
  EXPECT_EQ(judge(figures).notes[0].text, "1 of its 4 GPUs did nothing (1 without a process of the job): ask for 3 GPUs");
}

TEST(ReportGpus, AGpuJobWithoutNvidiaGpuSamplesSaysSo) {
  JobFigures cpu_only = analyse(JobData{7, {job_host("n", 4, 4)}});
  EXPECT_FALSE(contains(render_text(cpu_only, judge(cpu_only)), "GPU"));  // a CPU job has no GPU line
  SlurmRequest request;
  request.gpus = 2;
  set_request(cpu_only, request);
  EXPECT_TRUE(contains(render_text(cpu_only, judge(cpu_only)), "  GPU      not collected (enable [sensor:NvidiaGPU])\n"));
  HostData allocated = job_host("n", 4, 4);
  allocated.labels["JobCgroup.gpu_minors"] = "0";
  JobFigures figures = analyse(JobData{7, {allocated}});
  EXPECT_EQ(figures.not_collected.back(), (std::pair<std::string, std::string>{"network", "[sensor:NetIOCounters] or [sensor:InfiniBand]"}));
  EXPECT_TRUE(std::count(figures.not_collected.begin(), figures.not_collected.end(),
                         std::pair<std::string, std::string>{"GPU", "[sensor:NvidiaGPU]"}) == 1);
}

// RAPL: two packages with their DRAM (a core subzone is part of its package); IPMI: 300 W.
HostData energy_node(const std::string& name, double cores) {
  HostData host = job_host(name, cores, 8);
  add_node(host, "RAPL.package-0.energy", rising(100, 5000));
  add_node(host, "RAPL.package-0.core.energy", rising(50));
  add_node(host, "RAPL.package-0.dram.energy", rising(10));
  add_node(host, "RAPL.package-1.energy", rising(100));
  add_node(host, "IPMIPower.power", constant(300));
  add_node(host, "NetIOCounters.bytes_sent", rising(1e6));
  add_node(host, "NetIOCounters.bytes_recv", rising(2e6));
  add_node(host, "InfiniBand.mlx5_0.1.port_xmit_data", rising(3e6));
  add_node(host, "InfiniBand.mlx5_0.1.port_rcv_data", rising(4e6));
  add_node(host, "InfiniBand.mlx5_1.1.port_xmit_data", rising(1e6));
  // 10 of its CPUs' seconds busy a second: user 8 (guest in it), system 2; idle and steal are not.
  add_node(host, "CPUTimes.user", rising(8));
  add_node(host, "CPUTimes.system", rising(2));
  add_node(host, "CPUTimes.idle", rising(10));
  add_node(host, "CPUTimes.steal", rising(1));
  return host;
}

TEST(ReportEnergy, ANodeTheJobHadAloneIsAllItsOwn) {
  HostData host = energy_node("n", 2.5);
  set_jobs(host, 1);
  JobFigures figures = analyse(JobData{7, {host}});
  const NodeFigures& node = figures.nodes[0];
  EXPECT_EQ(node.use, NodeUse::alone);
  EXPECT_NEAR(*node.rapl_joules, (100 + 10 + 100) * 600, 1e-6);
  EXPECT_NEAR(*node.ipmi_joules, 300 * 600, 1e-6);
  EXPECT_FALSE(figures.energy_apportioned);
  EXPECT_NEAR(*figures.net_sent, 600e6, 1e-3);
  EXPECT_NEAR(*figures.net_received, 1200e6, 1e-3);
  EXPECT_NEAR(*figures.ib_sent, 2400e6, 1e-3);
  EXPECT_NEAR(*figures.ib_received, 2400e6, 1e-3);
  std::string text = render_text(figures, judge(figures));
  EXPECT_TRUE(contains(text, "  Energy   35 Wh by RAPL, 50 Wh by IPMI (whole node)\n")) << text;
  EXPECT_TRUE(contains(text, "  Network  NICs sent 572 MiB, received 1.1 GiB; InfiniBand sent 2.2 GiB,\n"
                             "           received 2.2 GiB\n"))
      << text;
  auto document = nlohmann::json::parse(render_json(figures, judge(figures)));
  EXPECT_EQ(document["figures"]["energy_attribution"], "whole");
  EXPECT_EQ(document["nodes"][0]["use"], "alone");
  EXPECT_NEAR(document["figures"]["energy_ipmi_j"].get<double>(), 180000, 1e-6);
  EXPECT_EQ(document["figures"]["network_attribution"], "whole");
  EXPECT_EQ(render_summary(figures, judge(figures)).find(", energy 50 Wh, elapsed 0:10:00\n") != std::string::npos, true);
}

TEST(ReportEnergy, ASharedNodesEnergyIsApportionedByTheJobsShareOfItsCpuTime) {
  HostData host = energy_node("n", 2.4);
  set_jobs(host, 2);
  JobFigures figures = analyse(JobData{7, {host}});
  const NodeFigures& node = figures.nodes[0];
  EXPECT_EQ(node.use, NodeUse::shared);
  EXPECT_NEAR(*node.cpu_share, 2.4 / 10, 1e-12);
  EXPECT_NEAR(*figures.rapl_joules, 210 * 600 * 0.24, 1e-6);
  EXPECT_NEAR(*figures.ipmi_joules, 300 * 600 * 0.24, 1e-6);
  EXPECT_TRUE(figures.energy_apportioned);
  // Others' traffic is in the node's counters: not the job's.
  EXPECT_TRUE(figures.network_shared);
  EXPECT_FALSE(figures.net_sent.has_value());
  std::string text = render_text(figures, judge(figures));
  EXPECT_TRUE(contains(text, "  Energy   8.4 Wh by RAPL, 12 Wh by IPMI (apportioned by its share of shared\n"
                             "           nodes' CPU time)\n"))
      << text;
  EXPECT_TRUE(contains(text, "  Network  not attributed: node shared\n")) << text;
  auto document = nlohmann::json::parse(render_json(figures, judge(figures)));
  EXPECT_EQ(document["figures"]["energy_attribution"], "apportioned");
  EXPECT_EQ(document["figures"]["network_attribution"], "not attributed");
  EXPECT_TRUE(document["figures"]["network_sent_bytes"].is_null());
  EXPECT_NEAR(document["nodes"][0]["cpu_share_of_node"].get<double>(), 0.24, 1e-12);

  // CPUTimes per CPU gives the same share.
  HostData per_cpu = energy_node("n", 2.4);
  set_jobs(per_cpu, 2);
  for (const char* mode : {"user", "system", "idle", "steal"}) per_cpu.node_metrics.erase(std::string("CPUTimes.") + mode);
  for (const char* cpu : {"0", "1"}) {
    add_node(per_cpu, std::string("CPUTimes.") + cpu + ".user", rising(4));
    add_node(per_cpu, std::string("CPUTimes.") + cpu + ".system", rising(1));
    add_node(per_cpu, std::string("CPUTimes.") + cpu + ".idle", rising(5));
  }
  EXPECT_NEAR(*analyse(JobData{7, {per_cpu}}).nodes[0].cpu_share, 0.24, 1e-12);

  // Without CPUTimes a shared node's energy cannot be apportioned: not attributed, said why.
  for (const char* mode : {"user", "system", "idle", "steal"}) host.node_metrics.erase(std::string("CPUTimes.") + mode);
  JobFigures unknown = analyse(JobData{7, {host}});
  EXPECT_FALSE(unknown.rapl_joules.has_value());
  EXPECT_TRUE(contains(unwrapped(render_text(unknown, judge(unknown))),
                       "  Energy   not collected (enable [sensor:CPUTimes] (to apportion a shared node's energy))\n"))
      << render_text(unknown, judge(unknown));
}

TEST(ReportEnergy, ZonesArePsysElseThePackagesElseTheirMmioTwins) {
  HostData host = job_host("n", 1, 8);
  set_jobs(host, 1);
  add_node(host, "RAPL.psys.energy", rising(200));
  add_node(host, "RAPL.package-0.energy", rising(100));
  add_node(host, "RAPL.package-0.dram.energy", rising(10));
  EXPECT_NEAR(*analyse(JobData{7, {host}}).rapl_joules, 200 * 600, 1e-6);
  host.node_metrics.erase("RAPL.psys.energy");
  add_node(host, "RAPL.mmio-package-0.energy", rising(100));
  EXPECT_NEAR(*analyse(JobData{7, {host}}).rapl_joules, 110 * 600, 1e-6);
  host.node_metrics.erase("RAPL.package-0.energy");
  host.node_metrics.erase("RAPL.package-0.dram.energy");
  EXPECT_NEAR(*analyse(JobData{7, {host}}).rapl_joules, 100 * 600, 1e-6);
}

TEST(ReportNetwork, PerNicCountersLeaveLoopbackOut) {
  HostData host = job_host("n", 1, 8);
  set_jobs(host, 1);
  add_node(host, "NetIOCounters.eth0.bytes_sent", rising(1e6));
  add_node(host, "NetIOCounters.ib0.bytes_sent", rising(2e6));
  add_node(host, "NetIOCounters.lo.bytes_sent", rising(5e6));
  JobFigures figures = analyse(JobData{7, {host}});
  EXPECT_NEAR(*figures.net_sent, 3e6 * 600, 1e-3);
  EXPECT_FALSE(figures.net_received.has_value());
  // Whether the node ran other jobs unknown (no JobCgroup or JobProc node samples): not attributed.
  host.node_metrics.erase("JobCgroup.jobs");
  JobFigures unknown = analyse(JobData{7, {host}});
  EXPECT_EQ(unknown.nodes[0].use, NodeUse::unknown);
  EXPECT_FALSE(unknown.net_sent.has_value());
  EXPECT_TRUE(unknown.network_shared);
}

TEST(ReportEnergy, SeveralNodesAddUpAndEachSaysHowItsShareCame) {
  HostData alone = energy_node("a", 2.5), shared = energy_node("b", 5);
  set_jobs(alone, 1);
  set_jobs(shared, 4);
  JobFigures figures = analyse(JobData{7, {alone, shared}});
  EXPECT_NEAR(*figures.ipmi_joules, 180000 + 180000 * 0.5, 1e-6);
  EXPECT_TRUE(figures.energy_apportioned);
  EXPECT_TRUE(figures.network_shared);  // b's traffic is not the job's alone
  EXPECT_FALSE(figures.net_sent.has_value());
  std::string text = render_text(figures, judge(figures));
  expect_80_columns(text);
  EXPECT_TRUE(contains(text, "    energy  35 Wh by RAPL, 50 Wh by IPMI (whole node)\n")) << text;
  EXPECT_TRUE(contains(text, "    energy  18 Wh by RAPL, 25 Wh by IPMI (50% of the node's CPU time: node\n"
                             "            shared)\n"))
      << text;
  EXPECT_TRUE(contains(text, "    network NICs sent 572 MiB")) << text;
  EXPECT_TRUE(contains(text, "    network not attributed: node shared\n")) << text;
  std::string html = render_html({{figures, judge(figures)}});
  EXPECT_TRUE(contains(html, "<td>18 Wh by RAPL, 25 Wh by IPMI (50% of the node&#39;s CPU time: node shared)</td>"))
      << html;
}

TEST(ReportEnergy, NoNodeSamplesMeansNotCollectedNeverZero) {
  JobFigures figures = analyse(JobData{7, {job_host("n", 4, 4)}});
  std::string text = render_text(figures, judge(figures));
  EXPECT_TRUE(contains(text, "  Energy   not collected (enable [sensor:RAPL] or [sensor:IPMIPower])\n")) << text;
  EXPECT_TRUE(contains(text, "  Network  not collected (enable [sensor:NetIOCounters] or [sensor:InfiniBand])\n"))
      << text;
  auto document = nlohmann::json::parse(render_json(figures, judge(figures)));
  EXPECT_TRUE(document["figures"]["energy_rapl_j"].is_null());
  EXPECT_TRUE(document["figures"]["energy_attribution"].is_null());
  EXPECT_TRUE(document["nodes"][0]["use"].is_null());
}

}  // namespace
