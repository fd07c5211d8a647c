// The agent's link to lmaster: a thread that owns the ZeroMQ DEALER socket, batches samples,
// keeps every batch in the on-disk spool (agent_spool.h) until the master acknowledges it, and
// sends the unacknowledged ones again, oldest first, when the master asks for a resync (it
// restarted, or the connection was re-established) and when lagent starts again. Memory stays
// bounded: at most max_unacked_batches (and kMaxInFlightBytes) batches are in flight; the
// others wait on disk and are read back when the window opens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "metric.h"

namespace fructosa::agent {

struct SenderSettings {
  // tcp://host:port of each lmaster, in order: the agent sends to one and moves to the next
  // when the one it sends to has said nothing (no ack) for `failover_after` seconds.
  std::vector<std::string> endpoints;
  double failover_after = 15.0;
  std::string host;      // the name this agent reports as
  double heartbeat_interval = 5.0;
  std::size_t max_unacked_batches = 1000;  // sent, not yet acknowledged; the rest wait in the spool
  std::string spool_dir;                    // required: where unacknowledged batches are kept
  std::uint64_t spool_max_bytes = 256ull << 20;
  double batch_delay = 0.05;  // without send_queued(), a batch leaves this long after its first sample (sender awake)
  std::size_t max_batch_samples = 1000;
  // CURVE (docs/security.md), Z85 text: with a server key the link is encrypted and this
  // agent authenticates with its own key pair; empty: plain ZMTP.
  std::string curve_server_key;
  std::string curve_public_key;
  std::string curve_secret_key;
  // lmaster asked to read `sensor` every `interval` s for `duration` s (`lmaster ctl`). Called on
  // the sender's thread: it must only hand the request over.
  std::function<void(const std::string& sensor, double interval, double duration)> on_control;
  // The first message from an lmaster since the sender started or failed over to it (readiness
  // for systemd). Called on the sender's thread with that master's endpoint: hand it over only.
  std::function<void(const std::string& endpoint)> on_connected;
};

class Sender {
 public:
  // Opens the spool (throws SpoolError when it cannot be used), unless a sender of this process
  // still holds it (a reload): then the thread opens it once that one has stopped.
  explicit Sender(SenderSettings settings);
  ~Sender();  // stops without waiting for acknowledgements
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // Thread-safe; never block on the network. queue() adds samples to the batch being made
  // without waking the sender (but for a full batch); send_queued() sends that batch now: the
  // agent calls it once the readings of an instant are in. Queued samples nobody sends leave
  // with the next batch, or batch_delay after the sender wakes for anything else.
  void queue(std::vector<Sample>&& samples);
  void send_queued();

  // Spools what is queued, sends it and waits up to `linger_seconds` for the master to
  // acknowledge every batch, then stops the thread. Returns the number of batches left
  // unacknowledged (they stay in the spool for the next start).
  // (Its counters are published as lagent's own metrics: sensors/agent_stats.h.)
  std::size_t stop(double linger_seconds);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fructosa::agent
