#include "daemon.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "config.h"
#include "service_notify.h"

namespace fructosa {
namespace {

std::string read_all(int fd) {
  std::string text;
  char buffer[256];
  ssize_t got;
  while ((got = ::pread(fd, buffer, sizeof buffer, static_cast<off_t>(text.size()))) > 0)
    text.append(buffer, static_cast<std::size_t>(got));
  return text;
}

std::string absolute(const std::string& path) {
  return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
}

// Written by the daemon to the `start` process through a pipe: an exit code and a message.
void report(int fd, int code, const std::string& message) {
  if (fd < 0) return;
  std::string packet = fmt::format("{}\n{}", code, message);
  [[maybe_unused]] auto ignored = ::write(fd, packet.data(), packet.size());
  ::close(fd);
}

int start(const ServiceProgram& program, const std::string& config, const std::string& pidfile) {
  try {
    program.check_config(config);
  } catch (const ConfigError& error) {
    std::cerr << program.name << ": " << error.what() << "\n";
    return kExitConfigError;
  }
  if (auto pid = Pidfile::holder(pidfile)) {
    std::cerr << fmt::format("{} is already running (pid {}, pidfile {})\n", program.name, *pid, pidfile);
    return 1;
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error(std::strerror(errno));
  std::cout.flush();
  std::cerr.flush();
  pid_t child = ::fork();
  if (child < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  if (child > 0) {
    ::close(pipe_fds[1]);
    ::waitpid(child, nullptr, 0);  // the intermediate process exits at once
    std::string answer;
    char buffer[512];
    ssize_t got;
    while ((got = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0) answer.append(buffer, static_cast<std::size_t>(got));
    ::close(pipe_fds[0]);
    if (answer.empty()) {
      std::cerr << program.name << ": the daemon died while starting (see its log)\n";
      return 1;
    }
    auto newline = answer.find('\n');
    int code = std::atoi(answer.substr(0, newline).c_str());
    std::string message = newline == std::string::npos ? "" : answer.substr(newline + 1);
    if (code != 0) std::cerr << program.name << ": " << message << "\n";
    return code;
  }
  // Intermediate child: new session, then fork again so the daemon can never reacquire a tty.
  ::close(pipe_fds[0]);
  ::setsid();
  pid_t daemon = ::fork();
  if (daemon != 0) ::_exit(daemon < 0 ? 1 : 0);
  int status_fd = pipe_fds[1];
  // Data, journal, spool and HDF5 files name jobs and users: 0640 and directories 0750, for the
  // service's own user and group (systemd's units say UMask=0027 too).
  ::umask(027);
  if (::chdir("/") != 0) ::_exit(1);
  int null_fd = ::open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    if (null_fd > 2) ::close(null_fd);
  }
  int code = 1;
  try {
    Pidfile lock(pidfile);
    code = program.run(config, false, [&] {
      report(status_fd, 0, "");
      status_fd = -1;
    });
    if (status_fd >= 0) report(status_fd, code ? code : 1, "stopped before it was ready (see its log)");
  } catch (const ConfigError& error) {
    report(status_fd, kExitConfigError, error.what());
    ::_exit(kExitConfigError);
  } catch (const std::exception& error) {
    report(status_fd, 1, error.what());
    ::_exit(1);
  }
  std::fflush(nullptr);
  ::_exit(code);
}

int stop(const ServiceProgram& program, const std::string& pidfile, double timeout) {
  auto pid = Pidfile::holder(pidfile);
  if (!pid) {
    std::cout << program.name << " is not running\n";
    return 0;  // LSB: stopping a stopped service succeeds
  }
  if (::kill(*pid, SIGTERM) != 0 && errno != ESRCH) {
    std::cerr << fmt::format("{}: cannot signal pid {}: {}\n", program.name, *pid, std::strerror(errno));
    return 1;
  }
  if (!wait_for_exit(*pid, timeout)) {
    std::cerr << fmt::format("{}: pid {} did not stop within {} s\n", program.name, *pid, timeout);
    return 1;
  }
  std::cout << fmt::format("{} stopped (pid {})\n", program.name, *pid);
  return 0;
}

}  // namespace

Pidfile::Pidfile(const std::string& path) : path_(path) {
  // Never through a link, and never anything but a regular file: a pidfile in a directory others
  // can write must not make a root daemon truncate what a planted link points at.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd_ < 0) throw std::runtime_error(fmt::format("cannot open pidfile {}: {}", path, std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(fmt::format("pidfile {} is not a regular file", path));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    std::string holder = read_all(fd_);
    ::close(fd_);
    fd_ = -1;
    while (!holder.empty() && std::isspace(static_cast<unsigned char>(holder.back()))) holder.pop_back();
    throw std::runtime_error(fmt::format("already running (pid {}, pidfile {})", holder, path));
  }
  std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    throw std::runtime_error(fmt::format("cannot write pidfile {}: {}", path, std::strerror(errno)));
}

Pidfile::~Pidfile() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // still under our lock, so nobody else is using it
  ::close(fd_);
}

std::optional<pid_t> Pidfile::holder(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  std::optional<pid_t> result;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    // Locked: a live process. Its pid is written right after the lock is taken.
    for (int attempt = 0; attempt < 100 && !result; ++attempt) {
      std::string text = read_all(fd);
      if (int pid = std::atoi(text.c_str()); pid > 0) result = pid;
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ::close(fd);
  return result;
}

bool wait_for_exit(pid_t pid, double timeout_seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  // A pidfd becomes readable when the process exits: a real wait, not a polling loop.
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd item{pidfd, POLLIN, 0};
    int ready = 0;
    do {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      ready = ::poll(&item, 1, static_cast<int>(std::max<long>(0, left.count())));
    } while (ready < 0 && errno == EINTR);
    ::close(pidfd);
    return ready > 0;
  }
  if (errno == ESRCH) return true;
  // Kernels before 5.3: check liveness a few times a second.
  while (::kill(pid, 0) == 0 || errno == EPERM) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

int run_service_verb(const ServiceProgram& program, const std::string& verb, const std::string& config_arg,
                     const std::string& pidfile_arg, double stop_timeout_seconds) {
  std::string config = absolute(config_arg);
  std::string pidfile = absolute(pidfile_arg);
  if (verb == "start") return start(program, config, pidfile);
  if (verb == "check") {
    try {
      for (const auto& warning : program.check_config(config)) std::cerr << program.name << ": warning: " << warning << "\n";
    } catch (const ConfigError& error) {
      std::cerr << program.name << ": " << error.what() << "\n";
      return kExitConfigError;
    }
    std::cout << fmt::format("{}: configuration OK\n", config);
    return 0;
  }
  if (verb == "stop") return stop(program, pidfile, stop_timeout_seconds);
  if (verb == "restart") {
    try {
      program.check_config(config);  // refuse to stop a running service for a broken config
    } catch (const ConfigError& error) {
      std::cerr << program.name << ": " << error.what() << "\n";
      return kExitConfigError;
    }
    if (int code = stop(program, pidfile, stop_timeout_seconds); code != 0) return code;
    return start(program, config, pidfile);
  }
  if (verb == "status") {
    auto pid = Pidfile::holder(pidfile);
    if (pid)
      std::cout << fmt::format("{} is running (pid {})\n", program.name, *pid);
    else
      std::cout << program.name << " is not running\n";
    if (program.describe_status) {
      try {
        program.describe_status(config, std::cout);
      } catch (const std::exception& error) {
        std::cout << fmt::format("(no details: {})\n", error.what());
      }
    }
    return pid ? 0 : kExitNotRunning;
  }
  if (verb == "reload") {
    auto pid = Pidfile::holder(pidfile);
    if (!pid) {
      std::cerr << program.name << " is not running\n";
      return kExitNotRunningAction;
    }
    try {
      program.check_config(config);
    } catch (const ConfigError& error) {
      std::cerr << program.name << ": not reloading: " << error.what() << "\n";
      return kExitConfigError;
    }
    if (::kill(*pid, SIGHUP) != 0) {
      std::cerr << fmt::format("{}: cannot signal pid {}: {}\n", program.name, *pid, std::strerror(errno));
      return 1;
    }
    return 0;
  }
  if (verb == "run") {
    try {
      program.check_config(config);
    } catch (const ConfigError& error) {
      std::cerr << program.name << ": " << error.what() << "\n";
      return kExitConfigError;
    }
    std::optional<Pidfile> lock;
    try {
      lock.emplace(pidfile);
    } catch (const std::runtime_error& error) {
      // A live holder means a second copy: refuse. An unwritable location (a user running
      // in the foreground without -p) only costs `status`/`stop`, so go on without one.
      if (Pidfile::holder(pidfile)) {
        std::cerr << program.name << ": " << error.what() << "\n";
        return 1;
      }
      std::cerr << program.name << ": warning: " << error.what() << "; running without a pidfile\n";
    }
    try {
      // Under systemd (Type=notify) `ready` is READY=1: the program calls it once it serves
      // (lmaster: bound; lagent: its sensors run and its spool is open).
      return program.run(config, true, [] { notify_ready("running"); });
    } catch (const ConfigError& error) {
      std::cerr << program.name << ": " << error.what() << "\n";
      return kExitConfigError;
    }
  }
  std::cerr << program.name << ": unknown command '" << verb << "'\n";
  return 2;
}

}  // namespace fructosa
