// The pairing of CURVE handshake failures with their peers (lmaster/handshake_failures.h), on
// the event orders libzmq produces with several I/O threads.
#include "handshake_failures.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <string>

using fructosa::master::HandshakeFailures;

TEST(HandshakeFailures, AFailureIsReportedWithThePeerOfItsDisconnect) {
  HandshakeFailures failures;
  failures.accepted(7, "10.0.0.3:40001");
  failures.failed(ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH);
  auto failure = failures.disconnected(7);
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->event, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL);
  EXPECT_EQ(failure->value, static_cast<std::uint32_t>(ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH));
  EXPECT_EQ(failure->peer, "10.0.0.3:40001");
  // The connection is forgotten: its descriptor number will serve another.
  failures.failed(ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL, 104);
  failure = failures.disconnected(7);
  ASSERT_TRUE(failure);
  EXPECT_NE(failure->peer.find("could not read"), std::string::npos) << failure->peer;
}

TEST(HandshakeFailures, ConcurrentRefusalsAreAllReportedInTheirOrder) {
  // nodeC (no CURVE) fails its handshake; before its disconnect arrives, ZAP refuses nodeB
  // (unknown key) on another I/O thread. One pending slot kept only nodeB's refusal, and
  // nodeC's went unlogged.
  HandshakeFailures failures;
  failures.accepted(11, "10.0.0.3:40001");  // nodeC
  failures.accepted(12, "10.0.0.2:40002");  // nodeB
  failures.failed(ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH);
  failures.failed(ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, 400);
  EXPECT_EQ(failures.pending(), 2u);

  auto first = failures.disconnected(11);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->event, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL);
  EXPECT_EQ(first->peer, "10.0.0.3:40001");
  auto second = failures.disconnected(12);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->event, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
  EXPECT_EQ(second->value, 400u);
  EXPECT_EQ(second->peer, "10.0.0.2:40002");
  EXPECT_EQ(failures.pending(), 0u);
}

TEST(HandshakeFailures, ADisconnectWithoutAFailureReportsNothing) {
  HandshakeFailures failures;
  failures.accepted(5, "10.0.0.1:40000");
  EXPECT_FALSE(failures.disconnected(5));
  EXPECT_FALSE(failures.disconnected(6));  // never accepted (the monitor missed it)
}

TEST(HandshakeFailures, FailuresWithoutDisconnectsDoNotPileUp) {
  HandshakeFailures failures;
  for (std::size_t i = 0; i < 10 * HandshakeFailures::kMaxPending; ++i)
    failures.failed(ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL, static_cast<std::uint32_t>(i));
  EXPECT_EQ(failures.pending(), HandshakeFailures::kMaxPending);
  // The oldest are kept: the disconnects that come belong to them.
  auto failure = failures.disconnected(3);
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->value, 0u);
}
