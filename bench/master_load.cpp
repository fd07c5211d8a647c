// A load generator for lmaster that speaks the real protocol as N agents, or the same points as
// Graphite plaintext for a carbon relay (the peer lmaster is compared with).
//
//   master_load --endpoint tcp://127.0.0.1:PORT [--agents N] [--metrics M] [--seconds S]
//               [--warmup S] [--drain S] [--interval S | --window W | --rate P] [--aligned]
//               [--threads T] [--io-threads T] [--host-prefix NAME]
//   master_load --plaintext HOST:PORT [the same options]
//
// Every agent has its own ZeroMQ DEALER socket: Hello, then batches encoded with the real
// AgentDictionary (the dictionary goes first), sequences from 1, and a Resync from lmaster is
// answered as lagent does (Hello, the whole dictionary, every unacknowledged batch again).
// Pacing: one batch per agent every --interval seconds (default 1; agents spread evenly over the
// interval, or all at the start of it with --aligned, as lagent's aligned timers do); --rate P
// sets the interval to agents * metrics / P; --interval 0, or --window W without --interval,
// sends as fast as acknowledgements allow. In every mode an agent has at most --window (default
// 8) unacknowledged batches, like lagent's spool window; a batch due while the window is full is
// sent once it opens (counted as deferred).
// --plaintext: one TCP connection per agent (as every node's own collector would open one),
// "<host>.<Sensor>[.<key>] <value> <timestamp>\n" lines with millisecond timestamps; nothing is
// acknowledged, so "acknowledged" figures are absent and the sink's count is the only check.
//
// Each agent reports the same shape of data as lagent's system sensors: CPUPercent and CPUTimes
// per CPU, CPUTimesPercent, CPUStats, CPUFreq, CPUCount, VirtualMemory, SwapMemory,
// DiskIOCounters per disk, DiskUsage, DiskPartitions, NetIOCounters and NetIFStats per NIC,
// NetConnections, Users, BootTime, with the catalogs' keys; the number of CPUs is chosen so that
// an agent reports exactly --metrics values. Counters grow by random plausible amounts, gauges
// walk, percentages have one decimal; the sample time is the wall clock when the batch is built.
//
// Prints one JSON object: what was sent and acknowledged (total and in the measurement window,
// which starts after --warmup and lasts --seconds), points/s, and payload bytes (Hello and
// dictionary apart from batches). Points are metric values; bytes are ZeroMQ message payloads
// (ZMTP adds a few bytes of framing per message).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "codec.h"
#include "node_model.h"
#include "graphite_name.h"
#include "sensor.h"
#include "wall_clock.h"

using namespace fructosa;
using namespace fructosa::bench;
using Clock = std::chrono::steady_clock;

namespace {

struct Settings {
  std::string endpoint;   // tcp://host:port of lmaster
  std::string plaintext;  // host:port of a carbon relay (plaintext mode)
  int agents = 100;
  int metrics = 200;
  double seconds = 10;
  double warmup = 2;
  double drain = 10;
  double interval = 1;  // 0: as fast as the window allows
  int window = 8;
  double rate = 0;  // total points/s; sets the interval
  bool aligned = false;
  int threads = 1;
  int io_threads = 1;
  std::string host_prefix = "mload";
  std::string command;
};

[[noreturn]] void usage_error(const std::string& why) {
  std::cerr << "master_load: " << why
            << "\nusage: master_load (--endpoint tcp://HOST:PORT | --plaintext HOST:PORT) [--agents N] "
               "[--metrics M] [--seconds S] [--warmup S] [--drain S] [--interval S | --window W | --rate P] "
               "[--aligned] [--threads T] [--io-threads T] [--host-prefix NAME]\n";
  std::exit(64);
}

Settings parse_arguments(int argc, char** argv) {
  Settings settings;
  bool interval_given = false, window_given = false;
  for (int i = 0; i < argc; ++i) settings.command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    std::string option = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(option + " needs a value");
      return argv[++i];
    };
    auto number = [&](double low, double high) {
      std::string text = value();
      char* end = nullptr;
      double parsed = std::strtod(text.c_str(), &end);
      if (text.empty() || *end || !(parsed >= low && parsed <= high))
        usage_error(option + ": " + text + " is not a number in [" + std::to_string(low) + ", " +
                    std::to_string(high) + "]");
      return parsed;
    };
    if (option == "--endpoint") settings.endpoint = value();
    else if (option == "--plaintext") settings.plaintext = value();
    else if (option == "--agents") settings.agents = static_cast<int>(number(1, 100000));
    else if (option == "--metrics") settings.metrics = static_cast<int>(number(1, 100000));
    else if (option == "--seconds") settings.seconds = number(0.1, 1e6);
    else if (option == "--warmup") settings.warmup = number(0, 1e6);
    else if (option == "--drain") settings.drain = number(0, 1e6);
    else if (option == "--interval") settings.interval = number(0, 1e6), interval_given = true;
    else if (option == "--window") settings.window = static_cast<int>(number(1, 1e6)), window_given = true;
    else if (option == "--rate") settings.rate = number(1, 1e12);
    else if (option == "--aligned") settings.aligned = true;
    else if (option == "--threads") settings.threads = static_cast<int>(number(1, 256));
    else if (option == "--io-threads") settings.io_threads = static_cast<int>(number(1, 64));
    else if (option == "--host-prefix") settings.host_prefix = value();
    else usage_error("unknown option " + option);
  }
  if (settings.endpoint.empty() == settings.plaintext.empty())
    usage_error("give exactly one of --endpoint and --plaintext");
  if (settings.rate > 0) settings.interval = static_cast<double>(settings.agents) * settings.metrics / settings.rate;
  else if (window_given && !interval_given) settings.interval = 0;
  settings.threads = std::min(settings.threads, settings.agents);
  return settings;
}

// ---- agents -------------------------------------------------------------------------------------

struct InFlight {
  std::uint64_t sequence;
  std::size_t points;
  Bytes batch;  // kept for a resync
};

struct Counters {
  std::uint64_t batches_sent = 0, points_sent = 0, batches_acked = 0, points_acked = 0;
  std::uint64_t window_points_sent = 0, window_points_acked = 0, window_batches_acked = 0;
  std::uint64_t batches_resent = 0, resyncs = 0, deferred = 0, send_failures = 0, bad_messages = 0;
  std::uint64_t hello_dictionary_bytes = 0, batch_bytes = 0, resent_bytes = 0;
  std::uint64_t unacked_at_end = 0;
  void add(const Counters& o) {
    batches_sent += o.batches_sent, points_sent += o.points_sent, batches_acked += o.batches_acked;
    points_acked += o.points_acked, window_points_sent += o.window_points_sent;
    window_points_acked += o.window_points_acked, window_batches_acked += o.window_batches_acked;
    batches_resent += o.batches_resent, resyncs += o.resyncs, deferred += o.deferred;
    send_failures += o.send_failures, bad_messages += o.bad_messages;
    hello_dictionary_bytes += o.hello_dictionary_bytes, batch_bytes += o.batch_bytes;
    resent_bytes += o.resent_bytes, unacked_at_end += o.unacked_at_end;
  }
};

// The phases of a run, shared by every thread.
struct Timeline {
  Clock::time_point start, window_start, window_end, drain_end;
  bool in_window(Clock::time_point t) const { return t >= window_start && t < window_end; }
};

struct Agent {
  std::string host;
  std::uint64_t session = 0;
  std::vector<Sample> samples;  // built once; values and times change in place
  Random random{1};
  double phase = 0;  // seconds into each interval where this agent's batch is due
  // ZeroMQ mode
  std::unique_ptr<zmq::socket_t> socket;
  std::unique_ptr<AgentDictionary> dictionary;
  std::uint64_t next_sequence = 1;
  std::deque<InFlight> in_flight;
  int owed = 0;  // due batches waiting for the window
  bool queued = false;  // in the thread's ready list
  // plaintext mode
  int fd = -1;
  std::vector<std::string> paths;  // "<host>.<Sensor>[.<key>] " per value, in batch order
};

std::string sensor_description(std::string_view sensor) {
  const auto* definition = sensors::find_sensor(sensor);
  return definition ? definition->description : std::string();
}

void fill_agent(Agent& agent, int index, const Settings& settings, const std::vector<SensorModel>& model) {
  char name[64];
  std::snprintf(name, sizeof name, "%s%05d", settings.host_prefix.c_str(), index);
  agent.host = name;
  std::random_device entropy;
  agent.session = (static_cast<std::uint64_t>(entropy()) << 32 | entropy()) ^ static_cast<std::uint64_t>(index);
  agent.random.state = 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(index) + 1) | 1;
  agent.phase = settings.aligned || settings.interval == 0
                    ? 0
                    : settings.interval * static_cast<double>(index) / settings.agents;
  for (const auto& sensor : model) {
    Sample& sample = agent.samples.emplace_back();
    sample.host = agent.host;
    sample.sensor = sensor.sensor;
    for (std::size_t k = 0; k < sensor.keys.size(); ++k) {
      sample.metrics.push_back({sensor.keys[k], first_value(sensor.values[k], agent.random)});
      if (!settings.plaintext.empty()) {
        // The names lmaster's Graphite output would send (common/graphite_name.h).
        std::string path;
        append_graphite_host(path, agent.host);
        path += '.';
        append_graphite_component(path, sensor.sensor);
        if (!sensor.keys[k].empty()) {
          path += '.';
          append_graphite_dotted(path, sensor.keys[k]);
        }
        path += ' ';
        agent.paths.push_back(std::move(path));
      }
    }
  }
}

// New values and the time of this batch, in place.
std::size_t advance(Agent& agent, const std::vector<SensorModel>& model) {
  std::int64_t now = wall_clock_ns();
  std::size_t points = 0;
  for (std::size_t s = 0; s < agent.samples.size(); ++s) {
    Sample& sample = agent.samples[s];
    // Sensors read one after another in lagent: a few tens of microseconds apart.
    sample.time_ns = now + static_cast<std::int64_t>(s) * 23000;
    for (std::size_t k = 0; k < sample.metrics.size(); ++k)
      sample.metrics[k].value = next_value(model[s].values[k], sample.metrics[k].value, agent.random);
    points += sample.metrics.size();
  }
  return points;
}

// ---- one thread's agents over ZeroMQ ------------------------------------------------------------

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

// ---- one thread's agents as Graphite plaintext senders ------------------------------------------

int connect_tcp(const std::string& host_port) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos) usage_error("--plaintext wants HOST:PORT, not " + host_port);
  std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int error = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); error != 0)
    throw std::runtime_error("cannot resolve " + host_port + ": " + gai_strerror(error));
  std::string failure = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    failure = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  throw std::runtime_error("cannot connect to " + host_port + ": " + failure);
}

class PlaintextWorker {
 public:
  PlaintextWorker(const Settings& settings, const Timeline& timeline, const std::vector<SensorModel>& model,
                  std::vector<Agent>& agents)
      : settings_(settings), timeline_(timeline), model_(model), agents_(agents) {}

  Counters run() {
    for (auto& agent : agents_) agent.fd = connect_tcp(settings_.plaintext);
    std::size_t cursor = 0;
    std::uint64_t round = 0;
    for (;;) {
      auto now = Clock::now();
      if (now >= timeline_.window_end) break;
      if (settings_.interval > 0) {
        auto due = timeline_.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                         agents_[cursor].phase + static_cast<double>(round) * settings_.interval));
        if (due > now) {
          std::this_thread::sleep_for(std::min<Clock::duration>(due - now, std::chrono::milliseconds(50)));
          continue;
        }
        if (now - due > std::chrono::duration<double>(settings_.interval)) ++counters_.deferred;  // behind
      }
      send_batch(agents_[cursor]);
      if (++cursor == agents_.size()) cursor = 0, ++round;
    }
    for (auto& agent : agents_) {
      ::shutdown(agent.fd, SHUT_WR);
      ::close(agent.fd);
    }
    return counters_;
  }

 private:
  void send_batch(Agent& agent) {
    std::size_t points = advance(agent, model_);
    buffer_.clear();
    std::size_t path = 0;
    for (const Sample& sample : agent.samples) {
      // " <seconds>.<milliseconds>\n", once per sample
      char stamp[40];
      std::int64_t ms = sample.time_ns / 1000000;
      int stamp_size = std::snprintf(stamp, sizeof stamp, " %lld.%03lld\n", static_cast<long long>(ms / 1000),
                                     static_cast<long long>(ms % 1000));
      for (const auto& metric : sample.metrics) {
        buffer_ += agent.paths[path++];
        char number[32];
        auto result = std::to_chars(number, number + sizeof number, metric.value);
        buffer_.append(number, result.ptr);
        buffer_.append(stamp, stamp_size);
      }
    }
    const char* data = buffer_.data();
    std::size_t left = buffer_.size();
    while (left > 0) {
      ssize_t n = ::send(agent.fd, data, left, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error("sending to " + settings_.plaintext + " for " + agent.host + ": " + std::strerror(errno));
      }
      data += n;
      left -= static_cast<std::size_t>(n);
    }
    ++counters_.batches_sent;
    counters_.points_sent += points;
    counters_.batch_bytes += buffer_.size();
    if (timeline_.in_window(Clock::now())) counters_.window_points_sent += points;
  }

  const Settings& settings_;
  const Timeline& timeline_;
  const std::vector<SensorModel>& model_;
  std::vector<Agent>& agents_;
  Counters counters_;
  std::string buffer_;
};

double unix_seconds(Clock::time_point t) {
  auto offset = std::chrono::system_clock::now().time_since_epoch() - Clock::now().time_since_epoch();
  return std::chrono::duration<double>(t.time_since_epoch() + offset).count();
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings = parse_arguments(argc, argv);
  // Each agent holds a socket (and ZeroMQ a mailbox per socket): raise the descriptor limit.
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  std::uint64_t needed = 3ull * static_cast<std::uint64_t>(settings.agents) + 64;
  if (files.rlim_cur < needed)
    std::cerr << "master_load: warning: RLIMIT_NOFILE is " << files.rlim_cur << ", " << settings.agents
              << " agents need about " << needed << "\n";

  const auto model = model_with(settings.metrics);
  std::vector<Agent> agents(static_cast<std::size_t>(settings.agents));
  for (int i = 0; i < settings.agents; ++i) fill_agent(agents[i], i, settings, model);

  // Each thread owns a contiguous share of the agents (so each thread's phases are sorted).
  std::vector<std::vector<Agent>> shares(static_cast<std::size_t>(settings.threads));
  for (int i = 0; i < settings.agents; ++i)
    shares[static_cast<std::size_t>(i) * settings.threads / settings.agents].push_back(std::move(agents[i]));
  agents.clear();

  zmq::context_t context;
  context.set(zmq::ctxopt::io_threads, settings.io_threads);
  context.set(zmq::ctxopt::max_sockets, settings.agents + 64);

  Timeline timeline;
  timeline.start = Clock::now();
  auto after = [&](double seconds) {
    return timeline.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  timeline.window_start = after(settings.warmup);
  timeline.window_end = after(settings.warmup + settings.seconds);
  timeline.drain_end = after(settings.warmup + settings.seconds + settings.drain);

  std::vector<Counters> results(shares.size());
  std::vector<std::string> errors(shares.size());
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < shares.size(); ++t)
    threads.emplace_back([&, t] {
      try {
        if (settings.plaintext.empty())
          results[t] = ZmqWorker(settings, timeline, model, context, shares[t]).run();
        else
          results[t] = PlaintextWorker(settings, timeline, model, shares[t]).run();
      } catch (const std::exception& error) {
        errors[t] = error.what();
      }
    });
  for (auto& thread : threads) thread.join();
  auto finished = Clock::now();
  for (const auto& error : errors)
    if (!error.empty()) {
      std::cerr << "master_load: " << error << "\n";
      return 1;
    }
  Counters total;
  for (const auto& result : results) total.add(result);

  const bool plaintext = !settings.plaintext.empty();
  nlohmann::json summary;
  summary["mode"] = plaintext ? "plaintext" : "zmq";
  summary["peer"] = plaintext ? settings.plaintext : settings.endpoint;
  summary["connections"] = plaintext ? "one TCP connection per agent" : "one DEALER socket per agent";
  summary["agents"] = settings.agents;
  summary["metrics_per_agent"] = value_count(model);
  summary["samples_per_batch"] = model.size();
  summary["interval_s"] = settings.interval;  // 0: as fast as the window allows
  summary["window"] = settings.window;
  summary["offered_points_per_s"] =
      settings.interval > 0 ? nlohmann::json(settings.agents * static_cast<double>(value_count(model)) / settings.interval)
                            : nlohmann::json(nullptr);
  summary["aligned"] = settings.aligned;
  summary["threads"] = settings.threads;
  summary["warmup_s"] = settings.warmup;
  summary["seconds"] = settings.seconds;
  summary["window_start_unix"] = unix_seconds(timeline.window_start);
  summary["window_end_unix"] = unix_seconds(timeline.window_end);
  summary["finished_unix"] = unix_seconds(finished);
  summary["batches_sent"] = total.batches_sent;
  summary["points_sent"] = total.points_sent;
  summary["window_points_sent"] = total.window_points_sent;
  summary["points_per_s_sent"] = static_cast<double>(total.window_points_sent) / settings.seconds;
  summary["late_batches"] = total.deferred;  // due while the window was full (plaintext: sent > 1 interval late)
  summary["bytes"] = {{"hello_and_dictionary", total.hello_dictionary_bytes},
                      {"batches", total.batch_bytes},
                      {"resent", total.resent_bytes}};
  summary["batch_bytes_per_point"] =
      total.points_sent ? static_cast<double>(total.batch_bytes) / static_cast<double>(total.points_sent) : 0.0;
  if (!plaintext) {
    summary["batches_acked"] = total.batches_acked;
    summary["points_acked"] = total.points_acked;
    summary["window_points_acked"] = total.window_points_acked;
    summary["points_per_s_acked"] = static_cast<double>(total.window_points_acked) / settings.seconds;
    summary["batches_resent"] = total.batches_resent;
    summary["resyncs"] = total.resyncs;
    summary["unacked_at_end"] = total.unacked_at_end;
    summary["send_failures"] = total.send_failures;
    summary["bad_messages"] = total.bad_messages;
  }
  // The generator's own cost (every thread, ZeroMQ's included), for the share of the cores it took.
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  double cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  summary["cpu_seconds"] = cpu_seconds;
  summary["cpu_ns_per_point_sent"] =
      total.points_sent ? 1e9 * cpu_seconds / static_cast<double>(total.points_sent) : 0.0;
  summary["command"] = settings.command;
  std::cout << summary.dump() << std::endl;
  return 0;
}
