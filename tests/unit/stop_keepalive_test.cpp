// StopKeepAlive: more stop time is asked for (EXTEND_TIMEOUT_USEC) only while work is done, on a
// real $NOTIFY_SOCKET as systemd reads it.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "stop_keepalive.h"

using fructosa::StopKeepAlive;
using namespace std::chrono_literals;

namespace {

struct Recorder {
  std::mutex mutex;
  std::vector<std::string> messages;
  void operator()(std::string_view state) {
    std::lock_guard lock(mutex);
    messages.emplace_back(state);
  }
  std::size_t size() {
    std::lock_guard lock(mutex);
    return messages.size();
  }
};

}  // namespace

TEST(StopKeepAlive, AsksForMoreTimeOnlyWhenWorkWasDoneSinceTheLastCheck) {
  std::atomic<std::uint64_t> done{7};
  Recorder recorder;
  // A period far longer than the test: only the explicit checks run.
  StopKeepAlive keepalive(1h, 30s, [&] { return done.load(); }, std::ref(recorder));
  EXPECT_FALSE(keepalive.check());  // nothing done since it started
  done += 3;
  EXPECT_TRUE(keepalive.check());
  EXPECT_FALSE(keepalive.check());  // stalled: the unit's own timeout applies again
  EXPECT_FALSE(keepalive.check());
  done += 1;
  EXPECT_TRUE(keepalive.check());
  EXPECT_EQ(keepalive.extensions(), 2u);
  ASSERT_EQ(recorder.size(), 2u);
  EXPECT_EQ(recorder.messages[0], "EXTEND_TIMEOUT_USEC=30000000\nSTATUS=stopping: finishing the outputs (10 steps done)");
  EXPECT_EQ(recorder.messages[1], "EXTEND_TIMEOUT_USEC=30000000\nSTATUS=stopping: finishing the outputs (11 steps done)");
}

TEST(StopKeepAlive, ItsThreadChecksEveryPeriodUntilDestroyed) {
  std::atomic<std::uint64_t> done{0};
  Recorder recorder;
  std::uint64_t asked = 0;
  {
    StopKeepAlive keepalive(5ms, 20ms, [&] { return done.load(); }, std::ref(recorder));
    // Work goes on: the thread asks again after each step it sees.
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (keepalive.extensions() < 3 && std::chrono::steady_clock::now() < deadline) {
      const auto seen = keepalive.extensions();
      ++done;
      while (keepalive.extensions() == seen && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
    }
    asked = keepalive.extensions();
  }
  EXPECT_GE(asked, 3u);
  EXPECT_EQ(recorder.size(), asked);  // nothing after it was destroyed, nothing without work
  EXPECT_EQ(recorder.messages.front().rfind("EXTEND_TIMEOUT_USEC=20000\n", 0), 0u) << recorder.messages.front();
}

TEST(StopKeepAlive, ProgressIsCountedProcessWide) {
  const std::uint64_t before = fructosa::progress_count();
  fructosa::note_progress();
  std::thread([] { fructosa::note_progress(); }).join();
  EXPECT_EQ(fructosa::progress_count(), before + 2);
}

// The default notifier sends the datagram systemd reads on $NOTIFY_SOCKET.
TEST(StopKeepAlive, TellsTheServiceManagerOnItsSocket) {
  const auto directory = std::filesystem::temp_directory_path() /
                         ("fructosa-keepalive-" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const std::string path = (directory / "notify").string();
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof address.sun_path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0) << std::strerror(errno);
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  {
    StopKeepAlive keepalive(1h, 45s);  // the process-wide count, the real notifier
    fructosa::note_progress();
    EXPECT_TRUE(keepalive.check());
  }
  ::unsetenv("NOTIFY_SOCKET");
  char buffer[512];
  ssize_t got = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
  ::close(fd);
  std::filesystem::remove_all(directory);
  ASSERT_GT(got, 0) << "no datagram on the notify socket";
  const std::string message(buffer, static_cast<std::size_t>(got));
  EXPECT_EQ(message.rfind("EXTEND_TIMEOUT_USEC=45000000\nSTATUS=stopping: ", 0), 0u) << message;
}
