#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "codec.h"

using namespace fructosa;

namespace {

Sample codec_sample(const std::string& sensor, std::int64_t time_ns, std::vector<MetricValue> metrics,
                   std::uint64_t job = 0) {
  Sample sample;
  sample.host = "node07";
  sample.sensor = sensor;
  sample.time_ns = time_ns;
  sample.job = job;
  sample.metrics = std::move(metrics);
  return sample;
}

AgentDictionary make_dictionary() {
  return AgentDictionary([](std::string_view sensor) { return "about " + std::string(sensor); },
                         [](std::string_view, std::string_view key) {
                           return MetricInfo{key == "percent" ? "percent" : "bytes",
                                             key == "sin" ? Kind::counter : Kind::gauge, "the " + std::string(key)};
                         });
}

}  // namespace

TEST(Codec, SmallMessagesRoundTrip) {
  Message hello = decode(encode_hello("node07", 0x1234, "0.1.0").data(), encode_hello("node07", 0x1234, "0.1.0").size());
  EXPECT_EQ(hello.type, MessageType::hello);
  EXPECT_EQ(hello.host, "node07");
  EXPECT_EQ(hello.session, 0x1234u);
  EXPECT_EQ(hello.agent_version, "0.1.0");

  Bytes ack = encode_ack(42);
  EXPECT_EQ(decode(ack.data(), ack.size()).sequence, 42u);
  Bytes heartbeat = encode_heartbeat(1732190000123456789, 7);
  Message beat = decode(heartbeat.data(), heartbeat.size());
  EXPECT_EQ(beat.type, MessageType::heartbeat);
  EXPECT_EQ(beat.time_ns, 1732190000123456789);
  EXPECT_EQ(beat.sequence, 7u);
  Bytes resync = encode_resync("restarted");
  EXPECT_EQ(decode(resync.data(), resync.size()).reason, "restarted");
}

TEST(Codec, BatchRoundTripThroughBothDictionaries) {
  AgentDictionary agent = make_dictionary();
  std::vector<Sample> samples{
      codec_sample("VirtualMemory", 1000, {{"total", 25165824000.0}, {"percent", 12.3}}),
      codec_sample("SwapMemory", 1000, {{"sin", 1e15}}, 4242),
  };
  samples[1].labels.push_back({"device", "/dev/sda2"});
  std::vector<Bytes> messages;
  agent.encode_batch(1, samples, messages);
  ASSERT_EQ(messages.size(), 2u);  // the dictionary first, then the batch

  MasterDictionary master;
  Message dictionary = decode(messages[0].data(), messages[0].size());
  ASSERT_EQ(dictionary.type, MessageType::dictionary);
  master.apply(dictionary.dictionary);
  ASSERT_EQ(master.sensors().size(), 2u);
  EXPECT_EQ(master.sensors()[1].description, "about SwapMemory");
  // Units and descriptions travel in the update (the master's MetricInfoStore keeps them once);
  // the connection's dictionary keeps keys and kinds.
  EXPECT_EQ(dictionary.dictionary.series[1].info.unit, "percent");
  EXPECT_EQ(dictionary.dictionary.series[0].info.description, "the total");
  ASSERT_EQ(master.series().size(), 3u);
  EXPECT_EQ(master.series()[2].kind, Kind::counter);
  EXPECT_EQ(master.kind(2), Kind::counter);
  EXPECT_EQ(master.kind(3), std::nullopt);
  EXPECT_EQ(master.series()[1].key, dictionary.dictionary.series[1].key);
  EXPECT_EQ(master.series()[1].sensor, dictionary.dictionary.series[1].sensor);

  Message batch = decode(messages[1].data(), messages[1].size());
  ASSERT_EQ(batch.type, MessageType::batch);
  EXPECT_EQ(batch.sequence, 1u);
  master.unpack(batch);
  ASSERT_EQ(batch.samples.size(), 2u);
  Sample vm = master.resolve(batch.samples[0], "node07");
  EXPECT_EQ(vm.sensor, "VirtualMemory");
  EXPECT_EQ(vm.time_ns, 1000);
  ASSERT_EQ(vm.metrics.size(), 2u);
  EXPECT_EQ(vm.metrics[0].key, "total");
  EXPECT_EQ(vm.metrics[0].value, 25165824000.0);
  EXPECT_EQ(vm.metrics[1].value, 12.3);
  Sample swap = master.resolve(batch.samples[1], "node07");
  EXPECT_EQ(swap.job, 4242u);
  EXPECT_EQ(swap.metrics[0].value, 1e15);
  ASSERT_EQ(swap.labels.size(), 1u);
  EXPECT_EQ(swap.labels[0].value, "/dev/sda2");
}

TEST(Codec, NamesTravelOnceThenOnlyNewOnes) {
  AgentDictionary agent = make_dictionary();
  MasterDictionary master;
  std::vector<Bytes> first, second, third;
  agent.encode_batch(1, {codec_sample("VirtualMemory", 1, {{"total", 1}, {"percent", 2}})}, first);
  agent.encode_batch(2, {codec_sample("VirtualMemory", 2, {{"total", 3}, {"percent", 4}})}, second);
  agent.encode_batch(3, {codec_sample("VirtualMemory", 3, {{"total", 5}, {"used", 6}})}, third);
  EXPECT_EQ(first.size(), 2u);
  EXPECT_EQ(second.size(), 1u);  // nothing new: the batch alone
  ASSERT_EQ(third.size(), 2u);   // only "used" is new
  // The steady batch is much smaller than the first message with names.
  EXPECT_LT(second[0].size(), first[0].size());

  for (auto* messages : {&first, &second, &third}) {
    for (const auto& bytes : *messages) {
      Message message = decode(bytes.data(), bytes.size());
      if (message.type == MessageType::dictionary) {
        if (messages == &third) {
          EXPECT_EQ(message.dictionary.first_series, 2u);
          EXPECT_EQ(message.dictionary.series.size(), 1u);
          EXPECT_TRUE(message.dictionary.sensors.empty());
        }
        master.apply(message.dictionary);
      } else {
        master.unpack(message);
        Sample sample = master.resolve(message.samples.at(0), "n");
        EXPECT_EQ(sample.metrics.size(), 2u);
      }
    }
  }
  EXPECT_EQ(master.series().size(), 3u);

  // A resync sends everything again and starts the connection over: a fresh master dictionary
  // understands the next batch.
  MasterDictionary fresh;
  Bytes everything = agent.encode_everything();
  fresh.apply(decode(everything.data(), everything.size()).dictionary);
  std::vector<Bytes> fourth;
  agent.encode_batch(4, {codec_sample("VirtualMemory", 4, {{"total", 5}, {"used", 7}})}, fourth);
  ASSERT_EQ(fourth.size(), 1u);
  Message batch = decode(fourth[0].data(), fourth[0].size());
  fresh.unpack(batch);
  Sample sample = fresh.resolve(batch.samples.at(0), "n");
  EXPECT_EQ(sample.metrics[1].key, "used");
  EXPECT_EQ(sample.metrics[1].value, 7);
}

// The agent remembers each sensor's keys at their places from the batch before (per n-th sample
// of the sensor in a batch); keys that move, change, or come in a sample more or less must still
// reach the master under their own names.
TEST(Codec, KeysThatMoveOrChangeBetweenBatchesKeepTheirNames) {
  AgentDictionary agent = make_dictionary();
  MasterDictionary master;
  auto round_trip = [&](std::uint64_t sequence, const std::vector<Sample>& samples) {
    std::vector<Bytes> messages;
    agent.encode_batch(sequence, samples, messages);
    std::vector<Sample> got;
    for (const auto& bytes : messages) {
      Message message = decode(bytes.data(), bytes.size());
      if (message.type == MessageType::dictionary) {
        master.apply(message.dictionary);
        continue;
      }
      master.unpack(message);
      for (const auto& wire : message.samples) got.push_back(master.resolve(wire, "node07"));
    }
    return got;
  };
  auto keys_and_values = [](const Sample& sample) {
    std::vector<std::pair<std::string, double>> out;
    for (const auto& metric : sample.metrics) out.emplace_back(metric.key, metric.value);
    return out;
  };
  std::vector<std::vector<Sample>> batches{
      {codec_sample("Disk", 1, {{"read", 1}, {"write", 2}}), codec_sample("Disk", 1, {{"read", 3}, {"write", 4}})},
      // swapped keys in the first sample, one key less in the second, a third sample
      {codec_sample("Disk", 2, {{"write", 5}, {"read", 6}}), codec_sample("Disk", 2, {{"read", 7}}),
       codec_sample("Disk", 2, {{"busy", 8}, {"read", 9}})},
      // a new key where an old one was, and back to the first shape
      {codec_sample("Disk", 3, {{"busy", 10}, {"write", 11}}), codec_sample("Disk", 3, {{"read", 12}, {"write", 13}})},
      {codec_sample("Disk", 4, {{"read", 14}, {"write", 15}}), codec_sample("Disk", 4, {{"read", 16}, {"write", 17}})},
  };
  std::uint64_t sequence = 0;
  for (const auto& batch : batches) {
    auto got = round_trip(++sequence, batch);
    ASSERT_EQ(got.size(), batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i)
      EXPECT_EQ(keys_and_values(got[i]), keys_and_values(batch[i])) << "batch " << sequence << ", sample " << i;
  }
  EXPECT_EQ(master.series().size(), 3u);  // read, write, busy: each named once
}

TEST(Codec, UnknownIndicesAndGapsAreProtocolErrors) {
  AgentDictionary agent = make_dictionary();
  std::vector<Bytes> messages;
  agent.encode_batch(1, {codec_sample("VirtualMemory", 1, {{"total", 1}})}, messages);
  Message batch = decode(messages[1].data(), messages[1].size());
  MasterDictionary empty;
  empty.unpack(batch);
  EXPECT_THROW(empty.resolve(batch.samples[0], "n"), ProtocolError);

  DictionaryUpdate gap;
  gap.first_sensor = 5;
  gap.sensors.push_back({"X", ""});
  EXPECT_THROW(empty.apply(gap), ProtocolError);
}

TEST(Codec, GarbageTruncationAndOtherVersionsAreRejected) {
  EXPECT_THROW(decode("", 0), ProtocolError);
  std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_THROW(decode(garbage.data(), garbage.size()), ProtocolError);
  Bytes hello = encode_hello("node07", 1, "x");
  EXPECT_THROW(decode(hello.data(), hello.size() / 2), ProtocolError);
  std::vector<char> random(4096);
  for (std::size_t i = 0; i < random.size(); ++i) random[i] = static_cast<char>((i * 7919) ^ (i >> 3));
  EXPECT_THROW(decode(random.data(), random.size()), ProtocolError);
  // Every cut of a packed batch: refused as a ProtocolError, never read past (the sanitizers
  // run this), whatever tag byte it ends in.
  AgentDictionary agent = make_dictionary();
  std::vector<Bytes> messages;
  agent.encode_batch(3, {codec_sample("VirtualMemory", 1, {{"total", 1.5e10}, {"used", 0}, {"percent", 12.5}})},
                     messages);
  const Bytes& batch = messages.back();
  for (std::size_t cut = 1; cut < batch.size(); ++cut) {
    std::vector<char> part(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(cut));
    try {
      (void)decode(part.data(), part.size());
    } catch (const ProtocolError&) {
    }
  }
  EXPECT_NO_THROW(decode(batch.data(), batch.size()));
}

TEST(Codec, DecodesFromUnalignedMemory) {
  AgentDictionary agent = make_dictionary();
  std::vector<Bytes> messages;
  agent.encode_batch(9, {codec_sample("VirtualMemory", 1, {{"total", 123.5}})}, messages);
  std::vector<char> buffer(messages[1].size() + 3);
  std::memcpy(buffer.data() + 3, messages[1].data(), messages[1].size());  // odd address
  Message batch = decode(buffer.data() + 3, messages[1].size());
  EXPECT_EQ(batch.sequence, 9u);
  MasterDictionary master;
  master.unpack(batch);
  EXPECT_EQ(batch.samples[0].values[0], 123.5);
}

TEST(Codec, ControlMessagesRoundTrip) {
  auto bytes = fructosa::encode_control("CPUPercent", 0.1, 60);
  auto message = fructosa::decode(bytes.data(), bytes.size());
  EXPECT_EQ(message.type, fructosa::MessageType::control);
  EXPECT_EQ(message.sensor, "CPUPercent");
  EXPECT_EQ(message.interval_s, 0.1);
  EXPECT_EQ(message.duration_s, 60);
  EXPECT_EQ(fructosa::to_string(message.type), "control");
}
