// A test client that speaks (and mis-speaks) the agent side of the wire protocol, to check how
// lmaster treats peers: wire_client ENDPOINT SCENARIO. Prints the master's replies, one per line.
// "burst": 50 batches back to back, until the ack of the last.
#include <chrono>
#include <iostream>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "codec.h"

using namespace fructosa;

constexpr std::uint64_t kBurst = 50;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: wire_client ENDPOINT garbage|truncated|wrong-version|multipart|batch-without-hello|valid|burst\n";
    return 2;
  }
  const std::string scenario = argv[2];
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 2000);
  socket.connect(argv[1]);

  AgentDictionary dictionary([](std::string_view) { return std::string("test sensor"); },
                             [](std::string_view, std::string_view) { return MetricInfo{"bytes", Kind::gauge, "x"}; });
  Sample sample{"wirenode", "WireTest", 1'000'000'000, 0, {{"value", 42}}, {}};
  std::vector<Bytes> batch;
  dictionary.encode_batch(1, {sample}, batch);
  Bytes hello = encode_hello("wirenode", 77, "test");

  std::vector<Bytes> messages;
  if (scenario == "garbage") {
    messages.push_back("GET / HTTP/1.1\r\nHost: lmaster\r\n\r\n");
  } else if (scenario == "truncated") {
    messages.push_back(hello.substr(0, hello.size() / 2));
  } else if (scenario == "wrong-version") {
    messages.push_back(encode_hello("wirenode", 77, "future", kProtocolVersion + 1));
  } else if (scenario == "batch-without-hello") {
    messages.push_back(batch.back());
  } else if (scenario == "valid") {
    messages = {hello, batch[0], batch[1]};
  } else if (scenario == "burst") {
    // 50 batches back to back, as a spool's backlog or batch_interval's held rounds leave.
    messages = {hello, batch[0], batch[1]};
    for (std::uint64_t sequence = 2; sequence <= kBurst; ++sequence) {
      std::vector<Bytes> next;
      sample.time_ns += 1'000'000'000;
      dictionary.encode_batch(sequence, {sample}, next);
      messages.push_back(next.back());
    }
  } else if (scenario != "multipart") {
    std::cerr << "unknown scenario " << scenario << "\n";
    return 2;
  }
  if (scenario == "multipart") {
    socket.send(zmq::buffer(std::string("first frame")), zmq::send_flags::sndmore);
    socket.send(zmq::buffer(std::string("second frame")), zmq::send_flags::none);
  }
  for (const auto& message : messages) socket.send(zmq::buffer(message), zmq::send_flags::none);

  // Replies (acks, resyncs) come back within moments; 2 s of silence ends the client.
  socket.set(zmq::sockopt::rcvtimeo, 2000);
  zmq::message_t reply;
  while (socket.recv(reply)) {
    Message decoded = decode(reply.data(), reply.size());
    std::cout << to_string(decoded.type);
    if (decoded.type == MessageType::ack) std::cout << " " << decoded.sequence;
    if (decoded.type == MessageType::resync) std::cout << " " << decoded.reason;
    std::cout << std::endl;
    // What the valid scenario waits for; the burst waits for its last batch's.
    if (decoded.type == MessageType::ack && (scenario != "burst" || decoded.sequence >= kBurst)) break;
  }
  return 0;
}
