// The datagram protocol is written here rather than linked from libsystemd: sd_notify(3)
// documents it as a stable interface (one AF_UNIX datagram of "KEY=VALUE" lines to the socket
// named by $NOTIFY_SOCKET, '@' meaning the abstract namespace), it is a few lines, and the
// programs then need no libsystemd on nodes booted with OpenRC or in containers.
#include "service_notify.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace fructosa {
namespace {

// STATUS= is a single line.
std::string one_line(std::string_view text) {
  std::string line(text);
  for (char& c : line)
    if (c == '\n') c = ' ';
  return line;
}

std::string with_status(std::string state, std::string_view status) {
  if (!status.empty()) state += "\nSTATUS=" + one_line(status);
  return state;
}

// "<N>" before each line: the syslog priority journald gives the entry (SyslogLevelPrefix=yes,
// systemd's default for stdout/stderr streams).
class SyslogPriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& message, const std::tm&, spdlog::memory_buf_t& out) override {
    std::string_view prefix;
    switch (message.level) {
      case spdlog::level::trace:
      case spdlog::level::debug: prefix = "<7>"; break;
      case spdlog::level::info: prefix = "<6>"; break;
      case spdlog::level::warn: prefix = "<4>"; break;
      case spdlog::level::err: prefix = "<3>"; break;
      case spdlog::level::critical: prefix = "<2>"; break;
      default: prefix = "<6>"; break;
    }
    out.append(prefix.data(), prefix.data() + prefix.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<SyslogPriorityFlag>(); }
};

}  // namespace

bool notify_service_manager(std::string_view state) {
  const char* socket_name = std::getenv("NOTIFY_SOCKET");
  if (socket_name == nullptr || socket_name[0] == '\0') return true;
  static std::atomic<bool> failure_logged{false};
  auto fail = [&](const std::string& why) {
    if (!failure_logged.exchange(true))
      spdlog::warn("cannot notify the service manager through NOTIFY_SOCKET={}: {}", socket_name, why);
    return false;
  };
  std::string_view name(socket_name);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if ((name[0] != '/' && name[0] != '@') || name.size() >= sizeof address.sun_path)
    return fail("not an absolute path or an @abstract name that fits a unix socket address");
  std::memcpy(address.sun_path, name.data(), name.size());
  if (name[0] == '@') address.sun_path[0] = '\0';  // abstract namespace: no terminating NUL counted
  auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + (name[0] == '@' ? 0 : 1));
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(std::strerror(errno));
  ssize_t sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&address), length);
  int error = errno;
  ::close(fd);
  if (sent != static_cast<ssize_t>(state.size())) return fail(sent < 0 ? std::strerror(error) : "short write");
  return true;
}

void notify_ready(std::string_view status) { notify_service_manager(with_status("READY=1", status)); }

void notify_reloading(std::string_view status) {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  auto microseconds = static_cast<long long>(now.tv_sec) * 1000000 + now.tv_nsec / 1000;
  notify_service_manager(with_status("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(microseconds), status));
}

void notify_stopping(std::string_view status) { notify_service_manager(with_status("STOPPING=1", status)); }

void notify_status(std::string_view status) { notify_service_manager("STATUS=" + one_line(status)); }

bool stderr_is_journal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  unsigned long long device = 0, inode = 0;
  if (std::sscanf(stream, "%llu:%llu", &device, &inode) != 2) return false;
  struct stat status {};
  if (::fstat(STDERR_FILENO, &status) != 0) return false;
  return status.st_dev == device && status.st_ino == inode;
}

std::unique_ptr<spdlog::formatter> journal_line_formatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<SyslogPriorityFlag>('*').set_pattern("%*%l: %v");
  return formatter;
}

}  // namespace fructosa
