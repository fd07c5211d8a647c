#include "round_runner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

using fructosa::Sample;
using fructosa::agent::RoundRunner;
using fructosa::agent::RoundTask;
using fructosa::test::make_sample;

namespace {

constexpr std::int64_t kIntervalNs = 50'000'000;  // 0.05 s

// What the runner delivered: each call's samples, and the thread it came from.
class Deliveries {
 public:
  RoundRunner::Deliver sink() {
    return [this](std::vector<Sample>&& samples, std::chrono::steady_clock::time_point) {
      std::lock_guard lock(mutex_);
      calls_.push_back({std::move(samples), std::this_thread::get_id()});
      changed_.notify_all();
    };
  }
  // Waits (at most 10 s) until `done` holds over the calls so far; returns whether it did.
  template <class Done>
  bool wait_until(Done done) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return done(calls_); });
  }
  struct Call {
    std::vector<Sample> samples;
    std::thread::id thread;
  };
  std::vector<Call> calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Call> calls_;
};

std::size_t samples_of(const std::vector<Deliveries::Call>& calls, const std::string& sensor) {
  std::size_t n = 0;
  for (const auto& call : calls)
    for (const auto& sample : call.samples) n += sample.sensor == sensor;
  return n;
}

// A sensor that gives one sample per reading; `gate` (when set) holds a reading until opened.
struct FakeTask final : RoundTask {
  explicit FakeTask(std::string name, double interval = kIntervalNs / 1e9) : RoundTask(std::move(name), interval) {}

  void read(std::int64_t deadline, std::vector<Sample>& out) override {
    {
      std::unique_lock lock(mutex);
      ++reads_started;
      started.notify_all();
      opened.wait(lock, [this] { return !held; });
    }
    out.push_back(make_sample("", name, deadline, 0, {{"k", 1.0}}));
  }
  std::string running_jobs() override { return {}; }

  void hold() {
    std::lock_guard lock(mutex);
    held = true;
  }
  void release() {
    std::lock_guard lock(mutex);
    held = false;
    opened.notify_all();
  }
  bool wait_started(int count) {
    std::unique_lock lock(mutex);
    return started.wait_for(lock, std::chrono::seconds(10), [&] { return reads_started >= count; });
  }

  std::mutex mutex;
  std::condition_variable opened, started;
  bool held = false;
  int reads_started = 0;
};

}  // namespace

TEST(RoundRunner, ReadsEverySensorOfAnInstantOnOneThreadAndDeliversThemTogether) {
  Deliveries deliveries;
  auto a = std::make_shared<FakeTask>("A");
  auto b = std::make_shared<FakeTask>("B");
  // No help within the test, however slow the machine: what is checked is who reads.
  RoundRunner runner(deliveries.sink(), std::chrono::minutes(1));
  runner.set_tasks({a, b});
  ASSERT_TRUE(deliveries.wait_until([](const auto& calls) { return calls.size() >= 5; }));
  runner.stop();
  auto calls = deliveries.calls();
  std::set<std::thread::id> threads;
  for (const auto& call : calls) {
    threads.insert(call.thread);
    // Both sensors share every instant: one hand-over per round, both samples in it, stamped
    // with the same aligned reading time (never 0, even for tasks added while the runner waited).
    ASSERT_EQ(call.samples.size(), 2u);
    EXPECT_EQ(call.samples[0].time_ns, call.samples[1].time_ns);
    EXPECT_GT(call.samples[0].time_ns, 0);
    EXPECT_EQ(call.samples[0].time_ns % kIntervalNs, 0);
  }
  for (std::size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i].samples[0].time_ns, calls[i - 1].samples[0].time_ns);
  EXPECT_EQ(threads.size(), 1u) << "rounds with fast reads are all read by the thread that waited for them";
}

TEST(RoundRunner, AReadThatBlocksHoldsBackNeitherTheOtherSensorsNorLaterRounds) {
  Deliveries deliveries;
  auto slow = std::make_shared<FakeTask>("Slow");
  auto fast = std::make_shared<FakeTask>("Fast");
  slow->hold();
  RoundRunner runner(deliveries.sink());
  runner.set_tasks({slow, fast});
  ASSERT_TRUE(slow->wait_started(1));
  // While Slow's first reading is stuck, Fast is read at 5 more instants (by other threads).
  ASSERT_TRUE(deliveries.wait_until([](const auto& calls) { return samples_of(calls, "Fast") >= 6; }))
      << samples_of(deliveries.calls(), "Fast");
  EXPECT_EQ(samples_of(deliveries.calls(), "Slow"), 0u);
  EXPECT_EQ(slow->reads_started, 1) << "a sensor still being read is not read again";
  slow->release();
  ASSERT_TRUE(deliveries.wait_until([](const auto& calls) { return samples_of(calls, "Slow") >= 3; }));
  runner.stop();
}

TEST(RoundRunner, SetIntervalMovesATaskToItsNewGrid) {
  Deliveries deliveries;
  auto task = std::make_shared<FakeTask>("A", 3600);  // hourly: not due within the test
  RoundRunner runner(deliveries.sink());
  runner.set_tasks({task});
  runner.set_interval(task, 0.05);
  ASSERT_TRUE(deliveries.wait_until([](const auto& calls) { return calls.size() >= 3; }));
  runner.stop();
  for (const auto& call : deliveries.calls()) EXPECT_EQ(call.samples.at(0).time_ns % kIntervalNs, 0);
}

TEST(RoundRunner, StopsWhileIdleAndWithNoTasks) {
  Deliveries deliveries;
  RoundRunner runner(deliveries.sink());
  runner.stop();
  EXPECT_TRUE(deliveries.calls().empty());
}
