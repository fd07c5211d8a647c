// Where the benchmarks get realistic samples: this machine's sensors read in a loop, or a
// recording of them (`hdf5_bytes --record`), one round (every sensor once) at a time.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <deque>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sensor.h"

namespace fructosa::bench {

using namespace fructosa::sensors;

// One round of samples (every sensor once) at a time.
class Source {
 public:
  virtual ~Source() = default;
  // The samples of the next round for host "node", stamped `time_ns`; false at the end.
  virtual bool next(std::int64_t time_ns, std::vector<Sample>& round) = 0;
};

class LiveSensors : public Source {
 public:
  explicit LiveSensors(int pace_ms) : pace_ms_(pace_ms) {
    for (const auto* definition : all_sensors()) {
      options_.push_back(parse_pairs(*definition->options, {}, "defaults"));
      sensors_.emplace_back(definition, definition->make(SensorContext{Roots{}, options_.back()}));
    }
  }
  bool next(std::int64_t time_ns, std::vector<Sample>& round) override {
    if (pace_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pace_ms_));
    for (auto& [definition, sensor] : sensors_) {
      SampleWriter out(round, "node", definition->name, time_ns);
      try {
        sensor->sample(out);
      } catch (const std::exception&) {  // unavailable here: left out, as lagent does
      }
    }
    return true;
  }

 private:
  int pace_ms_;
  std::deque<Options> options_;
  std::vector<std::pair<const SensorDefinition*, std::unique_ptr<Sensor>>> sensors_;
};

// A recording: "S\t<sensor>\t<time ns>\t<job>\t<metrics>\t<labels>" followed by that many
// "<key>\t<value>" lines (metrics, then labels); "C" lines (catalog) are skipped.
class Recording : public Source {
 public:
  Recording(const std::string& path, int loops) : loops_(loops) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::string line;
    std::vector<std::string> fields;
    auto split = [&](const std::string& text) {
      fields.clear();
      std::stringstream stream(text);
      std::string field;
      while (std::getline(stream, field, '\t')) fields.push_back(field);
      if (!text.empty() && text.back() == '\t') fields.emplace_back();
    };
    while (std::getline(in, line)) {
      split(line);
      if (fields.empty() || fields[0] != "S" || fields.size() < 6) continue;
      Sample sample;
      sample.host = "node";
      sample.sensor = fields[1];
      sample.time_ns = std::stoll(fields[2]);
      sample.job = std::stoull(fields[3]);
      const int metrics = std::stoi(fields[4]), labels = std::stoi(fields[5]);
      for (int i = 0; i < metrics + labels && std::getline(in, line); ++i) {
        auto tab = line.find('\t');
        std::string key = line.substr(0, tab),
                    value = tab == std::string::npos ? "" : line.substr(tab + 1);
        if (i < metrics)
          sample.metrics.push_back({key, std::stod(value)});
        else
          sample.labels.push_back({key, value});
      }
      if (rounds_.empty() || rounds_.back().front().time_ns != sample.time_ns)
        rounds_.emplace_back();
      rounds_.back().push_back(std::move(sample));
    }
    if (rounds_.empty()) throw std::runtime_error("no samples in " + path);
  }
  bool next(std::int64_t time_ns, std::vector<Sample>& round) override {
    if (position_ >= rounds_.size() * loops_) return false;
    for (Sample sample : rounds_[position_ % rounds_.size()]) {
      sample.time_ns = time_ns;  // the recording's values on the bench's time grid
      round.push_back(std::move(sample));
    }
    ++position_;
    return true;
  }
  std::size_t rounds() const { return rounds_.size() * loops_; }
  // Round `index` of the recording (modulo its length), stamped `time_ns`.
  void round_at(std::size_t index, std::int64_t time_ns, std::vector<Sample>& round) const {
    for (Sample sample : rounds_[index % rounds_.size()]) {
      sample.time_ns = time_ns;
      round.push_back(std::move(sample));
    }
  }
  std::size_t recorded_rounds() const { return rounds_.size(); }

 private:
  int loops_;
  std::size_t position_ = 0;
  std::vector<std::vector<Sample>> rounds_;
};

inline void record(std::ofstream& out, const std::vector<Sample>& round) {
  for (const auto& sample : round) {
    out << fmt::format("S\t{}\t{}\t{}\t{}\t{}\n", sample.sensor, sample.time_ns, sample.job,
                       sample.metrics.size(), sample.labels.size());
    for (const auto& metric : sample.metrics)
      out << fmt::format("{}\t{:.17g}\n", metric.key, metric.value);
    for (const auto& label : sample.labels) out << label.key << '\t' << label.value << '\n';
  }
}

}  // namespace fructosa::bench
