#include "zmtp_dealer.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace fructosa::bench {
namespace {

constexpr unsigned char kMore = 0x01, kLong = 0x02, kCommand = 0x04;
constexpr std::size_t kGreetingBytes = 64;

std::string error_text() { return std::strerror(errno); }

// Signature, version 3.1, mechanism NULL, as-server 0, filler.
std::string greeting() {
  std::string bytes(kGreetingBytes, '\0');
  bytes[0] = '\xff';
  bytes[9] = '\x7f';
  bytes[10] = 3;
  bytes[11] = 1;
  std::memcpy(&bytes[12], "NULL", 4);
  return bytes;
}

void put_property(std::string& out, std::string_view name, std::string_view value) {
  out.push_back(static_cast<char>(name.size()));
  out.append(name);
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value.size() >> shift));
  out.append(value);
}

// The frame header of a body of `size` bytes: short (1-byte size) or long (8 bytes, big-endian).
std::size_t frame_header(unsigned char flags, std::size_t size, char* out) {
  if (size <= 255) {
    out[0] = static_cast<char>(flags);
    out[1] = static_cast<char>(size);
    return 2;
  }
  out[0] = static_cast<char>(flags | kLong);
  for (int i = 0; i < 8; ++i) out[1 + i] = static_cast<char>(static_cast<std::uint64_t>(size) >> (8 * (7 - i)));
  return 9;
}

int connect_to(const std::string& endpoint) {
  constexpr std::string_view kScheme = "tcp://";
  auto colon = endpoint.rfind(':');
  if (!endpoint.starts_with(kScheme) || colon == std::string::npos || colon < kScheme.size())
    throw std::runtime_error("ZMTP: " + endpoint + " is not tcp://HOST:PORT");
  std::string host = endpoint.substr(kScheme.size(), colon - kScheme.size());
  std::string port = endpoint.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
    throw std::runtime_error("ZMTP: " + endpoint + ": " + ::gai_strerror(rc));
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* at = found; at && fd < 0; at = at->ai_next) {
    fd = ::socket(at->ai_family, at->ai_socktype | SOCK_CLOEXEC, at->ai_protocol);
    if (fd < 0) {
      why = error_text();
    } else if (::connect(fd, at->ai_addr, at->ai_addrlen) != 0) {
      why = error_text();
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) throw std::runtime_error("ZMTP: cannot connect to " + endpoint + ": " + why);
  int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);  // as libzmq: a batch leaves at once
  return fd;
}

}  // namespace

ZmtpDealer::ZmtpDealer(const std::string& endpoint) : endpoint_(endpoint), fd_(connect_to(endpoint)) {
  std::string our_ready = "\x05READY";
  put_property(our_ready, "Socket-Type", "DEALER");
  put_property(our_ready, "Identity", "");
  std::string opening = greeting();
  char header[9];
  opening.append(header, frame_header(kCommand, our_ready.size(), header));
  opening += our_ready;
  // Blocking until it is out (a few dozen bytes into an empty socket), then non-blocking.
  for (std::size_t done = 0; done < opening.size();) {
    ssize_t n = ::send(fd_, opening.data() + done, opening.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno != EINTR) {
      std::string why = error_text();
      ::close(fd_);
      throw std::runtime_error("ZMTP: " + endpoint + ": greeting: " + why);
    }
    if (n > 0) done += static_cast<std::size_t>(n);
  }
  // As libzmq's DEALER, no message before the peer's READY: libzmq's server stops reading a
  // connection whose first message came in the same read as the READY (seen with lmaster: the
  // connection's later batches were never read).
  bool ready = false;
  while (!ready) {
    pollfd readable{fd_, POLLIN, 0};
    if (::poll(&readable, 1, 10000) != 1) {
      ::close(fd_);
      throw std::runtime_error("ZMTP: " + endpoint + ": no greeting and READY within 10 s");
    }
    char buffer[512];
    ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n <= 0) {
      std::string why = n == 0 ? "the peer closed the connection" : error_text();
      ::close(fd_);
      throw std::runtime_error("ZMTP: " + endpoint + ": handshake: " + why);
    }
    in_.append(buffer, static_cast<std::size_t>(n));
    parsed_ = parse([](std::string_view) {}, &ready);
  }
  int flags = ::fcntl(fd_, F_GETFL);
  ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
}

ZmtpDealer::~ZmtpDealer() {
  if (fd_ >= 0) ::close(fd_);
}

void ZmtpDealer::send(std::string_view message) {
  char header[9];
  pending_.append(header, frame_header(0, message.size(), header));
  pending_.append(message);
}

void ZmtpDealer::flush() {
  while (wants_write()) {
    ssize_t n = ::send(fd_, pending_.data() + sent_, pending_.size() - sent_, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      throw std::runtime_error("ZMTP: " + endpoint_ + ": send: " + error_text());
    }
    sent_ += static_cast<std::size_t>(n);
  }
  pending_.clear();
  sent_ = 0;
}

bool ZmtpDealer::receive(const std::function<void(std::string_view)>& each) {
  char buffer[65536];
  ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
  if (n == 0) return false;
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
    throw std::runtime_error("ZMTP: " + endpoint_ + ": recv: " + error_text());
  }
  if (parsed_ == in_.size()) {
    in_.clear();
    parsed_ = 0;
  }
  in_.append(buffer, static_cast<std::size_t>(n));
  parsed_ = parse(each);
  if (parsed_ > in_.size() / 2) {  // keep the unparsed tail at the front
    in_.erase(0, parsed_);
    parsed_ = 0;
  }
  return true;
}

// Calls `each` for every whole message in in_ from parsed_ on; returns where parsing stopped.
std::size_t ZmtpDealer::parse(const std::function<void(std::string_view)>& each, bool* ready) {
  std::size_t at = parsed_;
  const auto* bytes = reinterpret_cast<const unsigned char*>(in_.data());
  if (!greeted_) {
    if (in_.size() - at < kGreetingBytes) return at;
    if (bytes[at] != 0xff || bytes[at + 9] != 0x7f || bytes[at + 10] < 3 ||
        std::memcmp(bytes + at + 12, "NULL\0", 5) != 0)
      throw std::runtime_error("ZMTP: " + endpoint_ + ": the peer's greeting is not ZMTP 3 with the NULL mechanism");
    greeted_ = true;
    at += kGreetingBytes;
  }
  for (;;) {
    const std::size_t left = in_.size() - at;
    if (left < 2) return at;
    const unsigned char flags = bytes[at];
    if (flags & ~(kMore | kLong | kCommand))
      throw std::runtime_error("ZMTP: " + endpoint_ + ": reserved frame flags " + std::to_string(flags));
    std::size_t header = 2;
    std::uint64_t size = bytes[at + 1];
    if (flags & kLong) {
      if (left < 9) return at;
      header = 9;
      size = 0;
      for (int i = 0; i < 8; ++i) size = size << 8 | bytes[at + 1 + i];
    }
    if (left - header < size) return at;
    std::string_view body(in_.data() + at + header, static_cast<std::size_t>(size));
    at += header + static_cast<std::size_t>(size);
    if (flags & kCommand) {
      if (body.starts_with("\x05" "ERROR"))
        throw std::runtime_error("ZMTP: " + endpoint_ + ": the peer refused: " + std::string(body.substr(7)));
      if (ready && body.starts_with("\x05" "READY")) {
        *ready = true;
        return at;  // messages may follow: the caller reads them later
      }
      continue;  // READY (its properties are not needed), PING, ...
    }
    if (flags & kMore) throw std::runtime_error("ZMTP: " + endpoint_ + ": a multi-frame message (lmaster sends one frame)");
    each(body);
  }
}

}  // namespace fructosa::bench
