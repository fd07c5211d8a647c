// One TCP connection to carbon's pickle or line receiver: connect and send, each bounded by a
// timeout, and notice that carbon went away. Carbon never answers on these ports, so what a
// sender knows is only that bytes were written into the connection; what to resend after a
// loss is the caller's business (lmaster's output keeps a replay window in memory, lagent its
// spool). Part of fructosa_carbon (carbon_encoder.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fructosa::graphite {

class CarbonConnection {
 public:
  // `timeout`: seconds a connect may take, and a send may go without progress.
  CarbonConnection(std::string host, int port, double timeout);
  ~CarbonConnection();
  CarbonConnection(const CarbonConnection&) = delete;
  CarbonConnection& operator=(const CarbonConnection&) = delete;

  // Connects (blocking sends from then on). Throws std::runtime_error naming host, port and why.
  void open();
  bool is_open() const { return fd_ >= 0; }
  // The socket, for poll(2) (-1 when closed): readable means carbon closed or reset it.
  int fd() const { return fd_; }
  // Writes all of `bytes`; the reason when it could not (the connection is then unusable).
  std::optional<std::string> send(std::string_view bytes);

  enum class PeerState { open, closed_cleanly, failed };
  // Carbon never sends on its receiver ports: a readable socket means it closed the connection
  // (closed_cleanly: an orderly EOF, so it read everything sent before it closed) or it was
  // reset (failed). Does not wait.
  PeerState peer_state() const;
  bool peer_closed() const { return peer_state() != PeerState::open; }

  // Ends our side (after the last send): carbon reads up to the end, then closes its side,
  // which peer_state() reports as closed_cleanly.
  void shutdown_write();
  void close();

  const std::string& peer() const { return peer_; }  // "host:port", for log lines

 private:
  std::string host_;
  int port_;
  double timeout_;
  std::string peer_;
  int fd_ = -1;
};

}  // namespace fructosa::graphite
