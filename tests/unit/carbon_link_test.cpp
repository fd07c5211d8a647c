// lagent straight to carbon: [Graphite] in lagent.conf, and the link that decides when carbon
// has taken a batch (lagent/carbon_link.h).
#include "carbon_link.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "agent_config.h"
#include "agent_spool.h"
#include "test_support.h"

namespace fructosa::agent {
namespace {

using Clock = std::chrono::steady_clock;
using test::make_sample;
using test::TempDir;

// What the link told the sender.
struct RecordedEvents final : LinkEvents {
  std::vector<std::uint64_t> taken_through, handed;
  int send_agains = 0, resyncs = 0, answers = 0;
  void taken(std::uint64_t sequence) override { taken_through.push_back(sequence); }
  void handed_over(std::uint64_t sequence) override { handed.push_back(sequence); }
  void send_again() override { ++send_agains; }
  void answered(const std::string&) override { ++answers; }
  void count_resync() override { ++resyncs; }
  void count_failover() override {}
  std::uint64_t last_handed() const override { return 0; }
  std::uint64_t session() const override { return 1; }
  std::uint64_t batches_kept() const override { return 0; }
  std::uint64_t last_taken() const { return taken_through.empty() ? 0 : taken_through.back(); }
};

// A carbon stand-in: a listening socket on 127.0.0.1 and the connections it accepts.
class FakeCarbon {
 public:
  FakeCarbon() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
        ::listen(listener_, 8) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size) != 0)
      throw std::runtime_error("cannot listen");
    port_ = ntohs(address.sin_port);
  }
  ~FakeCarbon() {
    close_connection();
    ::close(listener_);
  }
  int port() const { return port_; }
  // The connection the link made (waits for it up to 5 s).
  void accept_connection() {
    pollfd ready{listener_, POLLIN, 0};
    ASSERT_EQ(::poll(&ready, 1, 5000), 1) << "the link did not connect";
    connection_ = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(connection_, 0);
  }
  // Everything received until `done` says it is enough, or 5 s.
  std::string read_until(const std::function<bool(const std::string&)>& done) {
    std::string received;
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!done(received) && Clock::now() < deadline) {
      pollfd ready{connection_, POLLIN, 0};
      if (::poll(&ready, 1, 100) != 1) continue;
      char buffer[65536];
      ssize_t n = ::recv(connection_, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      received.append(buffer, static_cast<std::size_t>(n));
    }
    return received;
  }
  void close_connection() {
    if (connection_ >= 0) ::close(connection_);
    connection_ = -1;
  }

 private:
  int listener_ = -1;
  int connection_ = -1;
  int port_ = 0;
};

CarbonLinkSettings settings_for(int port, double replay_window) {
  CarbonLinkSettings settings;
  settings.carbon.host = "127.0.0.1";
  settings.carbon.port = port;
  settings.carbon.replay_window = replay_window;
  settings.host = "node07";
  settings.retry_max_interval = 2;
  return settings;
}

// A batch as the spool gives it back: no host.
std::vector<Sample> carbon_batch(std::int64_t second, double value) {
  return {make_sample("", "Test", second * 1000000000, 0, {{"k0", value}})};
}

// Runs the link as the sender does until `done`, or fails after 5 s.
void serve_until(Link& link, const std::function<bool()>& done) {
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!done() && Clock::now() < deadline) {
    std::vector<pollfd> fds;
    bool news = link.watch(fds, true);
    auto until = std::min(link.next_due(), Clock::now() + std::chrono::milliseconds(50));
    auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count() + 1;
    ::poll(fds.data(), fds.size(), news ? 0 : static_cast<int>(std::clamp<long>(timeout, 0, 50)));
    link.service();
  }
  EXPECT_TRUE(done()) << "timed out";
}

TEST(CarbonLink, ABatchIsTakenOnlyOnceTheConnectionOutlivedTheReplayWindow) {
  FakeCarbon carbon;
  auto link = make_carbon_link(settings_for(carbon.port(), 0.3));
  RecordedEvents events;
  link->start(events);
  carbon.accept_connection();
  EXPECT_TRUE(link->can_send());
  EXPECT_EQ(events.answers, 1);
  auto samples = carbon_batch(1700000000, 42);
  const auto written = Clock::now();
  link->send(1, samples);
  // The spool does not keep the host: the link names the samples after this agent.
  auto received = carbon.read_until(
      [](const std::string& bytes) { return bytes.find("node07.Test.k0") != std::string::npos; });
  EXPECT_NE(received.find("node07.Test.k0"), std::string::npos);
  EXPECT_EQ(events.handed, std::vector<std::uint64_t>{1});
  link->service();
  EXPECT_TRUE(events.taken_through.empty()) << "taken before the replay window passed";
  serve_until(*link, [&] { return events.last_taken() == 1; });
  EXPECT_GE(Clock::now() - written, std::chrono::milliseconds(300));
}

TEST(CarbonLink, WithoutAReplayWindowABatchIsTakenOnceWritten) {
  FakeCarbon carbon;
  auto link = make_carbon_link(settings_for(carbon.port(), 0));
  RecordedEvents events;
  link->start(events);
  carbon.accept_connection();
  auto samples = carbon_batch(1700000000, 1);
  link->send(7, samples);
  EXPECT_EQ(events.taken_through, std::vector<std::uint64_t>{7});
}

TEST(CarbonLink, ALostConnectionSendsEveryBatchNotTakenAgainAfterTheReconnect) {
  FakeCarbon carbon;
  auto link = make_carbon_link(settings_for(carbon.port(), 60));
  RecordedEvents events;
  link->start(events);
  carbon.accept_connection();
  EXPECT_EQ(events.send_agains, 1);  // at the first connection: whatever the spool kept
  for (std::uint64_t sequence : {1, 2}) {
    auto samples = carbon_batch(1700000000 + static_cast<std::int64_t>(sequence), 1);
    link->send(sequence, samples);
  }
  carbon.read_until([](const std::string& bytes) { return bytes.size() > 60; });
  carbon.close_connection();  // carbon went away with whatever it had not written yet
  serve_until(*link, [&] { return !link->can_send(); });
  EXPECT_TRUE(events.taken_through.empty());
  serve_until(*link, [&] { return events.send_agains == 2; });  // connected again (after 0.5 s)...
  carbon.accept_connection();
  EXPECT_TRUE(link->can_send());
  EXPECT_EQ(events.resyncs, 1);  // ... and every batch not taken goes again, oldest first
  EXPECT_TRUE(events.taken_through.empty());
}

TEST(CarbonLink, CarbonClosingAfterOurEndTakesEverythingWritten) {
  FakeCarbon carbon;
  auto link = make_carbon_link(settings_for(carbon.port(), 60));
  RecordedEvents events;
  link->start(events);
  carbon.accept_connection();
  for (std::uint64_t sequence : {1, 2, 3}) {
    auto samples = carbon_batch(1700000000 + static_cast<std::int64_t>(sequence), 1);
    link->send(sequence, samples);
  }
  link->finish();  // the agent stops: our end is closed...
  carbon.read_until([](const std::string&) { return false; });  // ... carbon reads up to it (EOF)
  carbon.close_connection();
  serve_until(*link, [&] { return events.last_taken() == 3; });
}

TEST(CarbonLink, ACarbonThatIsAwayIsTriedAgainLessAndLessOften) {
  int port;
  {
    FakeCarbon gone;  // a port nothing listens on once it is closed
    port = gone.port();
  }
  auto settings = settings_for(port, 5);
  settings.retry_max_interval = 1;
  auto link = make_carbon_link(settings);
  RecordedEvents events;
  link->start(events);
  EXPECT_FALSE(link->can_send());
  EXPECT_EQ(events.answers, 0);
  std::vector<double> waits;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto due = link->next_due();
    waits.push_back(std::chrono::duration<double>(due - Clock::now()).count());
    while (Clock::now() < due) ::usleep(10000);
    link->service();
  }
  EXPECT_NEAR(waits[0], 0.5, 0.1);
  EXPECT_NEAR(waits[1], 1.0, 0.1);
  EXPECT_NEAR(waits[2], 1.0, 0.1);  // retry_max_interval
}

// ---------------------------------------------------------------------------------------------
// lagent.conf

std::string write_config(const TempDir& dir, const std::string& text) {
  std::string path = dir.file("lagent.conf");
  std::ofstream(path) << text;
  return path;
}

TEST(AgentConfigGraphite, FrUCToSAsGraphiteSectionWithoutAnLmasterSendsToCarbon) {
  TempDir dir;
  auto config =
      load_agent_config(write_config(dir,
                                     "[Graphite]\nhost = localhost\ncarbon receiver pickle port = "
                                     "2004\n[sensor:CPUPercent]\ntime_interval = 1\n"));
  ASSERT_TRUE(config.graphite);
  auto carbon = graphite::carbon_settings(*config.graphite);
  EXPECT_EQ(carbon.host, "localhost");
  EXPECT_EQ(carbon.port, 2004);
  EXPECT_EQ(carbon.protocol, graphite::CarbonProtocol::pickle);
  EXPECT_EQ(carbon.batch_size, 500u);
  EXPECT_EQ(carbon.replay_window, 5);
  EXPECT_EQ(config.graphite->get_real("retry_max_interval"), 30);
  EXPECT_TRUE(config.warnings.empty());
}

TEST(AgentConfigGraphite, TheSectionIsLmastersOptionTableAndItsErrorsNameTheLine) {
  TempDir dir;
  auto config =
      load_agent_config(write_config(dir,
                                     "[graphite]\nprotocol = plaintext\ncarbon receiver port = "
                                     "2013\nprefix = hpc\nretry_max_interval = 5\n"));
  ASSERT_TRUE(config.graphite);
  auto carbon = graphite::carbon_settings(*config.graphite);
  EXPECT_EQ(carbon.protocol, graphite::CarbonProtocol::plaintext);
  EXPECT_EQ(carbon.port, 2013);
  EXPECT_EQ(carbon.prefix, "hpc");
  try {
    load_agent_config(write_config(dir, "[Graphite]\nhost = a\nbatch_size = 501\n"));
    FAIL() << "batch_size 501 accepted";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("lagent.conf:3: [Graphite] batch_size"),
              std::string::npos)
        << error.what();
  }
}

TEST(AgentConfigGraphite, WithAnLmasterTheSectionIsIgnoredWithAWarning) {
  TempDir dir;
  auto path =
      write_config(dir, "[lmaster]\nhost = m1\n[Graphite]\nhost = carbon1\nqueue_max_points = 5\n");
  auto config = load_agent_config(path);
  EXPECT_FALSE(config.graphite);
  ASSERT_EQ(config.warnings.size(), 1u);
  EXPECT_EQ(config.warnings[0],
            path +
                ":3: [Graphite]: ignored: lagent sends to the lmaster of [lmaster]; "
                "[Graphite] belongs in lmaster.conf");
  EXPECT_EQ(config.master_host, "m1");
}

// ---------------------------------------------------------------------------------------------
// The spool's side: a batch written to carbon needs no flush of its own, and stays until taken.

TEST(AgentSpoolHandedOver, AHandedOverBatchNeedsNoSyncButStaysUntilAcknowledged) {
  TempDir dir;
  AgentSpool spool(dir.file("spool"), 1 << 20);
  auto sequence = spool.append(carbon_batch(1700000000, 1));
  ASSERT_TRUE(spool.unsynced_since());
  spool.handed_over(sequence);
  EXPECT_FALSE(spool.unsynced_since());
  EXPECT_EQ(spool.stats().batches, 1u);
  auto next = spool.append(carbon_batch(1700000001, 2));
  EXPECT_TRUE(spool.unsynced_since()) << "a batch not handed over still needs its sync";
  spool.acknowledge(next);
  EXPECT_EQ(spool.stats().batches, 0u);
}

}  // namespace
}  // namespace fructosa::agent
