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
// every agent at a time, as its receiving thread takes what arrived. The first round, where each
// connection's dictionary starts (once in an agent's life), is not timed. Prints each stage's ns
// per point, the best of --repeat runs. That is wall-clock time, which moves with a shared
// machine; for figures that do not, count the timed rounds' instructions with callgrind and read
// each stage's inclusive cost:
//   valgrind --tool=callgrind --toggle-collect='*timed_rounds*' --callgrind-out-file=cg.out
//            build/bench/point_path --repeat 1
//   callgrind_annotate --inclusive=yes cg.out
//     | grep -E 'encode_batch\(|resolve_batch\(|fructosa::decode\(|SamplesEncoder::encode|CarbonEncoder::encode\('
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "carbon_encoder.h"
#include "codec.h"
#include "journal.h"
#include "sample_recycler.h"
#include "sample_source.h"

using namespace fructosa;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "point_path: %s\nusage: point_path [--hosts N] [--rounds R] [--repeat K]\n", why);
  std::exit(64);
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One agent's connection: its encoder on the agent's side, its dictionary on lmaster's.
struct Connection {
  std::string host;
  AgentDictionary agent{[](std::string_view) { return std::string(); },
                        [](std::string_view, std::string_view) { return MetricInfo{}; }};
  MasterDictionary master;
  std::vector<Bytes> in_flight;

  // The agent's side: `round` as this agent's batch (plus a dictionary message when new keys;
  // a batch does not name its host: lmaster knows it from the connection).
  void send(int round_index, const std::vector<Sample>& round) {
    in_flight.clear();
    agent.encode_batch(static_cast<std::uint64_t>(round_index + 1), round, in_flight);
  }
  // lmaster's side: what was sent, decoded and resolved into `taken`.
  void receive(std::vector<Sample>& taken, master::SampleRecycler& recycler) {
    for (const Bytes& bytes : in_flight) {
      Message message = decode(bytes.data(), bytes.size());
      if (message.type == MessageType::dictionary)
        master.apply(message.dictionary);
      else
        master.resolve_batch(message, host, taken, &recycler.reusable());
    }
  }
};

struct Stopwatch {
  double encode = 0, receive = 0, journal = 0, carbon = 0;
};
struct Totals {
  std::size_t points = 0, wire_bytes = 0, journal_bytes = 0, carbon_bytes = 0;
};

// Rounds 1.. of every connection, each stage timed apart. Not inlined, so that callgrind can
// count these rounds alone: --toggle-collect='*timed_rounds*'.
[[gnu::noinline]] Totals timed_rounds(std::vector<Connection>& connections,
                                      const std::vector<std::vector<Sample>>& recorded,
                                      master::SampleRecycler& recycler, Stopwatch& clock) {
  Totals totals;
  graphite::CarbonEncoder carbon(graphite::CarbonProtocol::pickle, "", 500);
  std::vector<graphite::CarbonFrame> frames;
  master::SamplesEncoder journal;  // as lmaster's Journal keeps it
  for (std::size_t r = 1; r < recorded.size(); ++r) {
    for (const auto& sample : recorded[r]) totals.points += sample.metrics.size() * connections.size();
    auto started = Clock::now();
    for (auto& connection : connections) connection.send(static_cast<int>(r), recorded[r]);
    clock.encode += seconds_since(started);
    for (const auto& connection : connections)
      for (const auto& bytes : connection.in_flight) totals.wire_bytes += bytes.size();
    // lmaster takes a round of every agent, then writes its journal record and its frames; the
    // round's samples come back to be filled again once they are done with (SampleRecycler).
    std::vector<Sample> taken = recycler.next_round();
    started = Clock::now();
    for (auto& connection : connections) connection.receive(taken, recycler);
    clock.receive += seconds_since(started);
    started = Clock::now();
    totals.journal_bytes += journal.encode({}, taken).size();
    clock.journal += seconds_since(started);
    started = Clock::now();
    std::size_t used = carbon.encode(taken, frames);
    clock.carbon += seconds_since(started);
    for (std::size_t f = 0; f < used; ++f) totals.carbon_bytes += frames[f].bytes.size();
    recycler.share(std::move(taken));  // let go at once, as the outputs would
  }
  return totals;
}

}  // namespace

int main(int argc, char** argv) {
  int hosts = 200, rounds = 20, repeat = 5;  // rounds: the first one untimed
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
  if (rounds < 2) usage("--rounds needs at least 2 (the first one is not timed)");

  // This machine's sensors, one round every 100 ms (rates need time between readings).
  bench::LiveSensors sensors(100);
  std::vector<std::vector<Sample>> recorded(static_cast<std::size_t>(rounds));
  const std::int64_t start_ns = 1'700'000'000'000'000'000;
  for (int r = 0; r < rounds; ++r) sensors.next(start_ns + r * 1'000'000'000LL, recorded[r]);

  double best_encode = 1e300, best_receive = 1e300, best_journal = 1e300, best_carbon = 1e300;
  Totals totals;
  for (int run = 0; run < repeat; ++run) {
    std::vector<Connection> connections(static_cast<std::size_t>(hosts));
    for (int h = 0; h < hosts; ++h) connections[h].host = "cn" + std::to_string(1000 + h);
    // Round 0 untimed: each connection's dictionary and compact-encoding memory start there,
    // once in an agent's life.
    master::SampleRecycler recycler;
    std::vector<Sample> taken;
    for (auto& connection : connections) connection.send(0, recorded[0]);
    for (auto& connection : connections) connection.receive(taken, recycler);
    recycler.share(std::move(taken));
    Stopwatch clock;
    totals = timed_rounds(connections, recorded, recycler, clock);
    best_encode = std::min(best_encode, clock.encode);
    best_receive = std::min(best_receive, clock.receive);
    best_journal = std::min(best_journal, clock.journal);
    best_carbon = std::min(best_carbon, clock.carbon);
  }
  const std::size_t points = totals.points;
  const std::size_t wire_bytes = totals.wire_bytes, journal_bytes = totals.journal_bytes,
                    carbon_bytes = totals.carbon_bytes;
  auto per_point = [&](double seconds) { return seconds * 1e9 / static_cast<double>(points); };
  std::printf("%d agents x %d rounds of this machine's sensors (the first untimed): %zu points timed, best of %d runs\n",
              hosts, rounds, points, repeat);
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
