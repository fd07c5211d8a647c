#include "lmaster_link.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <zmq.hpp>

#include "codec.h"
#include "sensor.h"
#include "wall_clock.h"

namespace fructosa::agent {
namespace {

using Clock = LinkClock;

// Encoded batches handed to the socket and not yet acknowledged stay below this (besides
// max_unacked_batches), so a master that is away costs disk, not memory.
constexpr std::size_t kMaxInFlightBytes = 8u << 20;

std::string sensor_description(std::string_view sensor) {
  const auto* definition = sensors::find_sensor(sensor);
  return definition ? definition->description : std::string();
}

class LmasterLink final : public Link {
 public:
  explicit LmasterLink(LmasterLinkSettings settings)
      : settings_(std::move(settings)),
        dictionary_(sensor_description, [](std::string_view sensor, std::string_view key) {
          return sensors::metric_info(sensor, key);
        }) {
    // Nothing queues in ZeroMQ while lmaster is unreachable (a send fails and the batch waits in
    // the spool): no memory grows, and a batch the spool drops cannot arrive later from a queue.
    socket_.set(zmq::sockopt::immediate, true);
    socket_.set(zmq::sockopt::linger, 0);  // the sender lingers for acknowledgements itself
    socket_.set(zmq::sockopt::sndhwm, 10000);
    socket_.set(zmq::sockopt::reconnect_ivl, 100);
    socket_.set(zmq::sockopt::reconnect_ivl_max, 5000);
    socket_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
    if (!settings_.curve_server_key.empty()) {  // CURVE client: lmaster checks our public key (ZAP)
      socket_.set(zmq::sockopt::curve_serverkey, settings_.curve_server_key);
      socket_.set(zmq::sockopt::curve_publickey, settings_.curve_public_key);
      socket_.set(zmq::sockopt::curve_secretkey, settings_.curve_secret_key);
    }
    std::string monitor_endpoint =
        fmt::format("inproc://lagent-link-monitor-{}", static_cast<const void*>(this));
    if (zmq_socket_monitor(socket_.handle(), monitor_endpoint.c_str(),
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0)
      throw std::runtime_error(fmt::format("zmq_socket_monitor: {}", zmq_strerror(zmq_errno())));
    monitor_.connect(monitor_endpoint);
    socket_.connect(endpoint());
    socket_fd_ = socket_.get(zmq::sockopt::fd);
    monitor_fd_ = monitor_.get(zmq::sockopt::fd);
    next_heartbeat_ = Clock::now();
  }

  std::string destination() const override { return fmt::format("lmaster at {}", endpoint()); }

  void start(LinkEvents& events) override {
    events_ = &events;
    send_hello();
  }

  bool can_send() const override {
    return outbox_.empty() && in_flight_.size() < settings_.max_unacked_batches &&
           in_flight_bytes_ < kMaxInFlightBytes;
  }

  // Encodes a spooled batch under this process's dictionary (new names go first) and sends it.
  void send(std::uint64_t sequence, std::vector<Sample>& samples) override {
    std::vector<Bytes> messages;
    dictionary_.encode_batch(sequence, samples, messages);
    std::size_t bytes = messages.back().size();
    for (auto& message : messages) post(std::move(message));
    in_flight_.emplace_back(sequence, bytes);
    in_flight_bytes_ += bytes;
  }

  bool watch(std::vector<pollfd>& fds, bool answers_awaited) override {
    // ZMQ_FD is readable when the socket has news of any kind (an edge, not a level): after it
    // or any operation on the socket, ZMQ_EVENTS says what is there.
    fds.push_back({monitor_fd_, POLLIN, 0});
    if (!answers_awaited && answered_ && outbox_.empty()) return false;
    fds.push_back({socket_fd_, POLLIN, 0});
    auto events = socket_.get(zmq::sockopt::events);
    return (events & ZMQ_POLLIN) || (!outbox_.empty() && (events & ZMQ_POLLOUT)) ||
           (monitor_.get(zmq::sockopt::events) & ZMQ_POLLIN);
  }

  void service() override {
    while (handle_monitor_event()) {
    }
    reconnect_if_due();
    // What came first: acks are read lazily (watch()), and silence is judged after them.
    zmq::message_t message;
    while (socket_.recv(message, zmq::recv_flags::dontwait)) handle(message);
    fail_over_if_due();
    flush();
    auto now = Clock::now();
    if (now >= next_heartbeat_) {
      if (outbox_.empty())
        post(encode_heartbeat(wall_clock_ns(), events_->last_handed()));
      else
        next_heartbeat_ = now + link_seconds(settings_.heartbeat_interval);
    }
  }

  Clock::time_point next_due() const override { return std::min(next_heartbeat_, reconnect_at_); }

 private:
  const std::string& endpoint() const { return settings_.endpoints[current_endpoint_]; }

  // Sends what waits in the outbox, in order; false when the socket's queue is full.
  bool flush() {
    while (!outbox_.empty()) {
      if (!socket_.send(zmq::buffer(outbox_.front()), zmq::send_flags::dontwait))
        return false;  // EAGAIN
      outbox_.pop_front();
      next_heartbeat_ = Clock::now() + link_seconds(settings_.heartbeat_interval);
    }
    return true;
  }

  void post(Bytes bytes) {
    outbox_.push_back(std::move(bytes));
    flush();
  }

  void send_hello() { post(encode_hello(settings_.host, events_->session(), FRUCTOSA_VERSION)); }

  void acknowledged(std::uint64_t sequence) {
    while (!in_flight_.empty() && in_flight_.front().first <= sequence) {
      in_flight_bytes_ -= in_flight_.front().second;
      in_flight_.pop_front();
    }
    events_->taken(sequence);
  }

  void handle(const zmq::message_t& message) {
    last_heard_ = Clock::now();
    Message decoded;
    try {
      decoded = decode(message.data(), message.size());
    } catch (const ProtocolError& error) {
      spdlog::warn("ignoring a message from lmaster {}: {}", endpoint(), error.what());
      return;
    }
    if (!answered_) {
      answered_ = true;
      events_->answered(destination());
    }
    if (decoded.type == MessageType::ack) {
      acknowledged(decoded.sequence);
    } else if (decoded.type == MessageType::control) {
      spdlog::info("lmaster {} asks for {} every {} s for {} s", endpoint(), decoded.sensor,
                   decoded.interval_s, decoded.duration_s);
      if (settings_.on_control)
        settings_.on_control(decoded.sensor, decoded.interval_s, decoded.duration_s);
    } else if (decoded.type == MessageType::resync) {
      spdlog::info(
          "lmaster {} asked for a resync ({}); sending the dictionary and {} unacknowledged "
          "batches",
          endpoint(), decoded.reason, events_->batches_kept());
      send_everything_again();
      events_->count_resync();
    } else {
      spdlog::warn("ignoring an unexpected {} message from lmaster {}", to_string(decoded.type),
                   endpoint());
    }
  }

  // Whatever still waits is for a master that does not know us: it all goes again.
  void send_everything_again() {
    outbox_.clear();
    in_flight_.clear();
    in_flight_bytes_ = 0;
    send_hello();
    post(dictionary_.encode_everything());
    events_->send_again();
  }

  // One event from `monitor_`: [u16 event, u32 value][endpoint]. False when none waited.
  // libzmq 4.3 never reconnects after lmaster refused a handshake (CURVE key not allowed, CURVE
  // on one side only): the link says why and reconnects itself, backing off from 5 s to 60 s,
  // so that adding the agent's key to lmaster is enough.
  bool handle_monitor_event() {
    zmq::message_t event, address;
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) return false;
    if (event.more()) (void)monitor_.recv(address, zmq::recv_flags::none);
    if (event.size() < 6) return true;
    std::uint16_t id;
    std::uint32_t value;
    std::memcpy(&id, event.data(), sizeof id);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      if (refused_) spdlog::info("lmaster {} accepted this agent", endpoint());
      refused_ = false;
      reconnect_backoff_ = std::chrono::seconds(5);
      return true;
    }
    std::string why;
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      why = value == 400 ? "its public key is not in lmaster's curve_allowed_keys_dir"
                         : fmt::format("authentication failed (ZAP status {})", value);
    else if (settings_.curve_server_key.empty())
      why = "the handshake failed: does lmaster use CURVE (then set curve_server_public_key_file)?";
    else
      why = "the CURVE handshake failed: is curve_server_public_key_file lmaster's public key?";
    if (!refused_)
      spdlog::error("lmaster {} refused this agent: {}; retrying in {} s (and backing off to 60 s)",
                    endpoint(), why, reconnect_backoff_.count());
    refused_ = true;
    reconnect_at_ = Clock::now() + reconnect_backoff_;
    reconnect_backoff_ = std::min(reconnect_backoff_ * 2, std::chrono::seconds(60));
    return true;
  }

  void reconnect_if_due() {
    if (Clock::now() < reconnect_at_) return;
    reconnect_at_ = Clock::time_point::max();
    try {
      socket_.disconnect(endpoint());
    } catch (const zmq::error_t&) {  // already gone: fine
    }
    socket_.connect(endpoint());
  }

  // The master sent nothing for failover_after (it acknowledges batches and heartbeats): move to
  // the next one; it gets Hello, the dictionary and every unacknowledged batch from the spool.
  void fail_over_if_due() {
    if (settings_.endpoints.size() < 2) return;
    auto now = Clock::now();
    if (now - last_heard_ < link_seconds(settings_.failover_after)) return;
    std::string silent = endpoint();
    try {
      socket_.disconnect(silent);
    } catch (const zmq::error_t&) {
    }
    current_endpoint_ = (current_endpoint_ + 1) % settings_.endpoints.size();
    answered_ = false;
    spdlog::warn("lmaster {} has said nothing for {:.0f} s: sending to {} instead", silent,
                 settings_.failover_after, endpoint());
    socket_.connect(endpoint());
    last_heard_ = now;
    reconnect_at_ = Clock::time_point::max();
    send_everything_again();
    events_->count_failover();
  }

  const LmasterLinkSettings settings_;
  LinkEvents* events_ = nullptr;  // set by start()
  zmq::context_t context_{1};
  zmq::socket_t socket_{context_, zmq::socket_type::dealer};
  zmq::socket_t monitor_{context_, zmq::socket_type::pair};  // handshake events of socket_
  int socket_fd_ = -1, monitor_fd_ = -1;  // ZMQ_FD of each, for the sender's poll
  Clock::time_point reconnect_at_ = Clock::time_point::max();
  std::chrono::seconds reconnect_backoff_{5};
  bool refused_ = false;
  // Failover among settings_.endpoints: the one connected now, and when it last said anything.
  std::size_t current_endpoint_ = 0;
  Clock::time_point last_heard_ = Clock::now();
  bool answered_ = false;  // the current endpoint has said something
  AgentDictionary dictionary_;
  std::deque<std::pair<std::uint64_t, std::size_t>>
      in_flight_;  // sent, unacknowledged: sequence, bytes
  std::size_t in_flight_bytes_ = 0;
  std::deque<Bytes> outbox_;  // messages the socket refused (its queue was full), in order
  Clock::time_point next_heartbeat_;
};

}  // namespace

std::unique_ptr<Link> make_lmaster_link(LmasterLinkSettings settings) {
  return std::make_unique<LmasterLink>(std::move(settings));
}

}  // namespace fructosa::agent
