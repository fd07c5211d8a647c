// The agent's link to lmaster: a thread that owns the ZeroMQ DEALER socket, batches samples,
// keeps every batch until the master acknowledges it, and sends them all again when the
// master asks for a resync (it restarted, or the connection was re-established).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "metric.h"

namespace fructosa::agent {

struct SenderSettings {
  std::string endpoint;  // tcp://host:port
  std::string host;      // the name this agent reports as
  double heartbeat_interval = 5.0;
  std::size_t max_unacked_batches = 10000;
  double batch_delay = 0.05;          // seconds a sample may wait for others to join its batch
  std::size_t max_batch_samples = 1000;
};

class Sender {
 public:
  explicit Sender(SenderSettings settings);
  ~Sender();  // stops without waiting for acknowledgements
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // Thread-safe; never blocks on the network.
  void submit(std::vector<Sample>&& samples);

  // Sends what is queued and waits up to `linger_seconds` for the master to acknowledge every
  // batch, then stops the thread. Returns the number of batches left unacknowledged.
  // (Its counters are published as lagent's own metrics: sensors/agent_stats.h.)
  std::size_t stop(double linger_seconds);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fructosa::agent
