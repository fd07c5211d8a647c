// The output runner and the master journal: ordering, retries, budgets, restarts, crashes.
#include "test_support.h"
#include "output_runner.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <limits>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "journal.h"

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
    std::ptrdiff_t replayed_at = -1;  // delivered.size() when journal_replayed() came
    std::optional<std::uint64_t> stored_through;  // what it says it holds after a crash
    std::vector<std::uint64_t> handed;            // handed_through() before each flush
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
  void handed_through(std::uint64_t record) override {
    std::lock_guard lock(state_->mutex);
    state_->handed.push_back(record);
  }
  std::optional<std::uint64_t> stored_through() const override {
    std::lock_guard lock(state_->mutex);
    return state_->stored_through;
  }
  void reopen() override {
    std::lock_guard lock(state_->mutex);
    ++state_->reopens;
    state_->changed.notify_all();
  }
  void journal_replayed() override {
    std::lock_guard lock(state_->mutex);
    if (told_replayed_) ADD_FAILURE() << "journal_replayed() twice";
    told_replayed_ = true;
    state_->replayed_at = static_cast<std::ptrdiff_t>(state_->delivered.size());
  }

 private:
  std::shared_ptr<State> state_;
  bool told_replayed_ = false;
};

// Waits (with a generous deadline) until `done` holds for the fake's state.
template <typename Condition>
bool runner_wait_until(FakeOutput::State& state, Condition done) {
  std::unique_lock lock(state.mutex);
  return state.changed.wait_for(lock, std::chrono::seconds(20), [&] { return done(); });
}

std::vector<std::int64_t> sequence(int first, int count) {
  std::vector<std::int64_t> numbers;
  for (int i = first; i < first + count; ++i) numbers.push_back(i);
  return numbers;
}

// Does what the master does with a round: journal it, commit, then submit it.
std::uint64_t feed(Journal& journal, OutputRunner& runner, std::vector<Sample> samples, SequenceMarks marks = {}) {
  std::uint64_t id = journal.append(marks, samples);
  journal.commit();
  runner.submit(id, shared(std::move(samples)));
  return id;
}

std::vector<std::int64_t> times_of(const std::vector<Sample>& samples) {
  std::vector<std::int64_t> times;
  for (const auto& sample : samples) times.push_back(sample.time_ns);
  return times;
}

std::size_t files_ending(const std::string& directory, const std::string& suffix) {
  std::size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory))
    count += entry.path().filename().string().ends_with(suffix);
  return count;
}

RunnerSettings fast_settings(std::size_t queue_max_points = 1000000) {
  RunnerSettings settings;
  settings.queue_max_points = queue_max_points;
  settings.retry_min_interval = 0.005;
  settings.retry_max_interval = 0.02;
  settings.stop_grace = 0.2;
  return settings;
}

TEST(Journal, EncodesSamplesExactly) {
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

// The version-1 layout of a record's samples (journal.cpp), written as lmaster did up to issue
// 26: a journal left by that lmaster must still be read after an upgrade.
std::string version1_samples(const std::vector<Sample>& samples) {
  std::string out;
  auto u32 = [&](std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); };
  auto text = [&](const std::string& t) { u32(static_cast<std::uint32_t>(t.size())), out += t; };
  u32(static_cast<std::uint32_t>(samples.size()));
  for (const auto& sample : samples) {
    text(sample.host), text(sample.sensor), u64(static_cast<std::uint64_t>(sample.time_ns)), u64(sample.job);
    u32(static_cast<std::uint32_t>(sample.metrics.size()));
    for (const auto& metric : sample.metrics) text(metric.key), out.append(reinterpret_cast<const char*>(&metric.value), 8);
    u32(static_cast<std::uint32_t>(sample.labels.size()));
    for (const auto& label : sample.labels) text(label.key), text(label.value);
  }
  return out;
}

std::vector<std::string> described(const std::vector<Sample>& samples) {
  std::vector<std::string> out;
  for (const auto& s : samples) {
    std::string line = s.host + " " + s.sensor + " " + std::to_string(s.time_ns) + " " + std::to_string(s.job);
    for (const auto& m : s.metrics) line += " " + m.key + "=" + std::to_string(m.value);
    for (const auto& l : s.labels) line += " " + l.key + ":" + l.value;
    out.push_back(line);
  }
  return out;
}

// A sample's keys are written once per record and sensor while they repeat; samples whose keys
// differ from their sensor's sample before (other keys, order, count; none) carry their own.
TEST(Journal, KeysRepeatedInARecordAreWrittenOnceAndOldRecordsStillRead) {
  std::vector<Sample> samples = numbered(0, 6);
  auto with = [](std::string host, std::string sensor, std::vector<MetricValue> metrics) {
    Sample sample;
    sample.host = std::move(host);
    sample.sensor = std::move(sensor);
    sample.time_ns = 77;
    sample.metrics = std::move(metrics);
    return sample;
  };
  samples.push_back(with("n1", "Sensor", {{"b.c d", 1}, {"a", 2}}));  // same keys, other order
  samples.push_back(with("n2", "Other", {{"a", 3}, {"b.c d", 4}}));   // same keys, other sensor
  samples.push_back(with("n3", "Sensor", {{"b.c d", 5}, {"a", 6}}));  // as the Sensor sample before
  samples.push_back(with("n4", "Sensor", {{"b.c d", 7}}));            // one key fewer
  samples.push_back(with("n5", "Sensor", {}));                        // none
  samples.push_back(with("n6", "Sensor", {{"b.c d", 8}, {"a", 9}}));
  samples.push_back(with("n7", "Other", {{"a", 10}, {"b.c d", 11}}));
  EXPECT_EQ(described(decode_samples(encode_samples(samples))), described(samples));
  EXPECT_EQ(described(decode_samples(version1_samples(samples))), described(samples));

  // 100 hosts' samples of a sensor with 20 keys: about 8 bytes a point instead of 22.
  std::vector<Sample> many;
  for (int host = 0; host < 100; ++host) {
    std::vector<MetricValue> metrics;
    for (int cpu = 0; cpu < 20; ++cpu) metrics.push_back({"cpu" + std::to_string(cpu) + ".user", host + cpu * 0.5});
    many.push_back(with("node" + std::to_string(host), "CPUTimes", std::move(metrics)));
  }
  EXPECT_EQ(described(decode_samples(encode_samples(many))), described(many));
  EXPECT_LT(encode_samples(many).size() * 2, version1_samples(many).size());

  // A reference to a later sample, or to one of another size, is malformed.
  std::string payload = encode_samples(numbered(0, 2));
  std::string forward = payload;
  // The first sample's keys_from sits after its count, host, sensor, time, job and metric count.
  std::size_t at = 4 + 4 + samples[0].host.size() + 4 + samples[0].sensor.size() + 8 + 8 + 4;
  std::uint32_t keys_from = 2;  // "as sample 1", which comes after it
  std::memcpy(&forward[at], &keys_from, 4);
  EXPECT_THROW(decode_samples(forward), std::runtime_error);
}

TEST(Journal, ReadsBackWhatWasCommittedAndRebuildsTheMarksAfterARestart) {
  TempDir dir;
  {
    Journal journal(dir.path(), 1 << 30);
    EXPECT_EQ(journal.committed(), 0u);
    EXPECT_EQ(journal.append({{{"node1", 7}, 3}}, numbered(0, 5)), 1u);
    EXPECT_EQ(journal.committed(), 0u);  // not durable yet: not readable
    journal.commit();
    EXPECT_EQ(journal.append({{{"node1", 7}, 5}, {{"node2", 9}, 1}}, numbered(5, 5)), 2u);
    journal.commit();
    Journal::Reader reader(journal, "test");
    std::uint64_t dropped = 0;
    auto first = reader.read(1, dropped);
    ASSERT_TRUE(first);
    EXPECT_EQ(times_of(first->samples), sequence(0, 5));
    EXPECT_EQ(first->points, 10u);
    auto second = reader.read(2, dropped);
    ASSERT_TRUE(second);
    EXPECT_EQ(times_of(second->samples), sequence(5, 5));
    EXPECT_FALSE(reader.read(3, dropped));
    EXPECT_EQ(dropped, 0u);
    journal.save_position("test", 1);
  }
  Journal journal(dir.path(), 1 << 30);  // as after a kill -9: nothing was saved at exit
  EXPECT_EQ(journal.committed(), 2u);
  EXPECT_EQ(journal.saved_position("test"), 1u);
  EXPECT_EQ(journal.saved_position("new output"), 2u);  // starts at the end
  SequenceMarks expected{{{"node1", 7}, 5}, {{"node2", 9}, 1}};
  EXPECT_EQ(journal.marks(), expected);
  EXPECT_EQ(journal.append({}, numbered(10, 1)), 3u);
}

TEST(Journal, ATornLastRecordIsCutAndTheRestIsKept) {
  TempDir dir;
  {
    Journal journal(dir.path(), 1 << 30);
    journal.append({{{"node1", 1}, 1}}, numbered(0, 5));
    journal.append({{{"node1", 1}, 2}}, numbered(5, 5));
    journal.commit();
  }
  auto segment = dir.file("00000000000000000001.journal");
  std::filesystem::resize_file(segment, std::filesystem::file_size(segment) - 7);  // a crash mid-write
  Journal journal(dir.path(), 1 << 30);
  EXPECT_EQ(journal.committed(), 1u);
  EXPECT_EQ(journal.marks().at({"node1", 1}), 1u);  // batch 2 was never acknowledged: its resend is taken
  Journal::Reader reader(journal, "test");
  std::uint64_t dropped = 0;
  ASSERT_TRUE(reader.read(1, dropped));
  EXPECT_FALSE(reader.read(2, dropped));
  EXPECT_EQ(journal.append({}, numbered(5, 5)), 2u);
}

TEST(Journal, DeletesDeliveredSegmentsAndKeepsTheirMarksAndIds) {
  TempDir dir;
  {
    Journal journal(dir.path(), 512 << 10);  // 64 KiB segments
    for (int round = 0; round < 100; ++round)
      journal.append({{{"node1", 1}, static_cast<std::uint64_t>(round + 1)}}, numbered(round * 40, 40)), journal.commit();
    ASSERT_GT(files_ending(dir.path(), ".journal"), 2u);
    journal.trim(journal.committed());
    EXPECT_EQ(files_ending(dir.path(), ".journal"), 1u);  // the newest always stays
  }
  Journal journal(dir.path(), 512 << 10);
  EXPECT_EQ(journal.marks().at({"node1", 1}), 100u);
  EXPECT_EQ(journal.committed(), 100u);
  EXPECT_EQ(journal.append({}, numbered(0, 1)), 101u);
}

TEST(Journal, OverItsBudgetTheOldestGoAndAReaderCountsWhatItMissed) {
  TempDir dir;
  Journal journal(dir.path(), 256 << 10);  // 64 KiB segments
  std::uint64_t appended = 0;
  for (int round = 0; round < 200; ++round) {
    auto samples = numbered(round * 40, 40);
    appended += 80;
    journal.append({}, samples);
    journal.commit();
  }
  EXPECT_LE(journal.bytes(), (256u << 10) + (64u << 10));
  Journal::Reader reader(journal, "test");
  std::uint64_t dropped = 0, read = 0, first_id = 0;
  std::uint64_t id = 1;
  while (auto record = reader.read(id, dropped)) {
    if (!first_id) first_id = record->id;
    read += record->points;
    id = record->id + 1;
  }
  EXPECT_GT(first_id, 1u);
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(dropped + read, appended);  // every point is either read or counted
}

TEST(OutputRunner, DeliversInOrderAndRetriesAfterFailures) {
  auto state = std::make_shared<FakeOutput::State>();
  state->failures_left = 3;
  OutputRunner runner(std::make_unique<FakeOutput>(state), fast_settings());
  for (int batch = 0; batch < 10; ++batch) runner.submit(0, shared(numbered(batch * 7, 7)));
  ASSERT_TRUE(runner_wait_until(*state, [&] { return state->delivered.size() >= 70; }));
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
  runner.submit(0, shared(numbered(0, 10)));
  ASSERT_TRUE(runner_wait_until(*state, [&] { return state->delivered.size() >= 10; }));
  runner.stop();
  std::multiset<std::int64_t> once(state->delivered.begin(), state->delivered.end());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(once.count(i), 1u) << i;
  EXPECT_EQ(runner.stats().retried, 10u);  // the five odd samples, two points each
}

TEST(OutputRunner, ReadsBackFromTheJournalWhenMemoryIsFullAndKeepsTheOrder) {
  TempDir dir;
  Journal journal(dir.path(), 1 << 30);
  auto state = std::make_shared<FakeOutput::State>();
  state->down = true;
  auto settings = fast_settings(/*queue_max_points=*/20);
  settings.journal = &journal;
  OutputRunner runner(std::make_unique<FakeOutput>(state), settings);
  for (int batch = 0; batch < 20; ++batch) feed(journal, runner, numbered(batch * 5, 5));
  auto stats = runner.stats();
  EXPECT_GE(stats.queued_points, 200u);  // memory, plus whole journal segments past it
  EXPECT_EQ(stats.dropped, 0u);
  {
    std::lock_guard lock(state->mutex);
    state->down = false;
  }
  ASSERT_TRUE(runner_wait_until(*state, [&] { return state->delivered.size() >= 100; }));
  for (int batch = 20; batch < 22; ++batch) feed(journal, runner, numbered(batch * 5, 5));
  ASSERT_TRUE(runner_wait_until(*state, [&] { return state->delivered.size() >= 110; }));
  runner.stop();
  EXPECT_EQ(state->delivered, sequence(0, 110));
  EXPECT_EQ(runner.stats().queued_points, 0u);
  EXPECT_EQ(runner.delivered(), 22u);
}

TEST(OutputRunner, WithoutJournalDropsPastMemoryAndCountsIt) {
  auto state = std::make_shared<FakeOutput::State>();
  state->down = true;
  OutputRunner runner(std::make_unique<FakeOutput>(state), fast_settings(/*queue_max_points=*/20));
  for (int batch = 0; batch < 5; ++batch) runner.submit(0, shared(numbered(batch * 5, 5)));
  auto stats = runner.stats();
  // 20 points fit in memory, and the runner may have taken up to 20 more to try them.
  EXPECT_GE(stats.dropped, 10u);
  EXPECT_EQ(stats.dropped + stats.queued_points, 50u);
  runner.stop();
  EXPECT_EQ(runner.stats().dropped, 50u);  // nothing delivered, nowhere to keep it
}

TEST(OutputRunner, WhatWasNotDeliveredAtStopIsSentFirstAtTheNextStart) {
  TempDir dir;
  auto state = std::make_shared<FakeOutput::State>();
  {
    Journal journal(dir.path(), 1 << 30);
    auto settings = fast_settings();
    settings.journal = &journal;
    OutputRunner runner(std::make_unique<FakeOutput>(state), settings);
    feed(journal, runner, numbered(0, 5));
    ASSERT_TRUE(runner_wait_until(*state, [&] { return state->delivered.size() >= 5; }));
    ASSERT_TRUE(runner_wait_until(*state, [&] { return runner.delivered() == 1; }));  // saved after a flush
    state->down = true;
    for (int batch = 1; batch < 4; ++batch) feed(journal, runner, numbered(batch * 5, 5));
    runner.stop();
    EXPECT_EQ(runner.stats().dropped, 0u);
    EXPECT_EQ(runner.delivered(), 1u);
  }
  state->down = false;
  Journal journal(dir.path(), 1 << 30);
  auto settings = fast_settings();
  settings.journal = &journal;
  OutputRunner runner(std::make_unique<FakeOutput>(state), settings);
  feed(journal, runner, numbered(20, 5));
  ASSERT_TRUE(runner_wait_until(*state, [&] { return state->delivered.size() >= 25; }));
  runner.stop();
  EXPECT_EQ(state->delivered, sequence(0, 25));
  journal.trim(runner.delivered());
  EXPECT_EQ(files_ending(dir.path(), ".journal"), 1u);
}

TEST(OutputRunner, AfterACrashResumesAfterTheLastSavedPosition) {
  TempDir dir;
  auto state = std::make_shared<FakeOutput::State>();
  {
    // What a killed master leaves: records 1..3 committed, the output's position at 1.
    Journal journal(dir.path(), 1 << 30);
    for (int batch = 0; batch < 3; ++batch) journal.append({}, numbered(batch * 5, 5)), journal.commit();
    journal.save_position("fake", 1);
  }
  Journal journal(dir.path(), 1 << 30);
  auto settings = fast_settings();
  settings.journal = &journal;
  OutputRunner runner(std::make_unique<FakeOutput>(state), settings);
  ASSERT_TRUE(runner_wait_until(*state, [&] { return state->delivered.size() >= 10; }));
  feed(journal, runner, numbered(15, 3));  // received after the start
  ASSERT_TRUE(runner_wait_until(*state, [&] { return state->delivered.size() >= 13; }));
  runner.stop();
  EXPECT_EQ(state->delivered, sequence(5, 13));
  EXPECT_EQ(runner.delivered(), 4u);
  // Told once, between what the journal held at start and what came after (an HDF5 output stops
  // looking for rows a crash left in its file there).
  EXPECT_EQ(state->replayed_at, 10);
}

// An output that can name the journal records its store holds (HDF5's /.flushed) after a crash
// gets only the records after them, whatever the saved position; a number past the journal's
// end (another journal's) is ignored. Before each flush it hears what has been handed to it.
TEST(OutputRunner, AfterACrashSkipsWhatTheOutputSaysItHolds) {
  for (std::uint64_t stored : {3, 9}) {
    SCOPED_TRACE(stored);
    TempDir dir;
    {
      // Records 1..4 committed, the output's position at 1.
      Journal journal(dir.path(), 1 << 30);
      for (int batch = 0; batch < 4; ++batch) journal.append({}, numbered(batch * 5, 5)), journal.commit();
      journal.save_position("fake", 1);
    }
    auto state = std::make_shared<FakeOutput::State>();
    state->stored_through = stored;
    Journal journal(dir.path(), 1 << 30);
    auto settings = fast_settings();
    settings.journal = &journal;
    OutputRunner runner(std::make_unique<FakeOutput>(state), settings);
    const std::size_t expected = stored == 3 ? 5 : 15;  // record 4; records 2..4
    ASSERT_TRUE(runner_wait_until(*state, [&] { return state->delivered.size() >= expected; }));
    runner.stop();
    EXPECT_EQ(state->delivered, sequence(20 - static_cast<int>(expected), static_cast<int>(expected)));
    EXPECT_EQ(runner.delivered(), 4u);
    ASSERT_FALSE(state->handed.empty());
    EXPECT_EQ(state->handed.back(), 4u);
    EXPECT_TRUE(std::is_sorted(state->handed.begin(), state->handed.end()));
  }
}

TEST(OutputRunner, WithoutAJournalNothingIsReplayed) {
  auto state = std::make_shared<FakeOutput::State>();
  OutputRunner runner(std::make_unique<FakeOutput>(state), fast_settings());
  runner.submit(1, shared(numbered(0, 3)));
  ASSERT_TRUE(runner_wait_until(*state, [&] { return state->delivered.size() >= 3; }));
  runner.stop();
  EXPECT_EQ(state->replayed_at, 0);
}

TEST(OutputRunner, ReopenReachesTheOutput) {
  auto state = std::make_shared<FakeOutput::State>();
  OutputRunner runner(std::make_unique<FakeOutput>(state), fast_settings());
  runner.request_reopen();
  ASSERT_TRUE(runner_wait_until(*state, [&] { return state->reopens == 1; }));
}

}  // namespace
}  // namespace fructosa::master
