// Job discovery (sensors/jobs.*) and JobCgroup on the synthesized cgroup trees of
// tests/fixtures/cgroups (README there), including jobs appearing and vanishing while the
// directory is in use, noticed through inotify alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <unistd.h>

#include "agent_config.h"
#include "cgroup_trees.h"
#include "job_layouts.h"
#include "jobs.h"
#include "sensor.h"
#include "test_support.h"

using namespace fructosa;
using namespace fructosa::sensors;
namespace fs = std::filesystem;

namespace {

using fructosa::test::kTrees;
using fructosa::test::tree;

JobSettings settings(std::vector<std::string> pairs) {
  return job_settings(parse_pairs(job_options(), pairs, "test"));
}

std::vector<std::uint64_t> ids(const JobSnapshot& snapshot) {
  std::vector<std::uint64_t> found;
  for (const auto& job : snapshot.jobs) found.push_back(job.id);
  return found;
}

using Values = std::map<std::uint64_t, std::map<std::string, double>>;

Values sample_job_cgroup(JobDirectory& jobs, const Roots& roots) {
  Options options;
  auto sensor = find_sensor("JobCgroup")->make(SensorContext{roots, options, &jobs});
  std::vector<Sample> samples;
  SampleWriter writer(samples, "node1", "JobCgroup", 1);
  EXPECT_TRUE(sensor->sample(writer));
  Values values;
  for (const auto& sample : samples)
    for (const auto& metric : sample.metrics) values[sample.job][metric.key] = metric.value;
  return values;
}

TEST(JobDiscovery, SlurmOnCgroupV1FindsEveryControllerOfEachJob) {
  JobDirectory jobs(settings({"scheduler=slurm"}), tree("slurm-v1"));
  auto snapshot = jobs.snapshot();
  ASSERT_EQ(ids(*snapshot), (std::vector<std::uint64_t>{1234, 5678}));
  EXPECT_EQ(snapshot->involved_jobs, "1234,5678");
  const JobCgroup& job = snapshot->jobs[0];
  EXPECT_EQ(job.name, "job_1234");
  EXPECT_TRUE(job.unified.empty());
  std::string base = kTrees + "/slurm-v1/sys/fs/cgroup/";
  EXPECT_EQ(job.dir("cpuacct"), base + "cpu,cpuacct/slurm/uid_1000/job_1234");
  EXPECT_EQ(job.dir("cpu"), base + "cpu,cpuacct/slurm/uid_1000/job_1234");
  EXPECT_EQ(job.dir("memory"), base + "memory/slurm/uid_1000/job_1234");
  EXPECT_EQ(job.dir("perf_event"), "");  // not mounted in this tree
  EXPECT_EQ(JobDirectory::pids(job), (std::vector<int>{4242, 4243}));
}

TEST(JobDiscovery, SlurmOnCgroupV2) {
  JobDirectory jobs(settings({"scheduler=slurm"}), tree("slurm-v2"));
  auto snapshot = jobs.snapshot();
  ASSERT_EQ(ids(*snapshot), (std::vector<std::uint64_t>{1234, 98765}));
  EXPECT_EQ(snapshot->jobs[0].unified, kTrees + "/slurm-v2/sys/fs/cgroup/system.slice/slurmstepd.scope/job_1234");
  EXPECT_EQ(snapshot->jobs[0].dir("memory"), snapshot->jobs[0].unified);
  EXPECT_EQ(JobDirectory::pids(snapshot->jobs[0]), (std::vector<int>{4242, 4243}));
}

TEST(JobDiscovery, MapsProcessesToJobsThroughProcPidCgroup) {
  for (const char* name : {"slurm-v1", "slurm-v2"}) {
    SCOPED_TRACE(name);
    JobDirectory jobs(settings({"scheduler=slurm"}), tree(name));
    EXPECT_EQ(jobs.job_of_pid(4242), 1234u);
    EXPECT_EQ(jobs.job_of_pid(4243), 1234u);
    EXPECT_EQ(jobs.job_of_pid(1), 0u);
    EXPECT_EQ(jobs.job_of_pid(424242), 0u);  // no such process
  }
  JobDirectory v2(settings({"scheduler=slurm"}), tree("slurm-v2"));
  EXPECT_EQ(v2.job_of_pid(6000), 98765u);
  EXPECT_EQ(v2.job_of_pid(700), 0u);  // sshd
}

TEST(JobDiscovery, MultipleSlurmdOnOneHost) {
  JobDirectory every(settings({"scheduler=slurm"}), tree("multi-slurmd"));
  EXPECT_EQ(ids(*every.snapshot()), (std::vector<std::uint64_t>{11, 22}));
  JobDirectory one(settings({"scheduler=slurm", "slurm_node_name=node2"}), tree("multi-slurmd"));
  EXPECT_EQ(ids(*one.snapshot()), (std::vector<std::uint64_t>{22}));
}

TEST(JobDiscovery, OarFromItsCpusetLinksAndSiblingControllers) {
  std::string links = kTrees + "/oar/dev/oar_cgroups_links";
  JobDirectory jobs(settings({"scheduler=oar", "cgroup_root=" + links + "/cpuset/"}), Roots{});
  auto snapshot = jobs.snapshot();
  ASSERT_EQ(ids(*snapshot), (std::vector<std::uint64_t>{777, 778}));
  EXPECT_EQ(snapshot->jobs[1].name, "bob_smith_778");
  EXPECT_EQ(snapshot->jobs[0].dir("cpuacct"), links + "/cpuacct/oar/alice_777");
  EXPECT_EQ(snapshot->jobs[0].dir("memory"), links + "/memory/oar/alice_777");
  EXPECT_EQ(snapshot->jobs[0].dir("freezer"), links + "/freezer/oar/alice_777");
  EXPECT_EQ(snapshot->jobs[0].v1.size(), 6u);  // cpuset cpu cpuacct devices freezer (+ memory)
  EXPECT_EQ(JobDirectory::pids(snapshot->jobs[1]), (std::vector<int>{7780, 7781}));
}

TEST(JobDiscovery, Oar3SystemdSlicesOnCgroupV2) {
  std::string root = kTrees + "/oar3-v2/sys/fs/cgroup";
  JobDirectory jobs(settings({"scheduler=oar", "cgroup_root=" + root}), tree("oar3-v2"));
  auto snapshot = jobs.snapshot();
  ASSERT_EQ(ids(*snapshot), (std::vector<std::uint64_t>{779, 780}));
  EXPECT_EQ(snapshot->jobs[0].name, "oar-u1000-j779.slice");
  EXPECT_EQ(snapshot->jobs[0].unified, root + "/oar.slice/oar-u1000.slice/oar-u1000-j779.slice");
  // Its processes are in the scopes (and a sub-task slice) below the job's slice.
  EXPECT_EQ(JobDirectory::pids(snapshot->jobs[0]), (std::vector<int>{7790, 7791, 7792}));
  EXPECT_EQ(jobs.job_of_pid(7792), 779u);
  EXPECT_EQ(jobs.job_of_pid(7800), 780u);
  EXPECT_EQ(jobs.job_of_pid(700), 0u);  // sshd
  JobDirectory automatic(settings({}), tree("oar3-v2"));
  EXPECT_EQ(ids(*automatic.snapshot()), (std::vector<std::uint64_t>{779, 780}));
}

// On a node, OAR's /dev/oar_cgroups_links/<controller> are links to /sys/fs/cgroup/<controller>,
// and cpu and cpuacct lead to cpu,cpuacct: the job's directories are where the links lead.
TEST(JobDiscovery, OarLinksLeadingToTheSystemHierarchies) {
  test::TempDir dir;
  const std::string cgroup = dir.file("sys/fs/cgroup");
  for (const char* hierarchy : {"cpu,cpuacct", "cpuset"}) {
    fs::create_directories(cgroup + "/" + hierarchy + "/oar/alice_7");
    for (const char* at : {"", "/oar", "/oar/alice_7"}) std::ofstream(cgroup + "/" + hierarchy + at + "/cgroup.procs");
  }
  std::ofstream(cgroup + "/cpu,cpuacct/oar/alice_7/cgroup.procs") << "77\n";
  std::ofstream(cgroup + "/cpu,cpuacct/oar/alice_7/cpuacct.usage") << "2500000000\n";
  fs::create_directory_symlink("cpu,cpuacct", cgroup + "/cpu");
  fs::create_directory_symlink("cpu,cpuacct", cgroup + "/cpuacct");
  const std::string links = dir.file("dev/oar_cgroups_links");
  fs::create_directories(links);
  for (const char* controller : {"cpu", "cpuacct", "cpuset"})
    fs::create_directory_symlink(cgroup + "/" + controller, links + "/" + controller);

  JobDirectory jobs(settings({"scheduler=oar", "cgroup_root=" + links + "/cpuset"}), Roots{});
  auto snapshot = jobs.snapshot();
  ASSERT_EQ(ids(*snapshot), (std::vector<std::uint64_t>{7}));
  EXPECT_EQ(snapshot->jobs[0].scheduler, "oar");
  EXPECT_EQ(snapshot->jobs[0].v1.size(), 2u) << "cpu and cpuacct are one hierarchy";
  EXPECT_TRUE(fs::exists(snapshot->jobs[0].dir("cpuacct") + "/cpuacct.usage")) << snapshot->jobs[0].dir("cpuacct");
  EXPECT_DOUBLE_EQ(sample_job_cgroup(jobs, Roots{})[7]["cpu.usage"], 2.5) << "the cgroup's figure, not the processes'";
}

TEST(JobDiscovery, PbsProAndTorque) {
  JobDirectory pbs(settings({"scheduler=pbs"}), tree("pbs-v2"));
  EXPECT_EQ(ids(*pbs.snapshot()), (std::vector<std::uint64_t>{123, 124}));
  // OpenPBS's hook on cgroup v1: <hierarchy>/pbs_jobs.service/jobid/<id> in the name=systemd,
  // cpu,cpuacct, cpuset and memory hierarchies.
  JobDirectory pbs_v1(settings({"scheduler=pbs"}), tree("pbs-v1"));
  auto v1 = pbs_v1.snapshot();
  ASSERT_EQ(ids(*v1), (std::vector<std::uint64_t>{123, 124}));
  EXPECT_EQ(v1->jobs[1].name, "124[3].pbsserver");
  std::string base = kTrees + "/pbs-v1/sys/fs/cgroup/";
  EXPECT_EQ(v1->jobs[0].dir("cpuacct"), base + "cpu,cpuacct/pbs_jobs.service/jobid/123.pbsserver");
  EXPECT_EQ(v1->jobs[0].dir("memory"), base + "memory/pbs_jobs.service/jobid/123.pbsserver");
  EXPECT_EQ(v1->jobs[0].dir("systemd"), base + "systemd/pbs_jobs.service/jobid/123.pbsserver");
  EXPECT_EQ(v1->jobs[0].dir("blkio"), "");  // not among the hook's controllers
  EXPECT_EQ(pbs_v1.job_of_pid(3010), 124u);
  EXPECT_EQ(pbs_v1.job_of_pid(2999), 0u);  // pbs_jobs.service's own process
  JobDirectory torque(settings({"scheduler=pbs"}), tree("torque-v1"));
  auto snapshot = torque.snapshot();
  ASSERT_EQ(ids(*snapshot), (std::vector<std::uint64_t>{456, 457}));
  EXPECT_EQ(snapshot->jobs[0].name, "456.headnode");
  EXPECT_EQ(snapshot->jobs[0].dir("devices"), kTrees + "/torque-v1/sys/fs/cgroup/devices/torque/456.headnode");
  // qsub -L: the processes are in the per-task cgroups R<req>.t<task>.
  EXPECT_EQ(JobDirectory::pids(snapshot->jobs[0]), (std::vector<int>{3100, 3101}));
  EXPECT_EQ(torque.job_of_pid(3101), 456u);
  for (const char* name : {"pbs-v1", "pbs-v2", "torque-v1"}) {
    SCOPED_TRACE(name);
    JobDirectory automatic(settings({}), tree(name));
    JobDirectory specific(settings({"scheduler=pbs"}), tree(name));
    EXPECT_EQ(ids(*automatic.snapshot()), ids(*specific.snapshot()));
  }
}

TEST(JobDiscovery, AutoFindsEverySchedulersLayout) {
  for (const char* name : {"slurm-v1", "slurm-v2", "multi-slurmd", "pbs-v2", "torque-v1"}) {
    SCOPED_TRACE(name);
    JobDirectory automatic(settings({}), tree(name));
    JobDirectory specific(settings({std::string("scheduler=") + (name[0] == 's' || name[0] == 'm' ? "slurm" : "pbs")}),
                          tree(name));
    EXPECT_EQ(ids(*automatic.snapshot()), ids(*specific.snapshot()));
    EXPECT_FALSE(automatic.snapshot()->jobs.empty());
  }
  // A scheduler's layout is not another's.
  JobDirectory oar(settings({"scheduler=oar", "cgroup_root=" + kTrees + "/slurm-v2/sys/fs/cgroup"}), Roots{});
  EXPECT_TRUE(oar.snapshot()->jobs.empty());
}

TEST(JobDiscovery, RegexSchedulerHonoursItsPattern) {
  JobDirectory jobs(settings({"scheduler=regex", R"(regex=mybatch\.slice/run-(\d+)\.scope$)"}), tree("regex"));
  EXPECT_EQ(ids(*jobs.snapshot()), (std::vector<std::uint64_t>{31, 32}));
  // The same tree under the built-in schedulers has no job.
  JobDirectory automatic(settings({}), tree("regex"));
  EXPECT_TRUE(automatic.snapshot()->jobs.empty());
}

TEST(JobDiscovery, RejectsUnusableRegexSettings) {
  EXPECT_THROW(settings({"scheduler=regex"}), ConfigError);
  EXPECT_THROW(settings({"scheduler=regex", "regex=job_\\d+"}), ConfigError);        // no group
  EXPECT_THROW(settings({"scheduler=regex", "regex=(a)(\\d+)"}), ConfigError);       // two
  EXPECT_THROW(settings({"scheduler=regex", "regex=job_((\\d+)"}), ConfigError);     // invalid
  EXPECT_THROW(settings({"scheduler=slurm", "regex=job_(\\d+)"}), ConfigError);      // ignored
  EXPECT_THROW(settings({"scheduler=lsf"}), ConfigError);
}

// The message of the ConfigError that [jobs] `pairs` give ("" when they are accepted).
std::string config_error(std::vector<std::string> pairs) {
  try {
    settings(std::move(pairs));
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(JobDiscovery, RegexRefusalsNameTheKeyThePatternAndWhy) {
  auto expect_refused = [](const std::string& regex, const std::string& why) {
    SCOPED_TRACE(regex);
    std::string message = config_error({"scheduler=regex", "regex=" + regex});
    EXPECT_NE(message.find("key 'regex'"), std::string::npos) << message;
    EXPECT_NE(message.find("'" + regex + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(why), std::string::npos) << message;
  };
  expect_refused(R"(job_\d+)", "has 0 capture groups; it needs exactly one");
  expect_refused(R"((a)(\d+))", "has 2 capture groups; it needs exactly one");
  expect_refused(R"(job_((\d+))", "missing )");
  expect_refused(R"(job_(\d+)\1)", "invalid escape sequence: \\1");  // no backreferences
  expect_refused(R"(job_(\d+)(?=/))", "invalid perl operator: (?=");  // no lookarounds
}

// Found by fuzz/ini_fuzz (seed regex-repeat-64370949.conf): std::regex compiled x{64370949}
// into that many states, over 10 s and 900 MB, hanging lagent at start or reload. RE2 refuses
// a repetition over 1000 before compiling anything, and a program over its memory bound.
TEST(JobDiscovery, RegexRepetitionsOverAThousandAreRefused) {
  for (const std::string count : {"{64370949}", "{1001}", "{2,1001}"}) {
    SCOPED_TRACE(count);
    std::string message = config_error({"scheduler=regex", R"(regex=job_(\d+)x)" + count});
    EXPECT_NE(message.find("key 'regex'"), std::string::npos) << message;
    EXPECT_NE(message.find("invalid repetition size: " + count), std::string::npos) << message;
  }
  // Nested repetitions count as their product.
  EXPECT_NE(config_error({"scheduler=regex", R"(regex=(?:x{100}){100}job_(\d+))"}).find("invalid repetition size"),
            std::string::npos);
  // Each count allowed, the whole too big to compile within the bound.
  std::string huge = R"(job_(\d+))";
  for (int i = 0; i < 64; ++i) huge += R"(\w{1000})";
  std::string message = config_error({"scheduler=regex", "regex=" + huge});
  EXPECT_NE(message.find("key 'regex'"), std::string::npos) << message.substr(0, 200);
  EXPECT_NE(message.find("pattern too large"), std::string::npos) << message.substr(0, 200);
  EXPECT_EQ(config_error({"scheduler=regex", R"(regex=job_(\d+)x{1000})"}), "");
}

TEST(JobDiscovery, RegexIsSearchedAnywhereInThePath) {
  // Unanchored, as before: any part of mybatch.slice/run-31.scope; run-x.scope has no number.
  for (const char* regex : {R"(run-(\d+))", R"(^mybatch\.slice/run-(\d+)\.scope$)", R"(/run-(?P<id>[0-9]+)\.)"}) {
    SCOPED_TRACE(regex);
    JobDirectory jobs(settings({"scheduler=regex", std::string("regex=") + regex}), tree("regex"));
    EXPECT_EQ(ids(*jobs.snapshot()), (std::vector<std::uint64_t>{31, 32}));
  }
  // Too shallow a search misses them.
  JobDirectory shallow(settings({"scheduler=regex", R"(regex=run-(\d+))", "regex_max_depth=1"}), tree("regex"));
  EXPECT_TRUE(shallow.snapshot()->jobs.empty());
}

// std::regex matched recursively: (?:a|aa)* on a long path overflowed the stack. RE2 matches
// in time linear in the text, on the heap.
TEST(JobRegex, LongPathsAndNamesMatchInLinearTime) {
  auto regex = compile_job_regex(R"((?:a|aa)*/job_(\d+)$)");
  const std::string long_name(100'000, 'a');
  std::uint64_t id = 0;
  EXPECT_TRUE(search_job_path(*regex, long_name + "/job_7", id));
  EXPECT_EQ(id, 7u);
  EXPECT_FALSE(search_job_path(*regex, long_name + "/job_x", id));
  EXPECT_FALSE(search_job_path(*regex, long_name, id));
  auto oar = compile_builtin_job_regex(R"(.+_(\d+))");
  EXPECT_TRUE(match_job_name(*oar, long_name + "_42", id));
  EXPECT_EQ(id, 42u);
  // Byte by byte: a name that is not UTF-8 still matches `.`.
  EXPECT_TRUE(match_job_name(*oar, "al\xff\x80ice_43", id));
  EXPECT_EQ(id, 43u);
  // Whole names for the built-in layouts; a group that took no part, or 0, is no job.
  EXPECT_FALSE(match_job_name(*oar, "alice_42/x", id));
  EXPECT_FALSE(match_job_name(*compile_builtin_job_regex(R"(job_(\d+)?)"), "job_", id));
  EXPECT_FALSE(match_job_name(*oar, "alice_0", id));
}

TEST(JobDiscovery, ConfigErrorsNameTheFileLineAndKey) {
  test::TempDir dir;
  std::string path = dir.file("lagent.conf");
  std::ofstream(path) << "[lmaster]\nhost = 127.0.0.1\n\n[jobs]\nscheduler = regex\nregex = job_[0-9]+\n";
  try {
    agent::load_agent_config(path);
    FAIL() << "accepted a regex without a capture group";
  } catch (const ConfigError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(":6"), std::string::npos) << message;
    EXPECT_NE(message.find("regex"), std::string::npos) << message;
  }
  // The fuzzer's input, as lagent reads it.
  std::ofstream(path) << "[lmaster]\nhost = 127.0.0.1\n\n[jobs]\nscheduler = regex\nregex = job_(\\d+)x{64370949}\n";
  try {
    agent::load_agent_config(path);
    FAIL() << "accepted a repetition of 64370949";
  } catch (const ConfigError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find(path + ":6"), std::string::npos) << message;
    EXPECT_NE(message.find("key 'regex'"), std::string::npos) << message;
    EXPECT_NE(message.find("invalid repetition size: {64370949}"), std::string::npos) << message;
  }
}

// Jobs start and end while the agent runs; with rescans effectively off, only inotify can
// tell the directory.
TEST(JobDiscovery, NoticesJobsAppearingAndVanishingThroughInotify) {
  test::TempDir dir;
  std::string root = dir.file("sys/fs/cgroup");
  fs::create_directories(root);
  std::ofstream(root + "/cgroup.controllers") << "cpu memory\n";
  std::ofstream(root + "/cgroup.procs") << "1\n";
  JobDirectory jobs(settings({"scheduler=slurm", "rescan_interval=100000"}), Roots{dir.file("proc"), dir.file("sys")});
  EXPECT_TRUE(jobs.snapshot()->jobs.empty());

  // slurmd starts: its scope appears, then a job, then a second one in it.
  std::string scope = root + "/system.slice/slurmstepd.scope";
  fs::create_directories(scope);
  EXPECT_TRUE(jobs.snapshot()->jobs.empty());
  fs::create_directories(scope + "/job_7/step_0");
  EXPECT_EQ(ids(*jobs.snapshot()), (std::vector<std::uint64_t>{7}));
  fs::create_directory(scope + "/job_8");
  EXPECT_EQ(jobs.snapshot()->involved_jobs, "7,8");
  auto before = jobs.snapshot();
  EXPECT_EQ(jobs.snapshot(), before) << "rescanned although nothing changed";

  fs::remove_all(scope + "/job_7");
  EXPECT_EQ(ids(*jobs.snapshot()), (std::vector<std::uint64_t>{8}));
  fs::remove_all(root + "/system.slice");
  EXPECT_TRUE(jobs.snapshot()->jobs.empty());
  fs::create_directories(scope + "/job_9");
  EXPECT_EQ(ids(*jobs.snapshot()), (std::vector<std::uint64_t>{9}));
}

TEST(JobCgroupSensor, ReadsCgroupV2Accounting) {
  JobDirectory jobs(settings({"scheduler=slurm"}), tree("slurm-v2"));
  auto values = sample_job_cgroup(jobs, tree("slurm-v2"));
  EXPECT_EQ(values[0]["jobs"], 2);
  auto& job = values[1234];
  EXPECT_DOUBLE_EQ(job["cpu.usage"], 12.5);
  EXPECT_DOUBLE_EQ(job["cpu.user"], 10);
  EXPECT_DOUBLE_EQ(job["cpu.system"], 2.5);
  EXPECT_EQ(job["memory.current"], 536870912);
  EXPECT_EQ(job["memory.peak"], 1073741824);
  EXPECT_EQ(job["io.read_bytes"], 4096000 + 1000);  // both devices
  EXPECT_EQ(job["io.write_bytes"], 8192000);
  EXPECT_EQ(job["io.reads"], 101);
  EXPECT_EQ(job["io.writes"], 200);
  EXPECT_EQ(job["tasks"], 2);
  EXPECT_EQ(job["cpus"], 5) << "cpuset.cpus.effective 0-3,8";
  EXPECT_EQ(job["memory.limit"], 2147483648);
  EXPECT_EQ(values[98765].count("memory.limit"), 0u) << "memory.max 'max': no limit, left out";
  EXPECT_EQ(values[98765].count("memory.peak"), 0u) << "no memory.peak before kernel 5.19: left out, not 0";
  EXPECT_DOUBLE_EQ(values[98765]["cpu.user"], 0.4);
}

TEST(JobCgroupSensor, ReadsCgroupV1Accounting) {
  JobDirectory jobs(settings({"scheduler=slurm"}), tree("slurm-v1"));
  auto values = sample_job_cgroup(jobs, tree("slurm-v1"));
  auto& job = values[1234];
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  EXPECT_DOUBLE_EQ(job["cpu.usage"], 12.5);
  EXPECT_DOUBLE_EQ(job["cpu.user"], 1000 / hz);
  EXPECT_DOUBLE_EQ(job["cpu.system"], 150 / hz);
  EXPECT_EQ(job["memory.current"], 536870912);
  EXPECT_EQ(job["memory.peak"], 1073741824);
  EXPECT_EQ(job["io.read_bytes"], 4096000);  // Read lines only, not Total
  EXPECT_EQ(job["io.write_bytes"], 8192000);
  EXPECT_EQ(job["io.reads"], 100);
  EXPECT_EQ(job["io.writes"], 200);
  EXPECT_EQ(job["tasks"], 2);
  EXPECT_EQ(values[5678]["memory.current"], 104857600);
  EXPECT_EQ(job["gpus"], 2) << "devices.list allows c 195:3 and c 195:1, beside nvidiactl and nvidia-uvm";
  EXPECT_EQ(values[5678].count("gpus"), 0u) << "a *:* rwm: every device, no GPU allocation to report";
}

TEST(JobCgroupSensor, LabelsTheMinorsOfTheGpusItsDevicesCgroupAllows) {
  JobDirectory jobs(settings({"scheduler=slurm"}), tree("slurm-v1"));
  Options options;
  auto sensor = find_sensor("JobCgroup")->make(SensorContext{tree("slurm-v1"), options, &jobs});
  std::vector<Sample> samples;
  SampleWriter writer(samples, "node1", "JobCgroup", 1);
  ASSERT_TRUE(sensor->sample(writer));
  std::map<std::uint64_t, std::string> minors;
  for (const auto& sample : samples)
    for (const auto& label : sample.labels)
      if (label.key == "gpu_minors") minors[sample.job] = label.value;
  EXPECT_EQ(minors, (std::map<std::uint64_t, std::string>{{1234, "1,3"}}));
}

TEST(JobCgroupSensor, DevicesListsParse) {
  EXPECT_EQ(allowed_gpu_minors("a *:* rwm\n"), std::nullopt);
  EXPECT_EQ(allowed_gpu_minors("c 195:255 rwm\nc 195:254 rwm\nc 195:2 rw\nc 195:0 rwm\nb 195:1 rwm\nc 195:2 rwm"),
            (std::vector<unsigned>{0, 2}));
  EXPECT_EQ(allowed_gpu_minors("c 1:3 rwm\nc 136:* rwm\n"), (std::vector<unsigned>{}));
  EXPECT_EQ(allowed_gpu_minors(""), (std::vector<unsigned>{}));
}

TEST(JobCgroupSensor, AJobThatEndedDuringTheRoundIsLeftOut) {
  test::TempDir dir;
  fs::copy(kTrees + "/slurm-v2", dir.path(), fs::copy_options::recursive);
  Roots roots{dir.file("proc"), dir.file("sys")};
  JobDirectory jobs(settings({"scheduler=slurm", "rescan_interval=100000"}), roots);
  auto snapshot = jobs.snapshot();  // knows job 98765 ...
  ASSERT_EQ(snapshot->jobs.size(), 2u);
  auto fixed = JobDirectory::fixed(snapshot->jobs, roots);
  fs::remove_all(dir.file("sys/fs/cgroup/system.slice/slurmstepd.scope/job_98765"));  // ... which ends
  auto values = sample_job_cgroup(*fixed, roots);
  EXPECT_EQ(values.count(98765), 0u);
  EXPECT_EQ(values[1234]["tasks"], 2);
}

TEST(JobCgroupSensor, WithoutJobDiscoveryItIsUnavailable) {
  Options options;
  auto sensor = find_sensor("JobCgroup")->make(SensorContext{Roots{}, options});
  std::vector<Sample> samples;
  SampleWriter writer(samples, "node1", "JobCgroup", 1);
  EXPECT_THROW(sensor->sample(writer), SensorUnavailable);
}

}  // namespace

namespace {

// The real cgroup file system: mkdir/rmdir of cgroups must reach inotify there too (kernfs),
// or jobs would only be found by the periodic rescan.
TEST(JobDiscovery, NoticesRealCgroupsThroughInotify) {
  std::string hierarchy;
  for (const char* candidate : {"/sys/fs/cgroup/cgroup.controllers", "/sys/fs/cgroup/unified/cgroup.controllers",
                                "/sys/fs/cgroup/cpuacct/cgroup.procs", "/sys/fs/cgroup/memory/cgroup.procs"})
    if (fs::exists(candidate)) {
      hierarchy = fs::path(candidate).parent_path().string();
      break;
    }
  if (hierarchy.empty()) GTEST_SKIP() << "no cgroup hierarchy mounted under /sys/fs/cgroup";
  std::string top = fmt::format("fructosa-test-{}-{}", ::getpid(), ::testing::UnitTest::GetInstance()->random_seed());
  std::error_code error;
  if (!fs::create_directory(hierarchy + "/" + top, error))
    GTEST_SKIP() << "cannot create a cgroup under " << hierarchy << ": " << error.message();
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove(dir + "/job_5", ignored);  // cgroups are removed with rmdir, one by one
      fs::remove(dir, ignored);
    }
  } cleanup{hierarchy + "/" + top};
  JobDirectory jobs(settings({"scheduler=regex", "regex=^" + top + R"(/job_(\d+)$)", "rescan_interval=100000",
                              "cgroup_root=" + hierarchy}),
                    Roots{});
  EXPECT_TRUE(jobs.snapshot()->jobs.empty());
  ASSERT_TRUE(fs::create_directory(cleanup.dir + "/job_5"));
  EXPECT_EQ(ids(*jobs.snapshot()), (std::vector<std::uint64_t>{5}));
  ASSERT_TRUE(fs::remove(cleanup.dir + "/job_5"));
  EXPECT_TRUE(jobs.snapshot()->jobs.empty());
}

// processes(): the sensors reading at one instant share a listing; each job's cgroup tree is
// remembered and listed again when a child cgroup comes or goes, also when one goes as another
// comes between two readings (the same link count).
TEST(JobDirectory, ProcessesFollowChildCgroupsThatComeAndGo) {
  test::TempDir dir;
  const std::string job = dir.path() + "/job_7";
  auto make_cgroup = [](const std::string& path, const std::string& procs) {
    fs::create_directories(path);
    std::ofstream(path + "/cgroup.procs") << procs;
    std::ofstream(path + "/cpu.stat") << "usage_usec 1\n";  // a control file, not a cgroup
  };
  make_cgroup(job, "");
  make_cgroup(job + "/step_0", "10\n11\n");
  auto jobs = JobDirectory::fixed({JobCgroup{.id = 7, .name = "job_7", .unified = job, .v1 = {}}}, Roots{});
  const JobCgroup cgroup = jobs->snapshot()->jobs.at(0);

  EXPECT_EQ(jobs->processes(cgroup, 1), (std::vector<int>{10, 11}));
  // Another sensor at the same instant gets the same listing.
  std::ofstream(job + "/step_0/cgroup.procs") << "10\n";
  EXPECT_EQ(jobs->processes(cgroup, 1), (std::vector<int>{10, 11}));
  EXPECT_EQ(jobs->processes(cgroup, 2), (std::vector<int>{10}));

  make_cgroup(job + "/step_1", "20\n");  // a new child: the link count changes
  EXPECT_EQ(jobs->processes(cgroup, 3), (std::vector<int>{10, 20}));

  fs::remove_all(job + "/step_0");  // one goes as another comes: the same count
  make_cgroup(job + "/step_2", "30\n31\n");
  EXPECT_EQ(jobs->processes(cgroup, 4), (std::vector<int>{20, 30, 31}));
  make_cgroup(job + "/step_2/task_0", "32\n");  // a grandchild
  EXPECT_EQ(jobs->processes(cgroup, 5), (std::vector<int>{20, 30, 31, 32}));
  EXPECT_EQ(JobDirectory::pids(cgroup), (std::vector<int>{20, 30, 31, 32}));

  fs::remove_all(job);  // the job ended
  EXPECT_EQ(jobs->processes(cgroup, 6), (std::vector<int>{}));
}

// The first sensor to ask at an instant lists every job, so that the sensors reading at that
// instant do not wait for one another job after job: a later question about another job at the
// same instant gets what was listed then; one at the next instant lists anew.
TEST(JobDirectory, TheFirstQuestionOfAnInstantListsEveryJob) {
  test::TempDir dir;
  auto make_job = [&](int id, const std::string& procs) {
    std::string path = dir.path() + "/job_" + std::to_string(id);
    fs::create_directories(path);
    std::ofstream(path + "/cgroup.procs") << procs;
    return JobCgroup{.id = static_cast<std::uint64_t>(id), .name = "job_" + std::to_string(id), .unified = path, .v1 = {}};
  };
  auto jobs = JobDirectory::fixed({make_job(1, "10\n"), make_job(2, "20\n")}, Roots{});
  const auto snapshot = jobs->snapshot();
  const JobCgroup& first = snapshot->jobs.at(0);
  const JobCgroup& second = snapshot->jobs.at(1);

  EXPECT_EQ(jobs->processes(first, 1), (std::vector<int>{10}));
  std::ofstream(second.unified + "/cgroup.procs") << "20\n21\n";
  EXPECT_EQ(jobs->processes(second, 1), (std::vector<int>{20}));  // listed with the first job
  EXPECT_EQ(jobs->processes(second, 2), (std::vector<int>{20, 21}));
}

}  // namespace
