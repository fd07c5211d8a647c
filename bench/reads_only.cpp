// The floor under lagent's CPU: the sensors an lagent.conf turns on, made as lagent makes them
// (the same options, the same job discovery), read at the same aligned instants on one thread,
// and nothing else: no scheduler, no sender, no ZeroMQ, no spool, no log. What this process
// costs is what any agent pays for asking the kernel the same questions at the same rate
// with these sensors' system calls; lagent's CPU above it is the agent's own work.
// agent_overhead.py runs it beside lagent, with lagent's configuration, as the row reads_only.
//   bench/reads_only -c LAGENT_CONF [--seconds N] [--per-sensor]
// Runs until SIGTERM/SIGINT or N seconds, then prints its CPU time per round and per second;
// --per-sensor also times each read (two more clock reads per sensor: not for the floor itself).
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agent_config.h"
#include "jobs.h"
#include "schedule.h"
#include "sensor.h"

using namespace fructosa;

namespace {

volatile std::sig_atomic_t stopping = 0;
void stop(int) { stopping = 1; }

std::int64_t now_ns(clockid_t clock) {
  timespec now{};
  ::clock_gettime(clock, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

double process_cpu_ms() { return static_cast<double>(now_ns(CLOCK_PROCESS_CPUTIME_ID)) / 1e6; }

// One sensor as lagent runs it: its aligned reading times, and fewer tries while it fails
// (lagent's RetryBackoff, with its 60 s ceiling), so that an unavailable sensor costs here what
// it costs there.
struct Reading {
  const sensors::SensorDefinition* definition;
  std::unique_ptr<sensors::Sensor> sensor;
  agent::AlignedSchedule schedule;
  agent::RetryBackoff retry{60'000'000'000};
  std::int64_t deadline = 0;
  std::int64_t last_try = 0;
  std::uint32_t failures = 0;
  double cpu_ms = 0;  // --per-sensor
  std::uint64_t reads = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  double seconds = 0;
  bool per_sensor = false;
  bool usage_error = false;
  for (int i = 1; i < argc && !usage_error; ++i) {
    if ((!std::strcmp(argv[i], "-c") || !std::strcmp(argv[i], "--config")) && i + 1 < argc)
      config_path = argv[++i];
    else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--per-sensor"))
      per_sensor = true;
    else
      usage_error = true;
  }
  if (usage_error || config_path.empty()) {
    fmt::print(stderr, "usage: {} -c LAGENT_CONF [--seconds N] [--per-sensor]\n", argv[0]);
    return 2;
  }
  std::signal(SIGTERM, stop);
  std::signal(SIGINT, stop);

  agent::AgentConfig config;
  std::unique_ptr<sensors::JobDirectory> jobs;
  std::vector<Reading> readings;
  try {
    config = agent::load_agent_config(config_path);
    jobs = std::make_unique<sensors::JobDirectory>(config.jobs, config.roots);
    for (const auto& sensor : config.sensors) {
      sensors::SensorContext context{config.roots, sensor.options, jobs.get()};
      readings.push_back({sensor.definition, sensor.definition->make(context),
                          agent::AlignedSchedule(static_cast<std::int64_t>(sensor.interval * 1e9))});
    }
  } catch (const std::exception& error) {
    fmt::print(stderr, "{}\n", error.what());
    return 1;
  }
  // Like lagent, no file descriptor limit of 1024 for the per-job sensors' held files.
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }

  const std::int64_t start = now_ns(CLOCK_REALTIME);
  for (auto& reading : readings) reading.deadline = reading.schedule.first(start);
  const double cpu_at_start = process_cpu_ms();
  std::vector<Sample> samples;
  std::uint64_t rounds = 0, reads = 0;
  while (!stopping) {
    std::int64_t instant = std::min_element(readings.begin(), readings.end(), [](const auto& a, const auto& b) {
                             return a.deadline < b.deadline;
                           })->deadline;
    if (seconds > 0 && instant > start + static_cast<std::int64_t>(seconds * 1e9)) break;
    timespec at{static_cast<time_t>(instant / 1'000'000'000), static_cast<long>(instant % 1'000'000'000)};
    if (::clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, nullptr) != 0) continue;  // a signal
    ++rounds;
    for (auto& reading : readings) {
      if (reading.deadline != instant) continue;
      std::uint64_t missed = 0;
      reading.deadline = reading.schedule.next(instant, now_ns(CLOCK_REALTIME), missed);
      if (reading.retry.skip(instant, reading.schedule.interval(), reading.failures, reading.last_try,
                             [&] { return jobs->snapshot()->involved_jobs; }))
        continue;
      reading.last_try = instant;
      samples.clear();
      sensors::SampleWriter out(samples, config.host, reading.definition->name, instant);
      const double started = per_sensor ? static_cast<double>(now_ns(CLOCK_THREAD_CPUTIME_ID)) / 1e6 : 0;
      try {
        reading.sensor->sample(out);
        reading.failures = 0;
      } catch (const std::exception&) {
        ++reading.failures;
      }
      if (per_sensor) reading.cpu_ms += static_cast<double>(now_ns(CLOCK_THREAD_CPUTIME_ID)) / 1e6 - started;
      ++reading.reads;
      ++reads;
    }
  }
  const double cpu_ms = process_cpu_ms() - cpu_at_start;
  const double wall_s = static_cast<double>(now_ns(CLOCK_REALTIME) - start) / 1e9;
  fmt::print("reads_only: {} sensors of {}; {} rounds, {} reads in {:.1f} s: {:.3f} ms CPU per round, {:.3f} ms per s\n",
             readings.size(), config_path, rounds, reads, wall_s, cpu_ms / std::max<std::uint64_t>(rounds, 1),
             cpu_ms / std::max(wall_s, 1e-9));
  if (per_sensor) {
    fmt::print("{:<22} {:>7} {:>12}\n", "sensor", "reads", "ms CPU/read");
    for (const auto& reading : readings)
      fmt::print("{:<22} {:>7} {:>12.3f}\n", reading.definition->name, reading.reads,
                 reading.cpu_ms / static_cast<double>(std::max<std::uint64_t>(reading.reads, 1)));
  }
  return 0;
}
