// The sender (lagent/sender.h) takes acknowledgements only for batches its spool numbered: one
// of UINT64_MAX, or beyond the last batch, from a confused or lying master changes nothing.
#include "sender.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>

#include "agent_spool.h"
#include "test_support.h"

namespace fructosa::agent {
namespace {

using test::make_sample;
using test::TempDir;

// A destination the test plays: it records the batches handed to it and delivers the
// acknowledgements the test gives it, on the sender's thread, as a real link does.
class ScriptedLink final : public Link {
 public:
  ScriptedLink() : wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~ScriptedLink() override { ::close(wake_fd_); }

  std::string destination() const override { return "scripted master"; }
  void start(LinkEvents& events) override { events_ = &events; }
  bool can_send() const override { return true; }
  void send(std::uint64_t sequence, std::vector<Sample>&) override {
    std::lock_guard lock(mutex_);
    sent_.push_back(sequence);
    changed_.notify_all();
  }
  bool watch(std::vector<pollfd>& fds, bool) override {
    fds.push_back({wake_fd_, POLLIN, 0});
    std::lock_guard lock(mutex_);
    return !acks_.empty();
  }
  void service() override {
    std::uint64_t ignored;
    [[maybe_unused]] auto n = ::read(wake_fd_, &ignored, sizeof ignored);
    std::vector<std::uint64_t> acks;
    {
      std::lock_guard lock(mutex_);
      acks.swap(acks_);
    }
    for (auto sequence : acks) events_->taken(sequence);
    std::lock_guard lock(mutex_);
    delivered_ += acks.size();
    changed_.notify_all();
  }
  LinkClock::time_point next_due() const override { return LinkClock::time_point::max(); }

  // The master acknowledges `sequence`; returns once the sender has been told.
  void acknowledge(std::uint64_t sequence) {
    std::unique_lock lock(mutex_);
    acks_.push_back(sequence);
    std::size_t target = delivered_ + acks_.size();
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
    ASSERT_TRUE(changed_.wait_for(lock, std::chrono::seconds(10), [&] { return delivered_ >= target; }));
  }

  // The sequences handed over so far, once there are `count` of them (or 10 s have passed).
  std::vector<std::uint64_t> sent(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(10), [&] { return sent_.size() >= count; });
    return sent_;
  }

 private:
  int wake_fd_;
  LinkEvents* events_ = nullptr;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::uint64_t> sent_;
  std::vector<std::uint64_t> acks_;
  std::size_t delivered_ = 0;
};

std::vector<Sample> batch(double value) { return {make_sample("", "Test", 1'000'000'000, 0, {{"k", value}})}; }

struct SenderUnderTest {
  TempDir dir;
  ScriptedLink* link = nullptr;
  std::unique_ptr<Sender> sender;
  SenderUnderTest() {
    auto scripted = std::make_unique<ScriptedLink>();
    link = scripted.get();
    SenderSettings settings;
    settings.spool_dir = dir.file("spool");
    settings.batch_delay = 0;
    sender = std::make_unique<Sender>(settings, std::move(scripted));
  }
  void send(double value) {
    sender->queue(batch(value));
    sender->send_queued();
  }
};

TEST(SenderAcknowledgements, OneOfTheLargestSequenceDoesNotWrapTheNumbering) {
  SenderUnderTest test;
  test.send(1);
  ASSERT_EQ(test.link->sent(1), std::vector<std::uint64_t>{1});
  test.link->acknowledge(std::numeric_limits<std::uint64_t>::max());
  // Taken, it would have made the next batch number 0 (which the spool means as "not kept").
  test.send(2);
  EXPECT_EQ(test.link->sent(2), (std::vector<std::uint64_t>{1, 2}));
  test.link->acknowledge(1);
  // Batch 2 was never acknowledged: it stays for the next start.
  EXPECT_EQ(test.sender->stop(0), 1u);
  test.sender.reset();
  AgentSpool spool(test.dir.file("spool"), 1 << 20);
  EXPECT_EQ(spool.first_sequence(), 2u);
  EXPECT_EQ(spool.next_sequence(), 3u);
}

TEST(SenderAcknowledgements, OnesBeyondTheLastBatchAreIgnoredAndTheBatchesStay) {
  SenderUnderTest test;
  test.send(1);
  ASSERT_EQ(test.link->sent(1), std::vector<std::uint64_t>{1});  // else both could leave as one batch
  test.send(2);
  ASSERT_EQ(test.link->sent(2), (std::vector<std::uint64_t>{1, 2}));
  // No batch 50 was ever made (the spool has reserved numbers up to 64, unused), nor any of the
  // others: none moves the numbering, nor stops the batches to come from being sent.
  test.link->acknowledge(50);
  test.send(3);
  EXPECT_EQ(test.link->sent(3), (std::vector<std::uint64_t>{1, 2, 3}));
  test.link->acknowledge(1000);
  test.send(4);
  EXPECT_EQ(test.link->sent(4), (std::vector<std::uint64_t>{1, 2, 3, 4}));
  test.link->acknowledge(std::numeric_limits<std::uint64_t>::max() - 1);
  test.send(5);
  EXPECT_EQ(test.link->sent(5), (std::vector<std::uint64_t>{1, 2, 3, 4, 5}));
  test.link->acknowledge(5);  // a real acknowledgement still counts
  EXPECT_EQ(test.sender->stop(0), 0u);
  test.sender.reset();
  AgentSpool spool(test.dir.file("spool"), 1 << 20);
  EXPECT_TRUE(spool.empty());
  EXPECT_EQ(spool.next_sequence(), 6u);
}

}  // namespace
}  // namespace fructosa::agent
