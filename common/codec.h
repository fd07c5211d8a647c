// Encoding and decoding of wire messages (common/protocol.capnp), kept behind plain C++ types
// so that no other translation unit includes Cap'n Proto headers.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "metric.h"

namespace fructosa {

// Every message carries it; a master drops messages of another version (and says so). Version 2
// sends batches in the compact encoding; a version-2 master still reads version-1 agents, so
// lmaster is upgraded first.
inline constexpr std::uint16_t kProtocolVersion = 2;
inline constexpr std::uint16_t kOldestProtocolVersion = 1;

// Largest message either side accepts; bigger ones are garbage or an attack.
inline constexpr std::size_t kMaxMessageBytes = 64u << 20;

using Bytes = std::string;  // an encoded message (binary)

// A message that is not a valid fructosa message (garbage, truncated, other version, an index
// outside the sender's dictionary). The receiver logs it with the peer and drops it.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class MessageType { hello, dictionary, batch, heartbeat, ack, resync, control };
std::string_view to_string(MessageType type);

struct SensorDescription {
  std::string name;
  std::string description;
};

struct SeriesDescription {
  std::uint32_t sensor = 0;  // index into the sensor dictionary
  std::string key;
  MetricInfo info;
};

struct DictionaryUpdate {
  std::uint32_t first_sensor = 0;
  std::vector<SensorDescription> sensors;
  std::uint32_t first_series = 0;
  std::vector<SeriesDescription> series;
};

// A sample as it travels: sensor and series are dictionary indices.
struct WireSample {
  std::uint32_t sensor = 0;
  std::int64_t time_ns = 0;
  std::uint64_t job = 0;
  std::vector<std::uint32_t> series;
  std::vector<double> values;
  std::vector<Label> labels;
};

// Samples that were resolved before and are done with, to be filled again in their order: their
// strings and vectors keep their memory, so that filling them copies names without allocating
// (lmaster's SampleRecycler gives its outputs' rounds back this way).
struct ReusableSamples {
  std::vector<Sample> samples;
  std::size_t next = 0;  // samples before it were taken (moved from)

  bool empty() const { return next == samples.size(); }
  Sample take() { return std::move(samples[next++]); }
};

// One decoded message; only the members of its type are filled.
struct Message {
  MessageType type = MessageType::heartbeat;
  std::string host;             // hello
  std::uint64_t session = 0;    // hello
  std::string agent_version;    // hello
  DictionaryUpdate dictionary;  // dictionary
  std::uint64_t sequence = 0;   // batch, ack, heartbeat (last sent)
  std::vector<WireSample> samples;  // batch (version 1, or after MasterDictionary::unpack)
  std::string compact;          // batch (version 2): samples for MasterDictionary::unpack
  std::int64_t time_ns = 0;     // heartbeat
  std::string reason;           // resync
  std::string sensor;           // control
  double interval_s = 0;        // control
  double duration_s = 0;        // control
};

// Throws ProtocolError (never anything else, whatever the bytes). Copes with any alignment of
// `data`. Memory and time are bounded by the message size: Cap'n Proto traversal and nesting
// limits, and a cap on what the decoded copies may take (a small message cannot claim millions
// of empty entries).
Message decode(const void* data, std::size_t size);

// `version` is only ever changed by tests that check how a peer of another version is treated.
Bytes encode_hello(const std::string& host, std::uint64_t session, const std::string& agent_version,
                   std::uint16_t version = kProtocolVersion);
Bytes encode_heartbeat(std::int64_t time_ns, std::uint64_t last_sequence);
Bytes encode_ack(std::uint64_t sequence);
Bytes encode_resync(const std::string& reason);
Bytes encode_control(const std::string& sensor, double interval_s, double duration_s);
Bytes encode_dictionary(const DictionaryUpdate& update);

// What both ends of a connection remember of its last sample of each (sensor, job): the compact
// batch encoding (compact_batch.h) sends only what changed since. Both sides update it with the
// same samples in the same order, and clear it with the dictionary.
struct ConnectionMemory {
  struct Last {
    std::vector<std::uint32_t> series;
    std::vector<double> values;
    std::vector<Label> labels;
  };
  struct Key {
    std::uint32_t sensor;
    std::uint64_t job;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& key) const noexcept {
      return std::hash<std::uint64_t>{}(key.job * 0x9e3779b97f4a7c15ull ^ key.sensor);
    }
  };
  std::unordered_map<Key, Last, KeyHash> last;
  std::int64_t last_time_ns = 0;
  void clear() {
    last.clear();
    last_time_ns = 0;
  }
};

// The agent's half of the per-connection dictionary: assigns indices to sensors and series
// the first time it meets them and remembers everything for a resync.
class AgentDictionary {
 public:
  // Metadata for a sensor's description and a key's catalog entry.
  using SensorInfoLookup = std::function<std::string(std::string_view sensor)>;
  using MetricInfoLookup = std::function<MetricInfo(std::string_view sensor, std::string_view key)>;

  AgentDictionary(SensorInfoLookup sensor_info, MetricInfoLookup metric_info);

  // Encodes one batch (compact encoding: differences from the previous batches encoded on this
  // connection, so batches must reach the master in the order they were encoded). When the
  // samples bring names not sent yet, a Dictionary message with just those is appended to `out`
  // first; the Batch message follows.
  void encode_batch(std::uint64_t sequence, const std::vector<Sample>& samples, std::vector<Bytes>& out);

  // Everything known so far, for a master that asked for a resync (or a new one): the connection
  // starts over, and the next batch is encoded without reference to earlier ones.
  Bytes encode_everything();

  std::size_t series_count() const { return series_.size(); }

 private:
  std::uint32_t sensor_index(const std::string& sensor, DictionaryUpdate& update);
  // sensor_index() of the batch's sample at `position`, compared first with the sensor there in
  // the batch before (an agent's rounds list their sensors in the same order).
  std::uint32_t sensor_at(std::size_t position, const std::string& sensor, DictionaryUpdate& update);
  std::uint32_t series_index(std::uint32_t sensor, const std::string& sensor_name,
                             const std::string& key, DictionaryUpdate& update);
  // Fills series_scratch_ with the indices of `sample`'s keys.
  void sample_series(std::uint32_t sensor, const Sample& sample, DictionaryUpdate& update);

  SensorInfoLookup sensor_info_;
  MetricInfoLookup metric_info_;
  ConnectionMemory memory_;
  std::vector<std::uint32_t> series_scratch_;
  std::vector<SensorDescription> sensors_;
  std::vector<SeriesDescription> series_;
  std::unordered_map<std::string, std::uint32_t> sensor_ids_;
  std::vector<std::unordered_map<std::string, std::uint32_t>> series_ids_;  // per sensor index, by key
  // A sensor sends the same keys in the same order round after round: each key is first
  // compared with the key at its place in the sensor's sample of the batch before (the n-th
  // sample of the sensor in the batch, for sensors with one sample per CPU, disk or job), and
  // hashed only when it differs. Hashing every key was a third of the encoding's CPU.
  struct SampleShape {
    std::vector<std::string> keys;
    std::vector<std::uint32_t> series;
  };
  static constexpr std::size_t kMaxShapesPerSensor = 1024;
  std::vector<std::vector<SampleShape>> shapes_;  // per sensor index, per n-th sample in a batch
  std::vector<std::uint32_t> samples_in_batch_;   // per sensor index, in the batch being encoded
  struct SensorAt {
    std::string name;
    std::uint32_t index = 0;
  };
  std::vector<SensorAt> sensor_at_;  // per position in the batch before (at most kMaxShapesPerSensor)
};

// The master's half: grows with Dictionary messages and turns WireSamples into Samples.
class MasterDictionary {
 public:
  // Throws ProtocolError if the update does not continue the dictionary.
  void apply(const DictionaryUpdate& update);
  // Turns a version-2 batch's `compact` samples into `samples` (values as they were read), in
  // the order the agent sent them: every batch of the connection goes through here, resends of
  // accepted ones included. Throws ProtocolError on malformed data (the connection must then
  // start over: clear() and resync).
  void unpack(Message& batch);
  // Throws ProtocolError on an index the agent never defined.
  Sample resolve(const WireSample& wire, const std::string& host) const;
  // unpack and resolve in one pass, as lmaster takes a new batch: its samples of `host` are
  // appended to `out` (a version-2 batch's decoded one at a time into a reused WireSample).
  // Throws ProtocolError as they do; the samples it appended before then are the caller's to drop.
  // With `reusable`, the samples appended are its own, filled again (see ReusableSamples).
  void resolve_batch(Message& batch, const std::string& host, std::vector<Sample>& out,
                     ReusableSamples* reusable = nullptr);

  // What a connection keeps of a series: what resolving its samples needs. Units and
  // descriptions are the same for every agent: the master keeps them once (MetricInfoStore).
  struct KnownSeries {
    std::string key;
    std::uint32_t sensor = 0;
    Kind kind = Kind::gauge;
  };
  // The series' kind; nullopt for an index the agent never defined.
  std::optional<Kind> kind(std::uint32_t series) const;
  const std::vector<SensorDescription>& sensors() const { return sensors_; }
  const std::vector<KnownSeries>& series() const { return series_; }
  void clear();

  // Far beyond any agent's catalog; a peer that goes past them is refused (ProtocolError).
  static constexpr std::size_t kMaxSensors = 1u << 16;
  static constexpr std::size_t kMaxSeries = 1u << 20;

 private:
  void resolve_into(const WireSample& wire, const std::string& host, Sample& sample) const;
  // All but the labels.
  void resolve_names(const WireSample& wire, const std::string& host, Sample& sample) const;
  std::vector<SensorDescription> sensors_;
  std::vector<KnownSeries> series_;
  ConnectionMemory memory_;
};

}  // namespace fructosa
