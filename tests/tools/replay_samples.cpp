// Sends samples to an lmaster as the agents of their hosts would, and returns once lmaster has
// acknowledged every batch (it acknowledges what its journal holds): replay_samples ENDPOINT
// FILE. FILE holds one sample per line as JSON:
//   {"host": "gpu01", "sensor": "NvidiaGPU", "time_ns": 1700000000000000000, "job": 0,
//    "metrics": {"0.utilization_gpu": 85}, "labels": {"0.name": "NVIDIA A100"}}
// Each host speaks over its own connection (Hello, then one batch per sample time, in the
// file's order), its keys described from the sensors' own catalogs as lagent describes them.
// The report fixtures (tests/fixtures/report/make_fixtures.py) are written this way, by a real
// lmaster from samples in the sensors' exact keys.
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "codec.h"
#include "sensor.h"

using namespace fructosa;

namespace {

struct HostStream {
  std::vector<std::vector<Sample>> batches;  // one per sample time, in the file's order
};

std::map<std::string, HostStream> read_samples(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error(path + ": cannot open");
  std::map<std::string, HostStream> hosts;
  std::map<std::string, std::int64_t> last_time;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    if (line.empty()) continue;
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(line);
      Sample sample;
      sample.host = json.at("host").get<std::string>();
      sample.sensor = json.at("sensor").get<std::string>();
      sample.time_ns = json.at("time_ns").get<std::int64_t>();
      sample.job = json.value("job", std::uint64_t{0});
      for (const auto& [key, value] : json.at("metrics").items()) sample.metrics.push_back({key, value.get<double>()});
      if (json.contains("labels"))
        for (const auto& [key, value] : json["labels"].items()) sample.labels.push_back({key, value.get<std::string>()});
      HostStream& stream = hosts[sample.host];
      auto [last, fresh] = last_time.try_emplace(sample.host, sample.time_ns);
      if (fresh || last->second != sample.time_ns) stream.batches.emplace_back();
      last->second = sample.time_ns;
      stream.batches.back().push_back(std::move(sample));
    } catch (const std::exception& error) {
      throw std::runtime_error(path + ":" + std::to_string(number) + ": " + error.what());
    }
  }
  return hosts;
}

// Sends one host's batches; returns once the last one is acknowledged (or fails after 60 s of
// silence).
void replay(zmq::context_t& context, const std::string& endpoint, const std::string& host, const HostStream& stream) {
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 2000);
  socket.set(zmq::sockopt::rcvtimeo, 60000);
  socket.connect(endpoint);
  AgentDictionary dictionary(
      [](std::string_view sensor) {
        const auto* definition = sensors::find_sensor(sensor);
        return definition ? definition->description : std::string();
      },
      [](std::string_view sensor, std::string_view key) { return sensors::metric_info(sensor, key); });
  socket.send(zmq::buffer(encode_hello(host, 1, "replay_samples")), zmq::send_flags::none);
  std::uint64_t sequence = 0;
  for (const auto& batch : stream.batches) {
    std::vector<Bytes> messages;
    dictionary.encode_batch(++sequence, batch, messages);
    for (const auto& message : messages) socket.send(zmq::buffer(message), zmq::send_flags::none);
  }
  for (;;) {
    zmq::message_t reply;
    if (!socket.recv(reply)) throw std::runtime_error(host + ": no acknowledgement from " + endpoint + " in 60 s");
    Message decoded = decode(reply.data(), reply.size());
    if (decoded.type == MessageType::resync)
      throw std::runtime_error(host + ": lmaster asked for a resync: " + decoded.reason);
    if (decoded.type == MessageType::ack && decoded.sequence >= sequence) return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: replay_samples ENDPOINT FILE\n";
    return 2;
  }
  try {
    auto hosts = read_samples(argv[2]);
    zmq::context_t context(1);
    std::size_t batches = 0;
    for (const auto& [host, stream] : hosts) {
      replay(context, argv[1], host, stream);
      batches += stream.batches.size();
    }
    std::cout << "replayed " << batches << " batches of " << hosts.size() << " hosts" << std::endl;
  } catch (const std::exception& error) {
    std::cerr << "replay_samples: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
