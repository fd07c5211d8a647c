// Pairs the CURVE handshake failures a ZeroMQ socket monitor reports with the peers they came
// from (zap_handler.cpp). libzmq 4.3's failure events carry an error code but not the socket;
// the connection's DISCONNECTED, which follows, carries the socket, whose peer address was read
// at ACCEPTED. With several I/O threads the events of concurrent handshakes interleave (an AUTH
// refusal can land between another peer's protocol failure and its disconnect), so failures
// wait in order of arrival, each for the next disconnect: one slot lost the earlier one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

namespace fructosa::master {

class HandshakeFailures {
 public:
  // Failures kept waiting for a disconnect at most (a monitor that lost its DISCONNECTED
  // events must not grow this without end).
  static constexpr std::size_t kMaxPending = 64;

  struct Failure {
    std::uint16_t event;  // ZMQ_EVENT_HANDSHAKE_FAILED_*
    std::uint32_t value;  // its error or status code
    std::string peer;     // "ip:port", or a description when it could not be read
  };

  // ACCEPTED: `peer` is the connection's address, or nothing when it had gone already.
  void accepted(int fd, std::optional<std::string> peer) {
    if (peer)
      peers_[fd] = std::move(*peer);
    else
      peers_.erase(fd);
  }

  void failed(std::uint16_t event, std::uint32_t value) {
    if (pending_.size() < kMaxPending) pending_.push_back({event, value});
  }

  // DISCONNECTED: the oldest failure waiting, now with its peer; nothing for a connection
  // that ended without one.
  std::optional<Failure> disconnected(int fd) {
    std::string peer = "an address lmaster could not read (the connection closed at once)";
    if (auto it = peers_.find(fd); it != peers_.end()) {
      peer = std::move(it->second);
      peers_.erase(it);
    }
    if (pending_.empty()) return std::nullopt;
    auto [event, value] = pending_.front();
    pending_.pop_front();
    return Failure{event, value, std::move(peer)};
  }

  std::size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    std::uint16_t event;
    std::uint32_t value;
  };
  std::map<int, std::string> peers_;
  std::deque<Pending> pending_;
};

}  // namespace fructosa::master
