// A counting Prometheus remote_write 1.0 receiver for benchmarks: listens on 127.0.0.1, answers
// every POST with 204 (as Prometheus does) after decoding its body (snappy block format, then the
// WriteRequest protobuf) and counting the samples. One thread per connection (lmaster's output
// keeps one connection); HTTP/1.1 keep-alive, Content-Length bodies.
//
//   remote_write_sink [--port N] [--match PREFIX] [--every]
//
// Prints the port it listens on (a line with the number) first; then, when stdin reaches its end
// or on SIGTERM/SIGINT, one JSON line as bench/carbon_sink prints it: points (samples), matched
// (samples whose `host` label starts with PREFIX; all without --match), requests, series, bad
// requests, and the latency of the matched samples (receive wall time - the sample's timestamp)
// p50/p99/max ("latency_s", and "window_latency_s" between lines "start" and "end" on stdin).
// --every prints the line (with "final": false) every second.
//
// The protobuf is walked field by field (WriteRequest.timeseries = 1; TimeSeries.labels = 1,
// .samples = 2; Label.name = 1, .value = 2; Sample.value = 1, .timestamp = 2), nothing copied:
// counting must cost the sink far less than encoding costs lmaster. Bounded: a body over 64 MiB
// or headers over 64 KiB close the connection; a body that does not decode is answered 400 and
// counted.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <snappy.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Latency histogram of 100 us buckets up to 10 minutes (later ones in the last bucket).
struct Latency {
  std::vector<std::uint64_t> buckets = std::vector<std::uint64_t>(6'000'000 + 1);
  std::uint64_t count = 0;
  double max = 0;
  void add(double seconds, std::uint64_t n) {
    auto index = static_cast<std::size_t>(std::clamp(seconds, 0.0, 600.0) * 1e4);
    buckets[std::min(index, buckets.size() - 1)] += n;
    count += n;
    max = std::max(max, seconds);
  }
  nlohmann::json json() const {
    auto quantile = [&](double q) {
      auto want = static_cast<std::uint64_t>(q * static_cast<double>(count));
      std::uint64_t seen = 0;
      for (std::size_t i = 0; i < buckets.size(); ++i)
        if ((seen += buckets[i]) > want) return static_cast<double>(i) / 1e4;
      return max;
    };
    if (count == 0) return {{"count", 0}};
    return {{"count", count}, {"p50", quantile(0.5)}, {"p99", quantile(0.99)}, {"max", max}};
  }
};

struct Totals {
  std::atomic<std::uint64_t> points{0}, matched{0}, requests{0}, series{0}, bad{0}, connections{0};
  std::mutex latency_mutex;
  Latency latency, window_latency;
  std::atomic<bool> in_window{false};
  std::string match;
};

struct Reader {
  const char* at;
  const char* end;
  bool ok = true;
  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64 && at < end; shift += 7) {
      auto byte = static_cast<std::uint8_t>(*at++);
      value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return value;
    }
    ok = false;
    return 0;
  }
  // A length-delimited field's bytes.
  std::string_view bytes() {
    std::uint64_t size = varint();
    if (!ok || size > static_cast<std::uint64_t>(end - at)) return ok = false, std::string_view();
    std::string_view out(at, size);
    at += size;
    return out;
  }
  void skip(std::uint32_t wire_type) {
    switch (wire_type) {
      case 0: varint(); return;
      case 1: at + 8 <= end ? at += 8 : (ok = false, at); return;
      case 2: bytes(); return;
      case 5: at + 4 <= end ? at += 4 : (ok = false, at); return;
      default: ok = false;
    }
  }
};

// Counts one WriteRequest's samples; false when it does not parse.
bool count_request(std::string_view body, Totals& totals, double now, std::vector<std::int64_t>& stamps) {
  Reader request{body.data(), body.data() + body.size()};
  std::uint64_t points = 0, matched = 0, series = 0;
  stamps.clear();
  while (request.ok && request.at < request.end) {
    std::uint64_t tag = request.varint();
    if (tag != ((1 << 3) | 2)) {
      request.skip(static_cast<std::uint32_t>(tag & 7));
      continue;
    }
    std::string_view one = request.bytes();
    Reader ts{one.data(), one.data() + one.size()};
    bool host_matches = totals.match.empty();
    std::size_t first_stamp = stamps.size();
    std::uint64_t samples = 0;
    while (ts.ok && ts.at < ts.end) {
      std::uint64_t field = ts.varint();
      if (field == ((1 << 3) | 2)) {  // Label
        std::string_view label = ts.bytes();
        Reader l{label.data(), label.data() + label.size()};
        std::string_view name, value;
        while (l.ok && l.at < l.end) {
          std::uint64_t f = l.varint();
          if (f == ((1 << 3) | 2)) name = l.bytes();
          else if (f == ((2 << 3) | 2)) value = l.bytes();
          else l.skip(static_cast<std::uint32_t>(f & 7));
        }
        if (!l.ok) return false;
        if (name == "host" && value.starts_with(totals.match)) host_matches = true;
      } else if (field == ((2 << 3) | 2)) {  // Sample
        std::string_view sample = ts.bytes();
        Reader s{sample.data(), sample.data() + sample.size()};
        std::int64_t stamp = 0;
        while (s.ok && s.at < s.end) {
          std::uint64_t f = s.varint();
          if (f == ((2 << 3) | 0)) stamp = static_cast<std::int64_t>(s.varint());
          else s.skip(static_cast<std::uint32_t>(f & 7));
        }
        if (!s.ok) return false;
        ++samples;
        stamps.push_back(stamp);
      } else {
        ts.skip(static_cast<std::uint32_t>(field & 7));
      }
    }
    if (!ts.ok) return false;
    ++series;
    points += samples;
    if (host_matches) matched += samples;
    else stamps.resize(first_stamp);  // latency of matched samples only
  }
  if (!request.ok) return false;
  totals.points += points;
  totals.matched += matched;
  totals.series += series;
  std::lock_guard lock(totals.latency_mutex);
  bool window = totals.in_window.load();
  for (auto stamp : stamps) {
    double seconds = now - static_cast<double>(stamp) / 1e3;
    totals.latency.add(seconds, 1);
    if (window) totals.window_latency.add(seconds, 1);
  }
  return true;
}

void serve(int fd, Totals& totals) {
  ++totals.connections;
  std::string in;
  std::string body;
  std::vector<std::int64_t> stamps;
  char buffer[1 << 16];
  auto fill = [&]() {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got <= 0) return false;
    in.append(buffer, static_cast<std::size_t>(got));
    return true;
  };
  while (true) {
    std::size_t header_end;
    while ((header_end = in.find("\r\n\r\n")) == std::string::npos) {
      if (in.size() > 65536 || !fill()) return (void)::close(fd);
    }
    std::string headers = in.substr(0, header_end);
    for (char& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto length_at = headers.find("\r\ncontent-length:");
    std::size_t length = length_at == std::string::npos ? 0 : std::stoul(headers.substr(length_at + 17));
    if (length > (64u << 20)) return (void)::close(fd);
    std::size_t total = header_end + 4 + length;
    while (in.size() < total)
      if (!fill()) return (void)::close(fd);
    std::string_view compressed(in.data() + header_end + 4, length);
    body.clear();
    size_t size = 0;
    bool ok = snappy::GetUncompressedLength(compressed.data(), compressed.size(), &size) && size <= (256u << 20) &&
              snappy::Uncompress(compressed.data(), compressed.size(), &body) &&
              count_request(body, totals, wall_seconds(), stamps);
    ++totals.requests;
    if (!ok) ++totals.bad;
    const char* answer = ok ? "HTTP/1.1 204 No Content\r\n\r\n"
                            : "HTTP/1.1 400 Bad Request\r\nContent-Length: 12\r\n\r\nbad request\n";
    if (::send(fd, answer, std::strlen(answer), MSG_NOSIGNAL) < 0) return (void)::close(fd);
    in.erase(0, total);
  }
}

nlohmann::json report(Totals& totals, bool final) {
  std::lock_guard lock(totals.latency_mutex);
  return {{"final", final},
          {"time_unix", wall_seconds()},
          {"points", totals.points.load()},
          {"matched", totals.matched.load()},
          {"requests", totals.requests.load()},
          {"series", totals.series.load()},
          {"bad_requests", totals.bad.load()},
          {"connections", totals.connections.load()},
          {"latency_s", totals.latency.json()},
          {"window_latency_s", totals.window_latency.json()}};
}

}  // namespace

int main(int argc, char** argv) {
  Totals totals;
  int port = 0;
  bool every = false;
  for (int i = 1; i < argc; ++i) {
    std::string option = argv[i];
    if (option == "--port" && i + 1 < argc) port = std::stoi(argv[++i]);
    else if (option == "--match" && i + 1 < argc) totals.match = argv[++i];
    else if (option == "--every") every = true;
    else {
      std::cerr << "usage: remote_write_sink [--port N] [--match PREFIX] [--every]\n";
      return 64;
    }
  }
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(listener, 64) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    std::cerr << "remote_write_sink: cannot listen on 127.0.0.1:" << port << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  // SIGTERM and SIGINT are taken by the main loop: blocked before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::cout << ntohs(address.sin_port) << std::endl;
  // Connections are served until the process exits: their threads are detached.
  std::thread([&] {
    while (true) {
      int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) std::thread(serve, fd, std::ref(totals)).detach();
    }
  }).detach();

  std::string line;
  auto next = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (true) {
    pollfd input{0, POLLIN, 0};
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
    int ready = ::poll(&input, 1, static_cast<int>(std::max<long>(0, wait.count())));
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGTERM) || sigismember(&pending, SIGINT)) break;
    if (ready > 0) {
      char c;
      ssize_t got = ::read(0, &c, 1);
      if (got <= 0) break;  // stdin closed: the end
      if (c != '\n') {
        line += c;
        continue;
      }
      if (line == "start") totals.in_window = true;
      if (line == "end") totals.in_window = false;
      line.clear();
    }
    if (std::chrono::steady_clock::now() >= next) {
      next += std::chrono::seconds(1);
      if (every) std::cout << report(totals, false).dump() << std::endl;
    }
  }
  std::cout << report(totals, true).dump() << std::endl;
  std::_Exit(0);  // detached connection threads may be blocked in read()
}
