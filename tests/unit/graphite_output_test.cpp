#include "test_support.h"
#include "graphite_output.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "config.h"
#include "graphite_name.h"

namespace fructosa::master {
namespace {

using test::make_sample;
using test::TempDir;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::int64_t kSecond = 1000000000;
constexpr std::int64_t kT0 = 1700000000 * kSecond;


// A sample with `points` metrics k0..k<points-1> valued base + i.
Sample numbered(std::int64_t time_ns, int points, double base = 0) {
  std::vector<MetricValue> metrics;
  for (int i = 0; i < points; ++i) metrics.push_back({"k" + std::to_string(i), base + i});
  return make_sample("node01.cluster", "Test", time_ns, 0, std::move(metrics));
}

std::string bits(double value) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx",
                static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(value)));
  return text;
}

// The line the decoder below prints for one point.
std::string point_line(const std::string& path, double timestamp, double value) {
  return path + " " + bits(timestamp) + " " + bits(value) + "\n";
}

// A fresh directory under /tmp, removed with everything in it at the end of the test.

// Decodes what was sent with Python, independently of the encoder: pickle frames with carbon's
// own unpickler (the code carbon-cache runs) and Python's, checking that each frame is exactly
// one pickle; plaintext lines with carbon's split() and float(). Prints "frame N" per pickle
// frame and "path timestamp-bits value-bits" per point.
constexpr const char* kDecoder = R"(
import io, pickle, struct, sys
from carbon.util import get_unpickler
data = open(sys.argv[1], 'rb').read()
if sys.argv[2] == 'pickle':
    position = 0
    while position < len(data):
        (length,) = struct.unpack('!L', data[position:position + 4])
        frame = data[position + 4:position + 4 + length]
        assert len(frame) == length, 'truncated frame'
        stream = io.BytesIO(frame)
        points = pickle.Unpickler(stream).load()
        assert stream.tell() == length, 'bytes after the pickle'
        assert get_unpickler(insecure=False).loads(frame) == points
        assert type(points) is list
        print('frame', len(points))
        for point in points:
            path, (timestamp, value) = point
            assert type(path) is str and type(timestamp) is float and type(value) is float, point
            print(path, struct.pack('>d', timestamp).hex(), struct.pack('>d', value).hex())
        position += 4 + length
else:
    assert data.endswith(b'\n')
    for line in data.decode('ascii').split('\n')[:-1]:
        path, value, timestamp = line.strip().split()
        assert line == ' '.join((path, value, timestamp)), line
        timestamp, value = float(timestamp), float(value)
        print(path, struct.pack('>d', timestamp).hex(), struct.pack('>d', value).hex())
)";

std::string decode_with_python(const std::string& bytes, CarbonProtocol protocol) {
  TempDir dir;
  std::ofstream(dir.file("sent"), std::ios::binary) << bytes;
  std::ofstream(dir.file("decode.py")) << kDecoder;
  std::string command = "/usr/bin/python3 " + dir.file("decode.py") + " " + dir.file("sent") + " " +
                        (protocol == CarbonProtocol::pickle ? "pickle" : "plaintext") + " > " +
                        dir.file("decoded") + " 2> " + dir.file("errors");
  int status = std::system(command.c_str());
  std::stringstream decoded, errors;
  decoded << std::ifstream(dir.file("decoded")).rdbuf();
  errors << std::ifstream(dir.file("errors")).rdbuf();
  EXPECT_EQ(status, 0) << errors.str();
  return decoded.str();
}

std::string joined(const std::vector<CarbonFrame>& frames, std::size_t used) {
  std::string bytes;
  for (std::size_t i = 0; i < used; ++i) bytes += frames[i].bytes;
  return bytes;
}

Options options_for(std::vector<std::string> pairs) {
  return parse_pairs(graphite_options(), pairs, "test");
}

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

// ---------------------------------------------------------------------------------------------
// Options

TEST(GraphiteOptions, DefaultsAreFrUCToSAsAndLimitsAreCarbons) {
  Options defaults = options_for({});
  EXPECT_EQ(defaults.get_text("host"), "localhost");
  EXPECT_EQ(defaults.get_int("carbon receiver pickle port"), 2004);
  EXPECT_EQ(defaults.get_int("carbon receiver port"), 2003);
  EXPECT_EQ(defaults.get_text("protocol"), "pickle");
  EXPECT_EQ(defaults.get_text("prefix"), "");
  EXPECT_EQ(defaults.get_int("batch_size"), 500);
  EXPECT_THROW(options_for({"batch_size=501"}), ConfigError);
  EXPECT_THROW(options_for({"batch_size=0"}), ConfigError);
  EXPECT_THROW(options_for({"protocol=json"}), ConfigError);
  auto output = make_graphite_output(defaults, MetricInfoStore());
  EXPECT_EQ(output->name(), "graphite");
  EXPECT_LE(output->flush_period(), 1.0);
}

// ---------------------------------------------------------------------------------------------
// The connection, against a listener on loopback

// A carbon stand-in: listens on 127.0.0.1 and reads what is sent, without answering.
class Listener {
 public:
  explicit Listener(int port = 0, int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int on = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (receive_buffer > 0)  // inherited by accepted sockets
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(fd_, 8) != 0)
      throw std::runtime_error("cannot listen on 127.0.0.1");
    socklen_t size = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
  }
  ~Listener() {
    close_connection();
    close_listener();
  }
  int port() const { return port_; }

  // Accepts the next connection (the client's connect completed already, in the backlog).
  bool accept_connection() {
    pollfd pending{fd_, POLLIN, 0};
    if (::poll(&pending, 1, 5000) != 1) return false;
    close_connection();
    connection_ = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    received_.clear();
    return connection_ >= 0;
  }
  bool pending_connection() const {
    pollfd pending{fd_, POLLIN, 0};
    return ::poll(&pending, 1, 0) == 1;
  }

  // Reads until `frames` whole pickle frames have arrived (waiting 5 s at most); returns them.
  std::string read_frames(std::size_t frames) {
    read_while([&] { return complete_frames() < frames; });
    return received_;
  }
  // Reads until `bytes` bytes have arrived (waiting 5 s at most); returns them.
  std::string read_bytes(std::size_t bytes) {
    read_while([&] { return received_.size() < bytes; });
    return received_;
  }

  void close_connection() {
    if (connection_ >= 0) ::close(connection_);
    connection_ = -1;
  }
  void close_listener() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  template <typename Condition>
  void read_while(Condition condition) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (condition() && std::chrono::steady_clock::now() < deadline) {
      pollfd readable{connection_, POLLIN, 0};
      if (::poll(&readable, 1, 100) != 1) continue;
      char buffer[65536];
      ssize_t got = ::recv(connection_, buffer, sizeof buffer, 0);
      if (got <= 0) break;
      received_.append(buffer, static_cast<std::size_t>(got));
    }
  }

  std::size_t complete_frames() const {
    std::size_t count = 0, position = 0;
    while (position + 4 <= received_.size()) {
      auto byte = [&](std::size_t i) {
        return static_cast<std::uint32_t>(static_cast<unsigned char>(received_[position + i]));
      };
      std::size_t length = byte(0) << 24 | byte(1) << 16 | byte(2) << 8 | byte(3);
      if (position + 4 + length > received_.size()) break;
      position += 4 + length;
      ++count;
    }
    return count;
  }

  int fd_ = -1;
  int port_ = 0;
  int connection_ = -1;
  std::string received_;
};

std::unique_ptr<Output> output_to(int port, std::vector<std::string> more = {}) {
  more.push_back("host=127.0.0.1");
  more.push_back("carbon receiver pickle port=" + std::to_string(port));
  return make_graphite_output(options_for(more), MetricInfoStore());
}

// The decoder's lines for numbered(time, points, base).
std::string numbered_lines(std::int64_t time_ns, int points, double base = 0) {
  std::string lines;
  for (int i = 0; i < points; ++i)
    lines += point_line("node01.Test.k" + std::to_string(i), static_cast<double>(time_ns) / 1e9,
                        base + i);
  return lines;
}

TEST(GraphiteOutput, SendsPickleFramesAndCountsPoints) {
  Listener carbon;
  auto output = output_to(carbon.port(), {"batch_size=2"});
  std::vector<Sample> samples{numbered(kT0, 3), numbered(kT0 + kSecond, 1, 10)};
  output->write(samples);
  EXPECT_EQ(output->counters().sent, 4u);
  EXPECT_EQ(output->counters().retried, 0u);
  ASSERT_TRUE(carbon.accept_connection());
  std::string decoded = decode_with_python(carbon.read_frames(2), CarbonProtocol::pickle);
  EXPECT_EQ(decoded, "frame 2\n" + numbered_lines(kT0, 2) + "frame 2\n" +
                         point_line("node01.Test.k2", 1700000000, 2) +
                         numbered_lines(kT0 + kSecond, 1, 10));
  // A write with nothing to send (all NaN) needs no connection.
  output->write(std::vector<Sample>{make_sample("n", "S", kT0, 0, {{"a", kNaN}})});
  EXPECT_FALSE(carbon.pending_connection());
}

TEST(GraphiteOutput, NoticesAClosedConnectionReconnectsAndReplaysTheRecentFrames) {
  auto carbon = std::make_unique<Listener>();
  const int port = carbon->port();
  auto output = output_to(port, {"timeout=1"});
  output->write(std::vector<Sample>{numbered(kT0, 3)});
  ASSERT_TRUE(carbon->accept_connection());
  EXPECT_EQ(decode_with_python(carbon->read_frames(1), CarbonProtocol::pickle),
            "frame 3\n" + numbered_lines(kT0, 3));

  // Carbon restarts: the connection closes. The next write notices before sending, connects
  // again and first re-sends what went over the lost connection (it may not have been read).
  carbon->close_connection();
  output->write(std::vector<Sample>{numbered(kT0 + kSecond, 2)});
  ASSERT_TRUE(carbon->accept_connection());
  EXPECT_EQ(decode_with_python(carbon->read_frames(2), CarbonProtocol::pickle),
            "frame 3\n" + numbered_lines(kT0, 3) + "frame 2\n" + numbered_lines(kT0 + kSecond, 2));
  EXPECT_EQ(output->counters().sent, 5u);
  EXPECT_EQ(output->counters().retried, 3u);

  // Carbon is down: the write fails, naming every sample as undelivered.
  carbon.reset();
  std::vector<Sample> third{numbered(kT0 + 2 * kSecond, 1), numbered(kT0 + 3 * kSecond, 1)};
  try {
    output->write(third);
    FAIL() << "write succeeded with nobody listening";
  } catch (const OutputError& error) {
    EXPECT_EQ(error.undelivered, (std::vector<std::size_t>{0, 1}));
    EXPECT_NE(std::string(error.what()).find("127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(output->counters().sent, 5u);

  // Carbon is back on the same port: the frames of the window come first, then the new ones.
  carbon = std::make_unique<Listener>(port);
  output->write(third);
  ASSERT_TRUE(carbon->accept_connection());
  EXPECT_EQ(decode_with_python(carbon->read_frames(3), CarbonProtocol::pickle),
            "frame 3\n" + numbered_lines(kT0, 3) + "frame 2\n" + numbered_lines(kT0 + kSecond, 2) +
                "frame 2\n" + numbered_lines(kT0 + 2 * kSecond, 1) +
                numbered_lines(kT0 + 3 * kSecond, 1));
  EXPECT_EQ(output->counters().sent, 7u);
  EXPECT_EQ(output->counters().retried, 8u);
}

TEST(GraphiteOutput, FlushReplaysAfterARestartEvenWhenNoNewDataComes) {
  auto carbon = std::make_unique<Listener>();
  const int port = carbon->port();
  auto output = output_to(port);
  output->write(std::vector<Sample>{numbered(kT0, 2)});
  ASSERT_TRUE(carbon->accept_connection());
  carbon->read_frames(1);
  carbon.reset();  // the old carbon is gone, a new one listens
  carbon = std::make_unique<Listener>(port);
  output->flush();
  ASSERT_TRUE(carbon->accept_connection());
  EXPECT_EQ(decode_with_python(carbon->read_frames(1), CarbonProtocol::pickle),
            "frame 2\n" + numbered_lines(kT0, 2));
  EXPECT_EQ(output->counters().retried, 2u);
}

TEST(GraphiteOutput, WithoutAReplayWindowNothingIsSentTwice) {
  auto carbon = std::make_unique<Listener>();
  auto output = output_to(carbon->port(), {"replay_window=0"});
  output->write(std::vector<Sample>{numbered(kT0, 2)});
  ASSERT_TRUE(carbon->accept_connection());
  carbon->read_frames(1);
  carbon->close_connection();
  output->write(std::vector<Sample>{numbered(kT0 + kSecond, 1)});
  ASSERT_TRUE(carbon->accept_connection());
  EXPECT_EQ(decode_with_python(carbon->read_frames(1), CarbonProtocol::pickle),
            "frame 1\n" + numbered_lines(kT0 + kSecond, 1));
  EXPECT_EQ(output->counters().retried, 0u);
}

TEST(GraphiteOutput, ACarbonThatStopsReadingTimesOutAndTheUnsentSamplesAreListed) {
  // Nobody reads: once the kernel buffers are full a send makes no progress for `timeout`.
  Listener carbon(0, 4096);
  auto output = output_to(carbon.port(), {"timeout=0.2"});
  std::vector<Sample> samples;
  for (int i = 0; i < 400; ++i) {
    samples.push_back(numbered(kT0 + i * kSecond, 1000));
    samples.back().sensor = std::string(60, 'S');  // ~100 bytes a point: 40 MB in all
  }
  try {
    output->write(samples);
    FAIL() << "40 MB went into a socket nobody reads";
  } catch (const OutputError& error) {
    ASSERT_FALSE(error.undelivered.empty());
    const std::size_t first = error.undelivered.front();
    EXPECT_GT(first, 0u) << "the first frames fit in the buffers";
    EXPECT_EQ(error.undelivered.back(), samples.size() - 1);
    EXPECT_EQ(error.undelivered.size(), samples.size() - first);
    // What was counted as sent is what the delivered frames held (whole samples or a part of
    // the sample the failure cut, in 500-point frames).
    EXPECT_GE(output->counters().sent, first * 1000u);
    EXPECT_LE(output->counters().sent, (first + 1) * 1000u);
    EXPECT_EQ(output->counters().sent % 500, 0u);
  }
}

TEST(GraphiteOutput, PlaintextGoesToTheLineReceiverPort) {
  Listener carbon;
  auto output = make_graphite_output(
      options_for({"host=127.0.0.1", "protocol=plaintext", "carbon receiver pickle port=1",
                   "carbon receiver port=" + std::to_string(carbon.port()), "prefix=p"}),
      MetricInfoStore());
  output->write(std::vector<Sample>{make_sample("node07", "S", kT0, 0, {{"a", 0.1}, {"", 2}})});
  ASSERT_TRUE(carbon.accept_connection());
  const std::string expected = "p.node07.S.a 0.1 1700000000\np.node07.S 2 1700000000\n";
  EXPECT_EQ(carbon.read_bytes(expected.size()), expected);
}

}  // namespace
}  // namespace fructosa::master
