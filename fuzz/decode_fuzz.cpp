// libFuzzer target: the bytes lmaster's ROUTER loop hands to the codec.
//
// Each input is used twice:
//  1. as one message: decode() must return or throw ProtocolError, nothing else;
//  2. as one agent connection: a sequence of messages, each prefixed by its length (2 bytes,
//     little-endian), handled the way lmaster handles them (hello clears the dictionary,
//     dictionary updates are applied, a batch is unpacked (compact encoding, against the
//     connection's memory) and resolved all or nothing, a protocol error
//     clears the dictionary as the resync that follows does).
// Whatever decodes is also encoded again and must decode to the same thing, so the encoder
// and decoder are checked against each other, not just for crashes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "codec.h"

using namespace fructosa;

namespace {

// A failed property: abort, which libFuzzer reports as a crash with the input saved.
#define FUZZ_CHECK(condition)                                                                  \
  do {                                                                                         \
    if (!(condition)) {                                                                        \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);        \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

bool same_double(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool same_labels(const std::vector<Label>& a, const std::vector<Label>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].key != b[i].key || a[i].value != b[i].value) return false;
  return true;
}

bool same_sample(const Sample& a, const Sample& b) {
  if (a.host != b.host || a.sensor != b.sensor || a.time_ns != b.time_ns || a.job != b.job ||
      a.metrics.size() != b.metrics.size() || !same_labels(a.labels, b.labels))
    return false;
  for (std::size_t i = 0; i < a.metrics.size(); ++i)
    if (a.metrics[i].key != b.metrics[i].key || !same_double(a.metrics[i].value, b.metrics[i].value)) return false;
  return true;
}

bool same_dictionary(const DictionaryUpdate& a, const DictionaryUpdate& b) {
  if (a.first_sensor != b.first_sensor || a.first_series != b.first_series || a.sensors.size() != b.sensors.size() ||
      a.series.size() != b.series.size())
    return false;
  for (std::size_t i = 0; i < a.sensors.size(); ++i)
    if (a.sensors[i].name != b.sensors[i].name || a.sensors[i].description != b.sensors[i].description) return false;
  for (std::size_t i = 0; i < a.series.size(); ++i) {
    const auto& x = a.series[i];
    const auto& y = b.series[i];
    if (x.sensor != y.sensor || x.key != y.key || x.info.unit != y.info.unit || x.info.kind != y.info.kind ||
        x.info.description != y.info.description)
      return false;
  }
  return true;
}

Message decode_again(const Bytes& bytes) {
  try {
    return decode(bytes.data(), bytes.size());
  } catch (const ProtocolError& error) {
    std::fprintf(stderr, "re-encoded message does not decode: %s\n", error.what());
    std::abort();
  }
}

// What was decoded, encoded again, decodes to the same message.
void check_round_trip(const Message& message) {
  switch (message.type) {
    case MessageType::hello: {
      Message again = decode_again(encode_hello(message.host, message.session, message.agent_version));
      FUZZ_CHECK(again.type == MessageType::hello && again.host == message.host &&
                 again.session == message.session && again.agent_version == message.agent_version);
      break;
    }
    case MessageType::dictionary: {
      Message again = decode_again(encode_dictionary(message.dictionary));
      FUZZ_CHECK(again.type == MessageType::dictionary && same_dictionary(again.dictionary, message.dictionary));
      break;
    }
    case MessageType::heartbeat: {
      Message again = decode_again(encode_heartbeat(message.time_ns, message.sequence));
      FUZZ_CHECK(again.type == MessageType::heartbeat && again.time_ns == message.time_ns &&
                 again.sequence == message.sequence);
      break;
    }
    case MessageType::ack: {
      Message again = decode_again(encode_ack(message.sequence));
      FUZZ_CHECK(again.type == MessageType::ack && again.sequence == message.sequence);
      break;
    }
    case MessageType::resync: {
      Message again = decode_again(encode_resync(message.reason));
      FUZZ_CHECK(again.type == MessageType::resync && again.reason == message.reason);
      break;
    }
    case MessageType::control: {
      Message again = decode_again(encode_control(message.sensor, message.interval_s, message.duration_s));
      FUZZ_CHECK(again.type == MessageType::control && again.sensor == message.sensor &&
                 (again.interval_s == message.interval_s || message.interval_s != message.interval_s) &&
                 (again.duration_s == message.duration_s || message.duration_s != message.duration_s));
      break;
    }
    case MessageType::batch:
      break;  // checked once resolved: the agent encodes Samples, not WireSamples
  }
}

// Resolved samples go through an agent's dictionary and a fresh master's, as after a resync.
void check_batch_round_trip(std::uint64_t sequence, const std::vector<Sample>& samples) {
  AgentDictionary agent([](std::string_view) { return std::string("fuzz"); },
                        [](std::string_view, std::string_view) { return MetricInfo{"bytes", Kind::gauge, ""}; });
  std::vector<Bytes> out;
  agent.encode_batch(sequence, samples, out);
  MasterDictionary master;
  std::vector<Sample> again;
  for (const Bytes& bytes : out) {
    Message message = decode_again(bytes);
    try {
      if (message.type == MessageType::dictionary) {
        master.apply(message.dictionary);
      } else {
        FUZZ_CHECK(message.type == MessageType::batch && message.sequence == sequence);
        master.unpack(message);
        for (const auto& wire : message.samples) again.push_back(master.resolve(wire, samples.at(again.size()).host));
      }
    } catch (const ProtocolError& error) {
      std::fprintf(stderr, "an agent's own batch is refused: %s\n", error.what());
      std::abort();
    }
  }
  FUZZ_CHECK(again.size() == samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) FUZZ_CHECK(same_sample(again[i], samples[i]));
}

// One connection as lmaster's receive()/handle()/accept_batch() treat it.
struct Connection {
  std::string host;
  MasterDictionary dictionary;

  void handle(Message& message) {
    switch (message.type) {
      case MessageType::hello:
        host = message.host;
        dictionary.clear();
        return;
      case MessageType::dictionary:
        if (host.empty()) return;
        dictionary.apply(message.dictionary);
        // lmaster indexes the sensor table with every applied series' sensor.
        for (const auto& series : message.dictionary.series) {
          FUZZ_CHECK(series.sensor < dictionary.sensors().size());
          (void)dictionary.sensors()[series.sensor].name.size();
        }
        return;
      case MessageType::batch: {
        if (host.empty()) return;
        // Every batch, in order, as lmaster takes a new one (check_batch_round_trip goes through
        // unpack and resolve, the path of resends and tools).
        std::vector<Sample> samples;
        dictionary.resolve_batch(message, host, samples);
        for (const auto& sample : samples) FUZZ_CHECK(sample.host == host);
        check_batch_round_trip(message.sequence, samples);
        return;
      }
      default:
        return;
    }
  }
};

void one_message(const std::uint8_t* data, std::size_t size) {
  try {
    Message message = decode(data, size);
    check_round_trip(message);
  } catch (const ProtocolError&) {
    // Dropped and logged by lmaster: the expected outcome for most inputs.
  }
}

void one_connection(const std::uint8_t* data, std::size_t size) {
  Connection connection;
  std::size_t at = 0;
  while (size - at >= 2) {
    std::size_t length = data[at] | (std::size_t{data[at + 1]} << 8);
    at += 2;
    if (length > size - at) length = size - at;
    Message message;
    try {
      message = decode(data + at, length);
    } catch (const ProtocolError&) {
      at += length;
      continue;  // dropped; the connection goes on
    }
    at += length;
    try {
      connection.handle(message);
    } catch (const ProtocolError&) {
      connection.dictionary.clear();  // lmaster asks for a resync and starts over
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  one_message(data, size);
  one_connection(data, size);
  return 0;
}
