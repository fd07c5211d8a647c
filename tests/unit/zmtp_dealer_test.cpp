// master_load's ZMTP client (bench/zmtp_dealer.*) against a real libzmq ROUTER, as lmaster binds
// one: the handshake, short and long frames each way, many messages in one read, and a message
// the socket could not take at once.
#include <gtest/gtest.h>

#include <poll.h>

#include <string>
#include <vector>
#include <zmq.hpp>

#include "zmtp_dealer.h"

using fructosa::bench::ZmtpDealer;

namespace {

struct Router {
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::router};
  std::string endpoint;
  // `queue`: how many messages libzmq reads ahead of the test (by default a thousand, which
  // leaves a sender's socket room for a thousand messages however large).
  explicit Router(int queue = 1000) {
    socket.set(zmq::sockopt::rcvhwm, queue);
    socket.set(zmq::sockopt::rcvbuf, 65536);
    socket.set(zmq::sockopt::linger, 0);
    socket.bind("tcp://127.0.0.1:*");
    endpoint = socket.get(zmq::sockopt::last_endpoint);
  }
  // One message from a DEALER: [identity, payload].
  std::pair<std::string, std::string> receive() {
    zmq::message_t identity, payload;
    EXPECT_TRUE(socket.recv(identity));
    EXPECT_TRUE(identity.more());
    EXPECT_TRUE(socket.recv(payload));
    EXPECT_FALSE(payload.more());
    return {identity.to_string(), payload.to_string()};
  }
  void send(const std::string& identity, const std::string& payload) {
    socket.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    socket.send(zmq::buffer(payload));
  }
};

// Writes everything queued, waiting for the socket to take it.
void flush_all(ZmtpDealer& dealer) {
  dealer.flush();
  while (dealer.wants_write()) {
    pollfd writable{dealer.fd(), POLLOUT, 0};
    ASSERT_EQ(::poll(&writable, 1, 10000), 1) << "the socket took nothing for 10 s";
    dealer.flush();
  }
}

// Waits for the dealer's socket to be readable, then reads until `count` messages came.
std::vector<std::string> receive(ZmtpDealer& dealer, std::size_t count) {
  std::vector<std::string> got;
  while (got.size() < count) {
    pollfd readable{dealer.fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&readable, 1, 10000), 1) << "nothing came";
    if (readable.revents == 0) break;
    EXPECT_TRUE(dealer.receive([&](std::string_view message) { got.emplace_back(message); }));
  }
  return got;
}

TEST(ZmtpDealer, SpeaksToALibzmqRouterBothWays) {
  Router router;
  ZmtpDealer dealer(router.endpoint);
  const std::string long_message(100000, 'x');  // a long frame (8-byte size)
  dealer.send("hello");
  dealer.send(long_message);
  flush_all(dealer);
  auto [identity, first] = router.receive();
  EXPECT_EQ(first, "hello");
  EXPECT_EQ(router.receive(), std::make_pair(identity, long_message));

  for (int i = 0; i < 100; ++i) router.send(identity, "ack " + std::to_string(i));
  router.send(identity, std::string(300, 'y'));
  auto got = receive(dealer, 101);
  ASSERT_EQ(got.size(), 101u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(got[i], "ack " + std::to_string(i));
  EXPECT_EQ(got[100], std::string(300, 'y'));
}

TEST(ZmtpDealer, KeepsWhatTheSocketCouldNotTakeInOrder) {
  Router router(1);
  ZmtpDealer dealer(router.endpoint);
  // More than the socket buffers hold while the router reads nothing: some must wait.
  const std::string big(1 << 20, 'z');
  int sent = 0;
  do {
    dealer.send(big + std::to_string(sent++));
    dealer.flush();
  } while (!dealer.wants_write() && sent < 256);
  ASSERT_TRUE(dealer.wants_write()) << "the socket took " << sent << " MiB without waiting";
  dealer.send("last");  // behind what waits
  for (int i = 0; i < sent; ++i) {
    // The router has a message only once all of it is out: write what waits meanwhile.
    zmq::pollitem_t item{router.socket.handle(), 0, ZMQ_POLLIN, 0};
    while (zmq::poll(&item, 1, std::chrono::milliseconds(10)) == 0) {
      pollfd writable{dealer.fd(), POLLOUT, 0};
      if (::poll(&writable, 1, 0) == 1) dealer.flush();
    }
    EXPECT_EQ(router.receive().second, big + std::to_string(i));
  }
  flush_all(dealer);
  EXPECT_EQ(router.receive().second, "last");
}

TEST(ZmtpDealer, RefusesWhatIsNotTcp) {
  EXPECT_THROW(ZmtpDealer("ipc:///tmp/x"), std::runtime_error);
}

}  // namespace
