// master_load's agents over ZeroMQ: each a DEALER socket speaking lagent's protocol (Hello, the
// dictionary, batches in sequence, acknowledgements, resyncs answered as lagent answers them).
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include "load_agents.h"
#include "sensor.h"

namespace fructosa::bench {
namespace {

std::string sensor_description(std::string_view sensor) {
  const auto* definition = sensors::find_sensor(sensor);
  return definition ? definition->description : std::string();
}

class ZmqWorker {
 public:
  ZmqWorker(const Settings& settings, const Timeline& timeline, const std::vector<SensorModel>& model,
            zmq::context_t& context, std::vector<Agent>& agents)
      : settings_(settings), timeline_(timeline), model_(model), context_(context), agents_(agents) {}

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
          if (window_open(agent)) send_batch(cursor);
          else ++agent.owed, ++counters_.deferred;
          if (++cursor == agents_.size()) cursor = 0, ++round;
        }
      }
      // Agents whose window opened (flat out: always; paced: batches owed).
      for (std::size_t r = 0; sending && r < ready_.size(); ++r) {
        std::uint32_t i = ready_[r];
        Agent& agent = agents_[i];
        agent.queued = false;
        while (window_open(agent) && (settings_.interval == 0 || agent.owed > 0) && Clock::now() < timeline_.window_end) {
          if (agent.owed > 0) --agent.owed;
          send_batch(i);
        }
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
      for (int e = 0; e < n; ++e) drain(events[e].data.u32);
      // ZMQ_FD only signals changes: a missed edge must not leave acks unread for long.
      if (Clock::now() >= next_sweep) {
        for (std::uint32_t i = 0; i < agents_.size(); ++i) drain(i);
        next_sweep = Clock::now() + std::chrono::milliseconds(250);
      }
    }
    for (auto& agent : agents_) {
      counters_.unacked_at_end += agent.in_flight.size();
      agent.socket->close();
    }
    ::close(epoll_);
    return counters_;
  }

 private:
  void open(std::uint32_t i) {
    Agent& agent = agents_[i];
    agent.socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
    agent.socket->set(zmq::sockopt::linger, 0);
    agent.socket->set(zmq::sockopt::sndhwm, 0);  // the window bounds what queues
    agent.socket->set(zmq::sockopt::rcvhwm, 0);
    agent.socket->connect(settings_.endpoint);
    agent.dictionary = std::make_unique<AgentDictionary>(sensor_description, [](std::string_view s, std::string_view k) {
      return sensors::metric_info(s, k);
    });
    int fd = agent.socket->get(zmq::sockopt::fd);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u32 = i;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &event) != 0)
      throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
    send_hello(agent);
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
    if (!agent.socket->send(zmq::buffer(bytes), zmq::send_flags::dontwait)) ++counters_.send_failures;
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
    drain(i);  // a send may have consumed the socket's signal of waiting acks
  }

  // Reads every message waiting on agent i's socket.
  void drain(std::uint32_t i) {
    Agent& agent = agents_[i];
    zmq::message_t message;
    for (;;) {
      zmq::recv_result_t got;
      try {
        got = agent.socket->recv(message, zmq::recv_flags::dontwait);
      } catch (const zmq::error_t& error) {
        std::cerr << "master_load: agent " << agent.host << ": recv: " << error.what() << "\n";
        return;
      }
      if (!got) return;
      handle(i, message);
    }
  }

  void handle(std::uint32_t i, const zmq::message_t& payload) {
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
  zmq::context_t& context_;
  std::vector<Agent>& agents_;
  int epoll_ = -1;
  Counters counters_;
  std::vector<std::uint32_t> ready_;
  std::vector<Bytes> messages_;
};

}  // namespace

Counters run_zmq_agents(const Settings& settings, const Timeline& timeline, const std::vector<SensorModel>& model,
                        zmq::context_t& context, std::vector<Agent>& agents) {
  return ZmqWorker(settings, timeline, model, context, agents).run();
}

}  // namespace fructosa::bench
