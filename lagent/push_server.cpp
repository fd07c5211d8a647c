#include "push_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "agent_config.h"
#include "jobs.h"
#include "pushed_metrics.h"

namespace fructosa::agent {
namespace {

namespace asio = boost::asio;
using stream = asio::local::stream_protocol;

// Errors listed per connection; the `done` line counts the rest.
constexpr std::size_t kMaxErrorLines = 20;
// How long a refused connection waits for its client to close before lagent closes it.
constexpr std::chrono::seconds kRefusedLinger{10};

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::runtime_error failure(const std::string& path, const std::string& what) {
  return std::runtime_error(fmt::format("push socket {}: {}", path, what));
}

sockaddr_un address_of(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) throw failure(path, "the path is too long for a unix socket");
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

// A socket file left by an lagent that died is replaced; one an lagent still listens on is not.
void remove_stale_socket(const std::string& path, const sockaddr_un& address) {
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0) return;
  if (!S_ISSOCK(status.st_mode)) throw failure(path, "exists and is not a socket");
  int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool live = probe >= 0 && ::connect(probe, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  if (probe >= 0) ::close(probe);
  if (live) throw failure(path, "another process (another lagent?) listens on it");
  ::unlink(path.c_str());
}

// Listening, mode 0666: any process on the node may push; what it pushes is its own job's.
int listen_on(const std::string& path, dev_t& device, ino_t& inode) {
  auto address = address_of(path);
  std::error_code error;
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::exists(parent, error)) {
    std::filesystem::create_directories(parent, error);
    if (error) throw failure(path, fmt::format("cannot create {}: {}", parent.string(), error.message()));
    ::chmod(parent.c_str(), 0755);
  }
  remove_stale_socket(path, address);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw failure(path, std::strerror(errno));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::chmod(path.c_str(), 0666) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd);
    throw failure(path, why);
  }
  struct stat status {};
  ::stat(path.c_str(), &status);
  device = status.st_dev;
  inode = status.st_ino;
  return fd;
}

// A line longer than parse_push_line takes, standing for one that was too long to keep.
std::string_view too_long_line() {
  static const std::string line(sensors::kMaxPushLineLength + 1, 'x');
  return line;
}

}  // namespace

struct PushServer::Impl {
  struct Connection;

  explicit Impl(PushServerSettings settings_in) : settings(std::move(settings_in)), acceptor(io) {
    int fd = listen_on(settings.socket_path, device, inode);
    acceptor.assign(stream(), fd);
    accept();
    thread = std::thread([this] { io.run(); });
  }

  ~Impl() {
    io.stop();
    if (thread.joinable()) thread.join();
    connections.clear();
    boost::system::error_code ignored;
    acceptor.close(ignored);
    // Only this server's file: a newer lagent may have taken the path since.
    struct stat status {};
    if (::stat(settings.socket_path.c_str(), &status) == 0 && status.st_dev == device && status.st_ino == inode)
      ::unlink(settings.socket_path.c_str());
  }

  void accept();
  void start(std::shared_ptr<Connection> connection);

  PushServerSettings settings;
  asio::io_context io;
  stream::acceptor acceptor;
  std::set<std::shared_ptr<Connection>> connections;  // io thread
  std::map<uid_t, std::size_t> connections_of;        // io thread: open connections per user
  std::thread thread;
  dev_t device = 0;
  ino_t inode = 0;
};

struct PushServer::Impl::Connection : std::enable_shared_from_this<Connection> {
  Connection(Impl& server_in, stream::socket socket_in)
      : server(server_in), socket(std::move(socket_in)), linger_timer(server_in.io) {}

  Impl& server;
  stream::socket socket;
  std::optional<uid_t> uid;  // counted in connections_of until closed
  asio::steady_timer linger_timer;  // a refused connection's last wait for its client to close
  bool refused_connection = false;
  std::uint64_t job = 0;
  std::array<char, 65536> buffer{};
  std::string partial;      // the start of a line the next read ends
  bool discarding = false;  // the line being read is too long: skipped up to its '\n'
  std::string joined;       // partial + the end that came, for this read's first line
  std::vector<std::string_view> lines;
  std::size_t lines_read = 0;
  std::size_t accepted = 0, refused = 0, dropped = 0, errors_listed = 0;
  std::string reply;  // waiting to be written
  std::string writing;
  bool close_after_reply = false;

  void close() {
    boost::system::error_code ignored;
    socket.close(ignored);
    linger_timer.cancel();
    if (uid) {
      auto count = server.connections_of.find(*uid);
      if (count != server.connections_of.end() && --count->second == 0) server.connections_of.erase(count);
      uid.reset();
    }
    server.connections.erase(shared_from_this());
  }

  void refuse_connection(const std::string& why) {
    reply = kPushRefusedPrefix + why + "\n";
    close_after_reply = true;
    refused_connection = true;
    write();
  }

  // A refused client may still be writing: closing with its lines unread would make the kernel
  // reset the connection, and the client could lose the reason. The reason is followed by EOF
  // and what the client writes meanwhile is read and ignored until it closes (or kRefusedLinger).
  void linger() {
    boost::system::error_code ignored;
    socket.shutdown(stream::socket::shutdown_send, ignored);
    linger_timer.expires_after(kRefusedLinger);
    linger_timer.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
      if (!error) self->close();
    });
    discard();
  }

  void discard() {
    socket.async_read_some(asio::buffer(buffer), [self = shared_from_this()](const boost::system::error_code& error,
                                                                             std::size_t) {
      if (error) {
        if (error != asio::error::operation_aborted) self->close();
        return;
      }
      self->discard();
    });
  }

  void read() {
    socket.async_read_some(asio::buffer(buffer), [self = shared_from_this()](const boost::system::error_code& error,
                                                                             std::size_t size) {
      if (error == asio::error::eof) {
        self->end_of_lines();
        return;
      }
      if (error) {
        if (error != asio::error::operation_aborted) self->close();
        return;
      }
      self->take(std::string_view(self->buffer.data(), size));
      self->read();
    });
  }

  // The complete lines of one read go to the store together (one lock).
  void take(std::string_view data) {
    lines.clear();
    joined.clear();
    for (;;) {
      auto newline = data.find('\n');
      if (newline == std::string_view::npos) {
        if (!discarding && partial.size() + data.size() > sensors::kMaxPushLineLength) {
          discarding = true;
          partial.clear();
        }
        if (!discarding) partial.append(data);
        break;
      }
      std::string_view line = data.substr(0, newline);
      data.remove_prefix(newline + 1);
      if (discarding) {
        lines.push_back(too_long_line());
        discarding = false;
      } else if (!partial.empty()) {
        joined = std::move(partial);  // only a read's first line can continue an earlier one
        partial.clear();
        joined.append(line);
        lines.push_back(joined);
      } else {
        lines.push_back(line);
      }
    }
    push_lines();
  }

  void push_lines() {
    if (lines.empty()) return;
    std::size_t first = lines_read;
    lines_read += lines.size();
    accepted += sensors::PushedMetrics::instance().push(
        job, lines, steady_ns(), [&](std::size_t i, sensors::PushRefusal why, std::string_view reason) {
          (why == sensors::PushRefusal::malformed ? refused : dropped) += 1;
          if (errors_listed++ < kMaxErrorLines)
            reply += fmt::format("{}{}: {}\n", kPushErrorPrefix, first + i + 1, reason);
        });
    write();
  }

  // The client shut its side: a last line without '\n' counts, then the tally.
  void end_of_lines() {
    lines.clear();
    if (discarding)
      lines.push_back(too_long_line());
    else if (!partial.empty())
      lines.push_back(partial);
    push_lines();
    reply += fmt::format("{}accepted={} refused={} dropped={}\n", kPushDonePrefix, accepted, refused, dropped);
    close_after_reply = true;
    write();
  }

  // One write at a time; a client that never reads gets at most the few listed errors queued.
  void write() {
    if (!writing.empty()) return;
    if (reply.empty()) {
      if (close_after_reply) refused_connection ? linger() : close();
      return;
    }
    writing = std::move(reply);
    reply.clear();
    asio::async_write(socket, asio::buffer(writing), [self = shared_from_this()](const boost::system::error_code& error,
                                                                                  std::size_t) {
      self->writing.clear();
      if (error) {
        if (error != asio::error::operation_aborted) self->close();
        return;
      }
      self->write();
    });
  }
};

void PushServer::Impl::accept() {
  acceptor.async_accept([this](const boost::system::error_code& error, stream::socket socket) {
    if (error == asio::error::operation_aborted) return;
    if (!error) start(std::make_shared<Connection>(*this, std::move(socket)));
    else spdlog::warn("push socket {}: accept: {}", settings.socket_path, error.message());
    accept();
  });
}

void PushServer::Impl::start(std::shared_ptr<Connection> connection) {
  auto& pushed = sensors::PushedMetrics::instance();
  pushed.count_connection();
  connections.insert(connection);
  // Who is at the other end, as the kernel saw it at connect(): the pid is the job's proof.
  ucred peer{};
  socklen_t size = sizeof peer;
  if (::getsockopt(connection->socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.pid <= 0) {
    connection->refuse_connection("lagent cannot tell which process connected");
    return;
  }
  // One user's idle connections cannot take every other user's place.
  connection->uid = peer.uid;
  std::size_t of_user = ++connections_of[peer.uid];
  if (of_user > settings.max_connections_per_user) {
    connection->refuse_connection(fmt::format("uid {} has {} push connections open already", peer.uid,
                                              settings.max_connections_per_user));
    return;
  }
  if (connections.size() > settings.max_connections) {
    connection->refuse_connection(fmt::format("lagent serves {} push connections already", settings.max_connections));
    return;
  }
  connection->job = settings.jobs ? settings.jobs->job_of_pid(peer.pid) : 0;
  if (connection->job == 0 && !settings.allow_outside_jobs) {
    pushed.count_outside_job();
    spdlog::debug("push socket: refused pid {} (uid {}): in no job", peer.pid, peer.uid);
    connection->refuse_connection(fmt::format(
        "process {} is in no batch job on this node, and lagent takes pushes from jobs only "
        "([lagent] push_allow_outside_jobs = false)",
        peer.pid));
    return;
  }
  connection->read();
}

PushServer::PushServer(PushServerSettings settings) : impl_(std::make_unique<Impl>(std::move(settings))) {}

void update_push_server(std::unique_ptr<PushServer>& server, const AgentConfig& config,
                        const std::shared_ptr<sensors::JobDirectory>& jobs) {
  auto& pushed = sensors::PushedMetrics::instance();
  if (!config.push) {
    server.reset();
    pushed.close("no [sensor:User] section");
    return;
  }
  PushServerSettings settings{config.push_socket, config.push_allow_outside_jobs, jobs};
  if (server && server->settings().socket_path == settings.socket_path &&
      server->settings().allow_outside_jobs == settings.allow_outside_jobs && server->settings().jobs == jobs) {
    pushed.open(config.push_limits);
    return;
  }
  server.reset();  // the path is free again before it is bound anew
  try {
    server = std::make_unique<PushServer>(settings);
  } catch (const std::exception& error) {
    spdlog::error("{}; nothing can be pushed, and [sensor:User] is unavailable", error.what());
    pushed.close(error.what());
    return;
  }
  pushed.open(config.push_limits);
  spdlog::info("push socket {}: listening (mode 0666); what a process pushes is its job's ({} jobs, {} names per "
               "job, {} lines per second per job)",
               settings.socket_path, settings.allow_outside_jobs ? "also outside" : "only from",
               config.push_limits.max_names_per_job, config.push_limits.max_lines_per_second);
}

PushServer::~PushServer() = default;

const PushServerSettings& PushServer::settings() const { return impl_->settings; }

}  // namespace fructosa::agent
