#include "sender.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <zmq.hpp>

#include "agent_stats.h"
#include "codec.h"
#include "sensor.h"

namespace fructosa::agent {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t wall_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string sensor_description(std::string_view sensor) {
  const auto* definition = sensors::find_sensor(sensor);
  return definition ? definition->description : std::string();
}

}  // namespace

struct Sender::State {
  explicit State(SenderSettings settings_in)
      : settings(std::move(settings_in)),
        dictionary(sensor_description, [](std::string_view sensor, std::string_view key) {
          return sensors::metric_info(sensor, key);
        }) {}

  struct Unacked {
    std::uint64_t sequence;
    Bytes bytes;
    bool sent;
  };

  const SenderSettings settings;

  // Shared with producers, under `mutex`.
  std::mutex mutex;
  std::vector<Sample> incoming;
  bool stopping = false;
  double linger = 0;
  int wake_fd = -1;

  sensors::SenderStats counters;  // sender thread only; published to AgentStats

  // Owned by the sender thread.
  std::thread thread;
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::dealer};
  AgentDictionary dictionary;
  std::uint64_t session = std::random_device{}() * 0x100000000ull + std::random_device{}();
  std::uint64_t next_sequence = 1;
  std::deque<Unacked> unacked;
  std::vector<Sample> pending;
  Clock::time_point first_pending;
  Clock::time_point next_heartbeat;

  bool send(const Bytes& bytes) {
    auto sent = socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    if (sent) next_heartbeat = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(settings.heartbeat_interval));
    return sent.has_value();  // no value: the queue towards lmaster is full (EAGAIN)
  }

  void update_counters(const std::function<void(sensors::SenderStats&)>& change) {
    change(counters);
    counters.unacked = unacked.size();
    sensors::AgentStats::instance().set_sender(counters);
  }

  void send_hello() { send(encode_hello(settings.host, session, FRUCTOSA_VERSION)); }

  void send_batch() {
    std::vector<Bytes> messages;
    std::uint64_t sequence = next_sequence++;
    dictionary.encode_batch(sequence, pending, messages);
    pending.clear();
    for (std::size_t i = 0; i + 1 < messages.size(); ++i) send(messages[i]);  // new dictionary entries
    bool sent = send(messages.back());
    unacked.push_back({sequence, std::move(messages.back()), sent});
    std::uint64_t dropped = 0;
    while (unacked.size() > settings.max_unacked_batches) {
      unacked.pop_front();
      ++dropped;
    }
    if (dropped)
      spdlog::warn("lmaster has not acknowledged {} batches; dropped the oldest {} (see max_unacked_batches)",
                   settings.max_unacked_batches, dropped);
    update_counters([&](sensors::SenderStats& c) {
      c.batches_sent += sent;
      c.batches_dropped += dropped;
    });
  }

  // Batches that did not fit in the queue earlier go out in order once there is room.
  void send_unsent() {
    for (auto& batch : unacked) {
      if (batch.sent) continue;
      if (!send(batch.bytes)) return;
      batch.sent = true;
    }
  }

  void handle(const zmq::message_t& message) {
    Message decoded;
    try {
      decoded = decode(message.data(), message.size());
    } catch (const ProtocolError& error) {
      spdlog::warn("ignoring a message from lmaster {}: {}", settings.endpoint, error.what());
      return;
    }
    if (decoded.type == MessageType::ack) {
      std::uint64_t acked = 0;
      while (!unacked.empty() && unacked.front().sequence <= decoded.sequence) {
        unacked.pop_front();
        ++acked;
      }
      update_counters([&](sensors::SenderStats& c) { c.batches_acked += acked; });
      send_unsent();
    } else if (decoded.type == MessageType::resync) {
      spdlog::info("lmaster {} asked for a resync ({}); sending the dictionary and {} unacknowledged batches",
                   settings.endpoint, decoded.reason, unacked.size());
      send_hello();
      send(dictionary.encode_everything());
      for (auto& batch : unacked) batch.sent = false;
      send_unsent();
      update_counters([](sensors::SenderStats& c) { ++c.resyncs; });
    } else {
      spdlog::warn("ignoring an unexpected {} message from lmaster {}", to_string(decoded.type), settings.endpoint);
    }
  }

  void run() {
    const auto batch_delay = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(settings.batch_delay));
    Clock::time_point linger_deadline = Clock::time_point::max();
    bool stop_seen = false;
    send_hello();
    for (;;) {
      auto now = Clock::now();
      auto wake_at = next_heartbeat;
      if (!pending.empty()) wake_at = std::min(wake_at, first_pending + batch_delay);
      if (stop_seen) wake_at = std::min(wake_at, linger_deadline);
      auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(wake_at - now).count() + 1;
      zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_fd, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, std::chrono::milliseconds(std::max<long>(0, timeout)));

      if (items[1].revents & ZMQ_POLLIN) {
        std::uint64_t ignored;
        [[maybe_unused]] auto n = ::read(wake_fd, &ignored, sizeof ignored);
        std::lock_guard lock(mutex);
        if (pending.empty() && !incoming.empty()) first_pending = Clock::now();
        for (auto& sample : incoming) pending.push_back(std::move(sample));
        incoming.clear();
        if (stopping && !stop_seen) {
          stop_seen = true;
          linger_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(linger));
        }
      }
      zmq::message_t message;
      while (socket.recv(message, zmq::recv_flags::dontwait)) handle(message);

      now = Clock::now();
      if (!pending.empty() &&
          (pending.size() >= settings.max_batch_samples || now >= first_pending + batch_delay || stop_seen))
        send_batch();
      if (now >= next_heartbeat) {
        send(encode_heartbeat(wall_clock_ns(), next_sequence - 1));
        send_unsent();
      }
      if (stop_seen && (unacked.empty() || now >= linger_deadline)) break;
    }
  }
};

Sender::Sender(SenderSettings settings) : state_(std::make_unique<State>(std::move(settings))) {
  auto& s = *state_;
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.wake_fd < 0) throw std::runtime_error("eventfd failed");
  s.socket.set(zmq::sockopt::linger, 0);  // stop() lingers for acknowledgements itself
  s.socket.set(zmq::sockopt::sndhwm, 10000);
  s.socket.set(zmq::sockopt::reconnect_ivl, 100);
  s.socket.set(zmq::sockopt::reconnect_ivl_max, 5000);
  s.socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
  s.socket.connect(s.settings.endpoint);
  s.next_heartbeat = Clock::now();
  s.thread = std::thread([&s] {
    try {
      s.run();
    } catch (const std::exception& error) {
      spdlog::critical("sender thread failed: {}", error.what());
    }
  });
}

Sender::~Sender() {
  if (state_->thread.joinable()) stop(0);
  ::close(state_->wake_fd);
}

void Sender::submit(std::vector<Sample>&& samples) {
  if (samples.empty()) return;
  {
    std::lock_guard lock(state_->mutex);
    for (auto& sample : samples) state_->incoming.push_back(std::move(sample));
  }
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(state_->wake_fd, &one, sizeof one);
}

std::size_t Sender::stop(double linger_seconds) {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    state_->linger = linger_seconds;
  }
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(state_->wake_fd, &one, sizeof one);
  if (state_->thread.joinable()) state_->thread.join();
  return state_->unacked.size();
}


}  // namespace fructosa::agent
