// The output runner and its disk spool: ordering, retries, budgets, restarts.
#include "test_support.h"
#include "output_runner.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "sample_spool.h"

namespace fructosa::master {
namespace {

using test::TempDir;


// A batch of `count` samples numbered from `first` (time_ns carries the number).
std::vector<Sample> numbered(int first, int count) {
  std::vector<Sample> samples;
  for (int i = first; i < first + count; ++i) {
    Sample sample;
    sample.host = "node" + std::to_string(i % 3);
    sample.sensor = "Sensor";
    sample.time_ns = i;
    sample.job = static_cast<std::uint64_t>(i % 2);
    sample.metrics = {{"a", i * 1.5}, {"b.c d", -i * 0.25}};
    if (i % 4 == 0) sample.labels = {{"device", "sd" + std::to_string(i)}};
    samples.push_back(std::move(sample));
  }
  return samples;
}

SharedSamples shared(std::vector<Sample> samples) {
  return std::make_shared<const std::vector<Sample>>(std::move(samples));
}

// Records what it was given; can be told to fail, or to refuse some samples.
class FakeOutput final : public Output {
 public:
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<std::int64_t> delivered;  // time_ns of every delivered sample, in order
    std::vector<std::size_t> write_sizes;
    int failures_left = 0;              // next writes throw OutputError (nothing delivered)
    bool refuse_odd_once = false;       // next write delivers even samples only
    bool down = false;                  // every write fails while set
    int flushes = 0, reopens = 0;
  };
  explicit FakeOutput(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::string name() const override { return "fake"; }
  std::size_t batch_samples() const override { return 10; }
  double flush_period() const override { return 0.02; }

  void write(std::span<const Sample> samples) override {
    std::lock_guard lock(state_->mutex);
    state_->write_sizes.push_back(samples.size());
    if (state_->down || state_->failures_left > 0) {
      if (state_->failures_left > 0) --state_->failures_left;
      throw OutputError("store unreachable");
    }
    std::vector<std::size_t> undelivered;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      if (state_->refuse_odd_once && samples[i].time_ns % 2 != 0) {
        undelivered.push_back(i);
        continue;
      }
      state_->delivered.push_back(samples[i].time_ns);
      counters_.sent += samples[i].metrics.size();
    }
    state_->changed.notify_all();
    if (!undelivered.empty()) {
      state_->refuse_odd_once = false;
      throw OutputError("some refused", undelivered);
    }
  }
  void flush() override {
    std::lock_guard lock(state_->mutex);
    ++state_->flushes;
    state_->changed.notify_all();
  }
  void reopen() override {
    std::lock_guard lock(state_->mutex);
    ++state_->reopens;
    state_->changed.notify_all();
  }

 private:
  std::shared_ptr<State> state_;
};

// Waits (with a generous deadline) until `done` holds for the fake's state.
template <typename Condition>
bool wait_until(FakeOutput::State& state, Condition done) {
  std::unique_lock lock(state.mutex);
  return state.changed.wait_for(lock, std::chrono::seconds(20), [&] { return done(); });
}

std::vector<std::int64_t> sequence(int first, int count) {
  std::vector<std::int64_t> numbers;
  for (int i = first; i < first + count; ++i) numbers.push_back(i);
  return numbers;
}

RunnerSettings fast_settings(std::size_t queue_max_points = 1000000) {
  RunnerSettings settings;
  settings.queue_max_points = queue_max_points;
  settings.retry_min_interval = 0.005;
  settings.retry_max_interval = 0.02;
  settings.stop_grace = 0.2;
  return settings;
}

TEST(SampleSpool, EncodesSamplesExactly) {
  auto samples = numbered(1, 9);
  samples[0].metrics.push_back({"nan", std::numeric_limits<double>::quiet_NaN()});
  auto decoded = decode_samples(encode_samples(samples));
  ASSERT_EQ(decoded.size(), samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(decoded[i].host, samples[i].host);
    EXPECT_EQ(decoded[i].time_ns, samples[i].time_ns);
    EXPECT_EQ(decoded[i].job, samples[i].job);
    ASSERT_EQ(decoded[i].metrics.size(), samples[i].metrics.size());
    for (std::size_t m = 0; m < samples[i].metrics.size(); ++m) {
      EXPECT_EQ(decoded[i].metrics[m].key, samples[i].metrics[m].key);
      if (std::isnan(samples[i].metrics[m].value))
        EXPECT_TRUE(std::isnan(decoded[i].metrics[m].value));
      else
        EXPECT_EQ(decoded[i].metrics[m].value, samples[i].metrics[m].value);
    }
    ASSERT_EQ(decoded[i].labels.size(), samples[i].labels.size());
    if (!samples[i].labels.empty()) {
      EXPECT_EQ(decoded[i].labels[0].value, samples[i].labels[0].value);
    }
  }
  std::string payload = encode_samples(samples);
  EXPECT_THROW(decode_samples(std::string_view(payload).substr(0, payload.size() - 3)), std::runtime_error);
  EXPECT_THROW(decode_samples(payload + "x"), std::runtime_error);
  std::string huge_count = payload;
  huge_count[3] = '\x7f';  // claims ~2 billion samples in a few bytes
  EXPECT_THROW(decode_samples(huge_count), std::runtime_error);
}

TEST(SampleSpool, IsFirstInFirstOutAndSurvivesARestartMidSegment) {
  TempDir dir;
  DiskBudget budget(1 << 30);
  std::uint64_t dropped = 0;
  {
    SampleSpool spool(dir.file("out"), budget, "test");
    EXPECT_TRUE(spool.empty());
    for (int batch = 0; batch < 4; ++batch) ASSERT_TRUE(spool.append(numbered(batch * 5, 5), dropped));
    EXPECT_EQ(spool.points(), 40u);
    EXPECT_GT(budget.used(), 0u);
    auto first = spool.pop(dropped);
    ASSERT_TRUE(first);
    EXPECT_EQ(first->front().time_ns, 0);
    EXPECT_EQ(spool.points(), 30u);
  }
  // The next run starts where this one stopped reading.
  DiskBudget fresh_budget(1 << 30);
  SampleSpool spool(dir.file("out"), fresh_budget, "test");
  EXPECT_EQ(spool.points(), 30u);
  EXPECT_GT(fresh_budget.used(), 0u);
  std::vector<std::int64_t> times;
  while (auto batch = spool.pop(dropped))
    for (const auto& sample : *batch) times.push_back(sample.time_ns);
  EXPECT_EQ(times, sequence(5, 15));
  EXPECT_EQ(dropped, 0u);
  EXPECT_TRUE(spool.empty());
  EXPECT_EQ(fresh_budget.used(), 0u);
}

TEST(SampleSpool, PrependPutsBatchesBeforeEverythingSpooled) {
  TempDir dir;
  DiskBudget budget(1 << 30);
  std::uint64_t dropped = 0;
  {
    SampleSpool spool(dir.path(), budget, "test");
    ASSERT_TRUE(spool.append(numbered(10, 5), dropped));
    ASSERT_TRUE(spool.append(numbered(15, 5), dropped));
    ASSERT_TRUE(spool.pop(dropped));  // 10..14 consumed
    ASSERT_TRUE(spool.prepend({numbered(0, 5), numbered(5, 5)}));
    spool.seal();
  }
  DiskBudget fresh_budget(1 << 30);
  SampleSpool spool(dir.path(), fresh_budget, "test");
  std::vector<std::int64_t> times;
  while (auto batch = spool.pop(dropped))
    for (const auto& sample : *batch) times.push_back(sample.time_ns);
  std::vector<std::int64_t> expected = sequence(0, 10);
  for (auto t : sequence(15, 5)) expected.push_back(t);
  EXPECT_EQ(times, expected);
}

TEST(SampleSpool, OverBudgetDropsItsOwnOldestSegmentsAndCountsThem) {
  TempDir dir;
  auto one_record = encode_samples(numbered(0, 200)).size() + 24;
  // Room for about 2.5 records; segments hold up to 8 MiB, so each seal starts a new one.
  DiskBudget budget(one_record * 5 / 2);
  SampleSpool spool(dir.path(), budget, "test");
  std::uint64_t dropped = 0;
  ASSERT_TRUE(spool.append(numbered(0, 200), dropped));
  spool.seal();
  ASSERT_TRUE(spool.append(numbered(200, 200), dropped));
  spool.seal();
  ASSERT_TRUE(spool.append(numbered(400, 200), dropped));
  EXPECT_EQ(dropped, 400u);  // the oldest batch: 200 samples x 2 points
  EXPECT_LE(budget.used(), budget.max_bytes());
  auto next = spool.pop(dropped);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->front().time_ns, 200);

  // Another output holding the whole budget: nothing of ours to drop, the batch is refused.
  DiskBudget full(10);
  TempDir other;
  SampleSpool starved(other.path(), full, "starved");
  EXPECT_FALSE(starved.append(numbered(0, 5), dropped));
}

TEST(SampleSpool, ATruncatedRecordLosesOnlyItself) {
  TempDir dir;
  DiskBudget budget(1 << 30);
  std::uint64_t dropped = 0;
  {
    SampleSpool spool(dir.path(), budget, "test");
    ASSERT_TRUE(spool.append(numbered(0, 5), dropped));
    ASSERT_TRUE(spool.append(numbered(5, 5), dropped));
  }
  // A crash in the middle of the second record.
  auto file = std::filesystem::directory_iterator(dir.path())->path();
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 10);
  DiskBudget fresh_budget(1 << 30);
  SampleSpool spool(dir.path(), fresh_budget, "test");
  auto first = spool.pop(dropped);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->size(), 5u);
  EXPECT_FALSE(spool.pop(dropped));
  EXPECT_TRUE(spool.empty());
}

TEST(OutputRunner, DeliversInOrderAndRetriesAfterFailures) {
  auto state = std::make_shared<FakeOutput::State>();
  state->failures_left = 3;
  OutputRunner runner(std::make_unique<FakeOutput>(state), fast_settings());
  for (int batch = 0; batch < 10; ++batch) runner.submit(shared(numbered(batch * 7, 7)));
  ASSERT_TRUE(wait_until(*state, [&] { return state->delivered.size() >= 70; }));
  runner.stop();
  EXPECT_EQ(state->delivered, sequence(0, 70));
  for (auto size : state->write_sizes) EXPECT_LE(size, 10u);  // batch_samples()
  auto stats = runner.stats();
  EXPECT_EQ(stats.sent, 140u);
  EXPECT_GE(stats.retried, 3u * 2);  // three failed tries of at least one sample
  EXPECT_EQ(stats.dropped, 0u);
  EXPECT_EQ(stats.queued_points, 0u);
  EXPECT_GT(state->flushes, 0);
}

TEST(OutputRunner, ResendsOnlyWhatTheOutputDidNotDeliver) {
  auto state = std::make_shared<FakeOutput::State>();
  state->refuse_odd_once = true;
  OutputRunner runner(std::make_unique<FakeOutput>(state), fast_settings());
  runner.submit(shared(numbered(0, 10)));
  ASSERT_TRUE(wait_until(*state, [&] { return state->delivered.size() >= 10; }));
  runner.stop();
  std::multiset<std::int64_t> once(state->delivered.begin(), state->delivered.end());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(once.count(i), 1u) << i;
  EXPECT_EQ(runner.stats().retried, 10u);  // the five odd samples, two points each
}

TEST(OutputRunner, SpoolsWhenMemoryIsFullAndKeepsTheOrder) {
  TempDir dir;
  DiskBudget budget(1 << 30);
  auto state = std::make_shared<FakeOutput::State>();
  state->down = true;
  auto settings = fast_settings(/*queue_max_points=*/20);
  settings.spool_dir = dir.file("fake");
  settings.budget = &budget;
  OutputRunner runner(std::make_unique<FakeOutput>(state), settings);
  for (int batch = 0; batch < 20; ++batch) runner.submit(shared(numbered(batch * 5, 5)));
  auto stats = runner.stats();
  EXPECT_EQ(stats.queued_points, 200u);
  EXPECT_GT(stats.spool_bytes, 0u);
  EXPECT_EQ(stats.dropped, 0u);
  {
    std::lock_guard lock(state->mutex);
    state->down = false;
  }
  ASSERT_TRUE(wait_until(*state, [&] { return state->delivered.size() >= 100; }));
  runner.stop();
  EXPECT_EQ(state->delivered, sequence(0, 100));
  EXPECT_EQ(runner.stats().spool_bytes, 0u);
  EXPECT_EQ(budget.used(), 0u);
}

TEST(OutputRunner, WithoutSpoolDropsPastMemoryAndCountsIt) {
  auto state = std::make_shared<FakeOutput::State>();
  state->down = true;
  OutputRunner runner(std::make_unique<FakeOutput>(state), fast_settings(/*queue_max_points=*/20));
  for (int batch = 0; batch < 5; ++batch) runner.submit(shared(numbered(batch * 5, 5)));
  auto stats = runner.stats();
  // 20 points fit in memory, and the runner may have taken up to 20 more to try them.
  EXPECT_GE(stats.dropped, 10u);
  EXPECT_EQ(stats.dropped + stats.queued_points, 50u);
  runner.stop();
  EXPECT_EQ(runner.stats().dropped, 50u);  // nothing delivered, nowhere to keep it
}

TEST(OutputRunner, StopSpoolsWhatIsLeftAndTheNextStartSendsItFirst) {
  TempDir dir;
  auto state = std::make_shared<FakeOutput::State>();
  state->down = true;
  {
    DiskBudget budget(1 << 30);
    auto settings = fast_settings();
    settings.spool_dir = dir.path();
    settings.budget = &budget;
    OutputRunner runner(std::make_unique<FakeOutput>(state), settings);
    for (int batch = 0; batch < 4; ++batch) runner.submit(shared(numbered(batch * 5, 5)));
    runner.stop();
    EXPECT_EQ(runner.stats().dropped, 0u);
    EXPECT_EQ(runner.stats().queued_points, 40u);
  }
  state->down = false;
  DiskBudget budget(1 << 30);
  auto settings = fast_settings();
  settings.spool_dir = dir.path();
  settings.budget = &budget;
  OutputRunner runner(std::make_unique<FakeOutput>(state), settings);
  runner.submit(shared(numbered(20, 5)));
  ASSERT_TRUE(wait_until(*state, [&] { return state->delivered.size() >= 25; }));
  runner.stop();
  EXPECT_EQ(state->delivered, sequence(0, 25));
}

TEST(OutputRunner, ReopenReachesTheOutput) {
  auto state = std::make_shared<FakeOutput::State>();
  OutputRunner runner(std::make_unique<FakeOutput>(state), fast_settings());
  runner.request_reopen();
  ASSERT_TRUE(wait_until(*state, [&] { return state->reopens == 1; }));
}

}  // namespace
}  // namespace fructosa::master
