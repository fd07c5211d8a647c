#include "child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

extern char** environ;

namespace fructosa::sensors {
namespace {

using Clock = std::chrono::steady_clock;

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int value) : fd(value) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// A pidfd makes poll() wake when the child exits; without one (kernel < 5.3) the loop polls
// waitpid every kTick.
constexpr auto kTick = std::chrono::milliseconds(20);

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

// Reads what is there now from a non-blocking pipe into `text` (up to the cap; the rest is
// read and dropped). False at end of file or on an error other than "nothing yet".
bool drain(int fd, std::string& text) {
  char buffer[8192];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      std::size_t room = ChildResult::kMaxOutput - std::min(text.size(), ChildResult::kMaxOutput);
      text.append(buffer, std::min<std::size_t>(room, static_cast<std::size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;
  }
}

std::string_view first_line(std::string_view text) {
  auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  text.remove_prefix(begin);
  text = text.substr(0, text.find('\n'));
  while (!text.empty() && (text.back() == '\r' || text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  if (text.size() > 200) text = text.substr(0, 200);
  return text;
}

bool executable_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string ChildResult::failure(std::string_view name, double timeout_seconds) const {
  if (spawn_error != 0)
    return fmt::format("{}: cannot run {}: {}", name, argv.empty() ? std::string() : argv.front(),
                       std::strerror(spawn_error));
  if (timed_out)
    return fmt::format("{} did not finish within {:g} s: killed (pid {})", name, timeout_seconds, pid);
  if (cancelled) return fmt::format("{} was stopped: the sensor went away", name);
  if (signal != 0) return fmt::format("{} was killed by signal {} ({})", name, signal, ::strsignal(signal));
  if (exit_code != 0) {
    auto why = first_line(err);
    if (why.empty()) why = first_line(out);
    return why.empty() ? fmt::format("{} exited with status {}", name, exit_code)
                       : fmt::format("{} exited with status {}: {}", name, exit_code, why);
  }
  return {};
}

namespace {

// One run of run_children: the read ends of its pipes and its pidfd.
struct Child {
  Fd out, err, pidfd;
  int status = 0;
  bool status_known = false;  // false: reaped by someone else (ECHILD), or not yet
  bool done = false;          // did not start, or reaped, or given up on
};

// Starts result.argv as described in child_process.h; sets result.pid, or result.spawn_error.
void spawn(ChildResult& result, Child& child) {
  const auto& argv = result.argv;
  if (argv.empty()) {
    result.spawn_error = EINVAL;
    return;
  }
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    result.spawn_error = errno;
    return;
  }
  Fd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.spawn_error = errno;
    return;
  }
  Fd err_read(err_pipe[0]), err_write(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, out_write.fd, 1);
  ::posix_spawn_file_actions_adddup2(&actions, err_write.fd, 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  ::posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  posix_spawnattr_t attributes;
  ::posix_spawnattr_init(&attributes);
  ::posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  ::posix_spawnattr_setpgroup(&attributes, 0);  // its own group, led by itself
  sigset_t signals;
  ::sigemptyset(&signals);
  ::posix_spawnattr_setsigmask(&attributes, &signals);
  ::sigfillset(&signals);
  ::sigdelset(&signals, SIGKILL);
  ::sigdelset(&signals, SIGSTOP);
  ::posix_spawnattr_setsigdefault(&attributes, &signals);

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int error = ::posix_spawn(&pid, argv.front().c_str(), &actions, &attributes, args.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attributes);
  if (error != 0) {
    result.spawn_error = error;
    return;
  }
  result.pid = pid;
  ::fcntl(out_read.fd, F_SETFL, O_NONBLOCK);
  ::fcntl(err_read.fd, F_SETFL, O_NONBLOCK);
  std::swap(child.out.fd, out_read.fd);
  std::swap(child.err.fd, err_read.fd);
  child.pidfd.fd = open_pidfd(pid);
}

// waitpid(flags) for the child; true once it is reaped (or someone else reaped it: ECHILD).
bool reap(pid_t pid, Child& child, int flags) {
  while (true) {
    pid_t got = ::waitpid(pid, &child.status, flags);
    if (got == pid) {
      child.status_known = true;
      return true;
    }
    if (got < 0 && errno == EINTR) continue;
    return got < 0 && errno == ECHILD;
  }
}

void settle(ChildResult& result, Child& child, Clock::time_point begin) {
  if (child.status_known) {
    if (WIFEXITED(child.status)) result.exit_code = WEXITSTATUS(child.status);
    if (WIFSIGNALED(child.status)) result.signal = WTERMSIG(child.status);
  }
  child.out.reset();
  child.err.reset();
  child.pidfd.reset();
  child.done = true;
  result.finished = Clock::now();
  result.seconds = std::chrono::duration<double>(result.finished - begin).count();
}

// run_in_parallel and run_with_timeout: `stragglers` null means "wait for the killed ones".
std::vector<ChildResult> run_children(const std::vector<std::vector<std::string>>& argvs, double timeout_seconds,
                                      int wake_fd, Stragglers* stragglers, std::atomic<pid_t>* started) {
  if (stragglers) stragglers->reap();
  const auto begin = Clock::now();
  const auto deadline = begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  std::vector<ChildResult> results(argvs.size());
  std::vector<Child> children(argvs.size());
  for (std::size_t i = 0; i < argvs.size(); ++i) {
    results[i].argv = argvs[i];
    spawn(results[i], children[i]);
    if (results[i].pid == 0)
      settle(results[i], children[i], begin);
    else if (started)
      started->store(results[i].pid);
  }

  std::vector<pollfd> fds;
  std::vector<std::pair<std::size_t, Fd*>> pipes;  // fds[k] for k < pipes.size(): whose pipe
  while (true) {
    bool running = false;
    bool without_pidfd = false;
    for (std::size_t i = 0; i < children.size(); ++i) {
      Child& child = children[i];
      if (child.done) continue;
      if (reap(results[i].pid, child, WNOHANG)) {
        // What the tool wrote before it exited is in the pipes now; a process it left behind
        // that still holds them is not waited for but killed.
        if (child.out.fd >= 0 && !drain(child.out.fd, results[i].out)) child.out.reset();
        if (child.err.fd >= 0 && !drain(child.err.fd, results[i].err)) child.err.reset();
        if (child.out.fd >= 0 || child.err.fd >= 0) ::kill(-results[i].pid, SIGKILL);
        settle(results[i], child, begin);
        continue;
      }
      running = true;
      without_pidfd = without_pidfd || child.pidfd.fd < 0;
    }
    if (!running) break;
    auto now = Clock::now();
    if (now >= deadline) {
      for (std::size_t i = 0; i < children.size(); ++i) results[i].timed_out = !children[i].done;
      break;
    }
    fds.clear();
    pipes.clear();
    for (std::size_t i = 0; i < children.size(); ++i) {
      if (children[i].done) continue;
      for (Fd* pipe : {&children[i].out, &children[i].err})
        if (pipe->fd >= 0) {
          fds.push_back({pipe->fd, POLLIN, 0});
          pipes.emplace_back(i, pipe);
        }
    }
    for (const auto& child : children)
      if (!child.done && child.pidfd.fd >= 0) fds.push_back({child.pidfd.fd, POLLIN, 0});
    const std::size_t wake_index = fds.size();
    if (wake_fd >= 0) fds.push_back({wake_fd, POLLIN, 0});
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) + std::chrono::milliseconds(1);
    if (without_pidfd) left = std::min<std::chrono::milliseconds>(left, kTick);
    int ready = ::poll(fds.data(), static_cast<nfds_t>(fds.size()), static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) {
      // Cannot wait properly: fall back to short sleeps.
      ::usleep(static_cast<useconds_t>(std::chrono::microseconds(kTick).count()));
      continue;
    }
    if (ready <= 0) continue;
    if (wake_fd >= 0 && fds[wake_index].revents) {
      for (std::size_t i = 0; i < children.size(); ++i) results[i].cancelled = !children[i].done;
      break;
    }
    for (std::size_t k = 0; k < pipes.size(); ++k) {
      auto [i, pipe] = pipes[k];
      if (fds[k].revents && !drain(pipe->fd, pipe == &children[i].out ? results[i].out : results[i].err))
        pipe->reset();
    }
  }
  // Timed out or cancelled: the tool and everything in its process group go.
  for (std::size_t i = 0; i < children.size(); ++i) {
    Child& child = children[i];
    if (child.done) continue;
    pid_t pid = results[i].pid;
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    if (!reap(pid, child, stragglers ? WNOHANG : 0) && stragglers) stragglers->add(pid);
    settle(results[i], child, begin);
  }
  if (started) started->store(0);
  return results;
}

}  // namespace

void Stragglers::reap() {
  std::erase_if(pids_, [](pid_t pid) {
    while (true) {
      pid_t got = ::waitpid(pid, nullptr, WNOHANG);
      if (got < 0 && errno == EINTR) continue;
      return got == pid || (got < 0 && errno == ECHILD);
    }
  });
}

std::vector<ChildResult> run_in_parallel(const std::vector<std::vector<std::string>>& argvs,
                                         double timeout_seconds, Stragglers& stragglers, int wake_fd) {
  return run_children(argvs, timeout_seconds, wake_fd, &stragglers, nullptr);
}

ChildResult run_with_timeout(const std::vector<std::string>& argv, double timeout_seconds, int wake_fd,
                             std::atomic<pid_t>* started) {
  return std::move(run_children({argv}, timeout_seconds, wake_fd, nullptr, started).front());
}

BackgroundCommand::BackgroundCommand(double timeout_seconds) : timeout_(timeout_seconds) {
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
  thread_ = std::thread([this] { loop(); });
}

BackgroundCommand::~BackgroundCommand() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wanted_.notify_all();
  if (wake_[1] >= 0) {
    char byte = 1;
    [[maybe_unused]] auto ignored = ::write(wake_[1], &byte, 1);
  }
  thread_.join();
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

bool BackgroundCommand::start(std::vector<std::string> argv) {
  {
    std::lock_guard lock(mutex_);
    if (busy_ || stopping_) return false;
    busy_ = true;
    request_ = std::move(argv);
  }
  wanted_.notify_all();
  return true;
}

bool BackgroundCommand::running() const {
  std::lock_guard lock(mutex_);
  return busy_;
}

std::optional<ChildResult> BackgroundCommand::take() {
  std::lock_guard lock(mutex_);
  std::optional<ChildResult> result = std::move(result_);
  result_.reset();
  return result;
}

void BackgroundCommand::loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    wanted_.wait(lock, [this] { return stopping_ || request_.has_value(); });
    if (stopping_) return;
    std::vector<std::string> argv = std::move(*request_);
    request_.reset();
    lock.unlock();
    ChildResult result = run_with_timeout(argv, timeout_, wake_[0], &pid_);
    lock.lock();
    result_ = std::move(result);
    busy_ = false;
  }
}

std::string find_program(std::string_view name) {
  if (name.empty()) return {};
  if (name.find('/') != std::string_view::npos) {
    std::string path(name);
    return executable_file(path) ? path : std::string();
  }
  const char* env = std::getenv("PATH");
  std::string dirs = env && *env ? env : "/usr/bin:/bin";
  dirs += ":/usr/local/sbin:/usr/sbin:/sbin";
  std::string_view rest = dirs;
  while (true) {
    auto colon = rest.find(':');
    std::string_view dir = rest.substr(0, colon);
    if (!dir.empty()) {
      std::string path = fmt::format("{}/{}", dir, name);
      if (executable_file(path)) return path;
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return {};
}

std::vector<std::string> split_command_line(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote)
        quote = 0;
      else
        word += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace fructosa::sensors
