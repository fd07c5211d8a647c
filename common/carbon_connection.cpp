#include "carbon_connection.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "localhost_name.h"

namespace fructosa::graphite {
namespace {

std::string errno_text(int error) { return std::strerror(error); }

}  // namespace

CarbonConnection::CarbonConnection(std::string host, int port, double timeout)
    : host_(std::move(host)),
      port_(port),
      timeout_(timeout),
      peer_(fmt::format("{}:{}", host_, port_)) {}

CarbonConnection::~CarbonConnection() { close(); }

void CarbonConnection::open() {
  close();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  const std::string service = std::to_string(port_);
  if (int status = getaddrinfo_localhost_aware(host_.c_str(), service.c_str(), &hints, &addresses); status != 0) {
    std::string reason = status == EAI_SYSTEM ? errno_text(errno) : ::gai_strerror(status);
    throw std::runtime_error(fmt::format("cannot resolve {}: {}", host_, reason));
  }
  std::string failure = "no address";
  const int timeout_ms = static_cast<int>(timeout_ * 1000);
  for (addrinfo* address = addresses; address; address = address->ai_next) {
    int fd = ::socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                      address->ai_protocol);
    if (fd < 0) {
      failure = errno_text(errno);
      continue;
    }
    int error = 0;
    if (::connect(fd, address->ai_addr, address->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        pollfd pending{fd, POLLOUT, 0};
        int ready;
        do ready = ::poll(&pending, 1, timeout_ms);
        while (ready < 0 && errno == EINTR);
        socklen_t size = sizeof error;
        if (ready == 0)
          error = ETIMEDOUT;
        else if (ready < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0)
          error = errno;
      }
    }
    if (error == 0) {
      // Blocking from here on, each send bounded by the timeout.
      timeval limit{static_cast<time_t>(timeout_),
                    static_cast<suseconds_t>((timeout_ - std::floor(timeout_)) * 1e6)};
      if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 ||
          ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit) != 0)
        error = errno;
    }
    if (error == 0) {
      fd_ = fd;
      break;
    }
    failure = errno_text(error);
    ::close(fd);
  }
  ::freeaddrinfo(addresses);
  if (fd_ < 0)
    throw std::runtime_error(fmt::format("cannot connect to carbon at {}: {}", peer_, failure));
}

std::optional<std::string> CarbonConnection::send(std::string_view bytes) {
  if (fd_ < 0) return std::string("not connected");
  while (!bytes.empty()) {
    ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return fmt::format("no progress for {} s (carbon too slow or unreachable)", timeout_);
      return errno_text(errno);
    }
    bytes.remove_prefix(static_cast<std::size_t>(sent));
  }
  return std::nullopt;
}

CarbonConnection::PeerState CarbonConnection::peer_state() const {
  if (fd_ < 0) return PeerState::failed;
  pollfd state{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&state, 1, 0) <= 0 || state.revents == 0) return PeerState::open;
  if (state.revents & POLLERR) return PeerState::failed;  // reset
  char byte;
  ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return PeerState::closed_cleanly;
  // Bytes from carbon (it never sends them) or an error: in either case it is not the carbon
  // receiver we were talking to any more.
  return PeerState::failed;
}

void CarbonConnection::shutdown_write() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

void CarbonConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace fructosa::graphite
