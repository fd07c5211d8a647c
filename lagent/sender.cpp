#include "sender.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <zmq.hpp>

#include "agent_spool.h"
#include "agent_stats.h"
#include "codec.h"
#include "sensor.h"

namespace fructosa::agent {
namespace {

using Clock = std::chrono::steady_clock;

// Encoded batches handed to the socket and not yet acknowledged stay below this (besides
// max_unacked_batches), so a master that is away costs disk, not memory.
constexpr std::size_t kMaxInFlightBytes = 8u << 20;
// How long a spooled batch may wait for lmaster's acknowledgement before the spool makes it
// durable itself (agent_spool.h, Durability): acknowledged batches are never flushed.
constexpr auto kSpoolSyncDelay = std::chrono::seconds(1);

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

  const SenderSettings settings;

  // Shared with producers, under `mutex`.
  std::mutex mutex;
  std::vector<Sample> incoming;
  Clock::time_point first_incoming;  // when `incoming` got its first sample
  bool incoming_complete = false;    // send_queued(): no need to wait for more
  bool stopping = false;
  double linger = 0;
  int wake_fd = -1;

  sensors::SenderStats counters;  // sender thread only; published to AgentStats

  // Owned by the sender thread.
  std::thread thread;
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::dealer};
  // Handshake events of `socket`. libzmq 4.3 never reconnects after lmaster refused a handshake
  // (CURVE key not allowed, CURVE on one side only): the sender says why and reconnects itself,
  // backing off from 5 s to 60 s, so that adding the agent's key to lmaster is enough.
  zmq::socket_t monitor{context, zmq::socket_type::pair};
  Clock::time_point reconnect_at = Clock::time_point::max();
  // Failover among settings.endpoints: the one connected now, and when it last said anything.
  std::size_t current_endpoint = 0;
  Clock::time_point last_heard = Clock::now();
  const std::string& endpoint() const { return settings.endpoints[current_endpoint]; }
  std::chrono::seconds reconnect_backoff{5};
  bool refused = false;
  bool answered = false;  // the current endpoint has said something (settings.on_connected)
  AgentDictionary dictionary;
  std::unique_ptr<AgentSpool> spool;  // null until opened (a reload waits for the old sender's)
  std::uint64_t next_to_send = 1;     // the next spooled batch to hand to the socket
  std::deque<std::pair<std::uint64_t, std::size_t>> in_flight;  // sent, unacknowledged: sequence, bytes
  std::size_t in_flight_bytes = 0;
  std::deque<Bytes> outbox;  // messages the socket refused (its queue was full), in order
  std::uint64_t failed_appends = 0, failed_samples = 0, last_bad_record = 0;
  std::vector<Sample> pending;
  Clock::time_point first_pending;
  bool pending_complete = false;  // send it without waiting batch_delay
  Clock::time_point incoming_due = Clock::time_point::max();
  Clock::time_point next_heartbeat;

  // Any thread: the sender thread looks at `incoming` and `stopping` again.
  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  // Under `mutex`: moves the producers' samples to `pending` once their batch is due
  // (send_queued(), max_batch_samples of them, the stop, or batch_delay after the first of
  // them if the thread woke for something else). Until then they wait in `incoming`:
  // producers wake this thread once per round (send_queued()), not once per sensor reading.
  void take_incoming_if_due(Clock::duration batch_delay) {
    if (incoming.empty()) {
      incoming_due = Clock::time_point::max();
      incoming_complete = false;
      return;
    }
    incoming_due = first_incoming + batch_delay;
    if (Clock::now() < incoming_due && incoming.size() < settings.max_batch_samples && !stopping && !incoming_complete)
      return;
    pending_complete = pending_complete || incoming_complete;
    incoming_complete = false;
    if (pending.empty()) {
      first_pending = first_incoming;
      pending.swap(incoming);  // both keep their capacity from round to round
    } else {
      for (auto& sample : incoming) pending.push_back(std::move(sample));
      incoming.clear();
    }
    incoming_due = Clock::time_point::max();
  }

  // Sends what waits in the outbox, in order; false when the socket's queue is full.
  bool flush() {
    while (!outbox.empty()) {
      if (!socket.send(zmq::buffer(outbox.front()), zmq::send_flags::dontwait)) return false;  // EAGAIN
      outbox.pop_front();
      next_heartbeat = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(settings.heartbeat_interval));
    }
    return true;
  }

  void post(Bytes bytes) {
    outbox.push_back(std::move(bytes));
    flush();
  }

  void publish_counters() {
    SpoolStats spool_stats = spool ? spool->stats() : SpoolStats{};
    counters.unacked = spool_stats.batches;
    counters.spool_bytes = spool_stats.bytes;
    counters.batches_dropped = spool_stats.dropped_batches + failed_appends;
    counters.samples_dropped = spool_stats.dropped_samples + failed_samples;
    sensors::AgentStats::instance().set_sender(counters);
  }

  void send_hello() { post(encode_hello(settings.host, spool->session(), FRUCTOSA_VERSION)); }

  bool window_open() const {
    return in_flight.size() < settings.max_unacked_batches && in_flight_bytes < kMaxInFlightBytes;
  }

  // Encodes a spooled batch under this process's dictionary (new names go first) and sends it.
  void transmit(std::uint64_t sequence, const std::vector<Sample>& samples) {
    std::vector<Bytes> messages;
    dictionary.encode_batch(sequence, samples, messages);
    std::size_t bytes = messages.back().size();
    for (auto& message : messages) post(std::move(message));
    in_flight.emplace_back(sequence, bytes);
    in_flight_bytes += bytes;
    if (sequence > counters_highest_sent) {
      ++counters.batches_sent;
      counters_highest_sent = sequence;
    }
  }
  std::uint64_t counters_highest_sent = 0;

  // Makes a batch of what is pending: in the spool first, then on the wire if the window
  // allows; otherwise it waits in the spool.
  void send_batch() {
    std::uint64_t sequence = 0;
    try {
      sequence = spool->append(pending);
    } catch (const SpoolError& error) {
      // Counted and logged (every 100th after the first, so a full disk does not flood the log).
      if (failed_appends % 100 == 0)
        spdlog::error("cannot keep a batch of {} sample(s) ({} such batch(es) lost so far): {}", pending.size(),
                      failed_appends + 1, error.what());
      ++failed_appends;
      failed_samples += pending.size();
    }
    if (sequence && sequence == next_to_send && outbox.empty() && window_open()) {
      transmit(sequence, pending);
      next_to_send = sequence + 1;
    }
    pending.clear();
    send_unsent();
    publish_counters();
  }

  // Makes the spooled batches durable once the oldest has waited kSpoolSyncDelay unacknowledged.
  void sync_spool_if_due(Clock::time_point now) {
    auto since = spool->unsynced_since();
    if (!since || now < *since + kSpoolSyncDelay || now < sync_retry_at) return;
    try {
      spool->sync();
    } catch (const SpoolError& error) {
      sync_retry_at = now + kSpoolSyncDelay;
      if (failed_syncs++ % 100 == 0)
        spdlog::error("{} ({} failed sync(s) so far; the batches stay in the page cache and are resent)",
                      error.what(), failed_syncs);
    }
  }
  std::uint64_t failed_syncs = 0;
  Clock::time_point sync_retry_at{};

  // Spooled batches not sent yet (or to be sent again), oldest first, while the window allows.
  void send_unsent() {
    while (window_open() && outbox.empty() && next_to_send < spool->next_sequence()) {
      next_to_send = spool->next_kept(next_to_send);  // dropped and skipped numbers have no batch
      if (next_to_send >= spool->next_sequence()) break;
      std::uint64_t sequence = next_to_send++;
      std::vector<Sample> samples;
      try {
        samples = spool->read(sequence);
      } catch (const SpoolError& error) {
        if (sequence > last_bad_record) {
          spdlog::error("skipping a spooled batch: {}", error.what());
          ++failed_appends;
          failed_samples += spool->samples_in(sequence);
          last_bad_record = sequence;
        }
        continue;
      }
      transmit(sequence, samples);
    }
  }

  void acknowledged(std::uint64_t sequence) {
    std::uint64_t before = spool->stats().batches;
    spool->acknowledge(sequence);
    std::uint64_t after = spool->stats().batches;
    counters.batches_acked += before > after ? before - after : 0;
    while (!in_flight.empty() && in_flight.front().first <= sequence) {
      in_flight_bytes -= in_flight.front().second;
      in_flight.pop_front();
    }
    next_to_send = std::max(next_to_send, sequence + 1);
    send_unsent();
    publish_counters();
  }

  void handle(const zmq::message_t& message) {
    last_heard = Clock::now();
    Message decoded;
    try {
      decoded = decode(message.data(), message.size());
    } catch (const ProtocolError& error) {
      spdlog::warn("ignoring a message from lmaster {}: {}", endpoint(), error.what());
      return;
    }
    if (!answered) {
      answered = true;
      if (settings.on_connected) settings.on_connected(endpoint());
    }
    if (decoded.type == MessageType::ack) {
      acknowledged(decoded.sequence);
    } else if (decoded.type == MessageType::control) {
      spdlog::info("lmaster {} asks for {} every {} s for {} s", endpoint(), decoded.sensor, decoded.interval_s,
                   decoded.duration_s);
      if (settings.on_control) settings.on_control(decoded.sensor, decoded.interval_s, decoded.duration_s);
    } else if (decoded.type == MessageType::resync) {
      spdlog::info("lmaster {} asked for a resync ({}); sending the dictionary and {} unacknowledged batches",
                   endpoint(), decoded.reason, spool->stats().batches);
      send_everything_again();
      ++counters.resyncs;
      publish_counters();
    } else {
      spdlog::warn("ignoring an unexpected {} message from lmaster {}", to_string(decoded.type), endpoint());
    }
  }

  // A reload's new sender: the previous one holds the spool until it has stopped.
  bool open_spool(bool stop_requested) {
    if (spool) return true;
    if (AgentSpool::held_here(settings.spool_dir) && !stop_requested) return false;
    try {
      spool = std::make_unique<AgentSpool>(settings.spool_dir, settings.spool_max_bytes);
    } catch (const SpoolError& error) {
      spdlog::error("{}", error.what());
      return false;
    }
    return true;
  }

  void start_link() {
    next_to_send = spool->first_sequence();
    send_hello();
    send_unsent();
    publish_counters();
  }

  // One event from `monitor`: [u16 event, u32 value][endpoint].
  void handle_monitor_event() {
    zmq::message_t event, address;
    if (!monitor.recv(event, zmq::recv_flags::dontwait)) return;
    if (event.more()) (void)monitor.recv(address, zmq::recv_flags::none);
    if (event.size() < 6) return;
    std::uint16_t id;
    std::uint32_t value;
    std::memcpy(&id, event.data(), sizeof id);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      if (refused) spdlog::info("lmaster {} accepted this agent", endpoint());
      refused = false;
      reconnect_backoff = std::chrono::seconds(5);
      return;
    }
    std::string why;
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      why = value == 400 ? "its public key is not in lmaster's curve_allowed_keys_dir"
                         : fmt::format("authentication failed (ZAP status {})", value);
    else if (settings.curve_server_key.empty())
      why = "the handshake failed: does lmaster use CURVE (then set curve_server_public_key_file)?";
    else
      why = "the CURVE handshake failed: is curve_server_public_key_file lmaster's public key?";
    if (!refused)
      spdlog::error("lmaster {} refused this agent: {}; retrying in {} s (and backing off to 60 s)", endpoint(),
                    why, reconnect_backoff.count());
    refused = true;
    reconnect_at = Clock::now() + reconnect_backoff;
    reconnect_backoff = std::min(reconnect_backoff * 2, std::chrono::seconds(60));
  }

  // The master sent nothing for failover_after (it acknowledges batches and heartbeats): move to
  // the next one; it gets Hello, the dictionary and every unacknowledged batch from the spool.
  void fail_over_if_due() {
    if (settings.endpoints.size() < 2) return;
    auto now = Clock::now();
    if (now - last_heard < std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(settings.failover_after)))
      return;
    std::string silent = endpoint();
    try {
      socket.disconnect(silent);
    } catch (const zmq::error_t&) {
    }
    current_endpoint = (current_endpoint + 1) % settings.endpoints.size();
    answered = false;
    spdlog::warn("lmaster {} has said nothing for {:.0f} s: sending to {} instead", silent, settings.failover_after,
                 endpoint());
    socket.connect(endpoint());
    last_heard = now;
    reconnect_at = Clock::time_point::max();
    send_everything_again();
    ++counters.failovers;
    publish_counters();
  }

  // Whatever still waits is for a master that does not know us: it all goes again.
  void send_everything_again() {
    outbox.clear();
    in_flight.clear();
    in_flight_bytes = 0;
    send_hello();
    post(dictionary.encode_everything());
    next_to_send = spool->first_sequence();
    send_unsent();
  }

  void reconnect_if_due() {
    if (Clock::now() < reconnect_at) return;
    reconnect_at = Clock::time_point::max();
    try {
      socket.disconnect(endpoint());
    } catch (const zmq::error_t&) {  // already gone: fine
    }
    socket.connect(endpoint());
  }

  void run() {
    const auto batch_delay = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(settings.batch_delay));
    Clock::time_point linger_deadline = Clock::time_point::max();
    bool stop_seen = false;
    auto next_spool_try = Clock::now();
    if (spool) start_link();
    for (;;) {
      auto now = Clock::now();
      if (!spool && now >= next_spool_try) {
        if (open_spool(false)) start_link();
        else next_spool_try = now + std::chrono::milliseconds(100);
      }
      auto wake_at = spool ? next_heartbeat : next_spool_try;
      if (spool && !pending.empty()) wake_at = std::min(wake_at, first_pending + batch_delay);
      if (stop_seen) wake_at = std::min(wake_at, linger_deadline);
      wake_at = std::min(wake_at, reconnect_at);
      wake_at = std::min(wake_at, incoming_due);
      if (spool)
        if (auto since = spool->unsynced_since()) wake_at = std::min(wake_at, std::max(*since + kSpoolSyncDelay, sync_retry_at));
      auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(wake_at - now).count() + 1;
      // POLLOUT while messages wait: the socket becomes writable once lmaster is connected.
      short socket_events = ZMQ_POLLIN | (spool && !outbox.empty() ? ZMQ_POLLOUT : 0);
      zmq::pollitem_t items[] = {{socket.handle(), 0, socket_events, 0},
                                 {nullptr, wake_fd, ZMQ_POLLIN, 0},
                                 {monitor.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 3, std::chrono::milliseconds(std::max<long>(0, timeout)));
      if (items[2].revents & ZMQ_POLLIN) handle_monitor_event();
      reconnect_if_due();
      if (spool) fail_over_if_due();

      if (items[1].revents & ZMQ_POLLIN) {
        std::uint64_t ignored;
        [[maybe_unused]] auto n = ::read(wake_fd, &ignored, sizeof ignored);
      }
      {
        std::lock_guard lock(mutex);
        take_incoming_if_due(batch_delay);
        if (stopping && !stop_seen) {
          stop_seen = true;
          linger_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(linger));
        }
      }
      if (!spool) {
        if (stop_seen && now >= linger_deadline) {
          if (!pending.empty())
            spdlog::error("stopping without the spool {}: {} sample(s) lost", settings.spool_dir, pending.size());
          break;
        }
        continue;
      }
      zmq::message_t message;
      while (socket.recv(message, zmq::recv_flags::dontwait)) handle(message);
      if (flush()) send_unsent();

      now = Clock::now();
      if (!pending.empty() &&
          (pending.size() >= settings.max_batch_samples || now >= first_pending + batch_delay || pending_complete ||
           stop_seen)) {
        send_batch();
        pending_complete = false;
      }
      if (now >= next_heartbeat) {
        if (outbox.empty()) post(encode_heartbeat(wall_clock_ns(), next_to_send - 1));
        else next_heartbeat = now + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(settings.heartbeat_interval));
        send_unsent();
      }
      sync_spool_if_due(now);
      if (stop_seen && (spool->empty() || now >= linger_deadline)) break;
    }
  }
};

Sender::Sender(SenderSettings settings) : state_(std::make_unique<State>(std::move(settings))) {
  auto& s = *state_;
  if (s.settings.spool_dir.empty()) throw SpoolError("no spool_dir given to the sender");
  // At start a spool that cannot be used stops lagent; after a reload the previous sender of
  // this process may still hold it, and the thread takes it over once that one has stopped.
  if (!AgentSpool::held_here(s.settings.spool_dir))
    s.spool = std::make_unique<AgentSpool>(s.settings.spool_dir, s.settings.spool_max_bytes);
  // Nothing queues in ZeroMQ while lmaster is unreachable (a send fails and the batch waits in
  // the spool): no memory grows, and a batch the spool drops cannot arrive later from a queue.
  s.socket.set(zmq::sockopt::immediate, true);
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.wake_fd < 0) throw std::runtime_error("eventfd failed");
  s.socket.set(zmq::sockopt::linger, 0);  // stop() lingers for acknowledgements itself
  s.socket.set(zmq::sockopt::sndhwm, 10000);
  s.socket.set(zmq::sockopt::reconnect_ivl, 100);
  s.socket.set(zmq::sockopt::reconnect_ivl_max, 5000);
  s.socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
  if (!s.settings.curve_server_key.empty()) {  // CURVE client: lmaster checks our public key (ZAP)
    s.socket.set(zmq::sockopt::curve_serverkey, s.settings.curve_server_key);
    s.socket.set(zmq::sockopt::curve_publickey, s.settings.curve_public_key);
    s.socket.set(zmq::sockopt::curve_secretkey, s.settings.curve_secret_key);
  }
  std::string monitor_endpoint = fmt::format("inproc://lagent-link-monitor-{}", static_cast<const void*>(&s));
  if (zmq_socket_monitor(s.socket.handle(), monitor_endpoint.c_str(),
                         ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0)
    throw std::runtime_error(fmt::format("zmq_socket_monitor: {}", zmq_strerror(zmq_errno())));
  s.monitor.connect(monitor_endpoint);
  s.socket.connect(s.endpoint());
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

void Sender::queue(std::vector<Sample>&& samples) {
  if (samples.empty()) return;
  bool full = false;
  {
    std::lock_guard lock(state_->mutex);
    auto& incoming = state_->incoming;
    if (incoming.empty()) state_->first_incoming = Clock::now();  // batch_delay counts from it
    for (auto& sample : samples) incoming.push_back(std::move(sample));
    full = incoming.size() >= state_->settings.max_batch_samples;
  }
  if (full) state_->wake();
}

void Sender::send_queued() {
  {
    std::lock_guard lock(state_->mutex);
    if (state_->incoming.empty()) return;
    state_->incoming_complete = true;
  }
  state_->wake();
}

std::size_t Sender::stop(double linger_seconds) {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    state_->linger = linger_seconds;
  }
  state_->wake();
  if (state_->thread.joinable()) state_->thread.join();
  if (!state_->spool) return 0;
  std::size_t left = state_->spool->stats().batches;
  if (left)
    spdlog::info("{} batch(es) stay in the spool {} until lmaster acknowledges them", left,
                 state_->spool->directory().string());
  return left;
}


}  // namespace fructosa::agent
