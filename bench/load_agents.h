// master_load's agents: what each one is (its host, its samples, its connection's state) and
// what a run counts, shared by its two ways of sending (load_zmq.cpp: the real protocol, as
// lagent; load_plaintext.cpp: Graphite plaintext, as a node's own collector) and its main.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "codec.h"
#include "node_model.h"
#include "zmtp_dealer.h"

namespace fructosa::bench {

using Clock = std::chrono::steady_clock;

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
  std::string client = "libzmq";  // ZeroMQ mode: "libzmq" (DEALER sockets) or "zmtp" (zmtp_dealer.h)
  std::string host_prefix = "mload";
  std::string command;
};

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
  // ZeroMQ mode: a libzmq socket or a ZMTP connection (--client)
  std::unique_ptr<zmq::socket_t> socket;
  std::unique_ptr<ZmtpDealer> zmtp;
  bool connected = true;         // ZMTP: false once the connection broke
  bool waits_for_write = false;  // ZMTP: EPOLLOUT watched
  std::unique_ptr<AgentDictionary> dictionary;
  std::uint64_t next_sequence = 1;
  std::deque<InFlight> in_flight;
  int owed = 0;  // due batches waiting for the window
  bool queued = false;  // in the thread's ready list
  // The connection's descriptor: its own in plaintext and ZMTP modes, libzmq's ZMQ_FD else.
  int fd = -1;
  // plaintext mode
  std::vector<std::string> paths;  // "<host>.<Sensor>[.<key>] " per value, in batch order
};

// Agent `index` of the run: its host name, session, random walk, phase, and its samples with
// their first values (and, in plaintext mode, the Graphite path of each value).
void fill_agent(Agent& agent, int index, const Settings& settings, const std::vector<SensorModel>& model);
// New values and the time of this batch, in place; returns the batch's points.
std::size_t advance(Agent& agent, const std::vector<SensorModel>& model);

// One thread's share of the agents, sending until the timeline's window ends (over ZeroMQ, then
// waiting for the acknowledgements until drain_end); returns what the thread counted.
Counters run_zmq_agents(const Settings& settings, const Timeline& timeline, const std::vector<SensorModel>& model,
                        zmq::context_t& context, std::vector<Agent>& agents);
Counters run_plaintext_agents(const Settings& settings, const Timeline& timeline,
                              const std::vector<SensorModel>& model, std::vector<Agent>& agents);

}  // namespace fructosa::bench
