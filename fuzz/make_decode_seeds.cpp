// Writes decode_fuzz's seed corpus: valid messages from the real encoder, one per file, and
// whole connections (length-prefixed messages, as decode_fuzz reads them).
// Usage: make_decode_seeds DIR   (the committed copy is fuzz/corpus/decode).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "codec.h"

using namespace fructosa;

namespace {

void write(const std::string& dir, const std::string& name, const Bytes& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::perror((dir + "/" + name).c_str());
    std::exit(1);
  }
}

Bytes connection(const std::vector<Bytes>& messages) {
  Bytes out;
  for (const Bytes& message : messages) {
    out.push_back(static_cast<char>(message.size() & 0xff));
    out.push_back(static_cast<char>((message.size() >> 8) & 0xff));
    out += message.substr(0, 0xffff);
  }
  return out;
}

Sample sample(const std::string& sensor, std::int64_t time_ns, std::uint64_t job, std::vector<MetricValue> metrics,
              std::vector<Label> labels = {}) {
  return Sample{"node07", sensor, time_ns, job, std::move(metrics), std::move(labels)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_decode_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  AgentDictionary agent([](std::string_view sensor) { return "about " + std::string(sensor); },
                        [](std::string_view, std::string_view key) {
                          return MetricInfo{key == "percent" ? "percent" : "bytes",
                                            key.find("count") != std::string_view::npos ? Kind::counter : Kind::gauge,
                                            "the " + std::string(key)};
                        });
  const std::int64_t t0 = 1'700'000'000'000'000'000;
  std::vector<Bytes> first, second, third;
  agent.encode_batch(1,
                     {sample("VirtualMemory", t0, 0, {{"total", 16e9}, {"available", 8e9}, {"percent", 50}}),
                      sample("CPUPercent", t0, 0, {{"0", 12.5}, {"1", 0}, {"2", 100}, {"3", 0.25}}),
                      sample("DiskUsage", t0, 0, {{"/.percent", 42}, {"/home.percent", 7}},
                             {{"/.device", "/dev/sda1"}, {"/home.fstype", "ext4"}})},
                     first);
  agent.encode_batch(2,
                     {sample("VirtualMemory", t0 + 1'000'000'000, 0, {{"total", 16e9}, {"used", 0}}),
                      sample("JobCgroup", t0 + 1'000'000'000, 4242,
                             {{"cpu.usage_count", 1234567}, {"memory.current", std::nan("")},
                              {"io.rbytes", std::numeric_limits<double>::infinity()}})},
                     second);
  agent.encode_batch(3, {sample("VirtualMemory", t0 + 2'000'000'000, 0, {{"total", -0.0}})}, third);
  // Times at both ends of int64, one after the other in a series: every time delta must be
  // defined (decode_fuzz found INT64_MIN negated in the encoder, issue 28).
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min(), kMax = std::numeric_limits<std::int64_t>::max();
  std::vector<Bytes> extremes;
  agent.encode_batch(4,
                     {sample("VirtualMemory", kMin, 0, {{"total", 1}}), sample("VirtualMemory", kMax, 0, {{"total", 2}}),
                      sample("VirtualMemory", kMin, 0, {{"total", 3}}), sample("VirtualMemory", 0, 0, {{"total", 4}})},
                     extremes);

  Bytes hello = encode_hello("node07", 0x1234abcd5678ef00, "0.1.0");
  write(dir, "hello", hello);
  write(dir, "heartbeat", encode_heartbeat(t0, 3));
  write(dir, "ack", encode_ack(2));
  write(dir, "resync", encode_resync("lmaster restarted"));
  write(dir, "dictionary", first.at(0));
  write(dir, "batch", first.at(1));
  write(dir, "dictionary-update", second.at(0));
  write(dir, "batch-with-job", second.at(1));
  write(dir, "batch-no-new-names", third.at(0));
  write(dir, "dictionary-everything", agent.encode_everything());
  write(dir, "hello-other-version", encode_hello("node07", 1, "9.9", kProtocolVersion + 1));

  write(dir, "connection", connection({hello, first.at(0), first.at(1), second.at(0), second.at(1), third.at(0)}));
  // After a resync: hello, the whole dictionary, the unacknowledged batches again.
  write(dir, "connection-resync",
        connection({hello, first.at(1), encode_heartbeat(t0, 2), hello, agent.encode_everything(), second.at(1),
                    third.at(0), third.at(0)}));
  std::vector<Bytes> with_extremes{hello, first.at(0), first.at(1), second.at(0), second.at(1), third.at(0)};
  with_extremes.insert(with_extremes.end(), extremes.begin(), extremes.end());
  write(dir, "connection-extreme-times", connection(with_extremes));
  return 0;
}
