#include "push_client.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "agent_config.h"
#include "config.h"
#include "push_line.h"
#include "push_server.h"

namespace fructosa::agent {

const char* const kPushUsage = R"(Usage:
  lagent push NAME VALUE [--counter] [--socket PATH] [-c FILE]
  lagent push [--socket PATH] [-c FILE] < LINES

Pushes a metric from inside a batch job into the job's data (sensor User; docs/push.md):
lagent finds the job from the pushing process itself. NAME: letters, digits, '_' and '-'.
A gauge keeps its last value; a counter (--counter) is summed over each interval.
Without NAME VALUE, lines are read from standard input as they come, each a statsd
`name:value|g` or `name:value|c`, or a Prometheus `name{label="v"} value` (a gauge).

  --counter      push VALUE as a counter's increment (default: a gauge's value)
  --socket PATH  the push socket (default: $FRUCTOSA_PUSH_SOCKET, else [lagent] push_socket
                 of the configuration file, else /run/fructosa/push.sock)
  -c FILE        the configuration file to read push_socket from (default /etc/fructosa/lagent.conf)

Exit status: 0 every line taken; 65 a line refused or dropped (each is printed with why);
69 no lagent listens; 77 lagent refused this process (in no job); 2 usage error.
)";

namespace {

constexpr int kExitDataError = 65;
constexpr int kExitUnavailable = 69;
constexpr int kExitNoPermission = 77;

// --socket, else the environment, else the configuration's [lagent] push_socket (readable by
// any user; a missing or broken file is the default's business), else the default.
std::string socket_path(const std::string& given, const std::string& config_path) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("FRUCTOSA_PUSH_SOCKET"); env && *env) return env;
  try {
    IniFile file = IniFile::load(config_path);
    return parse_section(agent_options(), file, file.find("lagent")).get_text("push_socket");
  } catch (const std::exception&) {
  }
  return "/run/fructosa/push.sock";
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t written = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(written));
  }
  return true;
}

struct Replies {
  std::string pending;
  bool refused_connection = false;
  bool done = false;
  std::size_t not_taken = 0;
  bool one_line = false;  // NAME VALUE: no line numbers in messages

  void take(std::string_view data, std::ostream& err) {
    pending.append(data);
    for (auto newline = pending.find('\n'); newline != std::string::npos; newline = pending.find('\n')) {
      std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      if (line.rfind(kPushRefusedPrefix, 0) == 0) {
        refused_connection = true;
        err << "lagent push: " << line << "\n";
      } else if (line.rfind(kPushErrorPrefix, 0) == 0) {
        ++not_taken;
        std::string_view text = std::string_view(line).substr(std::strlen(kPushErrorPrefix));
        if (one_line) text.remove_prefix(std::min(text.size(), text.find(": ") + 2));
        err << "lagent push: " << (one_line ? "" : "line ") << text << "\n";
      } else if (line.rfind(kPushDonePrefix, 0) == 0) {
        done = true;
        unsigned long long accepted = 0, refused = 0, dropped = 0;
        if (std::sscanf(line.c_str(), "done accepted=%llu refused=%llu dropped=%llu", &accepted, &refused, &dropped) ==
            3) {
          not_taken = refused + dropped;
          if (not_taken && !one_line)
            err << fmt::format("lagent push: {} line(s) taken, {} refused, {} dropped\n", accepted, refused, dropped);
        }
      }
    }
  }
};

}  // namespace

int push_command(int argc, char** argv, int in_fd, std::ostream& err) {
  std::vector<std::string> words;
  std::string given_socket;
  std::string config_path = "/etc/fructosa/lagent.conf";
  bool counter = false;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value_of = [&](const std::string& option) -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(option + " needs a value");
      return argv[++i];
    };
    bool number =
        arg.size() > 1 && arg[0] == '-' && (std::isdigit(static_cast<unsigned char>(arg[1])) || arg[1] == '.');
    if (arg == "--counter") {
      counter = true;
    } else if (arg == "--socket") {
      given_socket = value_of(arg);
    } else if (arg == "-c" || arg == "--config") {
      config_path = value_of(arg);
    } else if (arg == "-h" || arg == "--help") {
      std::cout << kPushUsage;  // asked for: standard output, as every --help
      return 0;
    } else if (arg == "--") {
      for (++i; i < argc; ++i) words.push_back(argv[i]);
    } else if (arg.size() > 1 && arg[0] == '-' && !number) {
      err << "lagent push: unknown option '" << arg << "'\n" << kPushUsage;
      return 2;
    } else {
      words.push_back(arg);
    }
  }
  if (!words.empty() && words.size() != 2) {
    err << "lagent push: give NAME and VALUE, or neither to read lines from standard input\n" << kPushUsage;
    return 2;
  }
  std::string line;
  if (!words.empty()) {
    if (auto problem = sensors::pushed_name_problem(words[0]); !problem.empty()) {
      err << "lagent push: " << problem << "\n";
      return kExitDataError;
    }
    if (words[1].find_first_of("|:\n") != std::string::npos) {
      err << "lagent push: value '" << words[1] << "' is not a number\n";
      return kExitDataError;
    }
    line = fmt::format("{}:{}|{}\n", words[0], words[1], counter ? 'c' : 'g');
  } else if (counter) {
    err << "lagent push: --counter goes with NAME VALUE (lines say |c themselves)\n";
    return 2;
  }

  std::string path = socket_path(given_socket, config_path);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof address.sun_path) {
    err << "lagent push: cannot use " << path << "\n";
    return kExitUnavailable;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    int error = errno;
    std::string hint = error == ENOENT || error == ECONNREFUSED
                           ? ": is lagent running here, with a [sensor:User] section?"
                           : "";
    err << "lagent push: cannot connect to " << path << ": " << std::strerror(error) << hint << "\n";
    ::close(fd);
    return kExitUnavailable;
  }

  Replies replies;
  replies.one_line = !line.empty();
  bool writing = true;
  if (!line.empty()) {
    write_all(fd, line);  // a refused connection answers why; that is read below
    ::shutdown(fd, SHUT_WR);
    writing = false;
  }
  std::vector<char> buffer(65536);
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {writing ? in_fd : -1, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents) {
      ssize_t size = ::read(in_fd, buffer.data(), buffer.size());
      if (size < 0 && errno == EINTR) continue;
      if (size <= 0 || !write_all(fd, std::string_view(buffer.data(), static_cast<std::size_t>(size)))) {
        ::shutdown(fd, SHUT_WR);
        writing = false;
      }
    }
    if (fds[0].revents) {
      ssize_t size = ::read(fd, buffer.data(), buffer.size());
      if (size < 0 && errno == EINTR) continue;
      if (size <= 0) break;
      replies.take(std::string_view(buffer.data(), static_cast<std::size_t>(size)), err);
      if (replies.refused_connection) break;
    }
  }
  ::close(fd);
  if (replies.refused_connection) return kExitNoPermission;
  if (!replies.done) {
    err << "lagent push: " << path << " closed the connection before it said what it took\n";
    return kExitUnavailable;
  }
  return replies.not_taken ? kExitDataError : 0;
}

}  // namespace fructosa::agent
