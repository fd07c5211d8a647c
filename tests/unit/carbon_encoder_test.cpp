// The Graphite paths and frames that common/carbon_encoder.h writes (lmaster's Graphite output
// and an lagent sending to carbon directly), read back by carbon's own unpickler.
#include <gtest/gtest.h>

#include <cctype>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "carbon_encoder.h"
#include "carbon_test_support.h"
#include "graphite_name.h"

namespace fructosa::graphite {
namespace {

using namespace fructosa::test::carbon;
using test::make_sample;

// ---------------------------------------------------------------------------------------------
// Paths

TEST(GraphitePath, HostSensorKeyAsFrUCToSA) {
  CarbonEncoder encoder(CarbonProtocol::pickle, "", 500);
  Sample vm = make_sample("node07.cluster.example.org", "VirtualMemory", kT0, 0, {});
  EXPECT_EQ(encoder.path(vm, "percent"), "node07.VirtualMemory.percent");
  EXPECT_EQ(encoder.path(vm, "eth0.bytes_sent"), "node07.VirtualMemory.eth0.bytes_sent");
  // A scalar sensor reports under the empty key: the path ends with the sensor.
  EXPECT_EQ(encoder.path(make_sample("node07", "BootTime", kT0, 0, {}), ""), "node07.BootTime");
}

TEST(GraphitePath, PerJobSamplesGoUnderJobs) {
  CarbonEncoder encoder(CarbonProtocol::pickle, "", 500);
  Sample job = make_sample("node07.cluster", "CPUTimes", kT0, 123456, {});
  EXPECT_EQ(encoder.path(job, "user"), "jobs.123456.node07.CPUTimes.user");
  CarbonEncoder prefixed(CarbonProtocol::pickle, "hpc.cluster1", 500);
  EXPECT_EQ(prefixed.path(job, "user"), "hpc.cluster1.jobs.123456.node07.CPUTimes.user");
  EXPECT_EQ(prefixed.path(job, ""), "hpc.cluster1.jobs.123456.node07.CPUTimes");
}

TEST(GraphitePath, PrefixDotsAtEitherEndAreIgnoredAndItsComponentsSanitised) {
  Sample vm = make_sample("node07", "VirtualMemory", kT0, 0, {});
  EXPECT_EQ(CarbonEncoder(CarbonProtocol::pickle, "cluster1.", 500).path(vm, "total"),
            "cluster1.node07.VirtualMemory.total");
  EXPECT_EQ(CarbonEncoder(CarbonProtocol::pickle, ".my site.a/b", 500).path(vm, "total"),
            "my_site.a_b.node07.VirtualMemory.total");
  EXPECT_EQ(CarbonEncoder(CarbonProtocol::pickle, "site(1)..a=b+c", 500).path(vm, "total"),
            "site_1_._.a_b_c.node07.VirtualMemory.total");
}

TEST(GraphitePath, ComponentsAreSanitisedAndKeepTheirDots) {
  CarbonEncoder encoder(CarbonProtocol::pickle, "", 500);
  Sample temps = make_sample("node07", "SensorsTemperatures", kT0, 0, {});
  EXPECT_EQ(encoder.path(temps, "coretemp.Core 0.current"),
            "node07.SensorsTemperatures.coretemp.Core_0.current");
  EXPECT_EQ(encoder.path(temps, "/home.used"), "node07.SensorsTemperatures._home.used");
  EXPECT_EQ(encoder.path(temps, "a;b=c.d\te\x7f"), "node07.SensorsTemperatures.a_b_c.d_e_");
  EXPECT_EQ(encoder.path(temps, "caf\xc3\xa9"), "node07.SensorsTemperatures.caf__");
  // An empty component would make "a..b", which carbon stores as a/b: it becomes "_".
  EXPECT_EQ(encoder.path(temps, "a..b."), "node07.SensorsTemperatures.a._.b._");
  // Host and sensor are one component each: their dots (past the short host) become '_'.
  EXPECT_EQ(encoder.path(make_sample("my node.x", "My.Sensor", kT0, 0, {}), "k"),
            "my_node.My_Sensor.k");
  EXPECT_EQ(encoder.path(make_sample("", "S", kT0, 0, {}), "k"), "_.S.k");
  // An IPv4 address keeps every octet.
  EXPECT_EQ(encoder.path(make_sample("10.1.2.3", "S", kT0, 0, {}), "k"), "10_1_2_3.S.k");
  EXPECT_EQ(encoder.path(make_sample("node(1)+a.x", "S", kT0, 0, {}), "k"), "node_1__a.S.k");
}

// The set carbon-c-relay stores as it is and graphite-web parses unquoted.
bool relay_keeps(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '_' || c == ':' || c == '#';
}

TEST(GraphitePath, EveryByteOutsideTheRelaysSetBecomesAnUnderscore) {
  CarbonEncoder encoder(CarbonProtocol::pickle, "", 500);
  Sample sample = make_sample("node01", "S", kT0, 0, {});
  int kept = 0;
  for (int byte = 0; byte < 256; ++byte) {
    const char c = static_cast<char>(byte);
    if (c == '.') continue;  // a key's separator
    const std::string name = std::string("a") + c + "b";
    const std::string expected = relay_keeps(static_cast<unsigned char>(byte)) ? name : "a_b";
    EXPECT_EQ(encoder.path(sample, name), "node01.S." + expected) << "byte " << byte;
    // In a host or sensor name too.
    EXPECT_EQ(encoder.path(make_sample(name, name, kT0, 0, {}), "k"),
              expected + "." + expected + ".k")
        << "byte " << byte;
    EXPECT_EQ(graphite_component(name), expected) << "byte " << byte;
    kept += expected == name;
  }
  EXPECT_EQ(kept, 26 + 26 + 10 + 4);
}

TEST(GraphitePath, ADiskUsagePathIsStoredUnderTheNameSent) {
  // What carbon-c-relay would store `node01.DiskUsage._scratch+proj(1)@a=b.total` as: the name
  // sent must already be that, or dashboards ask for a name that does not exist.
  CarbonEncoder encoder(CarbonProtocol::pickle, "", 500);
  std::vector<Sample> samples{
      make_sample("node01.cluster", "DiskUsage", kT0, 0,
                  {{"/scratch+proj(1)@a=b.total", 2048}, {"/home.percent", 12.5}})};
  EXPECT_EQ(encoder.path(samples[0], samples[0].metrics[0].key),
            "node01.DiskUsage._scratch_proj_1__a_b.total");
  std::vector<CarbonFrame> frames;
  std::size_t used = encoder.encode(samples, frames);
  EXPECT_EQ(decode_with_python(joined(frames, used), CarbonProtocol::pickle),
            "frame 2\n" +
                point_line("node01.DiskUsage._scratch_proj_1__a_b.total", 1700000000, 2048) +
                point_line("node01.DiskUsage._home.percent", 1700000000, 12.5));
  CarbonEncoder plaintext(CarbonProtocol::plaintext, "", 500);
  used = plaintext.encode(samples, frames);
  EXPECT_EQ(joined(frames, used),
            "node01.DiskUsage._scratch_proj_1__a_b.total 2048 1700000000\n"
            "node01.DiskUsage._home.percent 12.5 1700000000\n");
}

TEST(GraphiteName, TheSharedMappingGivesTheOutputsComponents) {
  EXPECT_EQ(graphite_component(""), "_");
  EXPECT_EQ(graphite_component("My.Sensor"), "My_Sensor");
  EXPECT_EQ(graphite_dotted("/scratch+proj(1)@a=b.total"), "_scratch_proj_1__a_b.total");
  EXPECT_EQ(graphite_dotted(".a..b%."), "_.a._.b_._");
  EXPECT_EQ(graphite_dotted("eth0.bytes_sent"), "eth0.bytes_sent");
  EXPECT_EQ(graphite_host("node07.cluster.example"), "node07");
  EXPECT_EQ(graphite_host("10.1.2.3"), "10_1_2_3");
  EXPECT_EQ(graphite_host("node 7,x.example"), "node_7_x");
  EXPECT_EQ(graphite_host(""), "_");
  EXPECT_EQ(graphite_prefix(""), "");
  EXPECT_EQ(graphite_prefix("..."), "");
  EXPECT_EQ(graphite_prefix(".hpc.cluster=1."), "hpc.cluster_1.");
  // The encoder's paths are made of these pieces, whatever the names hold.
  for (std::string_view prefix : {"", "p", "a b.c(d)"})
    for (std::string_view host : {"n07", "n07.x", "10.0.0.1", "n@7", ""})
      for (std::string_view key : {"k", "a.b", "a..=", "+"}) {
        Sample sample = make_sample(std::string(host), "S+x", kT0, 0, {});
        EXPECT_EQ(CarbonEncoder(CarbonProtocol::pickle, prefix, 500).path(sample, key),
                  graphite_prefix(prefix) + graphite_host(host) + ".S_x." + graphite_dotted(key));
      }
}

// ---------------------------------------------------------------------------------------------
// Frames

TEST(CarbonEncoder, PickleFramesDecodeToTheExactPointsWithCarbonsUnpickler) {
  CarbonEncoder encoder(CarbonProtocol::pickle, "site", 500);
  const double tricky[] = {0.1,   1.0 / 3,     -0.0,  5e-324,
                           1e300, 25165824000, -12.5, std::numeric_limits<double>::infinity()};
  std::vector<MetricValue> metrics;
  for (std::size_t i = 0; i < std::size(tricky); ++i)
    metrics.push_back({"v." + std::to_string(i), tricky[i]});
  std::vector<Sample> samples{
      make_sample("node07.cluster", "Values", kT0 + 250000000, 0, metrics),
      make_sample("node07", "BootTime", kT0, 0, {{"", 1699990000}}),
      make_sample("node07", "CPUTimes", kT0, 42, {{"user", 12.25}}),
  };
  samples[0].labels.push_back({"device", "sda1"});  // labels are not sent

  std::vector<CarbonFrame> frames;
  std::size_t used = encoder.encode(samples, frames);
  ASSERT_EQ(used, 1u);
  EXPECT_EQ(frames[0].points, std::size(tricky) + 2);
  EXPECT_EQ(frames[0].samples_done, 3u);

  std::string expected = "frame 10\n";
  for (std::size_t i = 0; i < std::size(tricky); ++i)
    expected += point_line("site.node07.Values.v." + std::to_string(i), 1700000000.25, tricky[i]);
  expected += point_line("site.node07.BootTime", 1700000000, 1699990000);
  expected += point_line("site.jobs.42.node07.CPUTimes.user", 1700000000, 12.25);
  EXPECT_EQ(decode_with_python(joined(frames, used), CarbonProtocol::pickle), expected);
}

// The encoder reuses the host part of the path from one sample to the next: hosts, jobs and
// sensors that change (or come back) in any order, within a call and across calls, must still
// give each sample its own path.
TEST(CarbonEncoder, EverySampleGetsItsOwnPathWhateverCameBefore) {
  CarbonEncoder encoder(CarbonProtocol::pickle, "site", 500);
  std::vector<Sample> samples{
      make_sample("a.cluster", "S", kT0, 0, {{"k", 1}}),     make_sample("a.cluster", "My.Sensor", kT0, 0, {{"k", 2}}),
      make_sample("b", "S", kT0, 0, {{"k", 3}}),             make_sample("b", "S", kT0, 7, {{"k", 4}}),
      make_sample("a.cluster", "S", kT0, 7, {{"k", 5}}),     make_sample("a.other", "S", kT0, 7, {{"k", 6}}),
      make_sample("10.1.2.3", "S", kT0, 0, {{"", 7}}),        make_sample("a.cluster", "S", kT0, 0, {{"k", 8}}),
  };
  std::vector<CarbonFrame> frames;
  std::string expected = "frame " + std::to_string(samples.size()) + "\n";
  for (const auto& sample : samples)
    expected += point_line(encoder.path(sample, sample.metrics[0].key), 1700000000, sample.metrics[0].value);
  std::size_t used = encoder.encode(samples, frames);
  EXPECT_EQ(decode_with_python(joined(frames, used), CarbonProtocol::pickle), expected);
  EXPECT_NE(expected.find("site.a.My_Sensor.k"), std::string::npos);
  EXPECT_NE(expected.find("site.jobs.7.a.S.k"), std::string::npos);
  // The next call starts where this one ended (host a, job 0) and changes job at once.
  std::vector<Sample> next{make_sample("a.cluster", "S", kT0, 9, {{"k", 9}})};
  used = encoder.encode(next, frames);
  EXPECT_EQ(decode_with_python(joined(frames, used), CarbonProtocol::pickle),
            "frame 1\n" + point_line("site.jobs.9.a.S.k", 1700000000, 9));
}

// The encoder remembers, per sensor and place, keys it found to need no mapping: a key that
// changes at its place (to one that needs mapping, and back), or moves, is still mapped as it
// should be, within a call and across calls.
TEST(CarbonEncoder, KeysThatChangeAtTheirPlaceAreMappedEachTime) {
  CarbonEncoder encoder(CarbonProtocol::plaintext, "", 500);
  std::vector<Sample> samples{
      make_sample("n", "S", kT0, 0, {{"sda.read", 1}, {"sdb.read", 2}}),
      make_sample("n", "S", kT0, 0, {{"sd a.read", 3}, {"sdb.read", 4}}),
      make_sample("n", "T", kT0, 0, {{"sda.read", 5}}),
      make_sample("n", "S", kT0, 0, {{"sdb.read", 6}, {"sda..read", 7}}),
      make_sample("n", "S", kT0, 0, {{"sda.read", 8}, {"sdb/x.read", 9}}),
  };
  std::vector<CarbonFrame> frames;
  std::string expected;
  for (const auto& sample : samples)
    for (const auto& metric : sample.metrics) expected += encoder.path(sample, metric.key) + " ";
  EXPECT_EQ(expected,
            "n.S.sda.read n.S.sdb.read n.S.sd_a.read n.S.sdb.read n.T.sda.read n.S.sdb.read n.S.sda._.read "
            "n.S.sda.read n.S.sdb_x.read ");
  for (int call = 0; call < 2; ++call) {
    std::size_t used = encoder.encode(samples, frames);
    std::string sent;
    for (std::size_t f = 0; f < used; ++f) sent += frames[f].bytes;
    std::string paths;
    for (std::size_t at = 0; at < sent.size(); at = sent.find('\n', at) + 1)
      paths += sent.substr(at, sent.find(' ', at) - at) + " ";
    EXPECT_EQ(paths, expected) << "call " << call;
  }
}

TEST(CarbonEncoder, NaNValuesAreSkipped) {
  CarbonEncoder encoder(CarbonProtocol::pickle, "", 500);
  std::vector<Sample> samples{make_sample("n", "S", kT0, 0, {{"a", kNaN}, {"b", 2}, {"c", kNaN}}),
                              make_sample("n", "S", kT0 + kSecond, 0, {{"a", kNaN}})};
  std::vector<CarbonFrame> frames;
  std::size_t used = encoder.encode(samples, frames);
  ASSERT_EQ(used, 1u);
  EXPECT_EQ(frames[0].points, 1u);
  EXPECT_EQ(decode_with_python(joined(frames, used), CarbonProtocol::pickle),
            "frame 1\n" + point_line("n.S.b", 1700000000, 2));
  // Nothing to send: no frame at all.
  EXPECT_EQ(encoder.encode(std::span(samples).subspan(1), frames), 0u);
}

TEST(CarbonEncoder, FramesHoldAtMostBatchSizePointsAndSayWhichSamplesTheyComplete) {
  CarbonEncoder encoder(CarbonProtocol::pickle, "", 3);
  std::vector<Sample> samples{numbered(kT0, 4), numbered(kT0 + kSecond, 2),
                              numbered(kT0 + 2 * kSecond, 0), numbered(kT0 + 3 * kSecond, 1)};
  std::vector<CarbonFrame> frames;
  std::size_t used = encoder.encode(samples, frames);
  ASSERT_EQ(used, 3u);
  EXPECT_EQ(frames[0].points, 3u);
  EXPECT_EQ(frames[0].samples_done, 0u);  // sample 0 goes on in frame 1
  EXPECT_EQ(frames[1].points, 3u);
  EXPECT_EQ(frames[1].samples_done, 3u);  // samples 0, 1 and the empty 2
  EXPECT_EQ(frames[2].points, 1u);
  EXPECT_EQ(frames[2].samples_done, 4u);
  std::string expected = "frame 3\n";
  for (int i = 0; i < 3; ++i)
    expected += point_line("node01.Test.k" + std::to_string(i), 1700000000, i);
  expected += "frame 3\n" + point_line("node01.Test.k3", 1700000000, 3) +
              point_line("node01.Test.k0", 1700000001, 0) +
              point_line("node01.Test.k1", 1700000001, 1);
  expected += "frame 1\n" + point_line("node01.Test.k0", 1700000003, 0);
  EXPECT_EQ(decode_with_python(joined(frames, used), CarbonProtocol::pickle), expected);

  // The buffers are reused: a second, smaller batch overwrites the first frames.
  used = encoder.encode(std::span(samples).subspan(3), frames);
  ASSERT_EQ(used, 1u);
  EXPECT_EQ(decode_with_python(joined(frames, used), CarbonProtocol::pickle),
            "frame 1\n" + point_line("node01.Test.k0", 1700000003, 0));
}

TEST(CarbonEncoder, PlaintextLinesReadBackAsTheSameDoubles) {
  CarbonEncoder encoder(CarbonProtocol::plaintext, "", 2);
  std::vector<Sample> samples{
      make_sample("node07", "S", kT0, 0, {{"a", 0.1}, {"b", 1.0 / 3}, {"c", 1e300}}),
      make_sample("node07", "S", kT0 + 123456789, 0, {{"a", -0.0}, {"b", 5e-324}, {"c", kNaN}}),
  };
  std::vector<CarbonFrame> frames;
  std::size_t used = encoder.encode(samples, frames);
  ASSERT_EQ(used, 3u);
  // Whole seconds are written as an integer.
  EXPECT_EQ(frames[0].bytes,
            "node07.S.a 0.1 1700000000\nnode07.S.b 0.3333333333333333 1700000000\n");
  EXPECT_EQ(frames[2].points, 1u);
  EXPECT_EQ(decode_with_python(joined(frames, used), CarbonProtocol::plaintext),
            point_line("node07.S.a", 1700000000, 0.1) +
                point_line("node07.S.b", 1700000000, 1.0 / 3) +
                point_line("node07.S.c", 1700000000, 1e300) +
                point_line("node07.S.a", 1700000000.123456789, -0.0) +
                point_line("node07.S.b", 1700000000.123456789, 5e-324));
}

}  // namespace
}  // namespace fructosa::graphite
