// master_load's agents over ZeroMQ, speaking lagent's protocol (Hello, the dictionary, batches
// in sequence, acknowledgements, resyncs answered as lagent answers them), each through a libzmq
// DEALER socket (--client libzmq) or ZMTP on its own TCP connection (--client zmtp,
// zmtp_dealer.h): the same bytes reach lmaster either way.
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include "load_agents.h"
#include "zmtp_dealer.h"
#include "sensor.h"

namespace fructosa::bench {
namespace {

std::string sensor_description(std::string_view sensor) {
  const auto* definition = sensors::find_sensor(sensor);
  return definition ? definition->description : std::string();
}

// How an agent's messages travel.
class Transport {
 public:
  virtual ~Transport() = default;
  // Connects the agent; the descriptor to wait on for its input (EPOLLIN).
  virtual int open(Agent& agent) = 0;
  // Sends (libzmq) or queues until flush() (ZMTP) one message; false when it could not.
  virtual bool post(Agent& agent, const Bytes& bytes) = 0;
  // Reads what waits for the agent and calls `each` per message; false when the connection broke.
  virtual bool receive(Agent& agent, const std::function<void(std::string_view)>& each) = 0;
  virtual void close(Agent& agent) = 0;
  // libzmq's descriptor signals edges, and a send can consume the one of waiting acks: the
  // worker then reads after sending, and sweeps every socket now and then.
  virtual bool edges_only() const = 0;
  // ZMTP: bytes the socket did not take yet (wait for EPOLLOUT) and sending them.
  virtual bool wants_write(const Agent&) const { return false; }
  virtual void flush(Agent&) {}
};

class LibzmqTransport final : public Transport {
 public:
  LibzmqTransport(zmq::context_t& context, const std::string& endpoint) : context_(context), endpoint_(endpoint) {}
  int open(Agent& agent) override {
    agent.socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
    agent.socket->set(zmq::sockopt::linger, 0);
    agent.socket->set(zmq::sockopt::sndhwm, 0);  // the window bounds what queues
    agent.socket->set(zmq::sockopt::rcvhwm, 0);
    agent.socket->connect(endpoint_);
    return agent.socket->get(zmq::sockopt::fd);
  }
  bool post(Agent& agent, const Bytes& bytes) override {
    return static_cast<bool>(agent.socket->send(zmq::buffer(bytes), zmq::send_flags::dontwait));
  }
  bool receive(Agent& agent, const std::function<void(std::string_view)>& each) override {
    zmq::message_t message;
    for (;;) {
      zmq::recv_result_t got;
      try {
        got = agent.socket->recv(message, zmq::recv_flags::dontwait);
      } catch (const zmq::error_t& error) {
        std::cerr << "master_load: agent " << agent.host << ": recv: " << error.what() << "\n";
        return true;  // the socket stays: libzmq reconnects on its own
      }
      if (!got) return true;
      each(std::string_view(static_cast<const char*>(message.data()), message.size()));
    }
  }
  void close(Agent& agent) override { agent.socket->close(); }
  bool edges_only() const override { return true; }

 private:
  zmq::context_t& context_;
  const std::string& endpoint_;
};

class ZmtpTransport final : public Transport {
 public:
  explicit ZmtpTransport(const std::string& endpoint) : endpoint_(endpoint) {}
  int open(Agent& agent) override {
    agent.zmtp = std::make_unique<ZmtpDealer>(endpoint_);
    return agent.zmtp->fd();
  }
  bool post(Agent& agent, const Bytes& bytes) override {
    agent.zmtp->send(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    return true;
  }
  bool receive(Agent& agent, const std::function<void(std::string_view)>& each) override {
    try {
      if (agent.zmtp->receive(each)) return true;
      std::cerr << "master_load: agent " << agent.host << ": lmaster closed the connection\n";
    } catch (const std::runtime_error& error) {
      std::cerr << "master_load: agent " << agent.host << ": " << error.what() << "\n";
    }
    return false;
  }
  void close(Agent& agent) override { agent.zmtp.reset(); }
  bool edges_only() const override { return false; }
  bool wants_write(const Agent& agent) const override { return agent.zmtp->wants_write(); }
  void flush(Agent& agent) override { agent.zmtp->flush(); }

 private:
  const std::string& endpoint_;
};

class ZmqWorker {
 public:
  ZmqWorker(const Settings& settings, const Timeline& timeline, const std::vector<SensorModel>& model,
            Transport& transport, std::vector<Agent>& agents)
      : settings_(settings), timeline_(timeline), model_(model), transport_(transport), agents_(agents) {}

  Counters run() {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) throw std::runtime_error(std::string("epoll_create1: ") + std::strerror(errno));
    for (std::uint32_t i = 0; i < agents_.size(); ++i) open(i);
    if (settings_.interval == 0)
      for (std::uint32_t i = 0; i < agents_.size(); ++i) make_ready(i);

    std::size_t cursor = 0;  // interval mode: the next agent due, round `round`
    std::uint64_t round = 0;
    auto due = [&](std::size_t i, std::uint64_t r) {
      return timeline_.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                   agents_[i].phase + static_cast<double>(r) * settings_.interval));
    };
    auto next_sweep = Clock::now() + std::chrono::milliseconds(250);
    std::vector<epoll_event> events(512);
    for (;;) {
      auto now = Clock::now();
      bool sending = now < timeline_.window_end;
      if (!sending && (all_acknowledged() || now >= timeline_.drain_end)) break;
      if (sending && settings_.interval > 0) {
        while (due(cursor, round) <= now) {
          Agent& agent = agents_[cursor];
          if (window_open(agent)) send_batch(cursor), after_sending(cursor);
          else ++agent.owed, ++counters_.deferred;
          if (++cursor == agents_.size()) cursor = 0, ++round;
        }
      }
      // Agents whose window opened (flat out: always; paced: batches owed).
      for (std::size_t r = 0; sending && r < ready_.size(); ++r) {
        std::uint32_t i = ready_[r];
        Agent& agent = agents_[i];
        agent.queued = false;
        bool sent = false;
        while (window_open(agent) && (settings_.interval == 0 || agent.owed > 0) && Clock::now() < timeline_.window_end) {
          if (agent.owed > 0) --agent.owed;
          send_batch(i);
          sent = true;
        }
        if (sent) after_sending(i);
      }
      ready_.clear();
      int timeout_ms = 50;
      if (sending && settings_.interval > 0) {
        // Rounded up: a wait rounded down to 0 ms spun until the next agent was due (1000 agents
        // paced at 1 s are 1 ms apart), a core taken from the server it measures.
        auto wait = std::chrono::ceil<std::chrono::milliseconds>(due(cursor, round) - Clock::now()).count();
        timeout_ms = static_cast<int>(std::clamp<long>(wait, 0, 50));
      }
      int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), timeout_ms);
      for (int e = 0; e < n; ++e) {
        if (events[e].events & EPOLLOUT) flush(events[e].data.u32);
        if (events[e].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) drain(events[e].data.u32);
      }
      // ZMQ_FD only signals changes: a missed edge must not leave acks unread for long.
      if (transport_.edges_only() && Clock::now() >= next_sweep) {
        for (std::uint32_t i = 0; i < agents_.size(); ++i) drain(i);
        next_sweep = Clock::now() + std::chrono::milliseconds(250);
      }
    }
    for (auto& agent : agents_) {
      counters_.unacked_at_end += agent.in_flight.size();
      transport_.close(agent);
    }
    ::close(epoll_);
    return counters_;
  }

 private:
  void open(std::uint32_t i) {
    Agent& agent = agents_[i];
    agent.dictionary = std::make_unique<AgentDictionary>(sensor_description, [](std::string_view s, std::string_view k) {
      return sensors::metric_info(s, k);
    });
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u32 = i;
    agent.fd = transport_.open(agent);
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, agent.fd, &event) != 0)
      throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
    send_hello(agent);
    after_sending(i);
  }

  // ZMTP: wait for the socket to take what it could not (EPOLLOUT) only while something waits.
  void watch_writes(std::uint32_t i) {
    Agent& agent = agents_[i];
    const bool wanted = transport_.wants_write(agent);
    if (wanted == agent.waits_for_write) return;
    agent.waits_for_write = wanted;
    epoll_event event{};
    event.events = EPOLLIN | (wanted ? EPOLLOUT : 0u);
    event.data.u32 = i;
    if (::epoll_ctl(epoll_, EPOLL_CTL_MOD, agent.fd, &event) != 0)
      throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  void flush(std::uint32_t i) {
    transport_.flush(agents_[i]);
    watch_writes(i);
  }
  // libzmq: a send may have consumed the socket's signal of waiting acks: read them (once per
  // agent, not per batch: an empty read costs libzmq two system calls). ZMTP: what was queued
  // leaves together (its reads are level-triggered).
  void after_sending(std::uint32_t i) {
    if (transport_.edges_only())
      drain(i);
    else
      flush(i);
  }

  bool window_open(const Agent& agent) const {
    return agent.in_flight.size() < static_cast<std::size_t>(settings_.window);
  }
  bool all_acknowledged() const {
    return std::all_of(agents_.begin(), agents_.end(), [](const Agent& a) { return a.in_flight.empty(); });
  }
  void make_ready(std::uint32_t i) {
    if (agents_[i].queued) return;
    agents_[i].queued = true;
    ready_.push_back(i);
  }

  void post(Agent& agent, const Bytes& bytes) {
    if (!transport_.post(agent, bytes)) ++counters_.send_failures;
  }

  void send_hello(Agent& agent) {
    Bytes hello = encode_hello(agent.host, agent.session, std::string("master_load ") + FRUCTOSA_VERSION);
    counters_.hello_dictionary_bytes += hello.size();
    post(agent, hello);
  }

  void send_batch(std::uint32_t i) {
    Agent& agent = agents_[i];
    std::size_t points = advance(agent, model_);
    messages_.clear();
    std::uint64_t sequence = agent.next_sequence++;
    agent.dictionary->encode_batch(sequence, agent.samples, messages_);
    for (std::size_t m = 0; m + 1 < messages_.size(); ++m) {  // new names: the dictionary first
      counters_.hello_dictionary_bytes += messages_[m].size();
      post(agent, messages_[m]);
    }
    counters_.batch_bytes += messages_.back().size();
    post(agent, messages_.back());
    ++counters_.batches_sent;
    counters_.points_sent += points;
    if (timeline_.in_window(Clock::now())) counters_.window_points_sent += points;
    agent.in_flight.push_back({sequence, points, std::move(messages_.back())});
  }

  // Reads every message waiting on agent i's connection.
  void drain(std::uint32_t i) {
    Agent& agent = agents_[i];
    if (!agent.connected) return;
    agent.connected = transport_.receive(agent, [&](std::string_view message) { handle(i, message); });
    if (!agent.connected) {  // ZMTP only: its batches stay unacknowledged
      ::epoll_ctl(epoll_, EPOLL_CTL_DEL, agent.fd, nullptr);
      return;
    }
    if (!transport_.edges_only()) flush(i);  // a resync's resends
  }

  void handle(std::uint32_t i, std::string_view payload) {
    Agent& agent = agents_[i];
    Message message;
    try {
      message = decode(payload.data(), payload.size());
    } catch (const ProtocolError& error) {
      if (counters_.bad_messages++ == 0)
        std::cerr << "master_load: agent " << agent.host << ": undecodable message from lmaster: " << error.what() << "\n";
      return;
    }
    if (message.type == MessageType::ack) {
      auto now = Clock::now();
      bool in_window = timeline_.in_window(now);
      while (!agent.in_flight.empty() && agent.in_flight.front().sequence <= message.sequence) {
        ++counters_.batches_acked;
        counters_.points_acked += agent.in_flight.front().points;
        if (in_window) {
          ++counters_.window_batches_acked;
          counters_.window_points_acked += agent.in_flight.front().points;
        }
        agent.in_flight.pop_front();
      }
      if (window_open(agent) && (settings_.interval == 0 || agent.owed > 0)) make_ready(i);
    } else if (message.type == MessageType::resync) {
      // As lagent: Hello, the whole dictionary, then every unacknowledged batch, oldest first.
      ++counters_.resyncs;
      if (counters_.resyncs <= 3)
        std::cerr << "master_load: agent " << agent.host << ": lmaster asked for a resync (" << message.reason << ")\n";
      send_hello(agent);
      Bytes everything = agent.dictionary->encode_everything();
      counters_.hello_dictionary_bytes += everything.size();
      post(agent, everything);
      for (const auto& batch : agent.in_flight) {
        post(agent, batch.batch);
        ++counters_.batches_resent;
        counters_.resent_bytes += batch.batch.size();
      }
    } else if (counters_.bad_messages++ == 0) {
      std::cerr << "master_load: agent " << agent.host << ": unexpected " << to_string(message.type)
                << " message from lmaster\n";
    }
  }

  const Settings& settings_;
  const Timeline& timeline_;
  const std::vector<SensorModel>& model_;
  Transport& transport_;
  std::vector<Agent>& agents_;
  int epoll_ = -1;
  Counters counters_;
  std::vector<std::uint32_t> ready_;
  std::vector<Bytes> messages_;
};

}  // namespace

Counters run_zmq_agents(const Settings& settings, const Timeline& timeline, const std::vector<SensorModel>& model,
                        zmq::context_t& context, std::vector<Agent>& agents) {
  if (settings.client == "zmtp") {
    ZmtpTransport transport(settings.endpoint);
    return ZmqWorker(settings, timeline, model, transport, agents).run();
  }
  LibzmqTransport transport(context, settings.endpoint);
  return ZmqWorker(settings, timeline, model, transport, agents).run();
}

}  // namespace fructosa::bench
