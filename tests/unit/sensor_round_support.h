// What the tests of the sensors that run outside the timer thread share (nvidia_gpu_test.cpp,
// ipmi_power_test.cpp, child_process_test.cpp): a probe of one sensor, one sample() round of
// it, polling a condition with a deadline, files and fake tools in a temporary directory, and
// whether a process is gone.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "jobs.h"
#include "sensor.h"
#include "sensor_probe.h"
#include "test_support.h"

namespace fructosa::test::sensor_rounds {

using namespace fructosa::sensors;
namespace fs = std::filesystem;


using Values = std::map<std::string, double>;
using Labels = std::map<std::string, std::string>;

using Probe = test::SensorProbe;

inline Probe make(const std::string& name, const std::vector<std::string>& pairs, JobDirectory* jobs = nullptr,
           Roots roots = Roots{"/nonexistent-proc", "/nonexistent-sys"}) {
  return test::make_probe(name, roots, pairs, jobs);
}

// One sample() call: what it reported, per job, or why it is unavailable.
struct Round {
  bool reported = false;
  std::string unavailable;
  std::map<std::uint64_t, Values> values;  // job -> key -> value
  std::map<std::uint64_t, Labels> labels;
};

inline Round round(Probe& probe) {
  Round result;
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", probe.definition->name, 1);
  try {
    result.reported = probe.sensor->sample(out);
  } catch (const SensorUnavailable& why) {
    result.unavailable = why.what();
    return result;
  }
  for (const auto& sample : samples) {
    auto& values = result.values[sample.job];
    for (const auto& metric : sample.metrics) {
      EXPECT_EQ(values.count(metric.key), 0u) << "duplicate key " << metric.key;
      values[metric.key] = metric.value;
      EXPECT_NE(probe.definition->catalog->find(metric.key), nullptr) << "no catalog entry for " << metric.key;
    }
    for (const auto& label : sample.labels) result.labels[sample.job][label.key] = label.value;
  }
  return result;
}

// Calls `condition` until it holds or `seconds` pass (with short pauses between the calls, so
// a background run gets the CPU); returns whether it held.
template <class Condition>
bool eventually(Condition condition, double seconds = 20) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

// Rounds until one reports values or says unavailable (a background tool finished).
inline Round settled(Probe& probe) {
  Round last;
  bool done = eventually([&] {
    last = round(probe);
    return last.reported || !last.unavailable.empty();
  });
  EXPECT_TRUE(done) << "the sensor never reported";
  return last;
}

inline void write_file(const std::string& path, const std::string& text, bool executable = false) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
  if (executable) ::chmod(path.c_str(), 0755);
}

inline std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A process that no longer exists, or a zombie nobody reaped yet (a killed grandchild waits
// for init, which in a container may never reap it).
inline bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

inline pid_t pid_in(const std::string& path) {
  std::string text = read_text(path);
  return text.empty() ? 0 : static_cast<pid_t>(std::stol(text));
}

}  // namespace fructosa::test::sensor_rounds
