#include "crashfs_control.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace crashfs {

namespace {

constexpr std::size_t kMaxLine = 4096;

std::optional<std::uint64_t> parse_number(const std::string& text) {
  std::uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::string cut(Filesystem& fs, const std::filesystem::path& backing, std::optional<std::uint64_t> seed) {
  Image image;
  {
    std::lock_guard lock(fs.mutex);
    if (fs.model.is_cut()) return "error already cut";
    image = fs.model.cut(seed);
  }
  // Written outside the lock: calls on the mount fail with EIO meanwhile rather than wait.
  try {
    write_image(image, backing);
  } catch (const std::exception& error) {
    std::cerr << "crashfs: cut: " << error.what() << '\n';
    return std::string("error cut: ") + error.what();
  }
  return seed ? "ok cut seed=" + std::to_string(*seed) : "ok cut";
}

bool send_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

std::string execute_command(Filesystem& fs, const std::filesystem::path& backing, const std::string& line) {
  std::istringstream stream(line);
  std::vector<std::string> words;
  for (std::string word; stream >> word;) words.push_back(word);
  if (words.empty()) return "error empty command";
  const std::string& command = words[0];
  if (command == "cut" && words.size() <= 2) {
    std::optional<std::uint64_t> seed;
    if (words.size() == 2 && !(seed = parse_number(words[1]))) return "error cut: not a seed: " + words[1];
    return cut(fs, backing, seed);
  }
  if (command == "capacity" && words.size() == 2) {
    std::optional<std::uint64_t> bytes;
    if (words[1] != "none" && !(bytes = parse_number(words[1])))
      return "error capacity: not a number of bytes: " + words[1];
    std::lock_guard lock(fs.mutex);
    fs.model.set_capacity(bytes);
    return "ok capacity " + words[1];
  }
  if (command == "fail-fsync" && words.size() == 2 && (words[1] == "on" || words[1] == "off")) {
    std::lock_guard lock(fs.mutex);
    fs.model.set_fail_fsync(words[1] == "on");
    return "ok fail-fsync " + words[1];
  }
  if (command == "stats" && words.size() == 1) {
    std::lock_guard lock(fs.mutex);
    return "ok " + fs.model.stats().to_string();
  }
  return "error unknown command: " + line + " (cut [SEED], capacity BYTES|none, fail-fsync on|off, stats)";
}

ControlServer::ControlServer(std::filesystem::path path, Handler handler)
    : path_(std::move(path)), handler_(std::move(handler)) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string name = path_.string();
  if (name.size() >= sizeof address.sun_path)
    throw std::runtime_error("control socket " + name + ": path longer than " + std::to_string(sizeof address.sun_path - 1) + " bytes");
  std::memcpy(address.sun_path, name.c_str(), name.size() + 1);
  struct stat st;
  if (::lstat(name.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) throw std::runtime_error("control socket " + name + ": exists and is not a socket");
    ::unlink(name.c_str());
  }
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error("control socket " + name + ": socket: " + std::strerror(errno));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(listen_fd_, 16) != 0) {
    int error = errno;
    ::close(listen_fd_);
    throw std::runtime_error("control socket " + name + ": " + std::strerror(error));
  }
  if (::pipe2(wake_fds_, O_CLOEXEC) != 0) {
    int error = errno;
    ::close(listen_fd_);
    ::unlink(name.c_str());
    throw std::runtime_error(std::string("control socket: pipe: ") + std::strerror(error));
  }
}

ControlServer::~ControlServer() {
  if (thread_.joinable()) {
    char byte = 0;
    while (::write(wake_fds_[1], &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  ::close(listen_fd_);
  ::close(wake_fds_[0]);
  ::close(wake_fds_[1]);
  ::unlink(path_.c_str());
}

void ControlServer::start() {
  sigset_t all, previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &previous);
  thread_ = std::thread([this] { serve(); });
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

void ControlServer::serve() {
  struct Client {
    int fd;
    std::string pending;  // received, up to its first newline not yet answered
  };
  std::vector<Client> clients;
  for (;;) {
    std::vector<pollfd> polled{{wake_fds_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const Client& client : clients) polled.push_back({client.fd, POLLIN, 0});
    if (::poll(polled.data(), polled.size(), -1) < 0) {
      if (errno == EINTR) continue;
      std::cerr << "crashfs: control socket: poll: " << std::strerror(errno) << '\n';
      break;
    }
    if (polled[0].revents) break;
    std::vector<Client> still_open;
    for (std::size_t i = 0; i < clients.size(); ++i) {
      Client& client = clients[i];
      bool open = true;
      if (polled[i + 2].revents) {
        char buffer[1024];
        ssize_t n = ::recv(client.fd, buffer, sizeof buffer, 0);
        if (n <= 0 && !(n < 0 && errno == EINTR)) {
          open = false;
        } else if (n > 0) {
          client.pending.append(buffer, static_cast<std::size_t>(n));
          for (std::size_t newline; open && (newline = client.pending.find('\n')) != std::string::npos;) {
            std::string line = client.pending.substr(0, newline);
            client.pending.erase(0, newline + 1);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            open = send_all(client.fd, handler_(line) + "\n");
          }
          if (open && client.pending.size() > kMaxLine) {
            send_all(client.fd, "error line too long\n");
            open = false;
          }
        }
      }
      if (open) {
        still_open.push_back(std::move(client));
      } else {
        ::close(client.fd);
      }
    }
    // After the loop above: polled[] has no entry for a client accepted now.
    if (polled[1].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) still_open.push_back({fd, {}});
    }
    clients = std::move(still_open);
  }
  for (const Client& client : clients) ::close(client.fd);
}

}  // namespace crashfs
