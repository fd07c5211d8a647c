#include "zap_handler.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "agent_identity.h"
#include "curve.h"
#include "handshake_failures.h"
#include "master_config.h"
#include "refusal_log.h"

namespace fructosa::master {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";  // fixed by RFC 27
constexpr const char* kMonitorEndpoint = "inproc://fructosa-curve-monitor";
// The allow-list directory is listed at most this often, whatever comes: known keys, and unknown
// ones (which anyone who can reach the port can make up by the thousand).
constexpr auto kRescanEvery = std::chrono::seconds(1);
// A ZAP request has 7 frames for CURVE; anything much longer is not from libzmq.
constexpr std::size_t kMaxZapFrames = 16;

std::string frame_text(const zmq::message_t& frame) { return std::string(frame.data<char>(), frame.size()); }

std::string z85_of(const zmq::message_t& frame) {
  if (frame.size() != 32) return "(a credential of " + std::to_string(frame.size()) + " bytes)";
  char text[curve::kZ85KeyLength + 1] = {};
  zmq_z85_encode(text, frame.data<std::uint8_t>(), frame.size());
  return text;
}

// "ip:port" of a connected TCP socket, or nothing when it is gone already.
std::optional<std::string> peer_of(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) return std::nullopt;
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return fmt::format("{}:{}", text, ntohs(in->sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof text);
    return fmt::format("[{}]:{}", text, ntohs(in->sin6_port));
  }
  return std::nullopt;
}

// The host part of "ip:port" / "[ip6]:port" (refusals are rate-limited per host: ports change
// with every reconnection).
std::string host_of(const std::string& address) {
  if (!address.empty() && address.front() == '[') return address.substr(1, address.find(']') - 1);
  auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

std::string describe_protocol_error(std::uint32_t code) {
  switch (code) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      return "it does not use CURVE (an lagent without curve_server_key / curve_server_public_key_file?)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
      return "its CURVE handshake does not decrypt (it was given another public key for this lmaster)";
    default:
      return fmt::format("ZMTP handshake protocol error 0x{:08x}", code);
  }
}

}  // namespace

// (Outside the anonymous namespace: ZapHandler::State holds one, and in a unity build GCC warns
// of a member whose type has internal linkage. No other file has a class of this name.)
// The public keys in the allow-list directory, read again when its listing (names, sizes,
// modification times) changes. The listing is looked at for every key that asks to be let in
// and for every hello lmaster checks (agent_identity.h), at most once per kRescanEvery: a key
// removed is noticed at its next connection, one added counts at most a second later (lagent
// tries again by itself after a refusal).
class AllowList {
 public:
  explicit AllowList(std::string directory) : directory_(std::move(directory)) {}

  const std::string& directory() const { return directory_; }

  struct Entry {
    std::string file;  // NAME.pub
    KeyHosts hosts;
  };

  // The allow-list entry of a Z85 public key, or nothing.
  std::optional<Entry> find(const std::string& key) {
    refresh();
    auto it = keys_.find(key);
    if (it == keys_.end()) return std::nullopt;
    return it->second;
  }

  // What the key named `name` (its .pub file's stem) speaks for, or nothing when it is not allowed.
  std::optional<KeyHosts> find_name(const std::string& name) {
    refresh();
    for (const auto& [key, entry] : keys_)
      if (entry.hosts.name == name) return entry.hosts;
    return std::nullopt;
  }

  std::uint64_t scans() const { return scans_; }

  std::size_t size() const { return keys_.size(); }

  void refresh(bool force = false) {
    auto now = Clock::now();
    if (!force && now - checked_ < kRescanEvery) return;
    checked_ = now;
    ++scans_;
    std::error_code error;
    std::string listing;
    std::vector<fs::path> files;
    for (fs::directory_iterator it(directory_, error), end; !error && it != end; it.increment(error)) {
      const auto& path = it->path();
      std::string name = path.filename().string();
      if (name.empty() || name.front() == '.') continue;  // editors' and tools' temporary files
      auto status = fs::status(path, error);
      if (error) break;
      if (!fs::is_regular_file(status)) continue;
      auto size = fs::file_size(path, error);
      auto time = fs::last_write_time(path, error);
      if (error) break;
      listing += fmt::format("{}\n{}\n{}\n", name, size, time.time_since_epoch().count());
      files.push_back(path);
    }
    if (error) {
      // Fail closed: an allow-list that cannot be read lets no one in.
      if (!failed_)
        spdlog::error("CURVE allow-list {}: {}; refusing every agent until it can be read", directory_,
                      error.message());
      failed_ = true;
      keys_.clear();
      listing_.clear();
      return;
    }
    if (!failed_ && listing == listing_) return;
    failed_ = false;
    listing_ = std::move(listing);
    load(files);
  }

 private:
  void load(std::vector<fs::path> files) {
    std::sort(files.begin(), files.end());
    std::map<std::string, Entry> keys;
    std::size_t skipped = 0;
    for (const auto& path : files) {
      std::string name = path.filename().string();
      if (path.extension() != ".pub") {
        if (path.extension() == ".key")
          spdlog::warn("CURVE allow-list: ignoring {}: only *.pub files are read (and an agent's secret .key file "
                       "belongs on that agent only)",
                       path.string());
        else
          spdlog::info("CURVE allow-list: ignoring {}: only *.pub files are read", path.string());
        ++skipped;
        continue;
      }
      curve::KeyFile file;
      try {
        file = curve::read_key_file(path.string());
      } catch (const std::exception& error) {
        spdlog::error("CURVE allow-list: ignoring {}", error.what());
        ++skipped;
        continue;
      }
      if (!file.secret_key.empty())
        spdlog::warn("CURVE allow-list: {} holds a secret key; only its public key is used (copy the agent's .pub "
                     "file instead, and keep secret keys on their own host)",
                     path.string());
      std::string key = file.public_key.empty() ? curve::public_key_of(file.secret_key) : file.public_key;
      Entry entry{name, {path.stem().string(), {}}};
      try {
        entry.hosts.patterns = read_host_patterns(path.string()).value_or(std::vector<std::string>{});
      } catch (const std::exception& error) {
        spdlog::error("CURVE allow-list: ignoring {}", error.what());
        ++skipped;
        continue;
      }
      auto [it, added] = keys.emplace(key, std::move(entry));
      if (!added) spdlog::warn("CURVE allow-list: {} holds the same key as {}", path.string(), it->second.file);
    }
    keys_ = std::move(keys);
    spdlog::info("CURVE allow-list {}: {} agent key(s){}", directory_, keys_.size(),
                 skipped ? fmt::format(" ({} file(s) ignored)", skipped) : "");
  }

  const std::string directory_;
  std::map<std::string, Entry> keys_;  // by Z85 public key
  std::string listing_;
  Clock::time_point checked_;
  std::uint64_t scans_ = 0;
  bool failed_ = false;
};

struct ZapHandler::State {
  State(zmq::context_t& context_in, std::string directory, std::string public_key_in, std::string secret_key_in)
      : context(context_in),
        public_key(std::move(public_key_in)),
        secret_key(std::move(secret_key_in)),
        allowed(std::move(directory)),
        zap(context, zmq::socket_type::rep) {}

  zmq::context_t& context;
  const std::string public_key;
  const std::string secret_key;
  std::mutex allowed_mutex;  // the handler's thread and lmaster's (key_hosts()) both read it
  AllowList allowed;
  RefusalLog refusals;
  // Connections closed during the handshake, at info: port scans and health checks do that, and
  // so does an lagent without CURVE when lmaster's whole greeting reaches it before it sent its
  // own (libzmq then closes without sending its mechanism: lmaster cannot tell it from a scan).
  RefusalLog unfinished{[](const std::string& line) { spdlog::info("{}", line); }};
  zmq::socket_t zap;
  std::optional<zmq::socket_t> monitor;
  int stop_fd = -1;
  std::thread thread;

  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> rejected{0};
  std::atomic<std::uint64_t> failed_handshakes{0};

  // Which peer each handshake failure came from (the events do not say).
  HandshakeFailures handshakes;

  void run() {
    for (;;) {
      zmq::pollitem_t items[] = {{zap.handle(), 0, ZMQ_POLLIN, 0},
                                 {monitor->handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, stop_fd, ZMQ_POLLIN, 0}};
      auto next = refusals.flush();
      if (auto due = unfinished.flush(); due && (!next || *due < *next)) next = due;
      long timeout = -1;
      if (next)
        timeout = std::max<long>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(*next - Clock::now()).count() + 1);
      try {
        zmq::poll(items, 3, std::chrono::milliseconds(timeout));
        if (items[2].revents & ZMQ_POLLIN) return;
        if (items[0].revents & ZMQ_POLLIN) serve_request();
        if (items[1].revents & ZMQ_POLLIN) read_events();
      } catch (const zmq::error_t& error) {
        if (error.num() == ETERM) return;
        // Keep serving: while this thread runs, unknown keys stay out.
        spdlog::error("CURVE ZAP handler: {}", error.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // no busy loop on a persistent error
      } catch (const std::exception& error) {
        spdlog::error("CURVE ZAP handler: {}", error.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }

  void reply(const zmq::message_t& request_id, std::string_view status, std::string_view text,
             std::string_view user_id) {
    zmq::message_t id(request_id.data(), request_id.size());
    zap.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
    zap.send(id, zmq::send_flags::sndmore);
    zap.send(zmq::buffer(status), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(text), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(user_id), zmq::send_flags::sndmore);
    zap.send(zmq::message_t(), zmq::send_flags::none);  // no metadata
  }

  // One RFC 27 request: version, request id, domain, address, identity, mechanism, credentials.
  void serve_request() {
    std::vector<zmq::message_t> frames;
    do {
      zmq::message_t frame;
      if (!zap.recv(frame, zmq::recv_flags::dontwait)) break;
      if (frames.size() < kMaxZapFrames) frames.push_back(std::move(frame));
    } while (zap.get(zmq::sockopt::rcvmore));
    if (frames.size() < 6 || frame_text(frames[0]) != "1.0") {
      // REP must answer something; libzmq treats a malformed request's 500 as a refusal.
      spdlog::error("CURVE ZAP handler: malformed request ({} frames)", frames.size());
      zmq::message_t none;
      reply(frames.size() > 1 ? frames[1] : none, "500", "malformed ZAP request", "");
      return;
    }
    std::string address = frame_text(frames[3]);
    std::string mechanism = frame_text(frames[5]);
    if (mechanism != "CURVE" || frames.size() < 7) {
      ++rejected;
      refusals.refuse(address + "\nmechanism " + mechanism,
                      fmt::format("CURVE: refused a peer at {}: it does not use CURVE (ZMTP mechanism {})", address,
                                  mechanism));
      reply(frames[1], "400", "CURVE required", "");
      return;
    }
    std::string key = z85_of(frames[6]);
    std::optional<AllowList::Entry> entry;
    {
      std::lock_guard lock(allowed_mutex);
      entry = allowed.find(key);
    }
    if (entry) {
      ++accepted;
      spdlog::info("CURVE: agent at {} let in (key {} from {})", address, key, entry->file);
      // The User-Id of every message of this connection (agent_identity.h: what it may send as).
      reply(frames[1], "200", "OK", entry->hosts.name);
      return;
    }
    ++rejected;
    // One line a minute per address, whatever the number of keys it tries.
    refusals.refuse(address + "\nunknown key",
                    fmt::format("CURVE: refused an agent at {}: its public key {} is not in the allow-list {} "
                                "(copy its .pub file there to let it in)",
                                address, key, allowed.directory()));
    reply(frames[1], "400", "public key not allowed", "");
  }

  // Socket monitor events (v1: a 6-byte frame with event and value, then the endpoint).
  void read_events() {
    for (;;) {
      zmq::message_t header;
      if (!monitor->recv(header, zmq::recv_flags::dontwait)) return;
      zmq::message_t endpoint;
      if (header.more()) {
        while (monitor->recv(endpoint, zmq::recv_flags::dontwait) && endpoint.more()) {
        }
      }
      if (header.size() < 6) continue;
      std::uint16_t event = 0;
      std::uint32_t value = 0;
      std::memcpy(&event, header.data<char>(), sizeof event);
      std::memcpy(&value, header.data<char>() + 2, sizeof value);
      handle_event(event, value);
    }
  }

  void handle_event(std::uint16_t event, std::uint32_t value) {
    switch (event) {
      case ZMQ_EVENT_ACCEPTED:
        // Read now: the socket may be closed soon after (a refused handshake is quick). If it is
        // gone already, the refusal is logged without a port.
        handshakes.accepted(static_cast<int>(value), peer_of(static_cast<int>(value)));
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        handshakes.failed(event, value);
        break;
      case ZMQ_EVENT_DISCONNECTED:
        if (auto failure = handshakes.disconnected(static_cast<int>(value)))
          report_failure(failure->event, failure->value, failure->peer);
        break;
      default:
        break;
    }
  }

  void report_failure(std::uint16_t event, std::uint32_t value, const std::string& peer) {
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      spdlog::debug("CURVE: handshake with {} refused by ZAP (status {})", peer, value);  // logged by ZAP
      return;
    }
    ++failed_handshakes;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      // Closed during the handshake: a port scan, a health check, a peer that gave up, or an
      // lagent without CURVE that read lmaster's greeting first (see `unfinished`).
      unfinished.refuse(host_of(peer) + "\nunfinished",
                        fmt::format("CURVE: a peer at {} closed the connection before the handshake finished ({}): "
                                    "an lagent without curve_server_key / curve_server_public_key_file does so, "
                                    "as do port scans and TCP health checks",
                                    peer, zmq_strerror(static_cast<int>(value))));
      return;
    }
    std::string reason = describe_protocol_error(value);
    refusals.refuse(host_of(peer) + '\n' + reason, fmt::format("CURVE: refused a peer at {}: {}", peer, reason));
  }
};

ZapHandler::ZapHandler(zmq::context_t& context, std::string allowed_keys_dir, std::string public_key,
                       std::string secret_key)
    : state_(std::make_unique<State>(context, std::move(allowed_keys_dir), std::move(public_key),
                                     std::move(secret_key))) {
  curve::require("[lmaster] curve = true");
  auto& s = *state_;
  s.zap.set(zmq::sockopt::linger, 0);
  try {
    s.zap.bind(kZapEndpoint);
  } catch (const zmq::error_t& error) {
    throw std::runtime_error(fmt::format("cannot start the CURVE ZAP handler on {}: {}", kZapEndpoint, error.what()));
  }
  s.allowed.refresh(true);
  s.stop_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.stop_fd < 0) throw std::runtime_error(fmt::format("eventfd: {}", std::strerror(errno)));
}

ZapHandler::~ZapHandler() {
  auto& s = *state_;
  if (s.thread.joinable()) {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(s.stop_fd, &one, sizeof one);
    s.thread.join();
  }
  ::close(s.stop_fd);
}

void ZapHandler::secure(zmq::socket_t& server) {
  auto& s = *state_;
  if (s.thread.joinable()) throw std::logic_error("ZapHandler::secure called twice");
  server.set(zmq::sockopt::curve_server, true);
  server.set(zmq::sockopt::curve_secretkey, s.secret_key);
  server.set(zmq::sockopt::curve_publickey, s.public_key);
  server.set(zmq::sockopt::zap_domain, "fructosa");
  if (zmq_socket_monitor(server.handle(), kMonitorEndpoint,
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
    throw std::runtime_error(fmt::format("cannot monitor the agents' socket: {}", zmq_strerror(zmq_errno())));
  s.monitor.emplace(s.context, zmq::socket_type::pair);
  s.monitor->set(zmq::sockopt::linger, 0);
  s.monitor->connect(kMonitorEndpoint);
  spdlog::info("CURVE on: lmaster public key {}; agents let in: the *.pub keys in {} ({} now)", s.public_key,
               s.allowed.directory(), s.allowed.size());
  // The sockets move to the new thread here (thread creation orders the memory, as ZeroMQ
  // requires for handing a socket over); from now on only that thread touches them.
  s.thread = std::thread([&s] { s.run(); });
}

CurveCounters ZapHandler::counters() const {
  std::lock_guard lock(state_->allowed_mutex);
  return {state_->accepted.load(), state_->rejected.load(), state_->failed_handshakes.load(),
          state_->allowed.scans()};
}

std::optional<KeyHosts> ZapHandler::key_hosts(const std::string& name) {
  std::lock_guard lock(state_->allowed_mutex);
  return state_->allowed.find_name(name);
}

std::unique_ptr<ZapHandler> start_curve(zmq::context_t& context, const MasterConfig& config) {
  if (!config.curve) return nullptr;
  return std::make_unique<ZapHandler>(context, config.curve_allowed_keys_dir, config.curve_public_key,
                                      config.curve_secret_key);
}

}  // namespace fructosa::master
