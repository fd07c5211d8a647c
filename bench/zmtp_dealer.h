// A ZeroMQ DEALER's end of a ZMTP 3.1 connection with the NULL mechanism, spoken on a plain TCP
// socket (ZMTP, rfc.zeromq.org/spec/37: the greeting, a READY command naming the socket type,
// then frames). master_load's agents use it (--client zmtp) because the generator shares the
// machine with the lmaster it measures: libzmq hands every message to its I/O thread and back
// (eventfd, poll, epoll_ctl), about 7 system calls per batch in the sending thread and 4 in the
// I/O thread over a thousand sockets, where this writes a batch with one call and reads every
// waiting acknowledgement with one. lmaster sees the same bytes either way.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace fructosa::bench {

class ZmtpDealer {
 public:
  // Connects to `endpoint` ("tcp://HOST:PORT"), sends the greeting and READY and waits for the
  // peer's (at most 10 s); the socket is non-blocking from then on. Throws std::runtime_error
  // naming the endpoint.
  explicit ZmtpDealer(const std::string& endpoint);
  ~ZmtpDealer();
  ZmtpDealer(const ZmtpDealer&) = delete;
  ZmtpDealer& operator=(const ZmtpDealer&) = delete;

  int fd() const { return fd_; }
  // Queues `message` as one frame; flush() writes what is queued, in one call where the socket
  // takes it all (as libzmq's I/O thread writes the messages queued meanwhile together). What
  // it does not take waits: flush() again once it is writable, while wants_write().
  void send(std::string_view message);
  void flush();
  bool wants_write() const { return sent_ < pending_.size(); }
  // Reads what the socket holds (one read; call again while it is readable) and calls `each`
  // with every whole message. False once the peer has closed the connection. Throws
  // std::runtime_error on a stream that is not ZMTP 3 or on a multi-frame message.
  bool receive(const std::function<void(std::string_view message)>& each);

 private:
  void write_out(const char* bytes, std::size_t size);
  // Calls `each` for every whole message from parsed_ on; returns where it stopped: at the end
  // of what is whole, or, with `ready`, just after the peer's READY (*ready then true).
  std::size_t parse(const std::function<void(std::string_view)>& each, bool* ready = nullptr);

  std::string endpoint_;
  int fd_ = -1;
  bool greeted_ = false;  // the peer's 64-byte greeting was read
  std::string in_;        // bytes read, not parsed yet from `parsed_` on
  std::size_t parsed_ = 0;
  std::string pending_;   // bytes the socket did not take yet, from `sent_` on
  std::size_t sent_ = 0;
};

}  // namespace fructosa::bench
