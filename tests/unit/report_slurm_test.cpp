// What a Slurm job asked for (report/slurm_request.*), from sacct's and scontrol's own output
// formats, and the rule that uses it.
#include <gtest/gtest.h>

#include "analysis.h"
#include "report_test_support.h"
#include "slurm_request.h"

using namespace fructosa::report;

namespace {

using fructosa::report::test::kGiB;

TEST(ReportSlurm, DurationsInSlurmsFormats) {
  EXPECT_EQ(parse_slurm_duration("2-00:00:00"), 2 * 86400.0);
  EXPECT_EQ(parse_slurm_duration("1-02"), 86400.0 + 2 * 3600);
  EXPECT_EQ(parse_slurm_duration("1-02:30"), 86400.0 + 2 * 3600 + 30 * 60);
  EXPECT_EQ(parse_slurm_duration("10:00:00"), 36000.0);
  EXPECT_EQ(parse_slurm_duration("05:30"), 330.0);
  EXPECT_EQ(parse_slurm_duration("90"), 5400.0);
  EXPECT_FALSE(parse_slurm_duration("UNLIMITED"));
  EXPECT_FALSE(parse_slurm_duration("Partition_Limit"));
  EXPECT_FALSE(parse_slurm_duration("soon"));
}

TEST(ReportSlurm, SacctLineOfTheJob) {
  auto request = parse_sacct("41|1:00:00|debug|cpu=1,mem=1G,node=1|RUNNING\n"
                             "42|2-00:00:00|gpu|billing=4,cpu=4,gres/gpu=2,mem=16G,node=1|CANCELLED by 0\n",
                             42);
  ASSERT_TRUE(request);
  EXPECT_EQ(request->source, "sacct");
  EXPECT_EQ(request->time_limit_s, 2 * 86400.0);
  EXPECT_EQ(request->partition, "gpu");
  EXPECT_EQ(request->cpus, 4.0);
  EXPECT_EQ(request->memory_bytes, 16 * kGiB);
  EXPECT_EQ(request->gpus, 2.0);
  EXPECT_EQ(request->state, "CANCELLED");
  EXPECT_TRUE(request->ended_early());
  EXPECT_FALSE(parse_sacct("41|1:00:00|debug|cpu=1|RUNNING\n", 42));
}

// The shape Debian's scontrol 22.05 printed for a job of test_slurm.py's cluster.
TEST(ReportSlurm, ScontrolShowJob) {
  auto request = parse_scontrol(
      "JobId=1 JobName=job.sh UserId=root(0) GroupId=root(0) JobState=COMPLETED Reason=None "
      "RunTime=00:00:01 TimeLimit=00:10:00 TimeMin=N/A Partition=debug NodeList=fx694x1 NumCPUs=1 "
      "TRES=cpu=1,mem=500M,node=1,billing=1 MinMemoryNode=500M\n");
  ASSERT_TRUE(request);
  EXPECT_EQ(request->source, "scontrol");
  EXPECT_EQ(request->time_limit_s, 600.0);
  EXPECT_EQ(request->partition, "debug");
  EXPECT_EQ(request->cpus, 1.0);
  EXPECT_EQ(request->memory_bytes, 500.0 * (1 << 20));
  EXPECT_FALSE(request->gpus);
  EXPECT_EQ(request->state, "COMPLETED");
  EXPECT_FALSE(parse_scontrol("slurm_load_jobs error: Invalid job id specified\n"));
}

TEST(ReportSlurm, AJobThatEndedFarBeforeItsLimitIsToldWhatToAskFor) {
  JobFigures figures;
  figures.elapsed_s = 3 * 3600 + 1200;  // 3:20:00
  figures.request.emplace();
  figures.request->time_limit_s = 48 * 3600.0;
  figures.request->state = "COMPLETED";
  Verdict verdict = judge(figures);
  EXPECT_EQ(verdict.word, "time_over_requested");
  EXPECT_EQ(verdict.notes.at(0).text, "completed in 7% of its 2-00:00:00 time limit: ask for --time=5:00:00");
  figures.request->state = "RUNNING";  // not over yet: nothing to say
  EXPECT_EQ(judge(figures).word, "healthy");
  figures.request->state = "COMPLETED";
  figures.request->time_limit_s.reset();  // no limit
  EXPECT_EQ(judge(figures).word, "healthy");
}

}  // namespace
