// Bytes per stored point and points/s of lmaster's HDF5 output on a realistic mix: every sensor
// of this machine, read in a loop and stamped with synthetic times `--interval` seconds apart (as
// if lagent read them at that interval), for one or many hosts, flushed every flush_interval of
// simulated time, as lmaster's runner does.
//
//   bench/hdf5_bytes [--hosts N] [--seconds S] [--interval I] [--pace-ms M] [--keep DIR]
//                    [--record FILE | --replay FILE [--loops N]] [--jobs J] [-o key=value ...]
//
// --pace-ms M   sleep M ms between two rounds of reads: counters and rates then change as on a
//               machine read every M ms (a tight loop gives unrealistically compressible data).
// --record FILE write the samples read (with their real times) to FILE; `--replay FILE` feeds
//               such a recording instead of reading the sensors (with --loops, repeated, shifted
//               in time), e.g. one recorded with --pace-ms 1000 --interval 1 for real 1 s data.
// --hosts N     with --replay, host h replays the recording from round h * R / N (of the R
//               recorded) and adds h * 4099 to its counters, so that hosts differ as real ones
//               do; with live sensors every host gets the same values.
// --jobs J      every sample of host h is job 1 + h % J's (0: the node's, as recorded): the
//               most the job index (docs/hdf5.md) can cost, where real nodes send a few job
//               samples among many of their own.
// -o key=value  an [hdf5] option (complevel, chunk, flush_interval, rotate_size, ...); the
//               defaults are lmaster's.
// Bytes per point = size of the files written / metric values written (labels, time and job
// columns and metadata included), for the file while written (uncompressed) and once closed
// (compressed). Points/s counts the time spent in write() and flush() only.
#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hdf5_output.h"
#include "sample_source.h"
#include "sensor.h"

using namespace fructosa;
using namespace fructosa::sensors;
using namespace fructosa::bench;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  int hosts = 1;
  double seconds = 6 * 3600;
  double interval = 1;
  int pace_ms = 0;
  int loops = 1;
  int jobs = 0;
  std::string keep;
  std::string record;
  std::string replay;
  std::vector<std::string> options;
};

void usage() {
  std::cerr
      << "usage: hdf5_bytes [--hosts N] [--seconds S] [--interval I] [--pace-ms M] [--keep DIR]\n"
         "                  [--record FILE | --replay FILE [--loops N]] [--jobs J]\n"
         "                  [-o key=value ...]\n";
  std::exit(2);
}

Settings parse(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (arg == "--hosts")
      settings.hosts = std::max(1, std::stoi(value()));
    else if (arg == "--seconds")
      settings.seconds = std::stod(value());
    else if (arg == "--interval")
      settings.interval = std::stod(value());
    else if (arg == "--pace-ms")
      settings.pace_ms = std::stoi(value());
    else if (arg == "--loops")
      settings.loops = std::max(1, std::stoi(value()));
    else if (arg == "--jobs")
      settings.jobs = std::max(0, std::stoi(value()));
    else if (arg == "--keep")
      settings.keep = value();
    else if (arg == "--record")
      settings.record = value();
    else if (arg == "--replay")
      settings.replay = value();
    else if (arg == "-o")
      settings.options.push_back(value());
    else
      usage();
  }
  return settings;
}

std::uintmax_t bytes_under(const fs::path& directory, std::size_t* files) {
  std::uintmax_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(directory))
    if (entry.is_regular_file() && !entry.is_symlink() && entry.path().extension() == ".h5") {
      bytes += entry.file_size();
      ++*files;
    }
  return bytes;
}

}  // namespace

int run(const Settings& settings, const fs::path& directory, const std::string& command);

int main(int argc, char** argv) {
  const Settings settings = parse(argc, argv);
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  fs::path directory;
  if (settings.keep.empty()) {
    char pattern[] = "/tmp/hdf5_bytes.XXXXXX";
    if (!mkdtemp(pattern)) return 1;
    directory = pattern;
  } else {
    directory = settings.keep;
    fs::create_directories(directory);
  }
  int status = 1;
  try {
    status = run(settings, directory, command);
  } catch (const std::exception& error) {
    fmt::print(stderr, "hdf5_bytes: {}\n", error.what());
  }
  if (settings.keep.empty())
    fs::remove_all(directory);
  else
    fmt::print("files kept in {}\n", directory.string());
  return status;
}

int run(const Settings& settings, const fs::path& directory, const std::string& command) {
  std::vector<std::string> pairs = settings.options;
  pairs.push_back("path=" + (directory / "bench.h5").string());
  const Options options = parse_pairs(master::Hdf5Output::hdf5_options(), pairs, "-o");
  const double flush_interval = options.get_real("flush_interval");

  std::unique_ptr<Source> source;
  const Recording* replayed = nullptr;
  std::size_t rounds = static_cast<std::size_t>(std::llround(settings.seconds / settings.interval));
  if (!settings.replay.empty()) {
    auto recording = std::make_unique<Recording>(settings.replay, settings.loops);
    rounds = recording->rounds();
    replayed = recording.get();
    source = std::move(recording);
  } else {
    source = std::make_unique<LiveSensors>(settings.pace_ms);
  }
  std::ofstream recorded;
  if (!settings.record.empty()) recorded.open(settings.record);

  master::MetricInfoStore infos;  // what the agents' dictionaries would have said
  std::set<std::pair<std::string, std::string>> described;
  std::set<std::pair<std::string, std::string>> counters;  // (sensor, key) of kind counter
  std::vector<std::string> host_names;
  for (int h = 0; h < settings.hosts; ++h) host_names.push_back(fmt::format("node{:04d}", h));

  std::uint64_t points = 0;
  Clock::duration output_time{};
  Clock::duration longest_flush{};
  Clock::duration close_time{};
  std::uintmax_t live_bytes = 0;
  const std::int64_t start_ns = 1'700'000'000'000'000'000;
  const auto interval_ns = static_cast<std::int64_t>(std::llround(settings.interval * 1e9));
  std::vector<Sample> round, batch;
  Clock::time_point close_started;
  {
    master::Hdf5Output output(options, infos);
    double next_flush = flush_interval;
    for (std::size_t r = 0; r < rounds; ++r) {
      const std::int64_t time_ns = start_ns + static_cast<std::int64_t>(r) * interval_ns;
      round.clear();
      if (!source->next(time_ns, round)) break;
      if (recorded.is_open()) {
        std::vector<Sample> stamped = round;
        const auto now = std::chrono::system_clock::now().time_since_epoch();
        for (auto& sample : stamped)
          sample.time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
        record(recorded, stamped);
      }
      for (const auto& sample : round)
        for (const auto& metric : sample.metrics)
          if (described.emplace(sample.sensor, metric.key).second) {
            const auto info = metric_info(sample.sensor, metric.key);
            infos.remember(sample.sensor, metric.key, info);
            if (info.kind == Kind::counter) counters.emplace(sample.sensor, metric.key);
          }
      batch.clear();
      for (std::size_t h = 0; h < host_names.size(); ++h) {
        const std::size_t start = batch.size();
        if (replayed && h > 0) {
          replayed->round_at(r + h * replayed->recorded_rounds() / host_names.size(), time_ns,
                             batch);
          for (std::size_t i = start; i < batch.size(); ++i)
            for (auto& metric : batch[i].metrics)
              if (counters.count({batch[i].sensor, metric.key}))
                metric.value += static_cast<double>(h * 4099);
        } else {
          batch.insert(batch.end(), round.begin(), round.end());
        }
        for (std::size_t i = start; i < batch.size(); ++i) {
          batch[i].host = host_names[h];
          if (settings.jobs > 0) batch[i].job = 1 + h % static_cast<std::size_t>(settings.jobs);
          points += batch[i].metrics.size();
        }
      }
      const auto started = Clock::now();
      // The runner hands at most batch_samples() samples to one write().
      for (std::size_t i = 0; i < batch.size(); i += output.batch_samples())
        output.write(
            std::span(batch).subspan(i, std::min(output.batch_samples(), batch.size() - i)));
      const double simulated = static_cast<double>(r + 1) * settings.interval;
      if (simulated >= next_flush) {
        const auto flush_started = Clock::now();
        output.flush();
        longest_flush = std::max(longest_flush, Clock::now() - flush_started);
        next_flush += flush_interval;
      }
      output_time += Clock::now() - started;
    }
    const auto started = Clock::now();
    output.flush();
    output_time += Clock::now() - started;
    if (output.counters().sent != points)
      fmt::print(stderr, "counters().sent = {} but {} points were written\n",
                 output.counters().sent.load(), points);
    std::size_t live_files = 0;
    live_bytes = bytes_under(directory, &live_files);
    close_started = Clock::now();
  }  // closes and compresses the file
  close_time = Clock::now() - close_started;

  std::size_t files = 0;
  const std::uintmax_t bytes = bytes_under(directory, &files);
  const double seconds = std::chrono::duration<double>(output_time).count();
  fmt::print("command: {}\n", command);
  fmt::print(
      "source: {}, {} host(s), {} rounds {} s apart ({:.1f} h simulated){}\n",
      settings.replay.empty() ? "this machine's sensors" : "recording " + settings.replay,
      settings.hosts, rounds, settings.interval, rounds * settings.interval / 3600,
      settings.jobs > 0 ? fmt::format(", every sample a job's ({} jobs)", settings.jobs) : "");
  fmt::print("[hdf5] complevel={} chunk={} flush_interval={} rotate_size={} rotate_age={}\n",
             options.get_int("complevel"), options.get_int("chunk"), flush_interval,
             options.get_int("rotate_size"), options.get_real("rotate_age"));
  fmt::print("points: {} ({:.1f} per host and round)\n", points,
             static_cast<double>(points) / settings.hosts / std::max<std::size_t>(1, rounds));
  const double stored = static_cast<double>(std::max<std::uint64_t>(1, points));
  fmt::print("while written (uncompressed): {} bytes: {:.3f} bytes/point\n", live_bytes,
             static_cast<double>(live_bytes) / stored);
  fmt::print("files: {}, {} bytes: {:.3f} bytes/point (closed and compressed in {:.2f} s)\n", files,
             bytes, static_cast<double>(bytes) / stored,
             std::chrono::duration<double>(close_time).count());
  fmt::print("output time (write + flush): {:.2f} s: {:.0f} points/s; longest flush {:.0f} ms\n",
             seconds, static_cast<double>(points) / seconds,
             std::chrono::duration<double, std::milli>(longest_flush).count());
  return 0;
}
