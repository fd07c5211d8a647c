// The shape of the data bench/master_load's agents send: the sensors, keys and value models of
// a node like lagent's system sensors report (CPUPercent and CPUTimes per CPU, memory, disks,
// NICs...), and how each value starts and moves from one batch to the next.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fructosa::bench {

enum class Shape : std::uint8_t { counter, gauge, percent, constant };

// How one value starts and moves from one batch to the next.
struct ValueModel {
  Shape shape;
  double start;  // first value (counters: a random share of it, as if up for a while)
  double step;   // counters: largest increase per batch; gauges: largest move either way
  double low = 0, high = 1e300;
  double quantum = 1;  // values are multiples of it (0.01 s for CPU times, 4096 for memory...)
};

struct SensorModel {
  std::string sensor;
  std::vector<std::string> keys;
  std::vector<ValueModel> values;
  void add(std::string key, ValueModel model) {
    keys.push_back(std::move(key));
    values.push_back(model);
  }
};

// The sensors of a node, in the order an agent's batch carries them, with exactly `metrics`
// values: enough CPUs, then the tail cut.
std::vector<SensorModel> model_with(int metrics);
std::size_t value_count(const std::vector<SensorModel>& model);

// xorshift64*: cheap, and good enough for plausible noise.
struct Random {
  std::uint64_t state;
  double uniform() {  // [0, 1)
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return static_cast<double>((state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
  }
};

// A value's first reading and the next one after `value`.
double first_value(const ValueModel& model, Random& random);
double next_value(const ValueModel& model, double value, Random& random);

}  // namespace fructosa::bench
