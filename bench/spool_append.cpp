// What an append to lagent's spool costs on this machine, with and without a sync each (the
// latter: lmaster not answering, every batch flushed by itself). Prints figures, asserts nothing.
//   build/bench/spool_append [DIRECTORY] [BATCHES]
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "agent_spool.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  fs::path directory = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / fmt::format("spool-append-{}", ::getpid());
  const int batches = argc > 2 ? std::stoi(argv[2]) : 200;
  fs::remove_all(directory);
  std::vector<fructosa::Sample> samples;
  for (int i = 0; i < 20; ++i) {
    fructosa::Sample sample;
    sample.sensor = i % 2 ? "CPUPercent" : "VirtualMemory";
    sample.time_ns = 1'700'000'000'000'000'000 + i * std::int64_t{200'000'000};
    sample.metrics = {{"total", 1.5 * i}, {"eth0.bytes_sent", -2.0}, {"percent", 42}};
    samples.push_back(sample);
  }
  {
    fructosa::agent::AgentSpool spool(directory, 256 << 20);
    using Clock = std::chrono::steady_clock;
    auto start = Clock::now();
    for (int i = 0; i < batches; ++i) spool.append(samples);
    double appended = std::chrono::duration<double>(Clock::now() - start).count();
    start = Clock::now();
    for (int i = 0; i < batches; ++i) {
      spool.append(samples);
      spool.sync();
    }
    double synced = std::chrono::duration<double>(Clock::now() - start).count();
    fmt::print("spool in {}: append of a 20-sample batch {:.3f} ms; with a sync each {:.3f} ms ({} bytes for {} "
               "batches)\n",
               directory.string(), appended * 1000 / batches, synced * 1000 / batches, spool.stats().bytes, 2 * batches);
  }
  fs::remove_all(directory);
}
