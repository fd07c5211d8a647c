// What lagent does with its readings: a thread that batches samples, keeps every batch in the
// on-disk spool (agent_spool.h) until its destination has taken it, and hands the batches to a
// Link (link.h): lmaster over ZeroMQ (lmaster_link.h), or carbon directly (carbon_link.h).
// Batches the destination has not taken go again, oldest first, when the link says so (lmaster
// asked for a resync, a failover, carbon came back) and when lagent starts again. Memory stays
// bounded: the link takes batches only while its window is open; the others wait on disk and
// are read back when it opens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "link.h"
#include "metric.h"

namespace fructosa::agent {

struct SenderSettings {
  std::string spool_dir;  // required: where batches wait until they are taken
  std::uint64_t spool_max_bytes = 256ull << 20;
  double batch_delay = 0.05;  // without send_queued(), a batch leaves this long after its first sample (sender awake)
  std::size_t max_batch_samples = 1000;
  // deliver(): each round's samples are spooled at once, as a batch of their own, and only their
  // sending waits: the batches of the rounds that wait leave together, back to back, when the
  // oldest would otherwise wait longer than this (or at a stop). A lagent killed meanwhile sends
  // them after its restart, like any unsent batch. 0: each round is sent at once.
  double batch_interval = 0;
  // The destination answered for the first time since the sender started (or failed over to
  // it): readiness for systemd. Called on the sender's thread with Link::destination(): hand it
  // over only.
  std::function<void(const std::string& destination)> on_connected;
};

class Sender {
 public:
  // Opens the spool (throws SpoolError when it cannot be used), unless a sender of this process
  // still holds it (a reload): then the thread opens it once that one has stopped.
  Sender(SenderSettings settings, std::unique_ptr<Link> link);
  ~Sender();  // stops without waiting for the destination
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // Thread-safe; never block on the network. queue() adds samples to the batch being made
  // without waking the sender (but for a full batch); send_queued() sends that batch now: the
  // agent calls it once the readings of an instant are in. Queued samples nobody sends leave
  // with the next batch, or batch_delay after the sender wakes for anything else.
  void queue(std::vector<Sample>&& samples);
  void send_queued();
  // A round's samples, spooled and sent from the calling thread now, after the acks that came
  // since the last round are read (round_runner.h): no other thread of lagent's is woken. When
  // the sender is busy (its thread holds the spool: a sync, a resend) or stopping, they are
  // queued and spooled and sent by its thread. `next_round`: when the next call is due, which
  // lets a spool sync wait for the acks that call reads, and batch_interval decide whether the
  // round's batch (spooled now) waits for it to be sent.
  void deliver(std::vector<Sample>&& samples, LinkClock::time_point next_round);

  // Spools what is queued, sends it and waits up to `linger_seconds` for the destination to
  // take every batch, then stops the thread. Returns the number of batches not taken (they
  // stay in the spool for the next start).
  // (Its counters are published as lagent's own metrics: sensors/agent_stats.h.)
  std::size_t stop(double linger_seconds);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fructosa::agent
