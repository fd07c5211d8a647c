// The [prometheus] output: the naming (common/prometheus_name.h), the labels of a series, the
// WriteRequest bytes against a byte string derived by hand from the protobuf encoding rules,
// snappy, and the output itself against an in-process remote_write receiver
// (remote_write_server.h): headers, order, retries, refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "config.h"
#include "prometheus_name.h"
#include "prometheus_output.h"
#include "remote_write_server.h"
#include "test_support.h"

namespace fructosa::master {
namespace {

TEST(PrometheusNames, SensorsBecomeSnakeCase) {
  EXPECT_EQ(prometheus_sensor_part("VirtualMemory"), "virtual_memory");
  EXPECT_EQ(prometheus_sensor_part("CPUPercent"), "cpu_percent");
  EXPECT_EQ(prometheus_sensor_part("NetIOCounters"), "net_io_counters");
  EXPECT_EQ(prometheus_sensor_part("CPUTimesPercent"), "cpu_times_percent");
  EXPECT_EQ(prometheus_sensor_part("NvidiaGPU"), "nvidia_gpu");
  EXPECT_EQ(prometheus_sensor_part("lagent"), "lagent");
  EXPECT_EQ(prometheus_sensor_part("Job2Cgroup"), "job2_cgroup");
  EXPECT_EQ(prometheus_sensor_part("My Sensor-1.x"), "my_sensor_1_x");
  EXPECT_EQ(prometheus_sensor_part("Sensor\xc3\xa9"), "sensor__");
}

TEST(PrometheusNames, MetricNamesCarryUnitAndTotal) {
  EXPECT_EQ(prometheus_metric_name("VirtualMemory", "total", "bytes", Kind::gauge),
            "fructosa_virtual_memory_total_bytes");
  EXPECT_EQ(prometheus_metric_name("VirtualMemory", "percent", "percent", Kind::gauge),
            "fructosa_virtual_memory_percent");  // the key says its unit already
  EXPECT_EQ(prometheus_metric_name("NetIOCounters", "eth0.bytes_sent", "bytes", Kind::counter),
            "fructosa_net_io_counters_eth0_bytes_sent_bytes_total");
  EXPECT_EQ(prometheus_metric_name("DiskIOCounters", "sda.read_bytes", "bytes", Kind::counter),
            "fructosa_disk_io_counters_sda_read_bytes_total");
  EXPECT_EQ(prometheus_metric_name("CPUTimes", "user", "seconds", Kind::counter), "fructosa_cpu_times_user_seconds_total");
  EXPECT_EQ(prometheus_metric_name("NetIOCounters", "packets_sent", "count", Kind::counter),
            "fructosa_net_io_counters_packets_sent_total");
  EXPECT_EQ(prometheus_metric_name("SensorsTemperatures", "coretemp.Core 0.current", "celsius", Kind::gauge),
            "fructosa_sensors_temperatures_coretemp_Core_0_current_celsius");
  EXPECT_EQ(prometheus_metric_name("RAPL", "package-0.energy", "joules", Kind::counter),
            "fructosa_rapl_package_0_energy_joules_total");
  // A scalar sensor: no key part.
  EXPECT_EQ(prometheus_metric_name("BootTime", "", "timestamp", Kind::gauge), "fructosa_boot_time_timestamp_seconds");
  EXPECT_EQ(prometheus_metric_name("CPUCount", "", "count", Kind::gauge), "fructosa_cpu_count");
  // Invalid characters (a mount point, UTF-8, colons reserved for recording rules).
  EXPECT_EQ(prometheus_metric_name("DiskUsage", "/scratch+proj(1).total", "bytes", Kind::gauge),
            "fructosa_disk_usage__scratch_proj_1__total_bytes");
  EXPECT_EQ(prometheus_metric_name("S", "a:b.\xc3\xa9", "", Kind::gauge), "fructosa_s_a_b___");
  EXPECT_EQ(prometheus_metric_name("S", "x", "MHz", Kind::gauge), "fructosa_s_x_megahertz");
  EXPECT_EQ(prometheus_metric_name("S", "x", "Mbit/s", Kind::gauge), "fructosa_s_x_megabits_per_second");
  EXPECT_EQ(prometheus_metric_name("S", "x_total", "count", Kind::counter), "fructosa_s_x_total");
  // The names are valid Prometheus metric names.
  for (const auto& name : {prometheus_metric_name("0", "..", "", Kind::gauge),
                           prometheus_metric_name("", "", "bool", Kind::counter)})
    EXPECT_TRUE(std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(c) || c == '_'; })) << name;
}

TEST(PrometheusNames, LabelNamesAreValidAndDoNotTakeLmastersOwn) {
  EXPECT_EQ(prometheus_label_name("device"), "device");
  EXPECT_EQ(prometheus_label_name("0abc"), "_0abc");
  EXPECT_EQ(prometheus_label_name("fs-type.x"), "fs_type_x");
  EXPECT_EQ(prometheus_label_name("host"), "label_host");
  EXPECT_EQ(prometheus_label_name("job_id"), "label_job_id");
  EXPECT_EQ(prometheus_label_name("__name__"), "label___name__");
  EXPECT_EQ(prometheus_label_name(""), "");
}

Sample sample_of(std::string sensor, std::int64_t time_ns, std::vector<MetricValue> metrics,
                 std::vector<Label> labels = {}, std::uint64_t job = 0) {
  return Sample{"node07", std::move(sensor), time_ns, job, std::move(metrics), std::move(labels)};
}

TEST(PrometheusLabels, HostJobAndTheLabelsOfTheKeysItem) {
  std::vector<PrometheusLabel> labels;
  Sample sample = sample_of("NvidiaGPU", 0, {}, {{"gpu0.name", "A100"}, {"gpu0.uuid", "GPU-1"},
                                                 {"gpu0.mig1.uuid", "MIG-7"}, {"gpu1.uuid", "GPU-2"},
                                                 {"commands", "a.out"}, {"gpu0.host", "x"},
                                                 {"gpu0.empty", ""}, {"gpu0.bad", "\xff" "ok"}}, 42);
  prometheus_series_labels(sample, "gpu0.utilization", "m", labels);
  EXPECT_EQ(labels, (std::vector<PrometheusLabel>{{"__name__", "m"}, {"bad", "\xef\xbf\xbdok"}, {"host", "node07"},
                                                  {"job_id", "42"}, {"label_host", "x"}, {"name", "A100"},
                                                  {"uuid", "GPU-1"}}));
  // The MIG instance's uuid wins over its GPU's; the GPU's name still applies.
  prometheus_series_labels(sample, "gpu0.mig1.memory", "m", labels);
  auto value = [&](const std::string& name) {
    for (const auto& label : labels)
      if (label.name == name) return label.value;
    return std::string("(none)");
  };
  EXPECT_EQ(value("uuid"), "MIG-7");
  EXPECT_EQ(value("name"), "A100");
  // A label of the whole sample (no item) is not sent; a node sample has no job_id; "gpu0x" is
  // not under "gpu0.".
  Sample node = sample_of("S", 0, {}, {{"commands", "a.out"}, {"gpu0.uuid", "GPU-1"}});
  prometheus_series_labels(node, "gpu0x.util", "m", labels);
  EXPECT_EQ(labels, (std::vector<PrometheusLabel>{{"__name__", "m"}, {"host", "node07"}}));
  // Two labels of one item named alike: the first one given wins.
  Sample alike = sample_of("S", 0, {}, {{"sda.fs-type", "ext4"}, {"sda.fs_type", "xfs"}});
  prometheus_series_labels(alike, "sda.total", "m", labels);
  EXPECT_EQ(value("fs_type"), "ext4");
  EXPECT_EQ(labels.size(), 3u);
}

// The bytes of WriteRequest{timeseries: [{labels: [{__name__: "up"}, {host: "a"}],
// samples: [{value: 1.5, timestamp: 1000}]}]}, from the protobuf encoding rules (tag = field
// number << 3 | wire type; 2 = length-delimited, 1 = 64-bit, 0 = varint).
const char kKnownGood[] =
    "\x0a\x29"                                  // WriteRequest.timeseries (1, len 41)
    "\x0a\x0e"                                  //   TimeSeries.labels (1, len 14)
    "\x0a\x08__name__\x12\x02up"                //     Label.name (1), Label.value (2)
    "\x0a\x09"                                  //   TimeSeries.labels (1, len 9)
    "\x0a\x04host\x12\x01" "a"                  //     Label.name, Label.value
    "\x12\x0c"                                  //   TimeSeries.samples (2, len 12)
    "\x09\x00\x00\x00\x00\x00\x00\xf8\x3f"      //     Sample.value (1, double 1.5 little-endian)
    "\x10\xe8\x07";                             //     Sample.timestamp (2, varint 1000)

TEST(PrometheusEncoding, WriteRequestMatchesTheKnownGoodBytes) {
  PrometheusRequest request;
  request.add({{"__name__", "up"}, {"host", "a"}}, 1000, 1.5);
  EXPECT_EQ(request.serialized(), std::string(kKnownGood, sizeof kKnownGood - 1));
  EXPECT_EQ(request.points(), 1u);
  // The body is the snappy block of those bytes; a cleared request is reused.
  EXPECT_EQ(prometheus_snappy_uncompress(request.body()), std::string(kKnownGood, sizeof kKnownGood - 1));
  request.clear();
  EXPECT_EQ(request.serialized(), "");
  // NaN goes out as the plain quiet NaN, never as Prometheus's staleness marker.
  std::uint64_t stale_bits = 0x7ff0000000000002ull;
  double stale;
  std::memcpy(&stale, &stale_bits, sizeof stale);
  request.add({{"__name__", "x"}}, -5, stale);
  fructosa::prompb::WriteRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(request.serialized()));
  double sent = parsed.timeseries(0).samples(0).value();
  std::uint64_t sent_bits;
  std::memcpy(&sent_bits, &sent, sizeof sent);
  EXPECT_TRUE(std::isnan(sent));
  EXPECT_NE(sent_bits, stale_bits);
  EXPECT_EQ(parsed.timeseries(0).samples(0).timestamp(), -5);
}

// The encoder writes the wire bytes itself: the same bytes as the generated code's, for long
// fields (varints of several bytes), zero and negative values and times, empty requests.
TEST(PrometheusEncoding, DirectBytesEqualTheGeneratedCodes) {
  std::vector<std::vector<PrometheusLabel>> label_sets = {
      {{"__name__", "m"}},
      {{"__name__", std::string(300, 'n')}, {"host", "node07"}, {"uuid", std::string(20000, 'u')}},
      {{"__name__", "x"}, {"a", "\xef\xbf\xbd"}}};
  std::vector<std::pair<std::int64_t, double>> points = {
      {0, 0.0}, {-1, -0.0}, {1'700'000'000'123, 42.5}, {std::numeric_limits<std::int64_t>::min(), -1e300},
      {std::numeric_limits<std::int64_t>::max(), std::numeric_limits<double>::infinity()}};
  PrometheusRequest request;
  fructosa::prompb::WriteRequest expected;
  for (const auto& labels : label_sets)
    for (const auto& [ms, value] : points) {
      std::string encoded;
      prometheus_encode_labels(labels, encoded);
      request.add_encoded(encoded, ms, value);
      auto* series = expected.add_timeseries();
      for (const auto& label : labels) {
        auto* added = series->add_labels();
        added->set_name(label.name);
        added->set_value(label.value);
      }
      auto* sample = series->add_samples();
      sample->set_value(value);
      sample->set_timestamp(ms);
    }
  EXPECT_EQ(request.serialized(), expected.SerializeAsString());
  EXPECT_EQ(prometheus_snappy_uncompress(request.body()), expected.SerializeAsString());
  fructosa::prompb::WriteRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(request.serialized()));
  ASSERT_EQ(parsed.timeseries_size(), 15);
  EXPECT_EQ(parsed.timeseries(5).labels(2).value(), std::string(20000, 'u'));
  EXPECT_EQ(parsed.timeseries(8).samples(0).timestamp(), std::numeric_limits<std::int64_t>::min());
  request.clear();
  EXPECT_EQ(request.serialized(), "");
  EXPECT_EQ(prometheus_snappy_uncompress(request.body()), "");
}

TEST(PrometheusEncoding, SnappyBlockFormat) {
  // A short input is one literal: the uncompressed length (varint), tag (length - 1) << 2.
  EXPECT_EQ(prometheus_snappy_compress("abc"), std::string("\x03\x08" "abc"));
  std::string long_text(100000, 'x');
  EXPECT_LT(prometheus_snappy_compress(long_text).size(), 6000u);
  EXPECT_EQ(prometheus_snappy_uncompress(prometheus_snappy_compress(long_text)), long_text);
  EXPECT_THROW(prometheus_snappy_uncompress("\xff\xff\xff\xff\x0f garbage"), std::runtime_error);
}

TEST(PrometheusEncoding, RefusalsOfTimesAreRecognised) {
  EXPECT_TRUE(prometheus_refuses_times("out of order sample\n"));
  EXPECT_TRUE(prometheus_refuses_times("duplicate sample for timestamp"));
  EXPECT_TRUE(prometheus_refuses_times("out of bounds"));
  EXPECT_TRUE(prometheus_refuses_times("err-mimir-sample-out-of-order"));
  EXPECT_FALSE(prometheus_refuses_times("invalid metric name"));
}

Options options_of(std::vector<std::string> pairs) { return parse_pairs(prometheus_options(), pairs, "test"); }

TEST(PrometheusOptions, DefaultsAndBadValues) {
  MetricInfoStore infos;
  auto output = make_prometheus_output(options_of({}), infos);
  EXPECT_EQ(output->name(), "prometheus");
  EXPECT_EQ(output->batch_samples(), 2000u);
  auto refused = [&](std::vector<std::string> pairs, const std::string& expected) {
    try {
      make_prometheus_output(options_of(pairs), infos);
      ADD_FAILURE() << "accepted " << pairs.front();
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  };
  test::TempDir dir;
  std::ofstream(dir.file("token")) << "secret\n";
  std::ofstream(dir.file("credentials")) << "user:pass\n";
  std::ofstream(dir.file("empty")) << "";
  refused({"url=ftp://host/x"}, "ftp://host/x");
  refused({"url=not a url"}, "not a url");
  refused({"credentials_file=/nonexistent/creds"}, "/nonexistent/creds");
  refused({"bearer_token_file=" + dir.file("empty")}, "bearer_token_file " + dir.file("empty"));
  refused({"credentials_file=" + dir.file("credentials"), "bearer_token_file=" + dir.file("token")}, "not both");
  refused({"ca_file=/nonexistent/ca.pem"}, "/nonexistent/ca.pem");
  EXPECT_THROW(options_of({"samples_per_request=0"}), ConfigError);
}

// --- the output against a receiver --------------------------------------------------------

struct Fixture {
  MetricInfoStore infos;
  test::RemoteWriteServer server;
  std::unique_ptr<Output> output;

  explicit Fixture(std::vector<std::string> pairs = {}) {
    infos.remember("VirtualMemory", "used", {"bytes", Kind::gauge, ""});
    infos.remember("VirtualMemory", "percent", {"percent", Kind::gauge, ""});
    infos.remember("CPUTimes", "user", {"seconds", Kind::counter, ""});
    pairs.push_back("url=" + server.url());
    pairs.push_back("catalog_wait=0");
    output = make_prometheus_output(options_of(pairs), infos);
  }
  // (metric name, host, time ms) -> value of every sample the receiver accepted, and how often.
  std::map<std::tuple<std::string, std::string, std::int64_t>, std::pair<double, int>> stored() const {
    std::map<std::tuple<std::string, std::string, std::int64_t>, std::pair<double, int>> result;
    for (const auto& [write, status] : server.received()) {
      if (status != 204) continue;
      for (const auto& series : write.request.timeseries()) {
        std::string name, host;
        for (const auto& label : series.labels()) {
          if (label.name() == "__name__") name = label.value();
          if (label.name() == "host") host = label.value();
        }
        for (const auto& sample : series.samples()) {
          auto& entry = result[{name, host, sample.timestamp()}];
          entry.first = sample.value();
          ++entry.second;
        }
      }
    }
    return result;
  }
};

std::vector<Sample> three_rounds() {
  std::vector<Sample> samples;
  for (int round = 0; round < 3; ++round) {
    std::int64_t t = 1'700'000'000'000'000'000 + round * 200'000'000;
    samples.push_back(sample_of("VirtualMemory", t, {{"used", 100.0 + round}, {"percent", 1.5}}));
    samples.push_back(sample_of("CPUTimes", t, {{"user", 7.25 + round}}));
  }
  return samples;
}

TEST(PrometheusOutput, SendsEveryPointOnceWithTheRequiredHeadersOneSamplePerSeriesPerRequest) {
  Fixture fixture;
  auto samples = three_rounds();
  fixture.output->write(samples);
  auto received = fixture.server.received();
  ASSERT_EQ(received.size(), 3u) << "a series' three points go out in three requests";
  std::map<std::string, std::int64_t> last_time;
  for (const auto& [write, status] : received) {
    EXPECT_EQ(write.headers.at("content-encoding"), "snappy");
    EXPECT_EQ(write.headers.at("content-type"), "application/x-protobuf");
    EXPECT_EQ(write.headers.at("x-prometheus-remote-write-version"), "0.1.0");
    EXPECT_TRUE(write.headers.at("user-agent").starts_with("fructosa-lmaster/"));
    std::set<std::string> in_request;
    for (const auto& series : write.request.timeseries()) {
      ASSERT_EQ(series.samples_size(), 1);
      std::string name = series.labels(0).value();
      EXPECT_TRUE(in_request.insert(name).second) << name << " twice in one request";
      EXPECT_GT(series.samples(0).timestamp(), last_time[name]) << name << " went back in time";
      last_time[name] = series.samples(0).timestamp();
      for (int i = 1; i < series.labels_size(); ++i) EXPECT_LT(series.labels(i - 1).name(), series.labels(i).name());
    }
  }
  auto stored = fixture.stored();
  EXPECT_EQ(stored.size(), 9u);
  auto key = std::make_tuple(std::string("fructosa_cpu_times_user_seconds_total"), std::string("node07"),
                             std::int64_t{1'700'000'000'400});
  EXPECT_EQ(stored[key], std::make_pair(9.25, 1));
  EXPECT_EQ(fixture.output->counters().sent, 9u);
  EXPECT_EQ(fixture.output->counters().dropped, 0u);
}

TEST(PrometheusOutput, A5xxLeavesTheUndeliveredSamplesAndARetrySendsOnlyWhatIsMissing) {
  Fixture fixture;
  auto samples = three_rounds();
  int requests = 0;
  fixture.server.set_answer([&](const test::ReceivedWrite&) { return ++requests == 2 ? test::Answer{503, "busy"} : test::Answer{}; });
  std::vector<std::size_t> undelivered;
  try {
    fixture.output->write(samples);
    FAIL() << "no OutputError";
  } catch (const OutputError& error) {
    EXPECT_NE(std::string(error.what()).find("503"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(fixture.server.url()), std::string::npos) << error.what();
    undelivered = error.undelivered;
  }
  // Rounds 1 and 2 (samples 2..5) had points in the failed request or after it.
  EXPECT_EQ(undelivered, (std::vector<std::size_t>{2, 3, 4, 5}));
  std::vector<Sample> retry;
  for (auto i : undelivered) retry.push_back(samples[i]);
  fixture.output->write(retry);
  auto stored = fixture.stored();
  EXPECT_EQ(stored.size(), 9u);
  for (const auto& [key, entry] : stored) EXPECT_EQ(entry.second, 1) << std::get<0>(key);
  EXPECT_EQ(fixture.output->counters().sent, 9u);
}

TEST(PrometheusOutput, AnUnreachableServerIsATemporaryFailure) {
  MetricInfoStore infos;
  std::string url;
  { url = test::RemoteWriteServer().url(); }  // a port nobody listens on any more
  auto output = make_prometheus_output(options_of({"url=" + url, "timeout=2", "catalog_wait=0"}), infos);
  auto samples = three_rounds();
  try {
    output->write(samples);
    FAIL() << "no OutputError";
  } catch (const OutputError& error) {
    EXPECT_TRUE(error.undelivered.empty()) << "all of them";
    EXPECT_NE(std::string(error.what()).find("127.0.0.1"), std::string::npos) << error.what();
  }
  EXPECT_EQ(output->counters().sent, 0u);
}

TEST(PrometheusOutput, OutOfOrderRefusalsAreNarrowedToTheRefusedPointsWhichAreDropped) {
  Fixture fixture;
  // Like Prometheus after a lmaster restart: refuses a whole request holding any point of
  // VirtualMemory used at or before round 0 with "out of order sample".
  fixture.server.set_answer([](const test::ReceivedWrite& write) {
    for (const auto& series : write.request.timeseries())
      if (series.labels(0).value() == "fructosa_virtual_memory_used_bytes" &&
          series.samples(0).timestamp() <= 1'700'000'000'000)
        return test::Answer{400, "out of order sample"};
    return test::Answer{};
  });
  fixture.output->write(three_rounds());
  auto stored = fixture.stored();
  EXPECT_EQ(stored.size(), 8u);
  EXPECT_EQ(fixture.output->counters().dropped, 1u);
  EXPECT_EQ(fixture.output->counters().sent, 8u);
}

TEST(PrometheusOutput, Other4xxAreFinalNotRetried) {
  Fixture fixture({"samples_per_request=1"});
  fixture.server.set_answer([](const test::ReceivedWrite& write) {
    return write.request.timeseries(0).labels(0).value() == "fructosa_cpu_times_user_seconds_total"
               ? test::Answer{400, "invalid labels"}
               : test::Answer{};
  });
  auto samples = three_rounds();
  fixture.output->write(samples);  // no OutputError: nothing to send again
  EXPECT_EQ(fixture.output->counters().dropped, 3u);
  EXPECT_EQ(fixture.output->counters().sent, 6u);
  EXPECT_EQ(fixture.server.received().size(), 9u) << "each point sent once";
}

TEST(PrometheusOutput, BearerTokenAndBasicAuth) {
  test::TempDir dir;
  std::ofstream(dir.file("token")) << "s3cret\n";
  std::ofstream(dir.file("credentials")) << "fructosa:pa:ss\n";
  {
    Fixture fixture({"bearer_token_file=" + dir.file("token")});
    fixture.output->write(three_rounds());
    EXPECT_EQ(fixture.server.received().front().first.headers.at("authorization"), "Bearer s3cret");
  }
  Fixture fixture({"credentials_file=" + dir.file("credentials")});
  fixture.output->write(three_rounds());
  EXPECT_EQ(fixture.server.received().front().first.headers.at("authorization"), "Basic ZnJ1Y3Rvc2E6cGE6c3M=");
}

TEST(PrometheusOutput, KeysNamedAlikeInOneSampleAndPointsGoingBackAreDroppedNotSent) {
  Fixture fixture;
  std::int64_t t = 1'700'000'000'000'000'000;
  std::vector<Sample> samples{sample_of("S", t, {{"a.b", 1}, {"a_b", 2}}), sample_of("S", t + 1000, {{"a.b", 3}}),
                              sample_of("S", t - 1'000'000, {{"a.b", 4}})};
  fixture.output->write(samples);
  auto stored = fixture.stored();
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored.begin()->second, std::make_pair(1.0, 1)) << "the first key of the sample wins";
  EXPECT_EQ(fixture.output->counters().dropped, 3u) << "a_b, the same millisecond, and the older one";
}

TEST(PrometheusOutput, SamplesWaitForTheCatalogDuringCatalogWait) {
  MetricInfoStore infos;
  test::RemoteWriteServer server;
  auto output = make_prometheus_output(options_of({"url=" + server.url(), "catalog_wait=60"}), infos);
  infos.remember("CPUTimes", "user", {"seconds", Kind::counter, ""});
  std::vector<Sample> samples{sample_of("CPUTimes", 1'000'000'000, {{"user", 1}}),
                              sample_of("VirtualMemory", 1'000'000'000, {{"used", 2}})};
  try {
    output->write(samples);
    FAIL() << "no OutputError";
  } catch (const OutputError& error) {
    EXPECT_EQ(error.undelivered, std::vector<std::size_t>{1});
    EXPECT_NE(std::string(error.what()).find("VirtualMemory"), std::string::npos) << error.what();
  }
  infos.remember("VirtualMemory", "used", {"bytes", Kind::gauge, ""});
  output->write(std::span(samples).subspan(1));
  std::set<std::string> names;
  for (const auto& [write, status] : server.received())
    for (const auto& series : write.request.timeseries()) names.insert(series.labels(0).value());
  EXPECT_EQ(names, (std::set<std::string>{"fructosa_cpu_times_user_seconds_total", "fructosa_virtual_memory_used_bytes"}));
}

}  // namespace
}  // namespace fructosa::master
