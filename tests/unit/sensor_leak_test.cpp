// Every registered sensor, sampled thousands of times on this machine's real /proc and /sys,
// must leave the process's file descriptor count and resident memory where they were.
#include <gtest/gtest.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <fstream>

#include "sensor.h"

using namespace fructosa;
using namespace fructosa::sensors;

namespace {

std::size_t open_descriptors() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

}  // namespace

TEST(SensorRounds, ThousandsOfRoundsLeakNeitherDescriptorsNorMemory) {
  std::deque<Options> options;  // sensors may keep references to their options
  std::vector<std::pair<const SensorDefinition*, std::unique_ptr<Sensor>>> sensors;
  for (const auto* definition : all_sensors()) {
    options.push_back(parse_pairs(*definition->options, {}, "defaults"));
    sensors.emplace_back(definition, definition->make(SensorContext{Roots{}, options.back()}));
  }
  ASSERT_GE(sensors.size(), 4u);
  std::vector<Sample> samples;
  std::size_t unavailable = 0;
  auto round = [&] {
    for (auto& [definition, sensor] : sensors) {
      samples.clear();
      SampleWriter out(samples, "node", definition->name, 1);
      try {
        sensor->sample(out);
      } catch (const SensorUnavailable&) {
        ++unavailable;  // no battery on this machine, say: must not leak either
      }
    }
  };
  // Warm-up: buffers grow to the files' sizes, rate sensors prime, caches fill.
  for (int i = 0; i < 200; ++i) round();
  const std::size_t descriptors = open_descriptors();
  const long resident = resident_bytes();
  for (int i = 0; i < 3000; ++i) round();
  EXPECT_EQ(open_descriptors(), descriptors);
  // Allow for allocator noise; a leak of even 300 bytes per round would exceed this. Under
  // AddressSanitizer freed memory waits in its quarantine (hundreds of MB), so RSS says nothing
  // there; LeakSanitizer checks the same rounds for leaks at exit instead.
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(resident_bytes() - resident, 1 << 20) << "RSS grew from " << resident << " to " << resident_bytes();
#endif
  RecordProperty("unavailable_reads", static_cast<int>(unavailable));
}
