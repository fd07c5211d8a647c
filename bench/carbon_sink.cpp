// A counting Graphite sink for benchmarks: listens on 127.0.0.1, takes any number of
// connections (epoll), each speaking either carbon's pickle protocol (4-byte big-endian length +
// a pickle of [(path, (timestamp, value)), ...]) or plaintext lines "path value timestamp\n".
// The protocol is told per connection by its first byte: a pickle frame starts with the high
// byte of its length, 0 for any frame under 16 MiB; a plaintext line starts with a path.
//
//   carbon_sink [--port N] [--match PREFIX] [--every]
//
// Prints the port it listens on (a line with the number) first. Then, when stdin reaches its end
// or on SIGTERM/SIGINT, one JSON line: points, points whose path starts with PREFIX ("matched";
// all points without --match), frames, lines, connections, errors, points/s between the first and
// the last point, and the latency of the matched points (receive wall time - the point's
// timestamp) p50/p99/max from a histogram of 100 us buckets, for the whole run ("latency_s") and
// between a line "start" and a line "end" on stdin ("window_latency_s": a measurement window). --every prints the same line (with
// "final": false) every second. Steady state allocates nothing per point: connection buffers and
// the pickle machine's stack and memo grow to the largest frame and are reused.
//
// Pickle frames are walked opcode by opcode (the protocol 0-4 opcodes a list of tuples of
// strings and numbers can use, memo included); a point is a (string, (number, number)) tuple
// appended to the top-level list. A frame that does not parse is counted and logged, and the
// connection's remaining bytes are dropped with it (the stream cannot be resynchronised).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace {

constexpr std::size_t kMaxFrameBytes = 64u << 20;  // carbon itself refuses far smaller ones

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Latency histogram: 100 us buckets up to 120 s; beyond, one overflow bucket (the exact max is
// kept apart). Points stamped in the future (clock steps, rounding) count as 0.
class LatencyHistogram {
 public:
  static constexpr double kBucket = 100e-6;
  static constexpr std::size_t kBuckets = 1200000;

  LatencyHistogram() : counts_(kBuckets + 1, 0) {}

  void add(double latency) {
    if (latency < 0) {
      ++future_;
      latency = 0;
    }
    max_ = std::max(max_, latency);
    auto index = static_cast<std::size_t>(latency / kBucket);
    ++counts_[std::min(index, kBuckets)];
    ++count_;
  }

  std::uint64_t count() const { return count_; }
  std::uint64_t future() const { return future_; }
  double max() const { return max_; }
  // The upper edge of the bucket holding the q-th quantile (q in [0, 1]).
  double quantile(double q) const {
    if (count_ == 0) return 0;
    auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_)));
    rank = std::max<std::uint64_t>(rank, 1);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i <= kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return i == kBuckets ? max_ : std::min(max_, static_cast<double>(i + 1) * kBucket);
    }
    return max_;
  }

 private:
  std::vector<std::uint64_t> counts_;
  std::uint64_t count_ = 0, future_ = 0;
  double max_ = 0;
};

struct Totals {
  std::uint64_t points = 0, matched = 0, frames = 0, lines = 0, bytes = 0;
  std::uint64_t connections = 0, bad_frames = 0, bad_lines = 0;
  double first_point = 0, last_point = 0;  // wall clock of the reads that brought them
  LatencyHistogram latency;
  // Between a "start" and an "end" line on stdin: the latency of a measurement window only.
  bool in_window = false;
  LatencyHistogram window_latency;
  void add_latency(double seconds) {
    latency.add(seconds);
    if (in_window) window_latency.add(seconds);
  }
};

class FrameError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Just enough of the pickle machine to find points: every stack entry is a type and, for the
// ones that matter, a string (pointing into the frame) and numbers.
class PickleCounter {
 public:
  PickleCounter(Totals& totals, std::string_view match) : totals_(totals), match_(match) {
    // Capacity kept across frames: a push is then a store (the sink shares the CPU with the
    // server it measures, so its own cost per point lowers the figures).
    stack_.reserve(4096);
    memo_.reserve(4096);
  }

  // Walks one frame (without its length prefix); counts its points.
  void frame(const char* data, std::size_t size, double received) {
    stack_.clear();
    memo_.clear();
    p_ = data;
    end_ = data + size;
    received_ = received;
    for (;;) {
      auto op = static_cast<unsigned char>(take(1)[0]);
      switch (op) {
        case 0x80: take(1); break;                          // PROTO
        case 0x95: take(8); break;                          // FRAME (protocol 4)
        case '(': push({Type::mark}); break;                // MARK
        case ']': push({Type::list}); break;                // EMPTY_LIST
        case ')': push({Type::other}); break;               // EMPTY_TUPLE
        case 'N': case 0x88: case 0x89: push({Type::other}); break;  // None, True, False
        case 'X':                                           // BINUNICODE
          if (!point_shortcut()) string(le(4));
          break;
        case 'T': case 'B': string(le(4)); break;           // BINSTRING, BINBYTES
        case 0x8c: case 'U': case 'C': string(le(1)); break;  // SHORT_BINUNICODE/BINSTRING/BINBYTES
        case 0x8d: case 0x8e: string(le(8)); break;         // BINUNICODE8, BINBYTES8
        case 'V': case 'S': {                               // UNICODE, STRING (text, to newline)
          auto text = line();
          push({Type::string, text.data(), static_cast<std::uint32_t>(text.size())});
          break;
        }
        case 'G': number(big_endian_double(take(8))); break;  // BINFLOAT
        case 'J': number(static_cast<double>(static_cast<std::int32_t>(le(4)))); break;  // BININT
        case 'K': number(static_cast<double>(le(1))); break;  // BININT1
        case 'M': number(static_cast<double>(le(2))); break;  // BININT2
        case 0x8a: number(long1(le(1))); break;               // LONG1
        case 'F': case 'I': case 'L': number(text_number(line())); break;  // FLOAT, INT, LONG
        case 'q': memo_put(le(1)); break;                     // BINPUT
        case 'r': memo_put(le(4)); break;                     // LONG_BINPUT
        case 'p': memo_put(static_cast<std::uint64_t>(text_number(line()))); break;  // PUT
        case 0x94: memo_put(memo_.size()); break;             // MEMOIZE
        case 'h': memo_get(le(1)); break;                     // BINGET
        case 'j': memo_get(le(4)); break;                     // LONG_BINGET
        case 'g': memo_get(static_cast<std::uint64_t>(text_number(line()))); break;  // GET
        case 0x85: tuple(1); break;                           // TUPLE1
        case 0x86: tuple(2); break;                           // TUPLE2
        case 0x87: tuple(3); break;                           // TUPLE3
        case 't': tuple(items_since_mark()); pop_mark_below(); break;  // TUPLE
        case 'l': {                                           // LIST
          std::size_t n = items_since_mark();
          std::size_t first = stack_.size() - n;
          for (std::size_t i = first; i < stack_.size(); ++i) count(stack_[i]);
          stack_.resize(first);
          pop_mark();
          push({Type::list});
          break;
        }
        case 'a': {                                           // APPEND
          if (stack_.size() < 2 || stack_[stack_.size() - 2].type != Type::list) throw FrameError("APPEND outside a list");
          count(stack_.back());
          stack_.pop_back();
          break;
        }
        case 'e': {                                           // APPENDS
          std::size_t n = items_since_mark();
          std::size_t first = stack_.size() - n;
          if (first < 2 || stack_[first - 2].type != Type::list) throw FrameError("APPENDS outside a list");
          for (std::size_t i = first; i < stack_.size(); ++i) count(stack_[i]);
          stack_.resize(first);
          pop_mark();
          break;
        }
        case '0': need(1), stack_.pop_back(); break;          // POP
        case '1': stack_.resize(stack_.size() - items_since_mark()), pop_mark(); break;  // POP_MARK
        case '2': need(1), push(stack_.back()); break;        // DUP
        case '.':                                             // STOP
          if (stack_.size() != 1 || stack_.back().type != Type::list)
            throw FrameError("the frame is not a list of points");
          if (p_ != end_) throw FrameError("bytes after STOP");
          return;
        default: {
          char what[64];
          std::snprintf(what, sizeof what, "unknown opcode 0x%02x at offset %zu", op,
                        static_cast<std::size_t>(p_ - 1 - data));
          throw FrameError(what);
        }
      }
    }
  }

 private:
  enum class Type : std::uint8_t { mark, list, string, number, pair, point, other };
  struct Item {
    Type type;
    const char* text = nullptr;
    std::uint32_t size = 0;
    double first = 0, second = 0;  // number: first; pair: (timestamp, value); point: timestamp
  };

  const char* take(std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n) throw FrameError("truncated frame");
    const char* at = p_;
    p_ += n;
    return at;
  }
  std::uint64_t le(int n) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(take(static_cast<std::size_t>(n)));
    std::uint64_t value = 0;
    for (int i = n - 1; i >= 0; --i) value = value << 8 | bytes[i];
    return value;
  }
  static double big_endian_double(const char* bytes) {
    std::uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = bits << 8 | static_cast<unsigned char>(bytes[i]);
    double value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  double long1(std::uint64_t n) {
    if (n > 8) throw FrameError("LONG1 wider than 8 bytes");
    if (n == 0) return 0;
    std::uint64_t value = le(static_cast<int>(n));
    if (n < 8 && (value >> (8 * n - 1)) & 1) value |= ~0ull << (8 * n);  // sign-extend
    return static_cast<double>(static_cast<std::int64_t>(value));
  }
  std::string_view line() {
    const char* newline = static_cast<const char*>(std::memchr(p_, '\n', static_cast<std::size_t>(end_ - p_)));
    if (!newline) throw FrameError("unterminated text opcode");
    std::string_view text(p_, static_cast<std::size_t>(newline - p_));
    p_ = newline + 1;
    return text;
  }
  static double text_number(std::string_view text) {
    if (!text.empty() && text.back() == 'L') text.remove_suffix(1);
    double value = 0;
    auto result = std::from_chars(text.data(), text.data() + text.size(), value);
    if (result.ec != std::errc()) throw FrameError("bad number in a text opcode");
    return value;
  }
  void string(std::uint64_t size) {
    if (size > static_cast<std::uint64_t>(end_ - p_)) throw FrameError("truncated string");
    const char* text = take(static_cast<std::size_t>(size));
    push({Type::string, text, static_cast<std::uint32_t>(size)});
  }
  void number(double value) { push({Type::number, nullptr, 0, value}); }
  // (path, (timestamp, value)) as carbon senders write each point (lmaster's CarbonEncoder,
  // Python's pickle): BINUNICODE path, BINFLOAT, BINFLOAT, TUPLE2, TUPLE2 becomes the point in
  // one step, what the five opcodes one by one would leave on the stack. Anything else goes
  // the long way. (The sink shares the CPUs with the server it measures.)
  bool point_shortcut() {
    if (end_ - p_ < 4) return false;
    const auto* u = reinterpret_cast<const unsigned char*>(p_);
    std::size_t length = std::size_t{u[0]} | std::size_t{u[1]} << 8 | std::size_t{u[2]} << 16 | std::size_t{u[3]} << 24;
    if (static_cast<std::size_t>(end_ - p_) < 4 + length + 20) return false;
    const char* after = p_ + 4 + length;
    if (after[0] != 'G' || after[9] != 'G' || static_cast<unsigned char>(after[18]) != 0x86 ||
        static_cast<unsigned char>(after[19]) != 0x86)
      return false;
    push({Type::point, p_ + 4, static_cast<std::uint32_t>(length), big_endian_double(after + 1),
          big_endian_double(after + 10)});
    p_ = after + 20;
    return true;
  }
  [[gnu::always_inline]] void push(const Item& item) { stack_.push_back(item); }
  void need(std::size_t n) {
    if (stack_.size() < n) throw FrameError("stack underflow");
  }
  std::size_t items_since_mark() const {
    for (std::size_t i = stack_.size(); i-- > 0;)
      if (stack_[i].type == Type::mark) return stack_.size() - 1 - i;
    throw FrameError("no MARK on the stack");
  }
  void pop_mark() {
    if (stack_.empty() || stack_.back().type != Type::mark) throw FrameError("MARK expected");
    stack_.pop_back();
  }
  // TUPLE: the items are gone (made into the tuple), the tuple sits above the mark.
  void pop_mark_below() {
    Item tuple_item = stack_.back();
    stack_.pop_back();
    pop_mark();
    stack_.push_back(tuple_item);
  }
  void tuple(std::size_t n) {
    need(n);
    Item made{Type::other};
    if (n == 2) {
      const Item& a = stack_[stack_.size() - 2];
      const Item& b = stack_.back();
      if (a.type == Type::number && b.type == Type::number) made = {Type::pair, nullptr, 0, a.first, b.first};
      else if (a.type == Type::string && b.type == Type::pair) made = {Type::point, a.text, a.size, b.first, b.second};
    }
    stack_.resize(stack_.size() - n);
    stack_.push_back(made);
  }
  void memo_put(std::uint64_t index) {
    need(1);
    if (index > (1u << 24)) throw FrameError("memo index out of range");
    if (memo_.size() <= index) memo_.resize(index + 1, Item{Type::other});
    memo_[index] = stack_.back();
  }
  void memo_get(std::uint64_t index) {
    if (index >= memo_.size()) throw FrameError("GET of an unset memo entry");
    push(memo_[index]);
  }
  void count(const Item& item) {
    if (item.type != Type::point) throw FrameError("a list entry is not (path, (timestamp, value))");
    ++totals_.points;
    if (match_.empty() || std::string_view(item.text, item.size).starts_with(match_)) {
      ++totals_.matched;
      totals_.add_latency(received_ - item.first);
    }
  }

  Totals& totals_;
  std::string_view match_;
  std::vector<Item> stack_, memo_;
  const char* p_ = nullptr;
  const char* end_ = nullptr;
  double received_ = 0;
};

struct Connection {
  int fd = -1;
  std::string peer;
  enum class Protocol { unknown, pickle, plaintext } protocol = Protocol::unknown;
  std::vector<char> buffer = std::vector<char>(1 << 16);
  std::size_t begin = 0, end = 0;  // unparsed bytes
  bool broken = false;             // a bad pickle frame: the rest is dropped
};

class Sink {
 public:
  Sink(std::string match) : match_(std::move(match)), pickle_(totals_, match_) {}

  // Parses what `connection` has buffered; returns the points it found.
  void parse(Connection& c, double received) {
    if (c.protocol == Connection::Protocol::unknown && c.end > c.begin)
      c.protocol = c.buffer[c.begin] == '\0' ? Connection::Protocol::pickle : Connection::Protocol::plaintext;
    std::uint64_t before = totals_.points;
    if (c.protocol == Connection::Protocol::pickle) {
      while (!c.broken && c.end - c.begin >= 4) {
        const auto* header = reinterpret_cast<const unsigned char*>(&c.buffer[c.begin]);
        std::size_t length = std::size_t{header[0]} << 24 | std::size_t{header[1]} << 16 |
                             std::size_t{header[2]} << 8 | header[3];
        if (length > kMaxFrameBytes) {
          fail(c, "a frame of " + std::to_string(length) + " bytes (more than 64 MiB): not a pickle stream");
          break;
        }
        if (c.end - c.begin < 4 + length) {
          if (c.buffer.size() < 4 + length) grow(c, 4 + length);
          break;
        }
        std::uint64_t points_before = totals_.points, matched_before = totals_.matched;
        try {
          pickle_.frame(&c.buffer[c.begin + 4], length, received);
          ++totals_.frames;
        } catch (const FrameError& error) {
          totals_.points = points_before;  // a frame counts whole or not at all
          totals_.matched = matched_before;
          fail(c, error.what());
          break;
        }
        c.begin += 4 + length;
      }
    } else if (c.protocol == Connection::Protocol::plaintext) {
      for (;;) {
        const char* start = &c.buffer[c.begin];
        const char* newline = static_cast<const char*>(std::memchr(start, '\n', c.end - c.begin));
        if (!newline) break;
        line(c, std::string_view(start, static_cast<std::size_t>(newline - start)), received);
        c.begin += static_cast<std::size_t>(newline - start) + 1;
      }
    }
    if (c.broken) c.begin = c.end;
    if (totals_.points > before) {
      if (totals_.first_point == 0) totals_.first_point = received;
      totals_.last_point = received;
    }
    // Keep the unparsed tail at the front so the buffer is reused.
    if (c.begin == c.end) c.begin = c.end = 0;
    else if (c.begin > c.buffer.size() / 2) {
      std::memmove(c.buffer.data(), &c.buffer[c.begin], c.end - c.begin);
      c.end -= c.begin;
      c.begin = 0;
    }
    if (c.end == c.buffer.size()) grow(c, c.buffer.size() * 2);
  }

  Totals& totals() { return totals_; }

  nlohmann::json report(bool final) const {
    const auto& t = totals_;
    double span = t.last_point - t.first_point;
    return {{"final", final},
            {"time_unix", wall_seconds()},
            {"points", t.points},
            {"matched", t.matched},
            {"match", match_},
            {"frames", t.frames},
            {"lines", t.lines},
            {"bytes", t.bytes},
            {"connections", t.connections},
            {"bad_frames", t.bad_frames},
            {"bad_lines", t.bad_lines},
            {"first_point_unix", t.first_point},
            {"last_point_unix", t.last_point},
            {"points_per_s", span > 0 ? static_cast<double>(t.points) / span : 0.0},
            {"latency_s", latency_json(t.latency)},
            {"window_latency_s", latency_json(t.window_latency)}};
  }

  static nlohmann::json latency_json(const LatencyHistogram& histogram) {
    return {{"count", histogram.count()},
            {"p50", histogram.quantile(0.50)},
            {"p99", histogram.quantile(0.99)},
            {"max", histogram.max()},
            {"future", histogram.future()}};
  }

 private:
  static void grow(Connection& c, std::size_t size) {
    if (c.begin > 0) {
      std::memmove(c.buffer.data(), &c.buffer[c.begin], c.end - c.begin);
      c.end -= c.begin;
      c.begin = 0;
    }
    c.buffer.resize(std::max(size, c.buffer.size()));
  }

  void fail(Connection& c, const std::string& why) {
    ++totals_.bad_frames;
    std::cerr << "carbon_sink: " << c.peer << ": bad pickle frame, dropping what follows on this connection: " << why
              << "\n";
    c.broken = true;
  }

  void line(Connection& c, std::string_view text, double received) {
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.empty()) return;
    ++totals_.lines;
    // path value timestamp: the timestamp is the last field, the value the one before.
    auto last_space = text.rfind(' ');
    auto value_space = last_space == std::string_view::npos ? last_space : text.rfind(' ', last_space - 1);
    double timestamp = 0;
    bool ok = value_space != std::string_view::npos && value_space > 0;
    if (ok) {
      auto stamp = text.substr(last_space + 1);
      auto result = std::from_chars(stamp.data(), stamp.data() + stamp.size(), timestamp);
      ok = result.ec == std::errc() && result.ptr == stamp.data() + stamp.size();
    }
    if (!ok) {
      if (totals_.bad_lines++ < 5)
        std::cerr << "carbon_sink: " << c.peer << ": not \"path value timestamp\": " << text.substr(0, 200) << "\n";
      return;
    }
    ++totals_.points;
    if (match_.empty() || text.starts_with(match_)) {
      ++totals_.matched;
      totals_.add_latency(received - timestamp);
    }
  }

  std::string match_;
  Totals totals_;
  PickleCounter pickle_;
};

[[noreturn]] void die(const std::string& what) {
  std::cerr << "carbon_sink: " << what << ": " << std::strerror(errno) << "\n";
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  bool every = false;
  std::string match;
  for (int i = 1; i < argc; ++i) {
    std::string option = argv[i];
    if (option == "--port" && i + 1 < argc) port = std::atoi(argv[++i]);
    else if (option == "--match" && i + 1 < argc) match = argv[++i];
    else if (option == "--every") every = true;
    else {
      std::cerr << "carbon_sink: unknown option " << option << "\nusage: carbon_sink [--port N] [--match PREFIX] [--every]\n";
      return 64;
    }
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  int signal_fd = ::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) die("signalfd");

  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listener < 0) die("socket");
  int yes = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    die("bind 127.0.0.1:" + std::to_string(port));
  if (::listen(listener, 4096) != 0) die("listen");
  socklen_t length = sizeof address;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  std::cout << ntohs(address.sin_port) << std::endl;

  int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll < 0) die("epoll_create1");
  // Tags in epoll data: small numbers for the fixed descriptors, connection fds otherwise.
  constexpr std::uint64_t kListener = ~0ull, kSignal = ~0ull - 1, kStdin = ~0ull - 2, kTimer = ~0ull - 3;
  auto watch = [&](int fd, std::uint64_t tag) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = tag;
    return ::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) == 0;
  };
  watch(listener, kListener);
  watch(signal_fd, kSignal);
  // A pipe on stdin ends the run when it closes; stdin that epoll cannot watch (a file,
  // /dev/null) is ignored and only a signal ends it.
  bool stdin_watched = watch(STDIN_FILENO, kStdin);
  int timer = -1;
  if (every) {
    timer = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    itimerspec period{{1, 0}, {1, 0}};
    ::timerfd_settime(timer, 0, &period, nullptr);
    watch(timer, kTimer);
  }
  (void)stdin_watched;

  Sink sink(match);
  std::unordered_map<int, std::unique_ptr<Connection>> connections;
  std::vector<epoll_event> events(256);
  bool running = true;
  while (running) {
    int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait");
    }
    double received = wall_seconds();  // one clock reading per wakeup, not per point
    for (int e = 0; e < n; ++e) {
      std::uint64_t tag = events[e].data.u64;
      if (tag == kListener) {
        for (;;) {
          sockaddr_in peer{};
          socklen_t peer_length = sizeof peer;
          int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&peer), &peer_length, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) break;
          auto connection = std::make_unique<Connection>();
          connection->fd = fd;
          char text[INET_ADDRSTRLEN] = "?";
          ::inet_ntop(AF_INET, &peer.sin_addr, text, sizeof text);
          connection->peer = std::string(text) + ":" + std::to_string(ntohs(peer.sin_port));
          ++sink.totals().connections;
          watch(fd, static_cast<std::uint64_t>(fd));
          connections[fd] = std::move(connection);
        }
      } else if (tag == kSignal) {
        running = false;
      } else if (tag == kStdin) {
        char input[256];
        ssize_t got = ::read(STDIN_FILENO, input, sizeof input);
        if (got <= 0) running = false;
        // "start" / "end" lines (their first letters) bound the measurement window.
        for (ssize_t i = 0; i < got; ++i) {
          if (input[i] == 's') sink.totals().in_window = true;
          if (input[i] == 'e') sink.totals().in_window = false;
        }
      } else if (tag == kTimer) {
        std::uint64_t expirations;
        [[maybe_unused]] auto got = ::read(timer, &expirations, sizeof expirations);
        std::cout << sink.report(false).dump() << std::endl;
      } else {
        auto found = connections.find(static_cast<int>(tag));
        if (found == connections.end()) continue;
        Connection& c = *found->second;
        bool closed = false;
        for (int reads = 0; reads < 16; ++reads) {  // bounded, so one busy peer cannot starve the others
          ssize_t got = ::read(c.fd, &c.buffer[c.end], c.buffer.size() - c.end);
          if (got > 0) {
            sink.totals().bytes += static_cast<std::uint64_t>(got);
            c.end += static_cast<std::size_t>(got);
            sink.parse(c, received);
            continue;
          }
          if (got == 0 || (errno != EAGAIN && errno != EINTR)) closed = true;
          break;
        }
        if (closed) {
          if (c.end > c.begin && !c.broken)
            std::cerr << "carbon_sink: " << c.peer << " closed with " << c.end - c.begin
                      << " byte(s) of an incomplete frame or line\n";
          ::close(c.fd);
          connections.erase(found);
        }
      }
    }
  }
  // Whatever is already in the socket buffers still counts, also on connections not accepted yet.
  for (;;) {
    int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    connection->peer = "a connection accepted at exit";
    ++sink.totals().connections;
    connections[fd] = std::move(connection);
  }
  for (auto& [fd, connection] : connections) {
    for (;;) {
      ssize_t got = ::read(fd, &connection->buffer[connection->end], connection->buffer.size() - connection->end);
      if (got <= 0) break;
      sink.totals().bytes += static_cast<std::uint64_t>(got);
      connection->end += static_cast<std::size_t>(got);
      sink.parse(*connection, wall_seconds());
    }
    ::close(fd);
  }
  std::cout << sink.report(true).dump() << std::endl;
  return 0;
}
