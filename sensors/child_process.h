// Running external tools for sensors without ever making a sensor wait for them past a
// deadline: IPMIPower (one FreeIPMI tool per reading, off the timer thread) and InfiniBand
// (perfquery = true: one perfquery per port, all at once).
//
// run_in_parallel() starts several commands at once and waits for them under one deadline;
// run_with_timeout() is its one-command case. When the deadline passes, the whole process group
// a tool leads (the tool and whatever it started) is killed with SIGKILL, so a hung tool costs
// a process for at most `timeout` seconds. A killed tool is then reaped: waited for by
// run_with_timeout (its caller is a thread of its own), or, given a Stragglers list, reaped
// without waiting and handed to the list when it has not died yet (stuck in the kernel: a
// SIGKILL only ends it once the system call it is in returns), which reaps it in a later round.
//
// BackgroundCommand owns one thread that runs one command at a time: start() hands it a
// command line and returns at once; take() hands back the result of the run that finished
// last; destroying it kills the run in flight. A hung BMC tool so never holds a thread of the
// agent's pool.
//
// A tool is started with posix_spawn (argv[0] a path, no PATH search: resolve it with
// find_program; no shell: give /bin/sh -c yourself where a shell is wanted), in its own process
// group, with stdin from /dev/null, stdout and stderr captured apart, signal mask and
// dispositions reset, and no descriptor of the agent besides 0, 1, 2.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace fructosa::sensors {

struct ChildResult {
  std::vector<std::string> argv;
  pid_t pid = 0;               // the tool's pid (and process group id); 0 when it never started
  int spawn_error = 0;         // errno of posix_spawn (ENOENT, EACCES, ...) when it did not start
  bool timed_out = false;      // killed at the deadline
  bool cancelled = false;      // killed because its owner went away
  int exit_code = -1;          // when it exited by itself (-1: not known)
  int signal = 0;              // the signal that ended it (SIGKILL after a timeout)
  std::string out;             // stdout, up to kMaxOutput bytes
  std::string err;             // stderr, up to kMaxOutput bytes
  double seconds = 0;          // from start to reaped
  std::chrono::steady_clock::time_point finished{};

  static constexpr std::size_t kMaxOutput = 1 << 20;

  bool succeeded() const { return spawn_error == 0 && !timed_out && !cancelled && signal == 0 && exit_code == 0; }
  // Why the run failed, in one line naming the tool `name` ("ipmi-dcmi exited with status 1:
  // <first line of stderr>", "... did not finish within 5 s: killed"); "" when it succeeded.
  std::string failure(std::string_view name, double timeout_seconds) const;
};

// Children killed at a deadline that had not died yet. reap() collects those that have, without
// waiting; the destructor does the same once more (what is still stuck then stays a zombie of
// the agent until it exits). Used by one caller at a time.
class Stragglers {
 public:
  Stragglers() = default;
  ~Stragglers() { reap(); }
  Stragglers(const Stragglers&) = delete;
  Stragglers& operator=(const Stragglers&) = delete;

  void add(pid_t pid) { pids_.push_back(pid); }
  void reap();
  std::size_t size() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

// Starts every argv (argv[0] a path; no PATH search) at once and waits for all of them under
// one deadline, `timeout_seconds` from now; the results are in the order of `argvs`. A run
// still going at the deadline is killed (timed_out); one whose tool exited but left something
// holding its output open has that process group killed and keeps what the tool wrote. The
// killed ones are reaped without waiting: those not dead yet go to `stragglers` (exit_code -1,
// signal 0), whose earlier ones are reaped first. `wake_fd` (-1: none) readable means "give up
// now": the runs still going are killed and marked cancelled.
std::vector<ChildResult> run_in_parallel(const std::vector<std::vector<std::string>>& argvs,
                                         double timeout_seconds, Stragglers& stragglers, int wake_fd = -1);

// Runs argv (argv[0] a path; no PATH search) with a deadline; a killed run is waited for. `wake_fd` (-1: none) is polled
// too: readable means "give up now" (the run is killed and marked cancelled). `started` gets
// the pid as soon as the child exists.
ChildResult run_with_timeout(const std::vector<std::string>& argv, double timeout_seconds, int wake_fd = -1,
                             std::atomic<pid_t>* started = nullptr);

class BackgroundCommand {
 public:
  explicit BackgroundCommand(double timeout_seconds);
  // Kills a run in flight (its process group), reaps it and joins the thread: returns promptly.
  ~BackgroundCommand();
  BackgroundCommand(const BackgroundCommand&) = delete;
  BackgroundCommand& operator=(const BackgroundCommand&) = delete;

  // Starts argv unless a run is in flight (then returns false). Never blocks on the tool.
  bool start(std::vector<std::string> argv);
  bool running() const;
  // The pid of the run in flight (0 when none, or before the thread has spawned it).
  pid_t running_pid() const { return pid_.load(); }
  // The result of the run that finished last, once; nullopt when none finished since.
  std::optional<ChildResult> take();

 private:
  void loop();

  const double timeout_;
  int wake_[2] = {-1, -1};
  mutable std::mutex mutex_;
  std::condition_variable wanted_;
  std::optional<std::vector<std::string>> request_;
  std::optional<ChildResult> result_;
  bool busy_ = false;
  bool stopping_ = false;
  std::atomic<pid_t> pid_{0};
  std::thread thread_;
};

// `name` as a program to run: itself when it contains '/', else the first executable file
// named so in $PATH, then /usr/local/sbin, /usr/sbin, /sbin (where FreeIPMI's tools live, which
// a daemon's PATH often lacks). "" when there is none.
std::string find_program(std::string_view name);

// Splits a command line at blanks; '...' and "..." quote (no escapes, no variables, no globs).
std::vector<std::string> split_command_line(std::string_view text);

}  // namespace fructosa::sensors
