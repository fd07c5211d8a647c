#include "graphite_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <numeric>
#include <optional>
#include <utility>

namespace fructosa::master {
namespace {

// Pickle opcodes (Python's Lib/pickle.py), all that a list of (str, (float, float)) needs.
constexpr char kProto = '\x80';
constexpr char kEmptyList = ']';
constexpr char kMark = '(';
constexpr char kBinUnicode = 'X';  // 4-byte little-endian length, UTF-8 bytes
constexpr char kBinFloat = 'G';    // 8-byte big-endian IEEE 754 double
constexpr char kTuple2 = '\x86';
constexpr char kAppends = 'e';
constexpr char kStop = '.';
constexpr std::size_t kLengthPrefix = 4;  // carbon's Int32StringReceiver: big-endian frame length

// Bytes carbon cannot take inside a path component: '/' would make directories, whitespace
// splits plaintext lines, ';' starts tags in carbon 1.1, and whisper file names should stay ASCII.
bool safe_path_byte(unsigned char c) { return c > 0x20 && c < 0x7f && c != '/' && c != ';'; }

// Appends one component; `dots_too` also replaces dots (a host or sensor name is one component).
void append_component(std::string& out, std::string_view component, bool dots_too) {
  if (component.empty()) {
    out += '_';
    return;
  }
  // Most names need nothing replaced: checked first, then appended in one go (this runs for
  // every point sent).
  if (std::all_of(component.begin(), component.end(), [dots_too](char c) {
        return safe_path_byte(static_cast<unsigned char>(c)) && !(dots_too && c == '.');
      })) {
    out.append(component);
    return;
  }
  for (char c : component) {
    bool safe = safe_path_byte(static_cast<unsigned char>(c)) && !(dots_too && c == '.');
    out += safe ? c : '_';
  }
}

// Appends a dotted key component by component (its dots stay separators).
void append_dotted(std::string& out, std::string_view dotted) {
  // The common case: safe bytes, no empty component (which becomes '_').
  if (!dotted.empty() && dotted.front() != '.' && dotted.back() != '.' &&
      dotted.find("..") == std::string_view::npos &&
      std::all_of(dotted.begin(), dotted.end(), [](char c) { return safe_path_byte(static_cast<unsigned char>(c)); })) {
    out.append(dotted);
    return;
  }
  while (true) {
    auto dot = dotted.find('.');
    append_component(out, dotted.substr(0, dot), false);
    if (dot == std::string_view::npos) return;
    out += '.';
    dotted.remove_prefix(dot + 1);
  }
}

// The host up to its first dot; an IPv4 address is kept whole (its first octet says nothing).
std::string_view short_host(std::string_view host, bool& whole) {
  whole = !host.empty() && host.find_first_not_of("0123456789.") == std::string_view::npos;
  return whole ? host : host.substr(0, host.find('.'));
}

std::string errno_text(int error) { return std::strerror(error); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Encoding

CarbonEncoder::CarbonEncoder(CarbonProtocol protocol, std::string_view prefix,
                             std::size_t batch_size)
    : protocol_(protocol), batch_size_(std::max<std::size_t>(batch_size, 1)) {
  // "cluster.a." and ".cluster.a" mean "cluster.a"; inner components are sanitised like a key's.
  while (!prefix.empty() && prefix.front() == '.') prefix.remove_prefix(1);
  while (!prefix.empty() && prefix.back() == '.') prefix.remove_suffix(1);
  if (!prefix.empty()) {
    append_dotted(prefix_, prefix);
    prefix_ += '.';
  }
}

void CarbonEncoder::path_prefix(const Sample& sample, std::string& out) const {
  out.assign(prefix_);
  if (sample.job != 0) fmt::format_to(std::back_inserter(out), "jobs.{}.", sample.job);
  bool whole = false;
  append_component(out, short_host(sample.host, whole), /*dots_too=*/true);
  out += '.';
  append_component(out, sample.sensor, /*dots_too=*/true);
}

std::string CarbonEncoder::path(const Sample& sample, std::string_view key) const {
  std::string result;
  path_prefix(sample, result);
  if (!key.empty()) {
    result += '.';
    append_dotted(result, key);
  }
  return result;
}

void CarbonEncoder::begin_frame(CarbonFrame& frame) const {
  frame.bytes.clear();
  frame.points = 0;
  if (protocol_ == CarbonProtocol::pickle) {
    frame.bytes.append(kLengthPrefix, '\0');  // filled in by end_frame
    frame.bytes += kProto;
    frame.bytes += '\x02';
    frame.bytes += kEmptyList;
    frame.bytes += kMark;
  }
}

void CarbonEncoder::end_frame(CarbonFrame& frame) const {
  if (protocol_ != CarbonProtocol::pickle) return;
  frame.bytes += kAppends;
  frame.bytes += kStop;
  auto length = static_cast<std::uint32_t>(frame.bytes.size() - kLengthPrefix);
  for (int i = 3; i >= 0; --i, length >>= 8) frame.bytes[i] = static_cast<char>(length & 0xff);
}

void CarbonEncoder::append_point(CarbonFrame& frame, std::string_view path, double timestamp,
                                 double value, std::int64_t time_ns) {
  std::string& out = frame.bytes;
  if (protocol_ == CarbonProtocol::pickle) {
    // (path, (timestamp, value)): BINUNICODE, BINFLOAT, BINFLOAT, TUPLE2, TUPLE2. Written through
    // a pointer into room made once: this runs for every point sent.
    const std::size_t at = out.size();
    out.resize(at + 1 + 4 + path.size() + 2 * 9 + 2);
    char* p = out.data() + at;
    *p++ = kBinUnicode;
    auto length = static_cast<std::uint32_t>(path.size());
    for (int i = 0; i < 4; ++i, length >>= 8) *p++ = static_cast<char>(length & 0xff);
    std::memcpy(p, path.data(), path.size());
    p += path.size();
    for (double number : {timestamp, value}) {
      *p++ = kBinFloat;
      auto bits = std::bit_cast<std::uint64_t>(number);
      for (int i = 7; i >= 0; --i) p[i] = static_cast<char>((bits >> (8 * (7 - i))) & 0xff);
      p += 8;
    }
    *p++ = kTuple2;
    *p = kTuple2;
  } else {
    // "{}" is fmt's shortest form that reads back as the same double.
    out.append(path);
    out += ' ';
    fmt::format_to(std::back_inserter(out), "{}", value);
    if (time_ns % 1000000000 == 0)
      fmt::format_to(std::back_inserter(out), " {}\n", time_ns / 1000000000);
    else
      fmt::format_to(std::back_inserter(out), " {}\n", timestamp);
  }
  ++frame.points;
}

std::size_t CarbonEncoder::encode(std::span<const Sample> samples,
                                  std::vector<CarbonFrame>& frames) {
  std::size_t used = 0;
  CarbonFrame* open = nullptr;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const Sample& sample = samples[i];
    path_prefix(sample, path_);  // once per sample; each point only appends its key
    const std::size_t prefix_size = path_.size();
    // Whole seconds and the fraction apart: an int64 of ns has more digits than a double.
    const std::lldiv_t seconds = std::lldiv(sample.time_ns, 1000000000);
    const double timestamp =
        static_cast<double>(seconds.quot) + static_cast<double>(seconds.rem) / 1e9;
    for (const auto& metric : sample.metrics) {
      if (std::isnan(metric.value)) continue;  // whisper has no NaN; carbon would drop it anyway
      if (!open) {
        if (frames.size() <= used) frames.emplace_back();
        open = &frames[used++];
        begin_frame(*open);
        open->samples_done = i;
      }
      path_.resize(prefix_size);
      if (!metric.key.empty()) {
        path_ += '.';
        append_dotted(path_, metric.key);
      }
      append_point(*open, path_, timestamp, metric.value, sample.time_ns);
      if (open->points == batch_size_) {
        end_frame(*open);
        open = nullptr;
      }
    }
    if (used > 0) frames[used - 1].samples_done = i + 1;
  }
  if (open) end_frame(*open);
  return used;
}

// ---------------------------------------------------------------------------------------------
// Options

const OptionTable& graphite_options() {
  static const OptionTable table{
      {.name = "host",
       .type = OptionType::text,
       .default_value = "localhost",
       .help = "carbon-cache (or carbon-relay) host name or address"},
      {.name = "carbon receiver pickle port",
       .type = OptionType::integer,
       .default_value = "2004",
       .help = "carbon's PICKLE_RECEIVER_PORT (protocol = pickle)",
       .min = 1,
       .max = 65535},
      {.name = "carbon receiver port",
       .type = OptionType::integer,
       .default_value = "2003",
       .help = "carbon's LINE_RECEIVER_PORT (protocol = plaintext)",
       .min = 1,
       .max = 65535},
      {.name = "protocol",
       .type = OptionType::text,
       .default_value = "pickle",
       .help = "pickle (binary, exact values) or plaintext (one \"path value timestamp\" line per "
               "point)",
       .choices = {"pickle", "plaintext"}},
      {.name = "prefix",
       .type = OptionType::text,
       .default_value = "",
       .help = "dotted path put before every metric path (e.g. cluster1); empty: none"},
      {.name = "batch_size",
       .type = OptionType::integer,
       .default_value = "500",
       .help = "points per pickle frame (carbon takes at most 500) or per plaintext block",
       .min = 1,
       .max = 500},
      {.name = "timeout",
       .type = OptionType::real,
       .default_value = "3",
       .help = "seconds to wait for a connection, or for one send to make progress",
       .min = 0.1,
       .max = 60},
      {.name = "replay_window",
       .type = OptionType::real,
       .default_value = "5",
       .help = "after a lost connection, seconds of the data sent just before it that are sent "
               "again (at most 16 MiB; carbon overwrites equal points); 0: none",
       .min = 0,
       .max = 60},
  };
  return table;
}

// ---------------------------------------------------------------------------------------------
// The output

namespace {

using Clock = std::chrono::steady_clock;

// The replay window holds at most this much: what can be in flight on one connection, i.e. in
// our send buffer and carbon's receive buffer (Linux autotunes them up to 4 and 6 MiB).
constexpr std::size_t kMaxReplayBytes = 16u << 20;
// Idle frame buffers kept for reuse.
constexpr std::size_t kMaxSpareBuffers = 64;

class GraphiteOutput final : public Output {
 public:
  explicit GraphiteOutput(const Options& options)
      : host_(options.get_text("host")),
        protocol_(options.get_text("protocol") == "plaintext" ? CarbonProtocol::plaintext
                                                              : CarbonProtocol::pickle),
        port_(static_cast<int>(options.get_int(protocol_ == CarbonProtocol::pickle
                                                   ? "carbon receiver pickle port"
                                                   : "carbon receiver port"))),
        timeout_(options.get_real("timeout")),
        replay_window_(options.get_real("replay_window")),
        encoder_(protocol_, options.get_text("prefix"),
                 static_cast<std::size_t>(options.get_int("batch_size"))),
        peer_(fmt::format("{}:{}", host_, port_)) {}

  ~GraphiteOutput() override { close_socket(); }

  std::string name() const override { return "graphite"; }
  double flush_period() const override { return 0.2; }  // Graphite graphs should lag little
  std::size_t batch_samples() const override { return 2000; }

  void write(std::span<const Sample> samples) override;
  void flush() override;
  void reopen() override;

 private:
  struct SentFrame {
    Clock::time_point sent;
    std::string bytes;
    std::size_t points = 0;
  };

  void ensure_connected();
  void connect_socket();
  void replay();
  bool peer_closed() const;
  void lose_connection(const std::string& reason);
  void close_socket();
  std::optional<std::string> send_all(std::string_view bytes);
  void remember(CarbonFrame& frame);
  void forget_oldest();

  const std::string host_;
  const CarbonProtocol protocol_;
  const int port_;
  const double timeout_;
  const double replay_window_;
  CarbonEncoder encoder_;
  const std::string peer_;  // "host:port", for log lines

  int fd_ = -1;
  std::vector<CarbonFrame> frames_;  // the current write's frames; buffers reused
  // Frames sent over the current (or just lost) connection within the replay window, oldest
  // first. Carbon never acknowledges, so a frame that reached our socket may still be lost with
  // the peer: in our send queue or carbon's unread receive buffer when it restarts, or in its
  // cache not yet written to whisper (about a second's worth) when it crashes. Whisper writes
  // are idempotent (same path and timestamp, same value), so after a reconnect these frames are
  // sent again before anything new (counted as retried); nothing else can recover them.
  std::deque<SentFrame> history_;
  std::size_t history_bytes_ = 0;
  bool replay_pending_ = false;
  std::vector<std::string> spare_;  // buffers of forgotten frames, for reuse
  bool reported_down_ = false;      // one warning per outage
  bool connected_before_ = false;
  Clock::time_point next_flush_reconnect_{};
  double flush_backoff_ = 1;
};

void GraphiteOutput::write(std::span<const Sample> samples) {
  const std::size_t used = encoder_.encode(samples, frames_);
  if (used == 0) return;
  auto from = [&](std::size_t first) {  // the indices of samples [first, end)
    std::vector<std::size_t> indices(samples.size() - first);
    std::iota(indices.begin(), indices.end(), first);
    return indices;
  };
  try {
    ensure_connected();
  } catch (const std::exception& error) {
    throw OutputError(error.what(), from(0));
  }
  for (std::size_t k = 0; k < used; ++k) {
    if (auto error = send_all(frames_[k].bytes)) {
      // A sample cut by the failure is sent again whole; carbon overwrites the equal points.
      const std::size_t delivered = k > 0 ? frames_[k - 1].samples_done : 0;
      lose_connection(*error);
      throw OutputError(fmt::format("sending to carbon at {}: {}", peer_, *error), from(delivered));
    }
    counters_.sent += frames_[k].points;
    remember(frames_[k]);
  }
}

void GraphiteOutput::flush() {
  // Notices a carbon restart while no data comes, and re-sends what it may have lost, at most
  // once per backoff step: flush() runs every 0.2 s and must not hammer a carbon that is down.
  if (fd_ >= 0 && peer_closed()) lose_connection("carbon closed the connection");
  if (fd_ >= 0 || !replay_pending_ || Clock::now() < next_flush_reconnect_) return;
  try {
    ensure_connected();
  } catch (const std::exception& error) {
    spdlog::debug("graphite: {}", error.what());
    next_flush_reconnect_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(flush_backoff_));
    flush_backoff_ = std::min(flush_backoff_ * 2, 30.0);
  }
}

void GraphiteOutput::reopen() {
  // A connection we close ourselves delivers what it holds (TCP sends it before the FIN), so
  // there is nothing to replay unless the connection was already lost.
  if (fd_ >= 0) {
    spdlog::info("graphite: reconnecting to carbon at {} (reopen)", peer_);
    close_socket();
    while (!history_.empty()) forget_oldest();
  }
}

void GraphiteOutput::ensure_connected() {
  // Carbon never sends on its receiver ports: a readable socket means EOF or a reset, i.e. the
  // carbon we were talking to is gone. Finding out before sending keeps new data out of it.
  if (fd_ >= 0 && peer_closed()) lose_connection("carbon closed the connection");
  if (fd_ >= 0) return;
  connect_socket();
  if (reported_down_ || !connected_before_)
    spdlog::info("graphite: connected to carbon at {} ({})", peer_,
                 protocol_ == CarbonProtocol::pickle ? "pickle" : "plaintext");
  reported_down_ = false;
  connected_before_ = true;
  flush_backoff_ = 1;
  if (replay_pending_) replay();
}

void GraphiteOutput::connect_socket() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  const std::string service = std::to_string(port_);
  if (int status = ::getaddrinfo(host_.c_str(), service.c_str(), &hints, &addresses); status != 0) {
    std::string reason = status == EAI_SYSTEM ? errno_text(errno) : ::gai_strerror(status);
    reported_down_ = true;  // the runner logs the OutputError
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
  if (fd_ < 0) {
    reported_down_ = true;  // the runner logs the OutputError
    throw std::runtime_error(fmt::format("cannot connect to carbon at {}: {}", peer_, failure));
  }
}

void GraphiteOutput::replay() {
  std::size_t points = 0;
  for (const auto& frame : history_) {
    if (auto error = send_all(frame.bytes)) {
      lose_connection(*error);
      throw std::runtime_error(fmt::format("re-sending to carbon at {}: {}", peer_, *error));
    }
    points += frame.points;
  }
  // They now belong to this connection's window.
  const auto now = Clock::now();
  for (auto& frame : history_) frame.sent = now;
  replay_pending_ = false;
  counters_.retried += points;
  spdlog::info(
      "graphite: sent {} points again to carbon at {} (the last {} s before the connection "
      "was lost)",
      points, peer_, replay_window_);
}

bool GraphiteOutput::peer_closed() const {
  pollfd state{fd_, POLLIN | POLLRDHUP, 0};
  int ready = ::poll(&state, 1, 0);
  return ready > 0 && state.revents != 0;
}

void GraphiteOutput::lose_connection(const std::string& reason) {
  close_socket();
  if (!reported_down_)
    spdlog::warn("graphite: lost the connection to carbon at {}: {}", peer_, reason);
  reported_down_ = true;
  if (replay_pending_) return;  // still owed from an earlier loss: keep all of it
  // Only what was sent shortly before the loss can have been lost with it.
  const auto oldest = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(replay_window_));
  while (!history_.empty() && history_.front().sent < oldest) forget_oldest();
  replay_pending_ = !history_.empty();
}

void GraphiteOutput::close_socket() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::optional<std::string> GraphiteOutput::send_all(std::string_view bytes) {
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

void GraphiteOutput::remember(CarbonFrame& frame) {
  if (replay_window_ <= 0) return;
  const auto now = Clock::now();
  history_bytes_ += frame.bytes.size();
  history_.push_back({now, std::move(frame.bytes), frame.points});
  if (!spare_.empty()) {
    frame.bytes = std::move(spare_.back());
    spare_.pop_back();
  } else {
    frame.bytes = std::string();
  }
  const auto oldest = now - std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(replay_window_));
  while (history_.size() > 1 &&
         (history_bytes_ > kMaxReplayBytes || history_.front().sent < oldest))
    forget_oldest();
}

void GraphiteOutput::forget_oldest() {
  SentFrame& oldest = history_.front();
  history_bytes_ -= oldest.bytes.size();
  if (spare_.size() < kMaxSpareBuffers) {
    oldest.bytes.clear();
    spare_.push_back(std::move(oldest.bytes));
  }
  history_.pop_front();
}

}  // namespace

std::unique_ptr<Output> make_graphite_output(const Options& options, const MetricInfoStore&) {
  return std::make_unique<GraphiteOutput>(options);
}

}  // namespace fructosa::master
