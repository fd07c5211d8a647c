#include "codec.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fmt/format.h>

#include "capnp_packing.h"
#include "compact_batch.h"
#include "protocol.capnp.h"
#include "short_text.h"

namespace fructosa {
namespace {

// Messages are packed: zero bytes of small integers cost little on the wire.
Bytes to_bytes(capnp::MessageBuilder& builder) { return pack_message(builder); }

wire::Envelope::Builder start(capnp::MallocMessageBuilder& builder) {
  auto envelope = builder.initRoot<wire::Envelope>();
  envelope.setVersion(kProtocolVersion);
  return envelope;
}

wire::MetricKind to_wire(Kind kind) {
  return kind == Kind::counter ? wire::MetricKind::COUNTER : wire::MetricKind::GAUGE;
}

void fill_dictionary(wire::Dictionary::Builder out, const DictionaryUpdate& update) {
  out.setFirstSensor(update.first_sensor);
  auto sensors = out.initSensors(update.sensors.size());
  for (unsigned i = 0; i < update.sensors.size(); ++i) {
    sensors[i].setName(update.sensors[i].name);
    sensors[i].setDescription(update.sensors[i].description);
  }
  out.setFirstSeries(update.first_series);
  auto series = out.initSeries(update.series.size());
  for (unsigned i = 0; i < update.series.size(); ++i) {
    const auto& in = update.series[i];
    series[i].setSensor(in.sensor);
    series[i].setKey(in.key);
    series[i].setUnit(in.info.unit);
    series[i].setKind(to_wire(in.info.kind));
    series[i].setDescription(in.info.description);
  }
}

}  // namespace

std::string_view to_string(MessageType type) {
  switch (type) {
    case MessageType::hello: return "hello";
    case MessageType::dictionary: return "dictionary";
    case MessageType::batch: return "batch";
    case MessageType::heartbeat: return "heartbeat";
    case MessageType::ack: return "ack";
    case MessageType::resync: return "resync";
    case MessageType::control: return "control";
  }
  return "?";
}

namespace {

// What decoding one message may cost, beyond the message itself. Cap'n Proto's traversal limit
// bounds how much of the message is read; this bounds what the copies into C++ objects take,
// since a list of empty structs costs one word on the wire but a whole WireSample decoded.
// Honest messages decode to at most ~25 times their packed size (a dictionary of entries with
// empty texts); 64 times leaves room and still refuses such amplification.
class DecodeBudget {
 public:
  explicit DecodeBudget(std::size_t wire_bytes)
      : left_(std::min<std::size_t>(kMaxDecodedBytes, wire_bytes * 64 + (64u << 10))) {}

  void spend(std::size_t bytes, const char* what) {
    if (bytes > left_)
      throw ProtocolError(fmt::format("message decodes to more than {} bytes (at {})", limit(), what));
    left_ -= bytes;
  }
  void spend(std::size_t count, std::size_t each, const char* what) {
    if (each != 0 && count > left_ / each)
      throw ProtocolError(fmt::format("message decodes to more than {} bytes (at {})", limit(), what));
    left_ -= count * each;
  }
  // Cap'n Proto's Text ends at its NUL; one inside is garbage that would also cut names short
  // wherever they become C strings (HDF5 paths), so it is refused rather than passed on.
  std::string text(capnp::Text::Reader text, const char* what) {
    spend(text.size(), what);
    if (std::memchr(text.cStr(), '\0', text.size()))
      throw ProtocolError(fmt::format("{} contains a NUL byte", what));
    return std::string(text.cStr(), text.size());
  }

 private:
  static constexpr std::size_t kMaxDecodedBytes = 256u << 20;
  std::size_t limit() const { return kMaxDecodedBytes; }
  std::size_t left_;
};

// Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    auto byte = static_cast<unsigned char>(text[i]);
    std::size_t length = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xe ? 3 : (byte >> 3) == 0x1e ? 4 : 0;
    if (length == 0 || text.size() - i < length) return false;
    std::uint32_t point = length == 1 ? byte : byte & (0x7f >> length);
    for (std::size_t k = 1; k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      point = (point << 6) | (next & 0x3f);
    }
    static constexpr std::uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (point < kSmallest[length] || point > 0x10ffff || (point >= 0xd800 && point <= 0xdfff)) return false;
    i += length;
  }
  return true;
}


}  // namespace

Message decode(const void* data, std::size_t size) {
  if (size == 0) throw ProtocolError("empty message");
  if (size > kMaxMessageBytes) throw ProtocolError(fmt::format("message of {} bytes exceeds the limit", size));
  Message message;
  DecodeBudget budget(size);
  // Unpacked into words of our own: aligned whatever the alignment of `data`.
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::vector<std::uint64_t> words(unpack_message(bytes, size, nullptr));
  unpack_message(bytes, size, words.data());
  try {
    capnp::ReaderOptions limits;
    // Honest messages are read once, field by field, so traversal stays below the message's
    // own size; twice that refuses pointers that make the reader visit the same data over and
    // over (and the FlatArrayMessageReader refuses segments beyond the buffer).
    limits.traversalLimitInWords = 2 * words.size() + 64;
    // The schema nests 7 deep (Envelope, Batch, samples, Sample, labels, Label, Text): room for
    // appended fields, none for pointer chains built to exhaust the stack.
    limits.nestingLimit = 16;
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reinterpret_cast<const capnp::word*>(words.data()), words.size()), limits);
    auto envelope = reader.getRoot<wire::Envelope>();
    if (envelope.getVersion() < kOldestProtocolVersion || envelope.getVersion() > kProtocolVersion)
      throw ProtocolError(fmt::format("protocol version {} (this side speaks {} to {})", envelope.getVersion(),
                                      kOldestProtocolVersion, kProtocolVersion));
    switch (envelope.which()) {
      case wire::Envelope::HELLO: {
        auto hello = envelope.getHello();
        message.type = MessageType::hello;
        message.host = budget.text(hello.getHost(), "hello host");
        message.session = hello.getSession();
        message.agent_version = budget.text(hello.getAgentVersion(), "hello agentVersion");
        if (message.host.empty()) throw ProtocolError("hello without a host name");
        // The host name becomes a Graphite path, HDF5 group and JSON key (agents.json): it
        // must at least be text.
        if (!is_utf8(message.host)) throw ProtocolError("hello with a host name that is not UTF-8");
        break;
      }
      case wire::Envelope::DICTIONARY: {
        auto in = envelope.getDictionary();
        message.type = MessageType::dictionary;
        auto& out = message.dictionary;
        out.first_sensor = in.getFirstSensor();
        auto sensors = in.getSensors();
        budget.spend(sensors.size(), sizeof(SensorDescription), "dictionary sensors");
        out.sensors.reserve(sensors.size());
        for (auto sensor : sensors)
          out.sensors.push_back({budget.text(sensor.getName(), "sensor name"),
                                 budget.text(sensor.getDescription(), "sensor description")});
        out.first_series = in.getFirstSeries();
        auto series_list = in.getSeries();
        budget.spend(series_list.size(), sizeof(SeriesDescription), "dictionary series");
        out.series.reserve(series_list.size());
        for (auto series : series_list) {
          out.series.push_back({series.getSensor(), budget.text(series.getKey(), "series key"),
                                MetricInfo{budget.text(series.getUnit(), "series unit"),
                                           series.getKind() == wire::MetricKind::COUNTER ? Kind::counter : Kind::gauge,
                                           budget.text(series.getDescription(), "series description")}});
        }
        break;
      }
      case wire::Envelope::BATCH: {
        auto batch = envelope.getBatch();
        message.type = MessageType::batch;
        message.sequence = batch.getSequence();
        auto samples = batch.getSamples();
        if (batch.hasCompactSamples()) {
          auto compact = batch.getCompactSamples();
          if (samples.size() != 0) throw ProtocolError("batch with both samples and compactSamples");
          budget.spend(compact.size(), "batch compactSamples");
          message.compact.assign(reinterpret_cast<const char*>(compact.begin()), compact.size());
        }
        budget.spend(samples.size(), sizeof(WireSample), "batch samples");
        message.samples.reserve(samples.size());
        for (auto in : samples) {
          WireSample out;
          out.sensor = in.getSensor();
          out.time_ns = in.getTimeNs();
          out.job = in.getJob();
          auto series = in.getSeries();
          auto values = in.getValues();
          if (series.size() != values.size())
            throw ProtocolError(fmt::format("sample with {} series but {} values", series.size(), values.size()));
          budget.spend(series.size(), sizeof(std::uint32_t) + sizeof(double), "sample values");
          out.series.reserve(series.size());
          out.values.reserve(values.size());
          for (auto index : series) out.series.push_back(index);
          for (auto value : values) out.values.push_back(value);
          auto labels = in.getLabels();
          budget.spend(labels.size(), sizeof(Label), "sample labels");
          out.labels.reserve(labels.size());
          for (auto label : labels)
            out.labels.push_back({budget.text(label.getKey(), "label key"), budget.text(label.getValue(), "label value")});
          message.samples.push_back(std::move(out));
        }
        break;
      }
      case wire::Envelope::HEARTBEAT: {
        auto heartbeat = envelope.getHeartbeat();
        message.type = MessageType::heartbeat;
        message.time_ns = heartbeat.getTimeNs();
        message.sequence = heartbeat.getLastSequence();
        break;
      }
      case wire::Envelope::ACK:
        message.type = MessageType::ack;
        message.sequence = envelope.getAck().getSequence();
        break;
      case wire::Envelope::RESYNC:
        message.type = MessageType::resync;
        message.reason = budget.text(envelope.getResync().getReason(), "resync reason");
        break;
      case wire::Envelope::CONTROL: {
        auto control = envelope.getControl();
        message.type = MessageType::control;
        message.sensor = budget.text(control.getSensor(), "control sensor");
        message.interval_s = control.getIntervalS();
        message.duration_s = control.getDurationS();
        break;
      }
      default:
        throw ProtocolError("unknown message type (a newer peer?)");
    }
  } catch (const kj::Exception& error) {
    throw ProtocolError(fmt::format("undecodable message: {}", error.getDescription().cStr()));
  } catch (const std::bad_alloc&) {
    // Cannot happen within the limits above; if it does, this message is still the one to drop.
    throw ProtocolError("undecodable message: out of memory while decoding");
  }
  return message;
}


Bytes encode_hello(const std::string& host, std::uint64_t session, const std::string& agent_version,
                   std::uint16_t version) {
  capnp::MallocMessageBuilder builder;
  auto envelope = start(builder);
  envelope.setVersion(version);
  auto hello = envelope.initHello();
  hello.setHost(host);
  hello.setSession(session);
  hello.setAgentVersion(agent_version);
  return to_bytes(builder);
}

Bytes encode_heartbeat(std::int64_t time_ns, std::uint64_t last_sequence) {
  capnp::MallocMessageBuilder builder;
  auto heartbeat = start(builder).initHeartbeat();
  heartbeat.setTimeNs(time_ns);
  heartbeat.setLastSequence(last_sequence);
  return to_bytes(builder);
}

Bytes encode_ack(std::uint64_t sequence) {
  capnp::MallocMessageBuilder builder;
  start(builder).initAck().setSequence(sequence);
  return to_bytes(builder);
}

Bytes encode_resync(const std::string& reason) {
  capnp::MallocMessageBuilder builder;
  start(builder).initResync().setReason(reason);
  return to_bytes(builder);
}

Bytes encode_control(const std::string& sensor, double interval_s, double duration_s) {
  capnp::MallocMessageBuilder builder;
  auto control = start(builder).initControl();
  control.setSensor(sensor);
  control.setIntervalS(interval_s);
  control.setDurationS(duration_s);
  return to_bytes(builder);
}

Bytes encode_dictionary(const DictionaryUpdate& update) {
  capnp::MallocMessageBuilder builder;
  fill_dictionary(start(builder).initDictionary(), update);
  return to_bytes(builder);
}

AgentDictionary::AgentDictionary(SensorInfoLookup sensor_info, MetricInfoLookup metric_info)
    : sensor_info_(std::move(sensor_info)), metric_info_(std::move(metric_info)) {}

std::uint32_t AgentDictionary::sensor_index(const std::string& sensor, DictionaryUpdate& update) {
  auto found = sensor_ids_.find(sensor);
  if (found != sensor_ids_.end()) return found->second;
  auto index = static_cast<std::uint32_t>(sensors_.size());
  if (update.sensors.empty()) update.first_sensor = index;
  sensors_.push_back({sensor, sensor_info_(sensor)});
  update.sensors.push_back(sensors_.back());
  sensor_ids_.emplace(sensor, index);
  return index;
}

std::uint32_t AgentDictionary::sensor_at(std::size_t position, const std::string& sensor, DictionaryUpdate& update) {
  if (position < sensor_at_.size() && same_text(sensor_at_[position].name, sensor)) return sensor_at_[position].index;
  auto index = sensor_index(sensor, update);
  if (position < kMaxShapesPerSensor) {
    if (position >= sensor_at_.size()) sensor_at_.resize(position + 1);
    sensor_at_[position] = {sensor, index};
  }
  return index;
}

std::uint32_t AgentDictionary::series_index(std::uint32_t sensor, const std::string& sensor_name,
                                            const std::string& key, DictionaryUpdate& update) {
  if (series_ids_.size() <= sensor) series_ids_.resize(sensor + 1);
  auto& ids = series_ids_[sensor];
  auto found = ids.find(key);
  if (found != ids.end()) return found->second;
  auto index = static_cast<std::uint32_t>(series_.size());
  if (update.series.empty()) update.first_series = index;
  series_.push_back({sensor, key, metric_info_(sensor_name, key)});
  update.series.push_back(series_.back());
  ids.emplace(key, index);
  return index;
}

void AgentDictionary::sample_series(std::uint32_t sensor, const Sample& sample, DictionaryUpdate& update) {
  series_scratch_.clear();
  if (samples_in_batch_.size() <= sensor) samples_in_batch_.resize(sensor + 1, 0);
  std::uint32_t nth = samples_in_batch_[sensor]++;
  if (nth >= kMaxShapesPerSensor) {  // bounded: beyond, every key is looked up
    for (const auto& metric : sample.metrics)
      series_scratch_.push_back(series_index(sensor, sample.sensor, metric.key, update));
    return;
  }
  if (shapes_.size() <= sensor) shapes_.resize(sensor + 1);
  auto& shapes = shapes_[sensor];
  if (shapes.size() <= nth) shapes.resize(nth + 1);
  SampleShape& shape = shapes[nth];
  const std::size_t count = sample.metrics.size();
  for (std::size_t k = 0; k < count; ++k) {
    const std::string& key = sample.metrics[k].key;
    if (k < shape.keys.size() && same_text(shape.keys[k], key)) {
      series_scratch_.push_back(shape.series[k]);
      continue;
    }
    auto index = series_index(sensor, sample.sensor, key, update);
    series_scratch_.push_back(index);
    if (k < shape.keys.size()) {
      shape.keys[k] = key;
      shape.series[k] = index;
    } else {
      shape.keys.push_back(key);
      shape.series.push_back(index);
    }
  }
}

void AgentDictionary::encode_batch(std::uint64_t sequence, const std::vector<Sample>& samples,
                                   std::vector<Bytes>& out) {
  DictionaryUpdate update;
  update.first_sensor = static_cast<std::uint32_t>(sensors_.size());
  update.first_series = static_cast<std::uint32_t>(series_.size());
  CompactBatchWriter blob(memory_, samples.size());
  std::fill(samples_in_batch_.begin(), samples_in_batch_.end(), 0);
  for (std::size_t position = 0; position < samples.size(); ++position) {
    const Sample& in = samples[position];
    auto sensor = sensor_at(position, in.sensor, update);
    sample_series(sensor, in, update);
    blob.add(in, sensor, series_scratch_);
  }
  const std::string& bytes = blob.bytes();
  // One segment that fits the batch (the default first segment is 8 KiB, zeroed for each batch).
  capnp::MallocMessageBuilder builder(static_cast<unsigned>(bytes.size() / sizeof(capnp::word) + 16));
  auto batch = start(builder).initBatch();
  batch.setSequence(sequence);
  batch.setCompactSamples(kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
  if (!update.sensors.empty() || !update.series.empty()) out.push_back(encode_dictionary(update));
  out.push_back(to_bytes(builder));
}

Bytes AgentDictionary::encode_everything() {
  memory_.clear();
  return encode_dictionary(DictionaryUpdate{0, sensors_, 0, series_});
}

void MasterDictionary::apply(const DictionaryUpdate& update) {
  // Entries must continue the dictionary; a repeat of known entries (a resync) starts over.
  if (update.first_sensor == 0 && update.first_series == 0) clear();
  if (!update.sensors.empty() && update.first_sensor != sensors_.size())
    throw ProtocolError(fmt::format("dictionary gap: sensors continue at {} but {} are known",
                                    update.first_sensor, sensors_.size()));
  if (!update.series.empty() && update.first_series != series_.size())
    throw ProtocolError(fmt::format("dictionary gap: series continue at {} but {} are known",
                                    update.first_series, series_.size()));
  // One connection's dictionary cannot grow without end, however many updates it sends.
  if (update.sensors.size() > kMaxSensors - sensors_.size() || update.series.size() > kMaxSeries - series_.size())
    throw ProtocolError(fmt::format("dictionary would exceed {} sensors or {} series", kMaxSensors, kMaxSeries));
  // Checked before anything is added: a rejected update leaves the dictionary as it was.
  std::size_t sensor_count = sensors_.size() + update.sensors.size();
  for (const auto& series : update.series)
    if (series.sensor >= sensor_count)
      throw ProtocolError(fmt::format("series '{}' names unknown sensor #{}", series.key, series.sensor));
  sensors_.insert(sensors_.end(), update.sensors.begin(), update.sensors.end());
  // Keys and kinds only (KnownSeries): copies of every agent's units and descriptions took
  // 33 MiB of lmaster's heap with 1000 agents of 200 series.
  series_.reserve(series_.size() + update.series.size());
  for (const auto& series : update.series) series_.push_back({series.key, series.sensor, series.info.kind});
}

Sample MasterDictionary::resolve(const WireSample& wire, const std::string& host) const {
  Sample sample;
  resolve_into(wire, host, sample);
  return sample;
}

void MasterDictionary::resolve_batch(Message& batch, const std::string& host, std::vector<Sample>& out,
                                     ReusableSamples* reusable) {
  if (batch.type != MessageType::batch) return;
  if (batch.compact.empty()) {  // version 1
    for (const auto& wire : batch.samples) resolve_into(wire, host, out.emplace_back());
    return;
  }
  decode_compact_batch(batch.compact, memory_, [&](const WireSample& wire, const std::vector<Label>& labels) {
    Sample& sample = reusable && !reusable->empty() ? out.emplace_back(reusable->take()) : out.emplace_back();
    resolve_names(wire, host, sample);
    sample.labels = labels;  // a reused sample's label strings keep their memory
  });
  batch.compact.clear();
}

void MasterDictionary::resolve_into(const WireSample& wire, const std::string& host, Sample& sample) const {
  resolve_names(wire, host, sample);
  sample.labels = wire.labels;
}

void MasterDictionary::resolve_names(const WireSample& wire, const std::string& host, Sample& sample) const {
  if (wire.sensor >= sensors_.size())
    throw ProtocolError(fmt::format("sample names unknown sensor #{}", wire.sensor));
  if (wire.series.size() != wire.values.size())
    throw ProtocolError(fmt::format("sample with {} series but {} values", wire.series.size(), wire.values.size()));
  assign_text(sample.host, host);
  assign_text(sample.sensor, sensors_[wire.sensor].name);
  sample.time_ns = wire.time_ns;
  sample.job = wire.job;
  // Assigned in place: a reused sample's keys are copied into the memory they already have.
  sample.metrics.resize(wire.series.size());
  for (std::size_t i = 0; i < wire.series.size(); ++i) {
    auto index = wire.series[i];
    if (index >= series_.size() || series_[index].sensor != wire.sensor)
      throw ProtocolError(fmt::format("sample of {} names unknown series #{}", sample.sensor, index));
    MetricValue& metric = sample.metrics[i];
    assign_text(metric.key, series_[index].key);
    metric.value = wire.values[i];
  }
}

std::optional<Kind> MasterDictionary::kind(std::uint32_t series) const {
  if (series >= series_.size()) return std::nullopt;
  return series_[series].kind;
}

void MasterDictionary::unpack(Message& batch) {
  if (batch.type != MessageType::batch || batch.compact.empty()) return;
  batch.samples = decode_compact_batch(batch.compact, memory_);
  batch.compact.clear();
}

void MasterDictionary::clear() {
  sensors_.clear();
  series_.clear();
  memory_.clear();
}

}  // namespace fructosa
