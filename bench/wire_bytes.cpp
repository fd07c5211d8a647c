// Bytes on the wire per point, as lagent sends them: each round of this machine's sensors (or of
// a recording made with `hdf5_bytes --record FILE --pace-ms 1000`) becomes one batch, encoded
// with the agent's dictionary (protocol version 2, the compact encoding) and decoded by a
// master's, which must give back every value bit for bit. For comparison, the same rounds in
// protocol version 1's encoding (a Cap'n Proto list of series indices and values, packed).
//
//   bench/wire_bytes [--replay FILE [--loops N]] [--rounds N] [--pace-ms M]
//
// Bytes per point = batch message bytes / values, the first batch (and any dictionary message)
// left out: names are sent once per connection. CPU figures are this process's CPU time per value.
#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <fmt/format.h>
#include <kj/io.h>
#include <time.h>

#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codec.h"
#include "protocol.capnp.h"
#include "sample_source.h"

using namespace fructosa;
using namespace fructosa::bench;

namespace {

double cpu_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

// Protocol version 1's batch for the same samples and dictionary indices.
std::size_t version1_bytes(const std::vector<Sample>& round, std::map<std::pair<std::string, std::string>, std::uint32_t>& series,
                           std::map<std::string, std::uint32_t>& sensors) {
  capnp::MallocMessageBuilder builder;
  auto envelope = builder.initRoot<wire::Envelope>();
  envelope.setVersion(1);
  auto batch = envelope.initBatch();
  batch.setSequence(1000);
  auto list = batch.initSamples(static_cast<unsigned>(round.size()));
  for (unsigned i = 0; i < round.size(); ++i) {
    const auto& in = round[i];
    auto out = list[i];
    out.setSensor(sensors.emplace(in.sensor, static_cast<std::uint32_t>(sensors.size())).first->second);
    out.setTimeNs(in.time_ns);
    out.setJob(in.job);
    auto indices = out.initSeries(static_cast<unsigned>(in.metrics.size()));
    auto values = out.initValues(static_cast<unsigned>(in.metrics.size()));
    for (unsigned m = 0; m < in.metrics.size(); ++m) {
      auto key = std::make_pair(in.sensor, in.metrics[m].key);
      indices.set(m, series.emplace(key, static_cast<std::uint32_t>(series.size())).first->second);
      values.set(m, in.metrics[m].value);
    }
    auto labels = out.initLabels(static_cast<unsigned>(in.labels.size()));
    for (unsigned l = 0; l < in.labels.size(); ++l) {
      labels[l].setKey(in.labels[l].key);
      labels[l].setValue(in.labels[l].value);
    }
  }
  kj::VectorOutputStream stream;
  capnp::writePackedMessage(stream, builder);
  return stream.getArray().size();
}

bool same(const Sample& a, const Sample& b) {
  if (a.sensor != b.sensor || a.time_ns != b.time_ns || a.job != b.job || a.metrics.size() != b.metrics.size() ||
      a.labels.size() != b.labels.size())
    return false;
  for (std::size_t i = 0; i < a.metrics.size(); ++i)
    if (a.metrics[i].key != b.metrics[i].key ||
        std::memcmp(&a.metrics[i].value, &b.metrics[i].value, sizeof(double)) != 0)
      return false;
  for (std::size_t i = 0; i < a.labels.size(); ++i)
    if (a.labels[i].key != b.labels[i].key || a.labels[i].value != b.labels[i].value) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string replay;
  int loops = 1, rounds = 120, pace_ms = 1000;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "usage: wire_bytes [--replay FILE [--loops N]] [--rounds N] [--pace-ms M]\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--replay") replay = value();
    else if (arg == "--loops") loops = std::stoi(value());
    else if (arg == "--rounds") rounds = std::stoi(value());
    else if (arg == "--pace-ms") pace_ms = std::stoi(value());
    else {
      std::cerr << "usage: wire_bytes [--replay FILE [--loops N]] [--rounds N] [--pace-ms M]\n";
      return 2;
    }
  }
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);

  std::unique_ptr<Source> source;
  if (!replay.empty()) {
    auto recording = std::make_unique<Recording>(replay, loops);
    rounds = static_cast<int>(recording->rounds());
    source = std::move(recording);
  } else {
    source = std::make_unique<LiveSensors>(pace_ms);
  }
  AgentDictionary agent([](std::string_view) { return std::string(); },
                        [](std::string_view, std::string_view) { return MetricInfo{}; });
  MasterDictionary master;
  std::map<std::pair<std::string, std::string>, std::uint32_t> v1_series;
  std::map<std::string, std::uint32_t> v1_sensors;
  std::size_t points = 0, bytes = 0, v1_bytes = 0, samples = 0, first_bytes = 0;
  double encode_s = 0, decode_s = 0;
  std::int64_t time_ns = 1'736'000'000'000'000'000;
  std::vector<Sample> round;
  for (int r = 0; r < rounds; ++r, time_ns += 1'000'000'000) {
    round.clear();
    if (!source->next(time_ns, round)) break;
    std::vector<Bytes> messages;
    double start = cpu_seconds();
    agent.encode_batch(static_cast<std::uint64_t>(r + 1), round, messages);
    double encoded = cpu_seconds();
    std::vector<Sample> received;
    for (const auto& message_bytes : messages) {
      Message message = decode(message_bytes.data(), message_bytes.size());
      if (message.type == MessageType::dictionary) {
        master.apply(message.dictionary);
        continue;
      }
      master.unpack(message);
      for (const auto& wire : message.samples) received.push_back(master.resolve(wire, "node"));
    }
    double decoded = cpu_seconds();
    if (received.size() != round.size()) {
      std::cerr << "round " << r << ": " << received.size() << " samples back of " << round.size() << "\n";
      return 1;
    }
    for (std::size_t i = 0; i < round.size(); ++i)
      if (!same(round[i], received[i])) {
        std::cerr << "round " << r << ": sample " << round[i].sensor << " came back different\n";
        return 1;
      }
    std::size_t v1 = version1_bytes(round, v1_series, v1_sensors);
    if (r == 0) {
      first_bytes = messages.back().size();
      continue;
    }
    bytes += messages.back().size();
    v1_bytes += v1;
    for (const auto& sample : round) points += sample.metrics.size();
    samples += round.size();
    encode_s += encoded - start;
    decode_s += decoded - encoded;
  }
  if (points == 0) {
    std::cerr << "no points\n";
    return 1;
  }
  std::cout << fmt::format("command: {}\n", command)
            << fmt::format("source: {}, {} rounds 1 s apart, {:.1f} values and {:.1f} samples per round\n",
                           replay.empty() ? "this machine's sensors" : replay, rounds,
                           static_cast<double>(points) / (rounds - 1), static_cast<double>(samples) / (rounds - 1))
            << fmt::format("first batch (no earlier values): {} bytes\n", first_bytes)
            << fmt::format("protocol 2 (compact): {:.2f} bytes/point ({} bytes for {} points)\n",
                           static_cast<double>(bytes) / points, bytes, points)
            << fmt::format("protocol 1 (for comparison): {:.2f} bytes/point\n", static_cast<double>(v1_bytes) / points)
            << fmt::format("CPU: encode {:.0f} ns/point, decode+unpack+resolve {:.0f} ns/point; every value came back bit for bit\n",
                           encode_s * 1e9 / points, decode_s * 1e9 / points);
  return 0;
}
