// The compact batch encoding (protocol version 2, common/codec.cpp): values sent as changes from
// the connection's previous sample of the same sensor and job must come back bit for bit, cost
// little in a steady stream, and refuse malformed input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codec.h"
#include "compact_batch.h"

using namespace fructosa;

namespace {

AgentDictionary make_agent() {
  return AgentDictionary([](std::string_view) { return std::string("about"); },
                         [](std::string_view, std::string_view) { return MetricInfo{"bytes", Kind::gauge, ""}; });
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_same(const std::vector<Sample>& sent, const std::vector<Sample>& received);

// One connection: what the agent encodes goes through decode, unpack and resolve, and through
// resolve_batch (lmaster's one pass) on a second master, which must give the same samples; and
// on a third into reused samples (the batch before's, in reverse order, so that each is filled
// with a sample of another shape: more or fewer metrics and labels), as lmaster reuses them.
struct Link {
  AgentDictionary agent = make_agent();
  MasterDictionary master;
  MasterDictionary one_pass;
  MasterDictionary reusing;
  std::vector<Sample> reused_before;
  std::size_t batch_bytes = 0;  // batch messages only (dictionaries left out)

  std::vector<Sample> send(std::uint64_t sequence, const std::vector<Sample>& samples) {
    std::vector<Bytes> messages;
    agent.encode_batch(sequence, samples, messages);
    std::vector<Sample> received;
    std::vector<Sample> received_in_one_pass;
    for (const auto& bytes : messages) {
      Message message = decode(bytes.data(), bytes.size());
      if (message.type == MessageType::dictionary) {
        master.apply(message.dictionary);
        one_pass.apply(message.dictionary);
        reusing.apply(message.dictionary);
        continue;
      }
      batch_bytes += bytes.size();
      Message copy = message;
      Message another_copy = message;
      master.unpack(message);
      for (const auto& wire : message.samples) received.push_back(master.resolve(wire, "node"));
      const std::size_t first = received_in_one_pass.size();
      one_pass.resolve_batch(copy, "node", received_in_one_pass);
      ReusableSamples reusable{std::move(reused_before)};
      std::reverse(reusable.samples.begin(), reusable.samples.end());
      reused_before.clear();
      reusing.resolve_batch(another_copy, "node", reused_before, &reusable);
      expect_same({received_in_one_pass.begin() + static_cast<std::ptrdiff_t>(first), received_in_one_pass.end()},
                  reused_before);
    }
    expect_same(received, received_in_one_pass);
    for (const auto& sample : received_in_one_pass) EXPECT_EQ(sample.host, "node");
    for (const auto& sample : reused_before) EXPECT_EQ(sample.host, "node");
    return received;
  }
};

void expect_same(const std::vector<Sample>& sent, const std::vector<Sample>& received) {
  ASSERT_EQ(sent.size(), received.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    const auto& a = sent[i];
    const auto& b = received[i];
    ASSERT_EQ(a.sensor, b.sensor);
    ASSERT_EQ(a.time_ns, b.time_ns);
    ASSERT_EQ(a.job, b.job);
    ASSERT_EQ(a.metrics.size(), b.metrics.size());
    for (std::size_t m = 0; m < a.metrics.size(); ++m) {
      ASSERT_EQ(a.metrics[m].key, b.metrics[m].key);
      ASSERT_TRUE(same_bits(a.metrics[m].value, b.metrics[m].value))
          << a.sensor << " " << a.metrics[m].key << ": sent " << a.metrics[m].value << ", got " << b.metrics[m].value;
    }
    ASSERT_EQ(a.labels.size(), b.labels.size());
    for (std::size_t l = 0; l < a.labels.size(); ++l) {
      ASSERT_EQ(a.labels[l].key, b.labels[l].key);
      ASSERT_EQ(a.labels[l].value, b.labels[l].value);
    }
  }
}

}  // namespace

TEST(CompactBatches, EveryValueComesBackBitForBit) {
  const double awkward[] = {0.0,
                            -0.0,
                            std::numeric_limits<double>::quiet_NaN(),
                            -std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::denorm_min(),
                            std::numeric_limits<double>::max(),
                            std::numeric_limits<double>::lowest(),
                            9007199254740992.0,   // 2^53
                            9007199254740994.0,   // 2^53 + 2
                            -9007199254740991.0,  // -(2^53 - 1)
                            1e300,
                            0.1 + 0.2,
                            12.3,
                            -12.3,
                            99.95,
                            0.001,
                            1234567.891011,
                            1.0 / 3.0,
                            1e-7,
                            4.2e15,
                            1736000000.123456};
  std::mt19937_64 random(7);
  Link link;
  std::int64_t time = 1'736'000'000'000'000'000;
  for (std::uint64_t sequence = 1; sequence <= 300; ++sequence) {
    std::vector<Sample> samples;
    for (int s = 0; s < 6; ++s) {
      Sample sample;
      sample.host = "node";
      sample.sensor = "S" + std::to_string(s);
      sample.time_ns = time + static_cast<std::int64_t>(random() % 2'000'000) - 1'000'000;
      sample.job = s == 5 ? random() % 4 * 1000 : 0;  // some per-job samples, job 0 among them
      // The key set changes now and then: keys come, go and change places.
      int keys = 3 + static_cast<int>(random() % 5);
      for (int k = 0; k < keys; ++k) {
        int key = (k + static_cast<int>(sequence / 50)) % 9;
        double value = random() % 3 == 0 ? awkward[random() % std::size(awkward)]
                       : random() % 2    ? static_cast<double>(random() % 100000)
                                         : static_cast<double>(random() % 1000) / 10.0;
        // S3's keys are longer than a short string's buffer (on the heap, as per-disk keys are).
        sample.metrics.push_back({(s == 3 ? "a_key_longer_than_sixteen_bytes_" : "k") + std::to_string(key), value});
      }
      if (s == 4 && random() % 3) sample.labels.push_back({"device", random() % 2 ? "/dev/sda" : "/dev/sdb"});
      if (s == 4 && random() % 2) sample.labels.push_back({"mountpoint", "/a/mount/point/longer/than/sixteen"});
      samples.push_back(std::move(sample));
    }
    time += 1'000'000'000;
    expect_same(samples, link.send(sequence, samples));
  }
}

// The decimal payload's rounding must be llround's on both ends, or an agent and a master of
// different builds would read different values: halves, the doubles next to them, every scale
// the encoding uses, and the range's ends (2^53 and the doubles below it).
TEST(CompactBatches, RoundingIsLlroundsBelowTwoToThe53) {
  std::vector<double> values = {0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999999999999994, -0.49999999999999994,
                                4503599627370495.5, -4503599627370495.5, 4503599627370496.0, 9007199254740991.0,
                                -9007199254740991.0, 9007199254740990.0};
  for (double half = 0.5; half < 1e15; half = half * 3 + 0.5) {
    for (double x : {half, -half}) {
      values.push_back(x);
      values.push_back(std::nextafter(x, 0.0));
      values.push_back(std::nextafter(x, x * 2));
    }
  }
  std::mt19937_64 random(27);
  for (int i = 0; i < 1'000'000; ++i) {
    double magnitude = std::ldexp(std::uniform_real_distribution<double>(0, 1)(random),
                                  std::uniform_int_distribution<int>(-10, 53)(random));
    double value = (random() & 1) ? -magnitude : magnitude;
    values.push_back(value);
    for (double scale : {10.0, 100.0, 1e3, 1e4, 1e5, 1e6}) values.push_back(value * scale);
  }
  for (double x : values) {
    if (!(std::fabs(x) < 9007199254740992.0)) continue;
    ASSERT_EQ(round_half_away(x), std::llround(x)) << std::hexfloat << x;
  }
}

TEST(CompactBatches, AnyTimeComesBackWhateverTheOneBefore) {
  // Time is sent as the difference from the series' previous one, modulo 2^64: extremes on
  // either side of each other must round-trip (INT64_MIN after anything overflowed a negation).
  const std::int64_t times[] = {std::numeric_limits<std::int64_t>::min(), 0, std::numeric_limits<std::int64_t>::max(),
                                std::numeric_limits<std::int64_t>::min(), -1, std::numeric_limits<std::int64_t>::min(),
                                1'736'000'000'000'000'000, std::numeric_limits<std::int64_t>::max()};
  Link link;
  std::uint64_t sequence = 0;
  for (std::int64_t time : times) {
    Sample sample;
    sample.host = "node";
    sample.sensor = "S";
    sample.time_ns = time;
    sample.metrics.push_back({"k", 1.0});
    std::vector<Sample> samples{sample};
    expect_same(samples, link.send(++sequence, samples));
  }
}

TEST(CompactBatches, ASteadyStreamCostsUnderFourBytesPerValue) {
  // 200 values as lagent's sensors give them: counters that grow, one-decimal percentages,
  // memory gauges in whole kiB that move a little, and values that do not change.
  std::mt19937_64 random(11);
  std::vector<double> counters(60), percents(60), gauges(40), constants(40);
  for (auto& value : counters) value = static_cast<double>(random() % 1'000'000'000'000ull);
  for (auto& value : percents) value = static_cast<double>(random() % 1000) / 10.0;
  for (auto& value : gauges) value = static_cast<double>(random() % 64'000'000) * 1024.0;
  for (auto& value : constants) value = static_cast<double>(random() % 100000);
  Link link;
  std::size_t points = 0, first_bytes = 0;
  for (std::uint64_t sequence = 1; sequence <= 120; ++sequence) {
    for (auto& value : counters) value += static_cast<double>(random() % 5000);
    for (auto& value : percents)
      value = std::clamp(std::round(value * 10 + static_cast<double>(random() % 41) - 20) / 10, 0.0, 100.0);
    for (auto& value : gauges) value += static_cast<double>(static_cast<int>(random() % 201) - 100) * 1024.0;
    std::vector<Sample> samples;
    auto add = [&](const char* sensor, const std::vector<double>& values) {
      for (std::size_t part = 0; part < values.size(); part += 10) {
        Sample sample;
        sample.host = "node";
        sample.sensor = std::string(sensor) + std::to_string(part / 10);
        sample.time_ns = 1'736'000'000'000'000'000 + static_cast<std::int64_t>(sequence) * 1'000'000'000 +
                         static_cast<std::int64_t>(random() % 3'000'000);
        for (std::size_t i = part; i < part + 10 && i < values.size(); ++i)
          sample.metrics.push_back({"key" + std::to_string(i), values[i]});
        samples.push_back(std::move(sample));
      }
    };
    add("Counters", counters);
    add("Percents", percents);
    add("Gauges", gauges);
    add("Constants", constants);
    auto received = link.send(sequence, samples);
    expect_same(samples, received);
    if (sequence == 1) first_bytes = link.batch_bytes;
    else points += 200;
  }
  double per_point = static_cast<double>(link.batch_bytes - first_bytes) / static_cast<double>(points);
  EXPECT_LT(per_point, 4.0);
  RecordProperty("bytes_per_point", std::to_string(per_point));
}

TEST(CompactBatches, ManyJobsAreForgottenOnBothSidesAlike) {
  // More (sensor, job) pairs than either side remembers: they forget at the same batch and the
  // values still come back.
  Link link;
  std::int64_t time = 1'000'000'000;
  for (std::uint64_t sequence = 1; sequence <= 30; ++sequence) {
    std::vector<Sample> samples;
    for (std::uint64_t job = 1; job <= 400; ++job) {
      Sample sample;
      sample.host = "node";
      sample.sensor = "JobProc";
      sample.time_ns = time;
      sample.job = sequence * 1000 + job;  // new jobs every batch: 12000 in all
      sample.metrics = {{"rss", static_cast<double>(job * sequence)}, {"cpu", 0.5 * static_cast<double>(job)}};
      samples.push_back(std::move(sample));
      if (job % 3 == 0) {  // some jobs also come back
        samples.push_back(samples.back());
        samples.back().job = job;
        samples.back().metrics[0].value += 1;
      }
    }
    time += 1'000'000'000;
    expect_same(samples, link.send(sequence, samples));
  }
}

TEST(CompactBatches, MalformedOrOutOfOrderBatchesAreProtocolErrors) {
  AgentDictionary agent = make_agent();
  std::vector<Sample> samples(3);
  for (int i = 0; i < 3; ++i) {
    samples[i].sensor = "VirtualMemory";
    samples[i].time_ns = 1'000'000'000 + i;
    samples[i].job = static_cast<std::uint64_t>(i);
    samples[i].metrics = {{"total", 1e10 + i}, {"percent", 12.5}};
    samples[i].labels = {{"device", "sda"}};
  }
  std::vector<Bytes> first, second;
  agent.encode_batch(1, samples, first);
  agent.encode_batch(2, samples, second);  // refers to what the first batch sent
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 1u);
  Message dictionary = decode(first[0].data(), first[0].size());

  // The second batch on a connection that never saw the first one.
  MasterDictionary lost;
  lost.apply(dictionary.dictionary);
  Message orphan = decode(second[0].data(), second[0].size());
  EXPECT_THROW(lost.unpack(orphan), ProtocolError);

  // Every truncation of the compact data and every flipped byte: a ProtocolError or samples
  // that resolve or not, never a crash (the sanitizers run this too).
  Message whole = decode(first[1].data(), first[1].size());
  ASSERT_FALSE(whole.compact.empty());
  for (std::size_t cut = 0; cut < whole.compact.size(); ++cut) {
    MasterDictionary master;
    master.apply(dictionary.dictionary);
    Message truncated = whole;
    truncated.compact.resize(cut);
    if (cut == 0) continue;  // empty: no compact samples at all
    EXPECT_THROW(master.unpack(truncated), ProtocolError) << "cut at " << cut;
    MasterDictionary one_pass;
    one_pass.apply(dictionary.dictionary);
    std::vector<Sample> out;
    truncated = whole;
    truncated.compact.resize(cut);
    EXPECT_THROW(one_pass.resolve_batch(truncated, "n", out), ProtocolError) << "cut at " << cut;
  }
  for (std::size_t at = 0; at < whole.compact.size(); ++at) {
    for (unsigned char flip : {0x01, 0x80, 0xff}) {
      MasterDictionary master;
      master.apply(dictionary.dictionary);
      Message changed = whole;
      changed.compact[at] = static_cast<char>(changed.compact[at] ^ flip);
      Message copy = changed;
      try {
        master.unpack(changed);
        for (const auto& wire : changed.samples) (void)master.resolve(wire, "n");
      } catch (const ProtocolError&) {
      }
      MasterDictionary one_pass;
      one_pass.apply(dictionary.dictionary);
      std::vector<Sample> out;
      try {
        one_pass.resolve_batch(copy, "n", out);
      } catch (const ProtocolError&) {
      }
    }
  }
}
