// The CPU a point costs on its way through the code, without the network or a disk: an agent's
// encoder (AgentDictionary::encode_batch, which lagent runs every round and master_load for
// each of its agents), then lmaster's receiving thread (decode, MasterDictionary::resolve_batch,
// the journal record's encoding) and its Graphite output's encoder (pickle frames).
//
//   point_path [--hosts N] [--rounds R] [--repeat K]
//
// --rounds rounds of this machine's own sensors (every sensor, read 100 ms apart before anything
// is timed) are sent by --hosts agents, each over its own connection (its own dictionaries and
// compact-encoding memory, as lmaster keeps them per agent); lmaster's side takes one round of
// every agent at a time, as its receiving thread takes what arrived. Prints each stage's ns per
// point, the best of --repeat runs. That is wall-clock time, which moves with a shared machine;
// for figures that do not, count instructions with callgrind and read each stage's inclusive
// cost:
//   valgrind --tool=callgrind --callgrind-out-file=cg.out build/bench/point_path --repeat 1
//   callgrind_annotate --inclusive=yes cg.out | grep -E \
//     'encode_batch\(|resolve_batch\(|fructosa::decode\(|encode_samples|CarbonEncoder::encode\('
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "carbon_encoder.h"
#include "codec.h"
#include "journal.h"
#include "sample_source.h"

using namespace fructosa;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "point_path: %s\nusage: point_path [--hosts N] [--rounds R] [--repeat K]\n", why);
  std::exit(64);
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

int main(int argc, char** argv) {
  int hosts = 200, rounds = 20, repeat = 5;
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    std::string option = argv[i];
    if (i + 1 >= argc) usage(("no value for " + option).c_str());
    int value = std::atoi(argv[++i]);
    if (value < 1) usage((option + " needs a positive number").c_str());
    if (option == "--hosts") hosts = value;
    else if (option == "--rounds") rounds = value;
    else if (option == "--repeat") repeat = value;
    else usage(("unknown option " + option).c_str());
  }

  // This machine's sensors, one round every 100 ms (rates need time between readings).
  bench::LiveSensors sensors(100);
  std::vector<std::vector<Sample>> recorded(static_cast<std::size_t>(rounds));
  const std::int64_t start_ns = 1'700'000'000'000'000'000;
  for (int r = 0; r < rounds; ++r) sensors.next(start_ns + r * 1'000'000'000LL, recorded[r]);

  auto no_description = [](std::string_view) { return std::string(); };
  auto no_info = [](std::string_view, std::string_view) { return MetricInfo{}; };
  double best_encode = 1e300, best_receive = 1e300, best_journal = 1e300, best_carbon = 1e300;
  std::size_t points = 0, wire_bytes = 0, journal_bytes = 0, carbon_bytes = 0;
  for (int run = 0; run < repeat; ++run) {
    // Each agent's batches: its name on every sample, then encoded on its own connection.
    std::vector<std::vector<Bytes>> sent(static_cast<std::size_t>(hosts));
    std::vector<std::string> names;
    points = wire_bytes = journal_bytes = carbon_bytes = 0;
    double encode_s = 0;
    for (int h = 0; h < hosts; ++h) {
      names.push_back("cn" + std::to_string(1000 + h));
      AgentDictionary agent(no_description, no_info);
      for (int r = 0; r < rounds; ++r) {
        std::vector<Sample> round = recorded[r];
        for (auto& sample : round) {
          sample.host = names.back();
          points += sample.metrics.size();
        }
        auto started = Clock::now();
        agent.encode_batch(static_cast<std::uint64_t>(r + 1), round, sent[h]);
        encode_s += seconds_since(started);
      }
      for (const auto& message : sent[h]) wire_bytes += message.size();
    }
    // lmaster: every agent's next round, then the journal record and the frames of all of them.
    std::vector<MasterDictionary> masters(static_cast<std::size_t>(hosts));
    std::vector<std::size_t> next(static_cast<std::size_t>(hosts), 0);
    graphite::CarbonEncoder carbon(graphite::CarbonProtocol::pickle, "", 500);
    std::vector<graphite::CarbonFrame> frames;
    double receive_s = 0, journal_s = 0, carbon_s = 0;
    for (int r = 0; r < rounds; ++r) {
      std::vector<Sample> taken;
      auto started = Clock::now();
      for (int h = 0; h < hosts; ++h) {
        while (next[h] < sent[h].size()) {
          const Bytes& bytes = sent[h][next[h]++];
          Message message = decode(bytes.data(), bytes.size());
          if (message.type == MessageType::dictionary) {
            masters[h].apply(message.dictionary);
            continue;
          }
          masters[h].resolve_batch(message, names[h], taken);
          break;
        }
      }
      receive_s += seconds_since(started);
      started = Clock::now();
      journal_bytes += master::encode_samples(taken).size();
      journal_s += seconds_since(started);
      started = Clock::now();
      std::size_t used = carbon.encode(taken, frames);
      carbon_s += seconds_since(started);
      for (std::size_t f = 0; f < used; ++f) carbon_bytes += frames[f].bytes.size();
    }
    best_encode = std::min(best_encode, encode_s);
    best_receive = std::min(best_receive, receive_s);
    best_journal = std::min(best_journal, journal_s);
    best_carbon = std::min(best_carbon, carbon_s);
  }
  auto per_point = [&](double seconds) { return seconds * 1e9 / static_cast<double>(points); };
  std::printf("%d agents x %d rounds of this machine's sensors: %zu points, best of %d runs\n", hosts, rounds,
              points, repeat);
  std::printf("agent encode (encode_batch)            %7.1f ns per point  %.2f wire bytes per point\n",
              per_point(best_encode), static_cast<double>(wire_bytes) / static_cast<double>(points));
  std::printf("lmaster decode + resolve_batch         %7.1f ns per point\n", per_point(best_receive));
  std::printf("lmaster journal record (encode)        %7.1f ns per point  %.2f bytes per point\n",
              per_point(best_journal), static_cast<double>(journal_bytes) / static_cast<double>(points));
  std::printf("lmaster Graphite frames (pickle)       %7.1f ns per point  %.2f bytes per point\n",
              per_point(best_carbon), static_cast<double>(carbon_bytes) / static_cast<double>(points));
  std::printf("command: %s\n", command.c_str());
  return 0;
}
