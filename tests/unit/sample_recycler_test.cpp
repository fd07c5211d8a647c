// lmaster's SampleRecycler: rounds the outputs let go of come back to be filled again, a bounded
// number of them, from any thread, even after the recycler itself is gone.
#include <gtest/gtest.h>

#include <thread>

#include "sample_recycler.h"

using namespace fructosa;
using fructosa::master::SampleRecycler;

namespace {

std::vector<Sample> numbered_round(int samples, const std::string& key) {
  std::vector<Sample> round;
  for (int i = 0; i < samples; ++i) {
    Sample& sample = round.emplace_back();
    sample.host = "node" + std::to_string(i);
    sample.sensor = "Sensor";
    sample.metrics.push_back({key + std::to_string(i), static_cast<double>(i)});
  }
  return round;
}

}  // namespace

TEST(SampleRecycler, ARoundLetGoOfComesBackInItsOrder) {
  SampleRecycler recycler;
  auto shared = recycler.share(numbered_round(3, "a_key_longer_than_sixteen_bytes_"));
  const char* first_key = (*shared)[0].metrics[0].key.data();
  EXPECT_EQ(recycler.waiting(), 0u);
  EXPECT_TRUE(recycler.reusable().empty());  // still in use
  shared.reset();
  EXPECT_EQ(recycler.waiting(), 1u);

  ReusableSamples& reusable = recycler.reusable();
  EXPECT_EQ(recycler.waiting(), 0u);
  ASSERT_FALSE(reusable.empty());
  Sample first = reusable.take();
  EXPECT_EQ(first.host, "node0");
  // The same memory, not a copy: the key's heap buffer came back with it.
  EXPECT_EQ(first.metrics[0].key.data(), first_key);
  EXPECT_EQ(reusable.take().host, "node1");
  EXPECT_EQ(reusable.take().host, "node2");
  EXPECT_TRUE(reusable.empty());
}

TEST(SampleRecycler, AtMostKeptRoundsWait) {
  SampleRecycler recycler;
  for (int i = 0; i < 5; ++i) recycler.share(numbered_round(2, "k"));  // each let go at once
  EXPECT_EQ(recycler.waiting(), SampleRecycler::kKeptRounds);
  recycler.reusable();
  EXPECT_EQ(recycler.waiting(), SampleRecycler::kKeptRounds - 1);
}

TEST(SampleRecycler, AUsedUpRoundsRoomServesTheNextRound) {
  SampleRecycler recycler;
  EXPECT_GE(recycler.next_round().capacity(), 1u);  // nothing came back: a new vector
  recycler.share(numbered_round(1, "k"));
  recycler.share(numbered_round(1000, "k"));
  ReusableSamples& reusable = recycler.reusable();  // the last one back: 1000 samples
  while (!reusable.empty()) reusable.take();
  recycler.reusable();  // used up: the 1 comes next, the used-up vector's room is kept
  std::vector<Sample> round = recycler.next_round();
  EXPECT_TRUE(round.empty());
  EXPECT_GE(round.capacity(), 1000u);  // a new one would have room for 256
  EXPECT_EQ(recycler.reusable().samples.size(), 1u);
  EXPECT_LT(recycler.next_round().capacity(), 1000u);  // the room went to the round before
}

TEST(SampleRecycler, RoundsComeBackFromOtherThreadsAndOutliveIt) {
  master::SharedSamples outlives;
  {
    SampleRecycler recycler;
    auto shared = recycler.share(numbered_round(10, "k"));
    std::thread output([held = std::move(shared)]() mutable { held.reset(); });
    output.join();
    EXPECT_EQ(recycler.waiting(), 1u);
    outlives = recycler.share(numbered_round(10, "k"));
  }
  // The recycler is gone; letting go of its last round still frees it (ASan would say if not).
  EXPECT_EQ((*outlives)[9].host, "node9");
  outlives.reset();
}
