// No sensor may report a key that is also the prefix of another of its keys ("x" and "x.y"):
// Elasticsearch nests dotted fields, so one of the two documents would be refused, and
// Graphite would need "x" as both a series and a directory. Every sensor is sampled on the
// fixture trees (and per-job ones on a Slurm cgroup tree), with its scaling option on where it
// has one, and all keys it gives across its samples are checked.
#include <gtest/gtest.h>

#include <deque>
#include <set>

#include "jobs.h"
#include "sensor.h"

using namespace fructosa;
using namespace fructosa::sensors;

namespace {

const std::string kFixtures = FRUCTOSA_FIXTURES;

// Where each sensor finds something to report; the node_exporter capture by default.
Roots roots_for(const std::string& sensor) {
  if (sensor == "Lustre") return {kFixtures + "/lustre/v2.15/proc", kFixtures + "/lustre/v2.15/sys"};
  if (sensor.rfind("Job", 0) == 0) return {kFixtures + "/cgroups/slurm-v2/proc", kFixtures + "/cgroups/slurm-v2/sys"};
  return {kFixtures + "/node-exporter/proc", kFixtures + "/node-exporter/sys"};
}

std::vector<std::string> pairs_for(const SensorDefinition& sensor) {
  std::vector<std::string> pairs;
  for (const auto& spec : *sensor.options) {
    if (spec.name == "scaling") pairs.push_back("scaling=true");  // PerfHW's extra keys
    if (spec.name == "scope") pairs.push_back("scope=node");
    if (spec.name == "events") pairs.push_back("events=task_clock,page_faults,context_switches");
    if (spec.name == "hw_counters") pairs.push_back("hw_counters=true");
  }
  return pairs;
}

TEST(SensorKeys, NoKeyIsThePrefixOfAnother) {
  std::size_t checked = 0;
  for (const auto* definition : all_sensors()) {
    SCOPED_TRACE(definition->name);
    Options options = parse_pairs(*definition->options, pairs_for(*definition), "test");
    Roots roots = roots_for(definition->name);
    JobSettings slurm;
    slurm.scheduler = Scheduler::slurm;
    JobDirectory jobs(slurm, roots);
    auto sensor = definition->make(SensorContext{roots, options, &jobs});
    std::set<std::string> keys;
    for (int round = 0; round < 2; ++round) {
      std::vector<Sample> samples;
      SampleWriter out(samples, "node", definition->name, 1);
      try {
        sensor->sample(out);
      } catch (const SensorUnavailable&) {
        continue;
      }
      for (const auto& sample : samples)
        for (const auto& metric : sample.metrics) keys.insert(metric.key);
    }
    checked += !keys.empty();
    for (const auto& key : keys) {
      auto next = keys.lower_bound(key + ".");
      if (next != keys.end() && next->rfind(key + ".", 0) == 0)
        ADD_FAILURE() << definition->name << ": '" << key << "' is also the prefix of '" << *next << "'";
    }
  }
  EXPECT_GE(checked, 20u) << "too few sensors reported anything to check";
}

}  // namespace
