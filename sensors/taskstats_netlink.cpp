#include "taskstats_netlink.h"

#include <errno.h>
#include <fmt/format.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <string_view>

#include "sensor.h"

namespace fructosa::sensors {
namespace {

constexpr std::size_t kHeaders = NLMSG_HDRLEN + GENL_HDRLEN;

std::string errno_text(int error) { return std::strerror(error); }

// Calls `visit(type, payload, length)` for each attribute in [data, data + size).
template <class Visit>
void for_each_attribute(const char* data, std::size_t size, Visit&& visit) {
  while (size >= NLA_HDRLEN) {
    nlattr attribute;
    std::memcpy(&attribute, data, sizeof attribute);
    if (attribute.nla_len < NLA_HDRLEN || attribute.nla_len > size) return;
    visit(attribute.nla_type & NLA_TYPE_MASK, data + NLA_HDRLEN, attribute.nla_len - NLA_HDRLEN);
    std::size_t step = NLA_ALIGN(attribute.nla_len);
    if (step >= size) return;
    data += step;
    size -= step;
  }
}

// Appends one attribute to a request being built in `buffer` (already sized to its end).
void append_attribute(std::vector<char>& buffer, std::uint16_t type, const void* payload, std::size_t size) {
  std::size_t at = buffer.size();
  buffer.resize(at + NLA_ALIGN(NLA_HDRLEN + size), 0);
  nlattr attribute{static_cast<std::uint16_t>(NLA_HDRLEN + size), type};
  std::memcpy(buffer.data() + at, &attribute, sizeof attribute);
  std::memcpy(buffer.data() + at + NLA_HDRLEN, payload, size);
}

// Starts a request: netlink and generic-netlink headers; lengths are filled in by finish().
void start_request(std::vector<char>& buffer, std::uint16_t type, std::uint8_t command, std::uint8_t version) {
  buffer.assign(kHeaders, 0);
  nlmsghdr header{};
  header.nlmsg_type = type;
  header.nlmsg_flags = NLM_F_REQUEST;
  std::memcpy(buffer.data(), &header, sizeof header);
  genlmsghdr generic{};
  generic.cmd = command;
  generic.version = version;
  std::memcpy(buffer.data() + NLMSG_HDRLEN, &generic, sizeof generic);
}

}  // namespace

TaskstatsSocket::TaskstatsSocket() : reply_(64 * 1024) {
  fd_ = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
  if (fd_ < 0)
    throw SensorUnavailable("socket(AF_NETLINK, NETLINK_GENERIC): " + errno_text(errno));
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
    int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw SensorUnavailable("bind(AF_NETLINK, NETLINK_GENERIC): " + errno_text(error));
  }
  // A reply always comes at once; never let a lost one hold the sensor's thread.
  timeval timeout{2, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);

  start_request(request_, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1);
  append_attribute(request_, CTRL_ATTR_FAMILY_NAME, TASKSTATS_GENL_NAME, sizeof TASKSTATS_GENL_NAME);
  int result = 0;
  try {
    result = transact(request_.size(), "CTRL_CMD_GETFAMILY " TASKSTATS_GENL_NAME);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
  if (result == 0) {
    const char* message = reply_.data() + reply_offset_;
    for_each_attribute(message + kHeaders, reply_length_ - kHeaders,
                       [&](int type, const char* payload, std::size_t size) {
                         if (type == CTRL_ATTR_FAMILY_ID && size >= sizeof(std::uint16_t))
                           std::memcpy(&family_, payload, sizeof family_);
                       });
  }
  if (result != 0 || family_ == 0) {
    ::close(fd_);
    fd_ = -1;
    if (result == -ENOENT)
      throw SensorUnavailable(
          "generic netlink family " TASKSTATS_GENL_NAME
          " not found (kernel without CONFIG_TASKSTATS, or not the initial network namespace): " +
          errno_text(ENOENT));
    throw SensorUnavailable("CTRL_CMD_GETFAMILY " TASKSTATS_GENL_NAME ": " +
                            (result ? errno_text(-result) : std::string("no family id in the reply")));
  }
}

TaskstatsSocket::~TaskstatsSocket() {
  if (fd_ >= 0) ::close(fd_);
}

int TaskstatsSocket::transact(std::size_t length, const char* what) {
  std::uint32_t sequence = ++sequence_;
  nlmsghdr header;
  std::memcpy(&header, request_.data(), sizeof header);
  header.nlmsg_len = static_cast<std::uint32_t>(length);
  header.nlmsg_seq = sequence;
  std::memcpy(request_.data(), &header, sizeof header);

  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  ssize_t sent;
  do {
    sent = ::sendto(fd_, request_.data(), length, 0, reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) throw SensorUnavailable(fmt::format("{}: sendto(netlink): {}", what, errno_text(errno)));

  for (;;) {
    ssize_t received = ::recv(fd_, reply_.data(), reply_.size(), 0);
    if (received < 0) {
      if (errno == EINTR) continue;
      int error = errno;
      if (error == EAGAIN || error == EWOULDBLOCK)
        throw SensorUnavailable(fmt::format("{}: no netlink reply within 2 s", what));
      if (error == ENOBUFS) continue;  // the receive queue overflowed: ours is still to come or lost
      throw SensorUnavailable(fmt::format("{}: recv(netlink): {}", what, errno_text(error)));
    }
    auto left = static_cast<std::size_t>(received);
    std::size_t offset = 0;
    while (left >= NLMSG_HDRLEN) {
      nlmsghdr reply;
      std::memcpy(&reply, reply_.data() + offset, sizeof reply);
      if (reply.nlmsg_len < NLMSG_HDRLEN || reply.nlmsg_len > left) break;
      if (reply.nlmsg_seq == sequence) {
        if (reply.nlmsg_type == NLMSG_ERROR) {
          nlmsgerr error{};
          if (reply.nlmsg_len >= NLMSG_HDRLEN + sizeof error)
            std::memcpy(&error, reply_.data() + offset + NLMSG_HDRLEN, sizeof error);
          else
            error.error = -EPROTO;
          if (error.error == 0) {  // an acknowledgement: the data (if any) came before it
            offset += NLMSG_ALIGN(reply.nlmsg_len);
            left -= std::min(left, static_cast<std::size_t>(NLMSG_ALIGN(reply.nlmsg_len)));
            continue;
          }
          return error.error;
        }
        if (reply.nlmsg_type == NLMSG_NOOP || reply.nlmsg_type == NLMSG_DONE) {
          offset += NLMSG_ALIGN(reply.nlmsg_len);
          left -= std::min(left, static_cast<std::size_t>(NLMSG_ALIGN(reply.nlmsg_len)));
          continue;
        }
        if (reply.nlmsg_len < kHeaders) return -EPROTO;
        reply_offset_ = offset;
        reply_length_ = reply.nlmsg_len;
        return 0;
      }
      // A late reply to an earlier request (one that timed out): skip it.
      std::size_t step = NLMSG_ALIGN(reply.nlmsg_len);
      if (step >= left) break;
      offset += step;
      left -= step;
    }
  }
}

TaskstatsSocket::Result TaskstatsSocket::query(int tid, taskstats& stats) {
  start_request(request_, family_, TASKSTATS_CMD_GET, TASKSTATS_GENL_VERSION);
  auto pid = static_cast<std::uint32_t>(tid);
  append_attribute(request_, TASKSTATS_CMD_ATTR_PID, &pid, sizeof pid);
  int result = transact(request_.size(), "TASKSTATS_CMD_GET");
  if (result == -ESRCH || result == -EINVAL) return Result::gone;
  if (result == -EPERM || result == -EACCES)
    throw SensorUnavailable(fmt::format(
        "TASKSTATS_CMD_GET (generic netlink " TASKSTATS_GENL_NAME ") needs CAP_NET_ADMIN: {}",
        errno_text(-result)));
  if (result != 0)
    throw SensorUnavailable(fmt::format("TASKSTATS_CMD_GET for task {}: {}", tid, errno_text(-result)));

  std::memset(&stats, 0, sizeof stats);
  bool found = false;
  const char* message = reply_.data() + reply_offset_;
  auto take_stats = [&](int type, const char* payload, std::size_t size) {
    if (type != TASKSTATS_TYPE_STATS || found) return;
    payload_size_ = std::min(size, sizeof stats);
    std::memcpy(&stats, payload, payload_size_);
    found = true;
  };
  for_each_attribute(message + kHeaders, reply_length_ - kHeaders,
                     [&](int type, const char* payload, std::size_t size) {
                       if (type == TASKSTATS_TYPE_AGGR_PID || type == TASKSTATS_TYPE_AGGR_TGID)
                         for_each_attribute(payload, size, take_stats);
                       else
                         take_stats(type, payload, size);
                     });
  if (!found)
    throw SensorUnavailable(fmt::format("TASKSTATS_CMD_GET for task {}: no TASKSTATS_TYPE_STATS in the reply", tid));
  return Result::ok;
}

}  // namespace fructosa::sensors
