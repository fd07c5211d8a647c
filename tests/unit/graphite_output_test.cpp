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

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "config.h"
#include "carbon_test_support.h"

namespace fructosa::master {
namespace {

using namespace fructosa::test::carbon;
using test::make_sample;
using test::TempDir;

Options options_for(std::vector<std::string> pairs) {
  return parse_pairs(graphite_options(), pairs, "test");
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
