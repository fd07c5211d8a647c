#include "codec.h"

#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <fmt/format.h>
#include <kj/io.h>

#include "protocol.capnp.h"

namespace fructosa {
namespace {

// Messages are packed: zero bytes of small integers cost little on the wire.
Bytes to_bytes(capnp::MessageBuilder& builder) {
  kj::VectorOutputStream stream;
  capnp::writePackedMessage(stream, builder);
  auto written = stream.getArray();
  return Bytes(reinterpret_cast<const char*>(written.begin()), written.size());
}

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
  }
  return "?";
}

Message decode(const void* data, std::size_t size) {
  if (size == 0) throw ProtocolError("empty message");
  if (size > kMaxMessageBytes) throw ProtocolError(fmt::format("message of {} bytes exceeds the limit", size));
  Message message;
  try {
    // The packed reader unpacks into its own aligned buffer, so `data` may have any alignment.
    kj::ArrayInputStream stream(kj::arrayPtr(static_cast<const kj::byte*>(data), size));
    capnp::ReaderOptions limits;
    limits.traversalLimitInWords = size * 8 / sizeof(capnp::word) + 1024;  // packed expands <= 8x
    limits.nestingLimit = 16;
    capnp::PackedMessageReader reader(stream, limits);
    auto envelope = reader.getRoot<wire::Envelope>();
    if (envelope.getVersion() != kProtocolVersion)
      throw ProtocolError(fmt::format("protocol version {} (this side speaks {})",
                                      envelope.getVersion(), kProtocolVersion));
    switch (envelope.which()) {
      case wire::Envelope::HELLO: {
        auto hello = envelope.getHello();
        message.type = MessageType::hello;
        message.host = hello.getHost();
        message.session = hello.getSession();
        message.agent_version = hello.getAgentVersion();
        if (message.host.empty()) throw ProtocolError("hello without a host name");
        break;
      }
      case wire::Envelope::DICTIONARY: {
        auto in = envelope.getDictionary();
        message.type = MessageType::dictionary;
        auto& out = message.dictionary;
        out.first_sensor = in.getFirstSensor();
        for (auto sensor : in.getSensors()) out.sensors.push_back({sensor.getName(), sensor.getDescription()});
        out.first_series = in.getFirstSeries();
        for (auto series : in.getSeries()) {
          out.series.push_back({series.getSensor(), series.getKey(),
                                MetricInfo{series.getUnit(),
                                           series.getKind() == wire::MetricKind::COUNTER ? Kind::counter : Kind::gauge,
                                           series.getDescription()}});
        }
        break;
      }
      case wire::Envelope::BATCH: {
        auto batch = envelope.getBatch();
        message.type = MessageType::batch;
        message.sequence = batch.getSequence();
        auto samples = batch.getSamples();
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
          out.series.reserve(series.size());
          out.values.reserve(values.size());
          for (auto index : series) out.series.push_back(index);
          for (auto value : values) out.values.push_back(value);
          for (auto label : in.getLabels()) out.labels.push_back({label.getKey(), label.getValue()});
          message.samples.push_back(std::move(out));
        }
        break;
      }
      case wire::Envelope::HEARTBEAT:
        message.type = MessageType::heartbeat;
        message.time_ns = envelope.getHeartbeat().getTimeNs();
        message.sequence = envelope.getHeartbeat().getLastSequence();
        break;
      case wire::Envelope::ACK:
        message.type = MessageType::ack;
        message.sequence = envelope.getAck().getSequence();
        break;
      case wire::Envelope::RESYNC:
        message.type = MessageType::resync;
        message.reason = envelope.getResync().getReason();
        break;
      default:
        throw ProtocolError("unknown message type (a newer peer?)");
    }
  } catch (const kj::Exception& error) {
    throw ProtocolError(fmt::format("undecodable message: {}", error.getDescription().cStr()));
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

void AgentDictionary::encode_batch(std::uint64_t sequence, const std::vector<Sample>& samples,
                                   std::vector<Bytes>& out) {
  DictionaryUpdate update;
  update.first_sensor = static_cast<std::uint32_t>(sensors_.size());
  update.first_series = static_cast<std::uint32_t>(series_.size());
  capnp::MallocMessageBuilder builder;
  auto batch = start(builder).initBatch();
  batch.setSequence(sequence);
  auto list = batch.initSamples(samples.size());
  for (unsigned i = 0; i < samples.size(); ++i) {
    const Sample& in = samples[i];
    auto sample = list[i];
    auto sensor = sensor_index(in.sensor, update);
    sample.setSensor(sensor);
    sample.setTimeNs(in.time_ns);
    sample.setJob(in.job);
    auto series = sample.initSeries(in.metrics.size());
    auto values = sample.initValues(in.metrics.size());
    for (unsigned m = 0; m < in.metrics.size(); ++m) {
      series.set(m, series_index(sensor, in.sensor, in.metrics[m].key, update));
      values.set(m, in.metrics[m].value);
    }
    if (!in.labels.empty()) {
      auto labels = sample.initLabels(in.labels.size());
      for (unsigned l = 0; l < in.labels.size(); ++l) {
        labels[l].setKey(in.labels[l].key);
        labels[l].setValue(in.labels[l].value);
      }
    }
  }
  if (!update.sensors.empty() || !update.series.empty()) out.push_back(encode_dictionary(update));
  out.push_back(to_bytes(builder));
}

Bytes AgentDictionary::encode_everything() const {
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
  sensors_.insert(sensors_.end(), update.sensors.begin(), update.sensors.end());
  for (const auto& series : update.series) {
    if (series.sensor >= sensors_.size())
      throw ProtocolError(fmt::format("series '{}' names unknown sensor #{}", series.key, series.sensor));
    series_.push_back(series);
  }
}

Sample MasterDictionary::resolve(const WireSample& wire, const std::string& host) const {
  if (wire.sensor >= sensors_.size())
    throw ProtocolError(fmt::format("sample names unknown sensor #{}", wire.sensor));
  Sample sample;
  sample.host = host;
  sample.sensor = sensors_[wire.sensor].name;
  sample.time_ns = wire.time_ns;
  sample.job = wire.job;
  sample.metrics.reserve(wire.series.size());
  for (std::size_t i = 0; i < wire.series.size(); ++i) {
    auto index = wire.series[i];
    if (index >= series_.size() || series_[index].sensor != wire.sensor)
      throw ProtocolError(fmt::format("sample of {} names unknown series #{}", sample.sensor, index));
    sample.metrics.push_back({series_[index].key, wire.values[i]});
  }
  sample.labels = wire.labels;
  return sample;
}

const MetricInfo* MasterDictionary::info(std::uint32_t series) const {
  return series < series_.size() ? &series_[series].info : nullptr;
}

void MasterDictionary::clear() {
  sensors_.clear();
  series_.clear();
}

}  // namespace fructosa
