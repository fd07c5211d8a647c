// Times full rounds of every sensor, as lagent runs them: CPU microseconds per round and per
// sensor (thread CPU time, so other load on the machine does not count). Sensors that share a
// file at one reading time (/proc/stat: sensors/procfs.h, SharedReading) read it once per
// round, as in lagent: the first of them in the round pays for it.
//   bench/sensor_round [ROUNDS] [--proc-root DIR] [--sys-root DIR]
// Target (issue 3): <= 500 us CPU per round of the 20 psutil sensors on a 2-core build VM.
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "sensor.h"

using namespace fructosa;
using namespace fructosa::sensors;

namespace {

double thread_cpu_us() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e6 + static_cast<double>(now.tv_nsec) / 1e3;
}

struct Entry {
  const SensorDefinition* definition;
  std::unique_ptr<Sensor> sensor;
  double cpu_us = 0;
  std::size_t metrics = 0;
  std::string unavailable;
};

}  // namespace

int main(int argc, char** argv) {
  int rounds = 2000;
  Roots roots;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--proc-root") && i + 1 < argc) roots.proc = argv[++i];
    else if (!std::strcmp(argv[i], "--sys-root") && i + 1 < argc) roots.sys = argv[++i];
    else rounds = std::max(1, std::atoi(argv[i]));
  }
  std::deque<Options> options;
  std::vector<Entry> entries;
  for (const auto* definition : all_sensors()) {
    options.push_back(parse_pairs(*definition->options, {}, "defaults"));
    entries.push_back({definition, definition->make(SensorContext{roots, options.back()}), 0, 0, {}});
  }
  std::vector<Sample> samples;
  std::int64_t instant = 0;  // a new reading time per round, as lagent's
  auto read = [&](Entry& entry) {
    samples.clear();
    SampleWriter out(samples, "node", entry.definition->name, instant);
    try {
      entry.sensor->sample(out);
    } catch (const SensorUnavailable& why) {
      entry.unavailable = why.what();
    }
    entry.metrics = samples.empty() ? entry.metrics : samples.front().metrics.size();
  };
  for (int i = 0; i < 100; ++i, ++instant)  // warm-up: buffers sized, rates primed
    for (auto& entry : entries) read(entry);

  // Per sensor (each read timed on its own).
  for (int i = 0; i < rounds; ++i, ++instant) {
    for (auto& entry : entries) {
      double start = thread_cpu_us();
      read(entry);
      entry.cpu_us += thread_cpu_us() - start;
    }
  }
  // Whole rounds, untimed inside, for the total without the timer's own cost.
  auto psutil_sensor = [](const Entry& entry) { return entry.definition->name != "lagent"; };
  double start = thread_cpu_us();
  for (int i = 0; i < rounds; ++i, ++instant)
    for (auto& entry : entries)
      if (psutil_sensor(entry)) read(entry);
  double round_us = (thread_cpu_us() - start) / rounds;

  fmt::print("{:<22} {:>10} {:>8}  {}\n", "sensor", "us/round", "metrics", "note");
  std::size_t psutil_sensors = 0;
  for (const auto& entry : entries) {
    psutil_sensors += psutil_sensor(entry);
    fmt::print("{:<22} {:>10.1f} {:>8}  {}\n", entry.definition->name, entry.cpu_us / rounds, entry.metrics,
               entry.unavailable.empty() ? "" : "unavailable: " + entry.unavailable);
  }
  fmt::print("\n{} rounds of {} psutil sensors (lagent's own excluded): {:.1f} us CPU per round (target <= 500)\n",
             rounds, psutil_sensors, round_us);
  return 0;
}
