// An agent whose every sample is known, for the power-cut test (tests/integration/
// test_power_cut.py): counting_agent ENDPOINT HOST SAMPLES_PER_BATCH.
//
// Sends batches 1, 2, 3... as fast as lmaster acknowledges them (at most kWindow unanswered),
// each of SAMPLES_PER_BATCH samples of sensor "PowerCut" with keys `batch` and `index` (and
// times that never repeat). It keeps every unacknowledged batch in memory (it is not on the
// filesystem that loses power), so whatever lmaster loses it can send again: on a resync it says
// hello again, describes everything and resends them in order. Prints `ack N` for every
// acknowledgement (stdout, flushed: what lmaster promised to keep). SIGTERM: no new batches;
// it exits 0 once every batch made is acknowledged, printing `made N`.
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <iostream>
#include <map>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "codec.h"

using namespace fructosa;

namespace {

volatile std::sig_atomic_t finishing = 0;
constexpr std::size_t kWindow = 16;

std::vector<Sample> make_batch(const std::string& host, std::uint64_t sequence, int samples) {
  std::vector<Sample> batch;
  for (int i = 0; i < samples; ++i)
    batch.push_back(Sample{host, "PowerCut", 1'600'000'000'000'000'000 + static_cast<std::int64_t>(sequence) * 1000 + i,
                           0, {{"batch", static_cast<double>(sequence)}, {"index", static_cast<double>(i)}}, {}});
  return batch;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: counting_agent ENDPOINT HOST SAMPLES_PER_BATCH\n";
    return 2;
  }
  const std::string host = argv[2];
  const int samples = std::stoi(argv[3]);
  struct sigaction action {};
  action.sa_handler = [](int) { finishing = 1; };
  ::sigaction(SIGTERM, &action, nullptr);

  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.connect(argv[1]);
  const std::uint64_t session = static_cast<std::uint64_t>(::getpid()) << 20 | 7;
  auto new_dictionary = [] {
    return AgentDictionary([](std::string_view) { return std::string("power-cut test"); },
                           [](std::string_view, std::string_view) { return MetricInfo{"count", Kind::gauge, "x"}; });
  };
  AgentDictionary dictionary = new_dictionary();
  std::map<std::uint64_t, std::vector<Sample>> unacknowledged;
  std::uint64_t next = 1;
  std::vector<Bytes> out;
  auto send = [&](const Bytes& message) {
    for (;;) {
      try {
        socket.send(zmq::buffer(message), zmq::send_flags::none);
        return;
      } catch (const zmq::error_t& error) {
        if (error.num() != EINTR) throw;
      }
    }
  };
  auto send_batch = [&](std::uint64_t sequence, const std::vector<Sample>& batch) {
    out.clear();
    dictionary.encode_batch(sequence, batch, out);
    for (const auto& message : out) send(message);
  };
  send(encode_hello(host, session, "counting_agent"));
  auto last_reply = std::chrono::steady_clock::now();
  while (!(finishing && unacknowledged.empty())) {
    while (!finishing && unacknowledged.size() < kWindow) {
      auto batch = make_batch(host, next, samples);
      send_batch(next, batch);
      unacknowledged.emplace(next++, std::move(batch));
    }
    zmq::pollitem_t item{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(200));
    } catch (const zmq::error_t& error) {
      if (error.num() != EINTR) throw;
      continue;  // SIGTERM: finishing
    }
    bool start_over = false;
    if (item.revents & ZMQ_POLLIN) {
      zmq::message_t reply;
      while (socket.recv(reply, zmq::recv_flags::dontwait)) {
        last_reply = std::chrono::steady_clock::now();
        Message message = decode(reply.data(), reply.size());
        if (message.type == MessageType::ack) {
          std::cout << "ack " << message.sequence << std::endl;
          unacknowledged.erase(unacknowledged.begin(), unacknowledged.upper_bound(message.sequence));
        } else if (message.type == MessageType::resync) {
          start_over = true;
        }
      }
    }
    // A resync, or silence with batches waiting (lmaster restarted and never heard of us):
    // everything again, in order, under the same session.
    if (start_over || (!unacknowledged.empty() && std::chrono::steady_clock::now() - last_reply > std::chrono::seconds(3))) {
      last_reply = std::chrono::steady_clock::now();
      dictionary = new_dictionary();
      send(encode_hello(host, session, "counting_agent"));
      for (const auto& [sequence, batch] : unacknowledged) send_batch(sequence, batch);
    }
  }
  std::cout << "made " << next - 1 << std::endl;
  return 0;
}
