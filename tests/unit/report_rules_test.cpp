// fructosa-report's rules (report/rules.cpp): each fires past its threshold and not at it, in
// the documented order; the thresholds come from a [report] section, whose errors name the place.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "analysis.h"
#include "report_test_support.h"
#include "master_config.h"
#include "rules.h"
#include "test_support.h"

using namespace fructosa;
using namespace fructosa::report;

namespace {

using fructosa::report::test::kGiB;

// A job that no rule has anything to say about: 600 s on 4 of 4 CPUs, 1 GiB of a 2 GiB limit.
JobFigures healthy() {
  JobFigures figures;
  figures.elapsed_s = 600;
  figures.cores_used = 4;
  figures.cpus = 4;
  figures.cpu_efficiency = 1;
  figures.memory_peak = kGiB;
  figures.memory_limit = 2 * kGiB;
  return figures;
}

GpuFigures gpu(const std::string& key, std::optional<double> utilization, bool used = true) {
  GpuFigures out;
  out.gpu = key;
  out.used = used;
  out.utilization = utilization;
  return out;
}

// `figures` with a node whose GPUs are `gpus` (used ones counted).
JobFigures with_gpus(JobFigures figures, std::vector<GpuFigures> gpus, double allocated) {
  NodeFigures node;
  node.host = "g";
  double used = 0;
  for (const auto& one : gpus) used += one.used;
  node.gpus = std::move(gpus);
  figures.gpus_allocated = allocated;
  figures.gpus_used = used;
  figures.gpus_without_process = std::max(0.0, allocated - used);
  figures.nodes.push_back(std::move(node));
  return figures;
}

std::vector<std::string> rules_of(const Verdict& verdict) {
  std::vector<std::string> out;
  for (const auto& note : verdict.notes) out.push_back(note.rule);
  return out;
}

bool fires(const JobFigures& figures, const std::string& rule, const Rules& rules = {}) {
  auto fired = rules_of(judge(figures, rules));
  return std::find(fired.begin(), fired.end(), rule) != fired.end();
}

TEST(ReportRules, AHealthyJobIsHealthy) {
  Verdict verdict = judge(healthy());
  EXPECT_EQ(verdict.word, "healthy");
  EXPECT_TRUE(verdict.notes.empty());
}

TEST(ReportRules, CpuAndMemoryRulesFirePastTheirThresholdsOnly) {
  JobFigures f = healthy();
  f.cores_used = 2, f.cpu_efficiency = 0.5;
  EXPECT_FALSE(fires(f, "cpu_underused"));
  f.cores_used = 1.96, f.cpu_efficiency = 0.49;
  EXPECT_TRUE(fires(f, "cpu_underused"));
  f.cores_used = 0.2, f.cpu_efficiency = 0.05;
  EXPECT_FALSE(fires(f, "idle"));
  f.cores_used = 0.196, f.cpu_efficiency = 0.049;
  EXPECT_EQ(rules_of(judge(f)), std::vector<std::string>{"idle"});  // idle, not underused as well
  f = healthy();
  f.memory_peak = 0.9 * *f.memory_limit;
  EXPECT_FALSE(fires(f, "memory_near_limit"));
  f.memory_peak = 0.91 * *f.memory_limit;
  EXPECT_TRUE(fires(f, "memory_near_limit"));
  f.memory_peak = 0.25 * *f.memory_limit;
  EXPECT_FALSE(fires(f, "memory_over_requested"));
  f.memory_peak = 0.24 * *f.memory_limit;
  EXPECT_TRUE(fires(f, "memory_over_requested"));
  f = healthy();
  f.efficiency_min = 0.5, f.efficiency_max = 1;
  EXPECT_FALSE(fires(f, "imbalanced"));
  f.efficiency_min = 0.49;
  EXPECT_TRUE(fires(f, "imbalanced"));
  f = healthy();
  SlurmRequest request;
  request.state = "COMPLETED";
  request.time_limit_s = 2 * f.elapsed_s;
  f.request = request;
  EXPECT_FALSE(fires(f, "time_over_requested"));
  f.request->time_limit_s = 2 * f.elapsed_s + 1;
  EXPECT_TRUE(fires(f, "time_over_requested"));
  f.request->state = "TIMEOUT";  // it did not end early: its limit is not the question
  EXPECT_FALSE(fires(f, "time_over_requested"));
}

TEST(ReportRules, IoBoundIsTheBlockIoDelayShare) {
  JobFigures f = healthy();
  f.delays.active_s = 1000;
  f.delays.blkio_s = 250;
  EXPECT_FALSE(fires(f, "io_bound"));
  f.delays.blkio_s = 260;
  Verdict verdict = judge(f);
  EXPECT_EQ(verdict.word, "io_bound");
  EXPECT_EQ(verdict.notes[0].text,
            "its tasks waited for block I/O 26% of the time they ran or waited (0:04:20 in all): read and write "
            "in larger blocks and fewer files, or on node-local storage");
  Rules lenient;
  lenient.io_bound = 0.3;
  EXPECT_FALSE(fires(f, "io_bound", lenient));
  // No delay accounting: no blkio figure, no rule.
  f.delays.blkio_s.reset();
  EXPECT_FALSE(fires(f, "io_bound"));
}

TEST(ReportRules, MemoryBoundIsLowIpcWithManyCacheMisses) {
  JobFigures f = healthy();
  f.ipc = 0.7;
  f.cache_miss_ratio = 0.5;
  EXPECT_FALSE(fires(f, "memory_bound"));
  f.ipc = 0.69;
  EXPECT_TRUE(fires(f, "memory_bound"));
  f.cache_miss_ratio = 0.2;  // low IPC, but not from the caches
  EXPECT_FALSE(fires(f, "memory_bound"));
  f.cache_miss_ratio = 0.21;
  EXPECT_EQ(judge(f).notes[0].text,
            "0.69 instructions per cycle, 21% of its cache references missing: its cores mostly wait for memory; "
            "make its data accesses local (blocking, contiguous arrays), or spread its processes over more nodes "
            "for more memory bandwidth");
  f.cache_miss_ratio.reset();  // not counted: IPC alone says it
  EXPECT_EQ(judge(f).notes[0].text.rfind("0.69 instructions per cycle: its cores", 0), 0u);
}

TEST(ReportRules, GpuIdleCountsGpusWithoutAProcessOrBarelyBusy) {
  // 2 allocated, one used at 80%: the other never ran a process of the job.
  JobFigures f = with_gpus(healthy(), {gpu("0", 0.8), gpu("1", 0.0, false)}, 2);
  Verdict verdict = judge(f);
  EXPECT_EQ(verdict.word, "gpu_idle");
  EXPECT_EQ(verdict.notes[0].text, "1 of its 2 GPUs did nothing (1 without a process of the job): ask for 1 GPU");
  // Used, but a kernel ran under gpu_idle of the time.
  f = with_gpus(healthy(), {gpu("0", 0.8), gpu("1", 0.049)}, 2);
  EXPECT_EQ(judge(f).notes[0].text, "1 of its 2 GPUs did nothing (1 busy under 5% of the time): ask for 1 GPU");
  f = with_gpus(healthy(), {gpu("0", 0.8), gpu("1", 0.05)}, 2);
  EXPECT_FALSE(fires(f, "gpu_idle"));
  // All of them: does it use GPUs at all?
  f = with_gpus(healthy(), {}, 4);
  f.gpus_used = 0;
  EXPECT_EQ(judge(f).notes[0].text,
            "its 4 GPUs did nothing (4 without a process of the job): does it use them (a CUDA build, "
            "CUDA_VISIBLE_DEVICES)? If not, ask for none");
  // Without NvidiaGPU's per-job samples nothing is known of their use: no rule.
  f.gpus_used.reset();
  f.gpus_without_process.reset();
  EXPECT_FALSE(fires(f, "gpu_idle"));
}

TEST(ReportRules, GpuUnderusedIsTheBusyGpusMeanUtilization) {
  JobFigures f = with_gpus(healthy(), {gpu("0", 0.5), gpu("1", 0.5)}, 2);
  EXPECT_FALSE(fires(f, "gpu_underused"));
  f = with_gpus(healthy(), {gpu("0", 0.3), gpu("1", 0.4)}, 2);
  Verdict verdict = judge(f);
  EXPECT_EQ(verdict.word, "gpu_underused");
  EXPECT_EQ(verdict.notes[0].text,
            "its 2 busy GPUs ran kernels 35% of the time on average: give them more work at once (larger batches, "
            "more data-loading workers), or ask for 1 GPU");
  f = with_gpus(healthy(), {gpu("0", 0.2)}, 1);
  EXPECT_EQ(judge(f).notes[0].text,
            "its GPU ran kernels 20% of the time: give it more work at once (larger batches, more data-loading "
            "workers)");
  Rules strict;
  strict.gpu_underused = 0.1;
  EXPECT_FALSE(fires(f, "gpu_underused", strict));
}

TEST(ReportRules, AJobFeedingABusyGpuIsNotIdle) {
  JobFigures f = healthy();
  f.cores_used = 0.1, f.cpu_efficiency = 0.025;
  EXPECT_EQ(judge(f).word, "idle");
  f = with_gpus(f, {gpu("0", 0.9)}, 1);
  Verdict verdict = judge(f);
  EXPECT_EQ(verdict.word, "cpu_underused");
  EXPECT_EQ(verdict.notes[0].text, "used 0.1 of 4 allocated cores on average: ask for 1");
  // Its GPU's utilization unknown (--list's summaries): not idle either.
  f.nodes[0].gpus[0].utilization.reset();
  EXPECT_FALSE(fires(f, "idle"));
}

TEST(ReportRules, TheVerdictIsTheFirstInTheDocumentedOrder) {
  JobFigures f = with_gpus(healthy(), {gpu("0", 0.3), gpu("1", 0.2), gpu("2", 0.0, false)}, 3);
  f.cores_used = 1, f.cpu_efficiency = 0.25;
  f.delays.active_s = 100, f.delays.blkio_s = 40;
  f.ipc = 0.3;
  f.efficiency_min = 0.1, f.efficiency_max = 0.9;
  f.memory_peak = 0.1 * kGiB;
  Verdict verdict = judge(f);
  EXPECT_EQ(rules_of(verdict), (std::vector<std::string>{"gpu_idle", "io_bound", "cpu_underused", "gpu_underused",
                                                         "imbalanced", "memory_bound", "memory_over_requested"}));
  EXPECT_EQ(verdict.word, "gpu_idle");
  f.memory_peak = 1.95 * kGiB;
  EXPECT_EQ(judge(f).word, "memory_near_limit");
}

TEST(ReportRules, ShortJobsGetOnlyTheRulesThatCannotWait) {
  JobFigures f = with_gpus(healthy(), {gpu("0", 0.0)}, 1);
  f.elapsed_s = 5;
  f.delays.active_s = 10, f.delays.blkio_s = 9;
  f.ipc = 0.1;
  EXPECT_EQ(judge(f).word, "healthy");
  Rules eager;
  eager.min_elapsed_s = 1;
  EXPECT_EQ(rules_of(judge(f, eager)), (std::vector<std::string>{"gpu_idle", "io_bound", "memory_bound"}));
}

// ---- [report]

Rules parse(const std::string& text, bool required = true) {
  return rules_from(IniFile::parse(text, "rules.conf"), required);
}

std::string rules_error_of(const std::string& text, bool required = true) {
  try {
    parse(text, required);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "no error";
}

TEST(ReportRulesConfig, ASectionSetsTheThresholdsItNames) {
  Rules rules = parse("[report]\nio_bound = 0.4\nGPU_Idle = 0.1\nmin_elapsed_s = 60\n");
  EXPECT_DOUBLE_EQ(rules.io_bound, 0.4);
  EXPECT_DOUBLE_EQ(rules.gpu_idle, 0.1);  // keys match case-insensitively, as lmaster's do
  EXPECT_DOUBLE_EQ(rules.min_elapsed_s, 60);
  EXPECT_DOUBLE_EQ(rules.memory_bound_ipc, Rules{}.memory_bound_ipc);
  // lmaster.conf without [report]: the defaults.
  Rules defaults = parse("[lmaster]\nhost = 127.0.0.1\n", false);
  EXPECT_DOUBLE_EQ(defaults.idle_efficiency, 0.05);
  // Every key is a member of Rules, its default Rules{}'s.
  EXPECT_EQ(report_options().size(), 14u);
  for (const auto& spec : report_options()) EXPECT_NO_THROW(parse("[report]\n" + spec.name + " = " + spec.default_value));
}

TEST(ReportRulesConfig, ErrorsNameTheFileTheLineAndTheKey) {
  EXPECT_EQ(rules_error_of("[report]\nio_bound = 0.3\nidle_efficency = 0.1\n").rfind(
                "rules.conf:3: [report] idle_efficency: unknown key, did you mean 'idle_efficiency'? (known keys: "
                "idle_efficiency, ",
                0),
            0u)
      << rules_error_of("[report]\nio_bound = 0.3\nidle_efficency = 0.1\n");
  EXPECT_EQ(rules_error_of("[report]\n\nio_bound = lots\n"), "rules.conf:3: [report] io_bound: bad value 'lots': expected a number");
  EXPECT_EQ(rules_error_of("[report]\nio_bound = 1.5\n"), "rules.conf:2: [report] io_bound: bad value '1.5': must be between 0 and 1");
  EXPECT_EQ(rules_error_of("[report]\nmemory_headroom = 0.8\n"),
            "rules.conf:2: [report] memory_headroom: bad value '0.8': must be between 1 and 100");
  EXPECT_EQ(rules_error_of("[report]\nidle_efficiency = 0.6\n"),
            "rules.conf:1: [report]: idle_efficiency (0.6) must not be above underused_efficiency (0.5)");
  EXPECT_EQ(rules_error_of("[reprot]\nio_bound = 0.3\n"), "rules.conf: no [report] section (is [reprot] meant?)");
  EXPECT_EQ(rules_error_of("[hdf5]\npath = x.h5\n"), "rules.conf: no [report] section");
  EXPECT_EQ(rules_error_of("[hdf5]\npath = x.h5\n", false), "no error");
  EXPECT_EQ(rules_error_of("[report]\n[report]\n"), "rules.conf:2: duplicate section [report]");
  fructosa::test::TempDir dir;
  try {
    load_rules(dir.file("none.conf"), true);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()).rfind(dir.file("none.conf") + ": cannot read configuration", 0), 0u) << error.what();
  }
}

// lmaster reads the same file: it takes [report] as fructosa-report's and leaves it alone.
TEST(ReportRulesConfig, LmasterAcceptsAReportSection) {
  fructosa::test::TempDir dir;
  std::ofstream(dir.file("lmaster.conf")) << "[lmaster]\nhost = 127.0.0.1\n[report]\nio_bound = 0.4\n";
  auto config = master::load_master_config(dir.file("lmaster.conf"));
  EXPECT_TRUE(config.outputs.empty());
  EXPECT_DOUBLE_EQ(load_rules(dir.file("lmaster.conf"), false).io_bound, 0.4);
}

// The sample lmaster.conf lists every key of [report], commented out with its default.
TEST(ReportRulesConfig, TheSampleLmasterConfListsEveryKeyWithItsDefault) {
  std::ifstream file(FRUCTOSA_SOURCE_DIR "/etc/fructosa/lmaster.conf");
  std::stringstream text;
  text << file.rdbuf();
  const std::string sample = text.str();
  auto section = sample.find("\n#[report]\n");
  ASSERT_NE(section, std::string::npos);
  for (const auto& spec : report_options())
    EXPECT_NE(sample.find("\n#" + spec.name + " = " + spec.default_value + "\n", section), std::string::npos)
        << spec.name << " = " << spec.default_value;
  // Commented out: the file gives the defaults.
  Rules rules = load_rules(FRUCTOSA_SOURCE_DIR "/etc/fructosa/lmaster.conf", false);
  EXPECT_DOUBLE_EQ(rules.memory_bound_cache_miss, Rules{}.memory_bound_cache_miss);
}

}  // namespace
