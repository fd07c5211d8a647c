// A Link (lagent/link.h) that a unit test plays the destination of, for the Sender's tests.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "link.h"
#include "sender.h"
#include "test_support.h"

namespace fructosa::test {


// A destination the test plays: it records the batches handed to it and delivers the
// acknowledgements the test gives it, on the sender's thread, as a real link does.
class ScriptedLink final : public agent::Link {
 public:
  ScriptedLink() : wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~ScriptedLink() override { ::close(wake_fd_); }

  std::string destination() const override { return "scripted master"; }
  void start(agent::LinkEvents& events) override { events_ = &events; }
  bool can_send() const override { return true; }
  void send(std::uint64_t sequence, std::vector<Sample>& samples) override {
    std::lock_guard lock(mutex_);
    sent_.push_back(sequence);
    sent_samples_.push_back(samples);
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
  agent::LinkClock::time_point next_due() const override { return agent::LinkClock::time_point::max(); }

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
  // The samples of each batch handed over, in the order they were.
  std::vector<std::vector<Sample>> sent_samples() {
    std::lock_guard lock(mutex_);
    return sent_samples_;
  }

 private:
  int wake_fd_;
  agent::LinkEvents* events_ = nullptr;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::uint64_t> sent_;
  std::vector<std::vector<Sample>> sent_samples_;
  std::vector<std::uint64_t> acks_;
  std::size_t delivered_ = 0;
};

// A Sender whose destination is a ScriptedLink (`link`) and whose spool is in `dir`.
struct ScriptedSender {
  TempDir dir;
  ScriptedLink* link = nullptr;
  std::unique_ptr<agent::Sender> sender;
  explicit ScriptedSender(double batch_interval = 0) {
    auto scripted = std::make_unique<ScriptedLink>();
    link = scripted.get();
    agent::SenderSettings settings;
    settings.spool_dir = dir.file("spool");
    settings.batch_delay = 0;
    settings.batch_interval = batch_interval;
    sender = std::make_unique<agent::Sender>(settings, std::move(scripted));
  }
};

}  // namespace fructosa::test
