// Where lagent's batches go: to lmaster over ZeroMQ (lmaster_link.h), or straight to carbon
// when lagent.conf has [Graphite] and no [lmaster] (carbon_link.h). The Sender (sender.h) owns
// what both share: batching, the on-disk spool and the thread. A link owns the connection and
// says when a batch is *taken*, i.e. may leave the spool (lmaster: acknowledged; carbon: see
// carbon_link.h), and when what it was sent must go again.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "metric.h"

namespace fructosa::agent {

using LinkClock = std::chrono::steady_clock;

// A configuration's seconds (retry intervals, timeouts) on the links' clock.
inline LinkClock::duration link_seconds(double value) {
  return std::chrono::duration_cast<LinkClock::duration>(std::chrono::duration<double>(value));
}

// The sender as its link sees it. Called on the sender's thread only.
class LinkEvents {
 public:
  // The destination has taken every batch up to `sequence`: they leave the spool.
  virtual void taken(std::uint64_t sequence) = 0;
  // The destination has every batch up to `sequence` but will not say so for a while (carbon
  // never does): like taken ones they need no flush to disk of their own; they stay in the
  // spool until taken().
  virtual void handed_over(std::uint64_t sequence) = 0;
  // The destination may have lost what it was sent and not taken: every batch still in the
  // spool goes again, oldest first, as fast as can_send() allows.
  virtual void send_again() = 0;
  // The destination answered, for the first time since the start or a failover (readiness).
  virtual void answered(const std::string& destination) = 0;
  virtual void count_resync() = 0;    // the destination asked for (or needed) everything again
  virtual void count_failover() = 0;  // the link moved to another destination
  // The last sequence handed to the link (heartbeats carry it), the spool's session, and the
  // batches it keeps.
  virtual std::uint64_t last_handed() const = 0;
  virtual std::uint64_t session() const = 0;
  virtual std::uint64_t batches_kept() const = 0;

 protected:
  ~LinkEvents() = default;
};

class Link {
 public:
  virtual ~Link() = default;
  // "lmaster at tcp://a:7888" or "carbon at localhost:2004", for log lines and systemd's status.
  virtual std::string destination() const = 0;
  // The spool is open: greet the destination. From now on the link may call `events`.
  virtual void start(LinkEvents& events) = 0;
  // Whether send() may be called now (a window is open, the connection can take more).
  virtual bool can_send() const = 0;
  // Hands over spooled batch `sequence`. Sequences only grow, except after send_again(). The
  // samples' host may be empty (the spool does not keep it); the link may change them.
  virtual void send(std::uint64_t sequence, std::vector<Sample>& samples) = 0;
  // Adds what the sender's thread must poll for the link to work: always what tells of trouble
  // (a refused handshake, carbon closing), the connection's answers only while
  // `answers_awaited` or the link itself needs them now (the first answer, a queue to flush).
  // Acks the sender does not await are read at the next service(). True when service() has
  // something to read already.
  virtual bool watch(std::vector<pollfd>& fds, bool answers_awaited) = 0;
  // Does what is due (reads answers, reconnects, heartbeats); called whenever the sender's
  // thread wakes, and before a round's batch is sent.
  virtual void service() = 0;
  // When service() must run again at the latest.
  virtual LinkClock::time_point next_due() const = 0;
  // The sender is stopping and has handed over every batch it holds: do what lets the
  // destination take them before the linger ends. Called again on every round until then.
  virtual void finish() {}
};

}  // namespace fructosa::agent
