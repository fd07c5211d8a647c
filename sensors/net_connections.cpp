// NetConnections: how many sockets psutil.net_connections(kind) lists on Linux, per protocol
// and per TCP state: the sockets of /proc/net/{tcp,tcp6,udp,udp6,unix}.
//
// One connection per socket listed in those files (netstat -an). psutil builds a set of
// (fd, family, type, laddr, raddr, status, pid) tuples instead, with fd and pid found by
// scanning every /proc/PID/fd, which costs milliseconds and depends on privileges: without them,
// sockets of other users that look alike (e.g. unnamed UNIX sockets) merge into one entry, and as
// root a UNIX socket shared by several descriptors counts once per descriptor. The count here
// is what psutil reports for inet sockets when it may see every process, without that scan.
//
// Cost: the kernel generates /proc/net/tcp and tcp6 by walking every bucket of the TCP
// established hash, whatever the number of sockets: about 1.7 ms of CPU per file on a VM with
// 262144 buckets (24 GiB), more on big nodes. psutil pays it twice per file. So on the live
// system (roots.proc is /proc) the sensor asks the kernel over NETLINK_SOCK_DIAG instead (as
// `ss` does): the same hash tables, walked by the same rules and filtered by the same network
// namespace, so the same sockets, but the walk of those 262144 buckets costs ~170 us.
//   - TCP: one dump per family (SOCK_DIAG_BY_FAMILY, inet_diag_req_v2), or, when the kind wants
//     both families, a single legacy TCPDIAG_GETSOCK dump, which the kernel serves for
//     AF_UNSPEC (both families in one walk of the hash: half the cost). States 1..12 only:
//     TCP_BOUND_INACTIVE (13, kernel 6.5+) would add sockets that are bound but neither
//     listening nor connected, which /proc/net/tcp does not list (and walk the bind hash too).
//     Request sockets (TCP_NEW_SYN_RECV) come back as SYN_RECV and TIME_WAIT sockets with their
//     substate, as /proc/net/tcp prints them.
//   - UDP: udp_diag walks the UDP hash, as /proc/net/udp does: every bound UDP socket.
//   - UNIX: unix_diag walks the namespace's UNIX socket table, as /proc/net/unix does.
// A table whose netlink request is refused (no inet_diag/udp_diag/unix_diag module: ENOENT,
// EOPNOTSUPP; denied: EPERM, EACCES; EINVAL) is read from /proc/net from then on; other
// failures reopen the socket at the next reading and use /proc/net for this one. The fixture
// trees of the tests (roots.proc elsewhere) are always read as files.
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "procfs.h"  // Lines, next_field
#include "sensor.h"

namespace fructosa::sensors::net_connections_file {
namespace {

// psutil's Connections.tmap kinds.
const OptionTable kOptions{
    {.name = "kind",
     .type = OptionType::text,
     .default_value = "inet",
     .help = "which sockets, as psutil.net_connections(kind): inet (tcp+udp, v4+v6), inet4, inet6, "
             "tcp, tcp4, "
             "tcp6, udp, udp4, udp6, unix, all",
     .choices = {"inet", "inet4", "inet6", "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6", "unix",
                 "all"}},
};

// TCP states as /proc/net/tcp writes them (include/net/tcp_states.h), by psutil's names.
constexpr std::array<std::string_view, 11> kTcpStates{
    "ESTABLISHED", "SYN_SENT",   "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT",
    "CLOSE",       "CLOSE_WAIT", "LAST_ACK", "LISTEN",    "CLOSING"};

const Catalog kCatalog{
    {"count", Unit::count, Kind::gauge,
     "sockets of the configured kind (all its protocols together)"},
    {"tcp4.count", Unit::count, Kind::gauge, "TCP sockets over IPv4 (/proc/net/tcp)"},
    {"tcp6.count", Unit::count, Kind::gauge, "TCP sockets over IPv6 (/proc/net/tcp6)"},
    {"udp4.count", Unit::count, Kind::gauge, "UDP sockets over IPv4 (/proc/net/udp)"},
    {"udp6.count", Unit::count, Kind::gauge, "UDP sockets over IPv6 (/proc/net/udp6)"},
    {"unix.count", Unit::count, Kind::gauge,
     "UNIX domain sockets, stream and datagram (/proc/net/unix)"},
    {"tcp.ESTABLISHED", Unit::count, Kind::gauge,
     "TCP connections established (IPv4 and IPv6 of the kind)"},
    {"tcp.SYN_SENT", Unit::count, Kind::gauge, "TCP sockets actively opening a connection"},
    {"tcp.SYN_RECV", Unit::count, Kind::gauge,
     "TCP connection requests received, handshake not complete"},
    {"tcp.FIN_WAIT1", Unit::count, Kind::gauge,
     "TCP sockets closed locally, FIN not yet acknowledged"},
    {"tcp.FIN_WAIT2", Unit::count, Kind::gauge,
     "TCP sockets closed locally, waiting for the peer's FIN"},
    {"tcp.TIME_WAIT", Unit::count, Kind::gauge,
     "TCP connections closed, waiting out stray packets"},
    {"tcp.CLOSE", Unit::count, Kind::gauge, "TCP sockets not in use"},
    {"tcp.CLOSE_WAIT", Unit::count, Kind::gauge,
     "TCP connections closed by the peer, not yet by the local end"},
    {"tcp.LAST_ACK", Unit::count, Kind::gauge,
     "TCP sockets closed on both ends, waiting for the last ACK"},
    {"tcp.LISTEN", Unit::count, Kind::gauge, "TCP sockets listening for connections"},
    {"tcp.CLOSING", Unit::count, Kind::gauge,
     "TCP sockets closed on both ends at once, waiting for an ACK"},
};

enum Proto { tcp4, tcp6, udp4, udp6, unix_, kProtos };
constexpr std::array<std::string_view, kProtos> kFiles{"tcp", "tcp6", "udp", "udp6", "unix"};
constexpr std::array<std::string_view, kProtos> kCountKeys{"tcp4.count", "tcp6.count", "udp4.count",
                                                           "udp6.count", "unix.count"};

std::vector<Proto> protos_of(const std::string& kind) {
  if (kind == "all") return {tcp4, tcp6, udp4, udp6, unix_};
  if (kind == "tcp") return {tcp4, tcp6};
  if (kind == "tcp4") return {tcp4};
  if (kind == "tcp6") return {tcp6};
  if (kind == "udp") return {udp4, udp6};
  if (kind == "udp4") return {udp4};
  if (kind == "udp6") return {udp6};
  if (kind == "unix") return {unix_};
  if (kind == "inet4") return {tcp4, udp4};
  if (kind == "inet6") return {tcp6, udp6};
  return {tcp4, tcp6, udp4, udp6};  // inet
}

// Reads a /proc/net socket table with as few passes over the kernel's hash tables as possible.
// Generating /proc/net/tcp walks every bucket of the established hash (262144 buckets cost
// 1.7 ms on a 24 GiB VM), and so does the read that finds the end of the file, which ProcFile
// makes. seq_file returns a short read only at the end or when the next line would not fit in
// its page-sized buffer; these lines are under 512 bytes, so a read of fewer than 4096 - 512
// bytes (asking for at least 4096) is the end, and the closing empty read is not needed. The
// same holds for the regular files of test fixtures.
class SocketTable {
 public:
  explicit SocketTable(std::string path) : path_(std::move(path)) {}
  ~SocketTable() {
    if (fd_ >= 0) ::close(fd_);
  }
  SocketTable(const SocketTable&) = delete;
  SocketTable& operator=(const SocketTable&) = delete;

  // Sets `text` to the content; false when the file does not exist (no IPv6 in this kernel).
  bool read(std::string_view& text) {
    if (fd_ < 0) {
      fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) {
        if (errno == ENOENT) return false;
        throw SensorUnavailable(fmt::format("cannot open {}: {}", path_, std::strerror(errno)));
      }
    }
    constexpr std::size_t kRequest = 4096, kLongestLine = 512;
    std::size_t used = 0;
    for (;;) {
      if (buffer_.size() - used < kRequest)
        buffer_.resize(std::max(buffer_.size() * 2, used + kRequest));
      ssize_t got =
          ::pread(fd_, buffer_.data() + used, buffer_.size() - used, static_cast<off_t>(used));
      if (got < 0) {
        if (errno == EINTR) continue;
        int error = errno;
        ::close(fd_);
        fd_ = -1;
        throw SensorUnavailable(fmt::format("cannot read {}: {}", path_, std::strerror(error)));
      }
      used += static_cast<std::size_t>(got);
      if (static_cast<std::size_t>(got) < kRequest - kLongestLine) break;
    }
    text = std::string_view(buffer_.data(), used);
    return true;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string buffer_;
  int fd_ = -1;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Counts of one reading: sockets per table and TCP sockets per state (index state - 1).
struct Counts {
  std::array<double, kProtos> sockets{};
  std::array<double, kTcpStates.size()> tcp_states{};
};

// TCP states 1 (ESTABLISHED) .. 12 (NEW_SYN_RECV): every state of the sockets in the listening
// and established hashes, which both /proc/net/tcp and inet_diag walk. Not 13
// (TCP_BOUND_INACTIVE): bound sockets that /proc/net/tcp does not list.
constexpr std::uint32_t kTcpStatesMask = ((1u << 13) - 1) & ~1u;

// A NETLINK_SOCK_DIAG socket kept open across readings, and its dumps.
class SockDiag {
 public:
  enum class Result { ok, refused, failed };

  SockDiag() = default;
  ~SockDiag() { close(); }
  SockDiag(const SockDiag&) = delete;
  SockDiag& operator=(const SockDiag&) = delete;

  // False when no socket can be had now; `usable()` then says whether it is worth retrying.
  bool open() {
    if (fd_ >= 0) return true;
    if (!usable_) return false;
    fd_ = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd_ < 0) {
      usable_ = !refusal(errno);
      return false;
    }
    return true;
  }
  bool usable() const { return usable_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Dumps SOCK_DIAG_BY_FAMILY for an inet table; adds to `counts`, `proto4` and `proto6` being
  // where sockets of each family go (the request's family, or both for `legacy`, the
  // TCPDIAG_GETSOCK request that walks the TCP hash once for AF_INET and AF_INET6 alike).
  Result dump_inet(std::uint8_t family, std::uint8_t protocol, bool legacy, Proto proto4,
                   Proto proto6, Counts& counts) {
    std::uint16_t type;
    std::size_t length;
    if (legacy) {
      inet_diag_req request{};
      request.idiag_family = AF_INET;  // ignored: the kernel dumps AF_UNSPEC
      request.idiag_states = kTcpStatesMask;
      std::memcpy(request_.body, &request, sizeof request);
      type = TCPDIAG_GETSOCK;
      length = sizeof request;
    } else {
      inet_diag_req_v2 request{};
      request.sdiag_family = family;
      request.sdiag_protocol = protocol;
      request.idiag_ext = 0;  // no extensions: small messages
      request.idiag_states = protocol == IPPROTO_TCP ? kTcpStatesMask : ~0u;
      std::memcpy(request_.body, &request, sizeof request);
      type = SOCK_DIAG_BY_FAMILY;
      length = sizeof request;
    }
    const bool tcp = protocol == IPPROTO_TCP;
    return dump(type, length, [&](const char* data, std::size_t size) {
      inet_diag_msg message;
      if (size < sizeof message) return false;
      std::memcpy(&message, data, sizeof message);
      Proto proto;
      if (message.idiag_family == AF_INET)
        proto = proto4;
      else if (message.idiag_family == AF_INET6)
        proto = proto6;
      else
        return true;
      ++counts.sockets[proto];
      if (tcp && message.idiag_state >= 1 && message.idiag_state <= kTcpStates.size())
        ++counts.tcp_states[message.idiag_state - 1];
      return true;
    });
  }

  Result dump_unix(Counts& counts) {
    unix_diag_req request{};
    request.sdiag_family = AF_UNIX;
    request.udiag_states = ~0u;
    request.udiag_show = 0;  // no attributes asked for
    std::memcpy(request_.body, &request, sizeof request);
    return dump(SOCK_DIAG_BY_FAMILY, sizeof request, [&](const char*, std::size_t size) {
      if (size < sizeof(unix_diag_msg)) return false;
      ++counts.sockets[unix_];
      return true;
    });
  }

 private:
  // Whether a failure means the kernel will not do it (no module, not allowed) rather than a
  // passing problem.
  static bool refusal(int error) {
    return error == EPERM || error == EACCES || error == EOPNOTSUPP || error == ENOENT ||
           error == EINVAL || error == EPROTONOSUPPORT || error == EAFNOSUPPORT;
  }

  // Sends the request in request_.body (`length` bytes) as a dump of `type` and passes each
  // answer's payload to `each` (false: malformed) until NLMSG_DONE.
  template <typename Each>
  Result dump(std::uint16_t type, std::size_t length, Each&& each) {
    if (!open()) return usable_ ? Result::failed : Result::refused;
    request_.header = nlmsghdr{};
    request_.header.nlmsg_len = static_cast<std::uint32_t>(NLMSG_LENGTH(length));
    request_.header.nlmsg_type = type;
    request_.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    request_.header.nlmsg_seq = ++sequence_;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    for (;;) {
      if (::sendto(fd_, &request_, request_.header.nlmsg_len, 0,
                   reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel) >= 0)
        break;
      if (errno == EINTR) continue;
      close();
      return Result::failed;
    }
    for (;;) {
      sockaddr_nl from{};
      socklen_t from_length = sizeof from;
      ssize_t got = ::recvfrom(fd_, buffer_.data(), buffer_.size(), MSG_TRUNC,
                               reinterpret_cast<sockaddr*>(&from), &from_length);
      if (got < 0) {
        if (errno == EINTR) continue;
        close();
        return Result::failed;
      }
      if (static_cast<std::size_t>(got) > buffer_.size()) {  // truncated: cannot happen
        close();
        return Result::failed;
      }
      if (from.nl_pid != 0) continue;  // not from the kernel
      std::size_t offset = 0, end = static_cast<std::size_t>(got);
      while (end - offset >= sizeof(nlmsghdr)) {
        nlmsghdr header;
        std::memcpy(&header, buffer_.data() + offset, sizeof header);
        if (header.nlmsg_len < sizeof header || header.nlmsg_len > end - offset) {
          close();
          return Result::failed;
        }
        const char* payload = buffer_.data() + offset + NLMSG_HDRLEN;
        std::size_t size = header.nlmsg_len - std::min<std::size_t>(header.nlmsg_len, NLMSG_HDRLEN);
        offset += NLMSG_ALIGN(header.nlmsg_len);
        if (header.nlmsg_seq != sequence_) continue;  // left over from an earlier request
        if (header.nlmsg_type == NLMSG_DONE || header.nlmsg_type == NLMSG_ERROR) {
          // NLMSG_DONE carries the dump's status (an int), NLMSG_ERROR the request's (nlmsgerr).
          int status = 0;
          if (size >= sizeof status) std::memcpy(&status, payload, sizeof status);
          if (header.nlmsg_type == NLMSG_DONE && status == 0) return Result::ok;
          // NLMSG_ERROR with 0 would be an acknowledgement, which a dump does not get.
          if (status < 0 && refusal(-status)) return Result::refused;
          close();
          return Result::failed;
        }
        if (header.nlmsg_type == type && !each(payload, size)) {
          close();
          return Result::failed;
        }
      }
    }
  }

  struct Request {
    nlmsghdr header;
    char body[std::max(sizeof(inet_diag_req_v2),
                       std::max(sizeof(inet_diag_req), sizeof(unix_diag_req)))];
  };
  int fd_ = -1;
  bool usable_ = true;
  std::uint32_t sequence_ = 0;
  Request request_{};
  // A dump comes in datagrams of at most 32 KiB (the kernel sizes them after the receive
  // buffer offered, up to that); twice that leaves room.
  alignas(nlmsghdr) std::array<char, 65536> buffer_{};
};

class NetConnectionsSensor final : public Sensor {
 public:
  explicit NetConnectionsSensor(const SensorContext& context)
      : live_(context.roots.proc == "/proc" || context.roots.proc == "/proc/") {
    std::array<bool, kProtos> wanted{};
    for (Proto proto : protos_of(context.options.get_text("kind"))) {
      tables_.push_back(
          {proto,
           std::make_unique<SocketTable>(context.roots.proc + "/net/" + std::string(kFiles[proto])),
           live_});
      wanted[proto] = true;
      has_tcp_ |= proto == tcp4 || proto == tcp6;
    }
    if (live_) diag_ = std::make_unique<SockDiag>();
    legacy_tcp_ = live_ && wanted[tcp4] && wanted[tcp6];
  }

  bool sample(SampleWriter& out) override {
    Counts counts;
    std::array<bool, kProtos> done{};
    if (live_) ask_kernel(counts, done);
    for (auto& table : tables_)
      if (!done[table.proto]) read_file(*table.file, table.proto, counts);
    double total = 0;
    for (const auto& table : tables_) total += counts.sockets[table.proto];
    out.set("count", total);
    for (const auto& table : tables_) out.set(kCountKeys[table.proto], counts.sockets[table.proto]);
    if (has_tcp_) {
      for (std::size_t i = 0; i < kTcpStates.size(); ++i) {
        key_.assign("tcp.").append(kTcpStates[i]);
        out.set(key_, counts.tcp_states[i]);
      }
    }
    return true;
  }

 private:
  struct Table {
    Proto proto;
    std::unique_ptr<SocketTable> file;
    bool netlink;  // false once the kernel refused this table's dump
  };

  // Counts the tables the kernel will dump over netlink; marks them in `done`. A dump that
  // fails leaves its tables to the files, for this reading (then the socket is reopened) or for
  // good (refused). Counts go to a scratch copy first: a failed dump may have counted some.
  void ask_kernel(Counts& counts, std::array<bool, kProtos>& done) {
    if (!diag_->usable()) return;  // no netlink socket to be had: files only
    if (legacy_tcp_ && table(tcp4).netlink && table(tcp6).netlink) {
      Counts scratch = counts;
      switch (diag_->dump_inet(AF_UNSPEC, IPPROTO_TCP, true, tcp4, tcp6, scratch)) {
        case SockDiag::Result::ok:
          counts = scratch;
          done[tcp4] = done[tcp6] = true;
          break;
        case SockDiag::Result::refused:
          legacy_tcp_ = false;  // per family from now on
          if (!diag_->usable()) return;
          break;
        case SockDiag::Result::failed:
          return;
      }
    }
    for (auto& table : tables_) {
      if (done[table.proto] || !table.netlink) continue;
      Counts scratch = counts;
      SockDiag::Result result;
      switch (table.proto) {
        case tcp4:
          result = diag_->dump_inet(AF_INET, IPPROTO_TCP, false, tcp4, tcp4, scratch);
          break;
        case tcp6:
          result = diag_->dump_inet(AF_INET6, IPPROTO_TCP, false, tcp6, tcp6, scratch);
          break;
        case udp4:
          result = diag_->dump_inet(AF_INET, IPPROTO_UDP, false, udp4, udp4, scratch);
          break;
        case udp6:
          result = diag_->dump_inet(AF_INET6, IPPROTO_UDP, false, udp6, udp6, scratch);
          break;
        default:
          result = diag_->dump_unix(scratch);
          break;
      }
      if (result == SockDiag::Result::ok) {
        counts = scratch;
        done[table.proto] = true;
      } else if (result == SockDiag::Result::refused) {
        table.netlink = false;
        if (!diag_->usable()) return;  // no netlink socket at all: every table from files
      } else {
        return;  // files for the rest of this reading
      }
    }
  }

  Table& table(Proto proto) {
    for (auto& table : tables_)
      if (table.proto == proto) return table;
    throw std::logic_error("no such table");
  }

  static void read_file(SocketTable& file, Proto proto, Counts& counts) {
    std::string_view text;
    if (!file.read(text)) {
      if (proto == tcp6 || proto == udp6) return;  // no IPv6 in this kernel: psutil skips it too
      throw SensorUnavailable(
          fmt::format("cannot open {}: {}", file.path(), std::strerror(ENOENT)));
    }
    Lines lines(text);
    std::string_view line;
    bool header = true;
    double count = 0;
    while (lines.next(line)) {
      if (header) {
        header = false;
        continue;
      }
      if (proto == unix_) {
        // "Num RefCount Protocol Flags Type St Inode [Path]": psutil needs the first 7 fields.
        std::string_view rest = line;
        int fields = 0;
        while (fields < 7 && !next_field(rest).empty()) ++fields;
        if (fields == 7) ++count;
        continue;
      }
      // "sl local_address rem_address st ...": the state is the 4th field, two hex digits.
      std::string_view rest = line;
      next_field(rest);
      next_field(rest);
      next_field(rest);
      std::string_view state = next_field(rest);
      if (state.empty()) continue;
      ++count;
      if (proto == tcp4 || proto == tcp6) {
        int high = state.size() == 2 ? hex_digit(state[0]) : -1,
            low = state.size() == 2 ? hex_digit(state[1]) : -1;
        int code = high < 0 || low < 0 ? -1 : high * 16 + low;
        if (code >= 1 && code <= static_cast<int>(kTcpStates.size())) ++counts.tcp_states[code - 1];
      }
    }
    counts.sockets[proto] = count;
  }

  bool live_;
  std::vector<Table> tables_;
  bool has_tcp_ = false;
  bool legacy_tcp_ = false;
  std::unique_ptr<SockDiag> diag_;
  std::string key_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR(
    "NetConnections", "Open sockets per protocol and TCP state (psutil.net_connections, counted)",
    kOptions, kCatalog, NetConnectionsSensor, .row = DashboardRow::network);

}  // namespace fructosa::sensors::net_connections_file
