// [lagent] batch_interval (lagent/sender.h): each round is spooled at once, as a batch of its
// own, and only its sending waits; the rounds that waited leave together, back to back, with
// the round that would make the oldest wait longer than batch_interval, or at a stop.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent_spool.h"
#include "agent_stats.h"
#include "scripted_link.h"
#include "segment_log.h"
#include "spool_format.h"
#include "sender.h"
#include "test_support.h"

namespace fructosa::agent {
namespace {

using test::make_sample;
using test::ScriptedLink;
using test::TempDir;
using namespace std::chrono_literals;

std::vector<Sample> round_of(int round) {
  return {make_sample("", "Test", round * 1'000'000'000ll, 0, {{"k", static_cast<double>(round)}})};
}

sensors::SenderStats sender_stats() { return sensors::AgentStats::instance().sender(); }

// The ids of the records in the spool's segment files, as a lagent killed now leaves them
// (common/segment_log.h: a header, then the payload).
std::vector<std::uint64_t> spooled(const std::string& directory) {
  std::vector<std::uint64_t> ids;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.path().extension() != ".seg") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    SegmentLog::Header header;
    while (in.read(reinterpret_cast<char*>(&header), sizeof header) && header.magic == spool_format::kRecordMagic) {
      ids.push_back(header.id);
      in.seekg(header.payload_bytes, std::ios::cur);
    }
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Waits (10 s at most) until the spool holds the batches 1..`count`; returns what it holds.
std::vector<std::uint64_t> spooled_through(const std::string& directory, std::uint64_t count) {
  auto deadline = LinkClock::now() + 10s;
  std::vector<std::uint64_t> ids;
  while ((ids = spooled(directory)).size() < count && LinkClock::now() < deadline) std::this_thread::sleep_for(1ms);
  return ids;
}

struct HoldingSender : test::ScriptedSender {
  const LinkClock::time_point start = LinkClock::now();
  HoldingSender() : ScriptedSender(30) {}  // far longer than the test: only the rounds' rule sends
  // Round `round`, the next one due `next_in` after the test's start; returns once it is
  // spooled (it may go by the sender's thread, which would else make one batch of it and the
  // next round, as of rounds that come together).
  void deliver(int round, LinkClock::duration next_in) {
    sender->deliver(round_of(round), start + next_in);
    std::vector<std::uint64_t> expected;
    for (int i = 1; i <= round; ++i) expected.push_back(i);
    ASSERT_EQ(spooled_through(dir.file("spool"), round), expected);
  }
  void three_rounds_that_wait() {
    ASSERT_NO_FATAL_FAILURE(deliver(1, 1s));
    ASSERT_NO_FATAL_FAILURE(deliver(2, 2s));
    ASSERT_NO_FATAL_FAILURE(deliver(3, 3s));
  }
};

TEST(SenderBatchInterval, RoundsWaitSpooledEachAsItsOwnBatchAndLeaveTogether) {
  HoldingSender test;
  // The next rounds come before the first has waited 30 s: the batches wait, in the spool.
  ASSERT_NO_FATAL_FAILURE(test.three_rounds_that_wait());
  EXPECT_TRUE(test.link->sent(0).empty());
  // This round's next comes after the oldest would have waited 30 s: all of them leave now, each
  // under its own number, in one send.
  ASSERT_NO_FATAL_FAILURE(test.deliver(4, 40s));
  ASSERT_EQ(test.link->sent(4), (std::vector<std::uint64_t>{1, 2, 3, 4}));
  auto batches = test.link->sent_samples();
  for (int round = 1; round <= 4; ++round) {
    ASSERT_EQ(batches[round - 1].size(), 1u);
    EXPECT_EQ(batches[round - 1][0].time_ns, round * 1'000'000'000ll);
  }
  test.link->acknowledge(4);
  EXPECT_EQ(test.sender->stop(0), 0u);
  auto counters = sender_stats();  // this sender's, published with the acknowledgement
  EXPECT_EQ(counters.batches_sent, 4u);
  EXPECT_EQ(counters.sends, 1u);
}

TEST(SenderBatchInterval, WhatWaitsLeavesAtAStopAndStaysSpooledUntilTaken) {
  HoldingSender test;
  ASSERT_NO_FATAL_FAILURE(test.three_rounds_that_wait());
  EXPECT_TRUE(test.link->sent(0).empty());
  // The stop sends them; nobody takes them, so they stay for the next start, as a lagent killed
  // while they waited leaves them.
  EXPECT_EQ(test.sender->stop(0), 3u);
  EXPECT_EQ(test.link->sent(3), (std::vector<std::uint64_t>{1, 2, 3}));
  test.sender.reset();
  AgentSpool spool(test.dir.file("spool"), 1 << 20);
  ASSERT_EQ(spool.first_sequence(), 1u);
  ASSERT_EQ(spool.next_sequence(), 4u);
  for (int round = 1; round <= 3; ++round) {
    auto samples = spool.read(round);
    ASSERT_EQ(samples.size(), 1u);
    EXPECT_EQ(samples[0].time_ns, round * 1'000'000'000ll);
  }
}

TEST(SenderBatchInterval, ZeroSendsEachRoundAtOnce) {
  TempDir dir;
  auto scripted = std::make_unique<ScriptedLink>();
  auto* link = scripted.get();
  SenderSettings settings;
  settings.spool_dir = dir.file("spool");
  Sender sender(settings, std::move(scripted));
  auto start = LinkClock::now();
  sender.deliver(round_of(1), start + 1s);
  ASSERT_EQ(link->sent(1), std::vector<std::uint64_t>{1});
  sender.deliver(round_of(2), start + 2s);
  ASSERT_EQ(link->sent(2), (std::vector<std::uint64_t>{1, 2}));
  link->acknowledge(2);
  EXPECT_EQ(sender.stop(0), 0u);
  EXPECT_EQ(sender_stats().sends, 2u);
}

}  // namespace
}  // namespace fructosa::agent
