// The decoder's bounds (common/codec.cpp): what a hostile peer can make lmaster allocate.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codec.h"

using namespace fructosa;

TEST(CodecHardening, ALargeHonestBatchOfZerosDecodes) {
  // Zeros pack to almost nothing: the decoder's budget must still leave room for them.
  AgentDictionary agent([](std::string_view) { return std::string(); },
                        [](std::string_view, std::string_view) { return MetricInfo{}; });
  std::vector<Sample> samples(1000);
  for (auto& sample : samples) {
    sample.sensor = "CPUPercent";
    sample.time_ns = 1;
    for (int i = 0; i < 200; ++i) sample.metrics.push_back({std::to_string(i), 0.0});
  }
  std::vector<Bytes> out;
  agent.encode_batch(1, samples, out);
  MasterDictionary master;
  master.apply(decode(out[0].data(), out[0].size()).dictionary);
  Message batch = decode(out[1].data(), out[1].size());
  master.unpack(batch);
  ASSERT_EQ(batch.samples.size(), 1000u);
  EXPECT_EQ(master.resolve(batch.samples[999], "n").metrics.size(), 200u);
}

TEST(CodecHardening, ZeroRunsCannotUnpackBeyondTheLimit) {
  // Each "\0\xff" is a run of 256 zero words: 2 bytes for 2 KiB.
  std::string bomb;
  while (bomb.size() * 1024 <= kMaxMessageBytes + 4096) bomb += std::string("\0\xff", 2);
  try {
    decode(bomb.data(), bomb.size());
    FAIL() << "decoded";
  } catch (const ProtocolError& error) {
    EXPECT_NE(std::string(error.what()).find("unpacks to more than"), std::string::npos) << error.what();
  }
  // Truncated inside a word or a run: refused, not read past the end.
  EXPECT_THROW(decode("\x7f\x01", 2), ProtocolError);
  EXPECT_THROW(decode("\xff\x01\x02", 3), ProtocolError);
  EXPECT_THROW(decode("\x00", 1), ProtocolError);
}

TEST(CodecHardening, ARejectedDictionaryUpdateChangesNothing) {
  MasterDictionary master;
  master.apply({0, {{"A", ""}}, 0, {{0, "a", {}}}});
  DictionaryUpdate bad{1, {{"B", ""}}, 1, {{1, "b", {}}, {7, "c", {}}}};
  EXPECT_THROW(master.apply(bad), ProtocolError);
  EXPECT_EQ(master.sensors().size(), 1u);
  EXPECT_EQ(master.series().size(), 1u);
  WireSample uneven{0, 1, 0, {0}, {}, {}};
  EXPECT_THROW(master.resolve(uneven, "n"), ProtocolError);
}

TEST(CodecHardening, TheDictionaryOfOneConnectionIsBounded) {
  MasterDictionary master;
  DictionaryUpdate huge;
  huge.sensors.resize(MasterDictionary::kMaxSensors + 1);
  EXPECT_THROW(master.apply(huge), ProtocolError);
  EXPECT_TRUE(master.sensors().empty());
}

TEST(CodecHardening, AHostNameMustBeText) {
  Bytes good = encode_hello("nœud-07", 1, "x");
  EXPECT_EQ(decode(good.data(), good.size()).host, "nœud-07");
  for (const char* bad : {"node\xff", "\xc0\xae", "\xed\xa0\x80", "n\xe2\x82"}) {
    Bytes hello = encode_hello(bad, 1, "x");
    EXPECT_THROW(decode(hello.data(), hello.size()), ProtocolError) << bad;
  }
}
