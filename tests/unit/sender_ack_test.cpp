// The sender (lagent/sender.h) takes acknowledgements only for batches its spool numbered: one
// of UINT64_MAX, or beyond the last batch, from a confused or lying master changes nothing.
#include "sender.h"

#include <gtest/gtest.h>

#include <limits>

#include "agent_spool.h"
#include "scripted_link.h"
#include "test_support.h"

namespace fructosa::agent {
namespace {

using test::make_sample;

std::vector<Sample> ack_batch(double value) { return {make_sample("", "Test", 1'000'000'000, 0, {{"k", value}})}; }

struct SenderUnderTest : test::ScriptedSender {
  void send(double value) {
    sender->queue(ack_batch(value));
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
