// NetConnections: how many sockets psutil.net_connections(kind) lists on Linux, from
// /proc/net/{tcp,tcp6,udp,udp6,unix}, per protocol and per TCP state.
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
// 262144 buckets (24 GiB), more on big nodes. psutil pays it twice per file. The UDP and UNIX
// tables are cheap (~20 us). A long time_interval suits kinds that include TCP.
#include <fcntl.h>
#include <fmt/format.h>
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

namespace fructosa::sensors {
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

class NetConnectionsSensor final : public Sensor {
 public:
  explicit NetConnectionsSensor(const SensorContext& context) {
    for (Proto proto : protos_of(context.options.get_text("kind"))) {
      files_.push_back({proto, std::make_unique<SocketTable>(context.roots.proc + "/net/" +
                                                             std::string(kFiles[proto]))});
      has_tcp_ |= proto == tcp4 || proto == tcp6;
    }
  }

  bool sample(SampleWriter& out) override {
    std::array<double, kTcpStates.size()> states{};
    std::array<double, kProtos> counts{};
    double total = 0;
    for (auto& [proto, file] : files_) {
      std::string_view text;
      if (!file->read(text)) {
        if (proto == tcp6 || proto == udp6)
          continue;  // no IPv6 in this kernel: psutil skips it too
        throw SensorUnavailable(
            fmt::format("cannot open {}: {}", file->path(), std::strerror(ENOENT)));
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
          if (code >= 1 && code <= static_cast<int>(kTcpStates.size())) ++states[code - 1];
        }
      }
      counts[proto] = count;
      total += count;
    }
    out.set("count", total);
    for (const auto& [proto, file] : files_) out.set(kCountKeys[proto], counts[proto]);
    if (has_tcp_) {
      for (std::size_t i = 0; i < kTcpStates.size(); ++i) {
        key_.assign("tcp.").append(kTcpStates[i]);
        out.set(key_, states[i]);
      }
    }
    return true;
  }

 private:
  struct File {
    Proto proto;
    std::unique_ptr<SocketTable> file;
  };
  std::vector<File> files_;
  bool has_tcp_ = false;
  std::string key_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR(
    "NetConnections", "Open sockets per protocol and TCP state (psutil.net_connections, counted)",
    kOptions, kCatalog, NetConnectionsSensor);

}  // namespace fructosa::sensors
