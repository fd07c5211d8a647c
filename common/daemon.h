// The service verbs shared by lagent and lmaster: start | stop | status | restart | reload | run.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>
#include <sys/types.h>

namespace fructosa {

// LSB exit codes for `status` and friends.
inline constexpr int kExitNotRunning = 3;        // status: program is not running
inline constexpr int kExitNotRunningAction = 7;  // reload: program is not running

// A pidfile held with flock(2) for the life of the process. A file left behind by a dead
// process is unlocked, so it never blocks a start; a live holder is found by its lock rather
// than by its pid, which may have been reused.
class Pidfile {
 public:
  // Throws std::runtime_error naming the holder when another live process has the lock.
  explicit Pidfile(const std::string& path);
  ~Pidfile();
  Pidfile(const Pidfile&) = delete;
  Pidfile& operator=(const Pidfile&) = delete;

  // The pid of the live process holding `path`, or nothing when none does.
  static std::optional<pid_t> holder(const std::string& path);

 private:
  std::string path_;
  int fd_ = -1;
};

struct ServiceProgram {
  std::string name;  // "lagent"
  // Reads and validates the configuration; throws ConfigError. Runs before any fork. Returns
  // what was accepted with a warning (sections of FrUCToSA's that are ignored, ...).
  std::function<std::vector<std::string>(const std::string& config)> check_config;
  // Runs the service until SIGTERM/SIGINT; calls `ready()` once it serves. Returns the exit code.
  std::function<int(const std::string& config, bool foreground, const std::function<void()>& ready)> run;
  // `status` prints this after its running/not-running line (lmaster: the table of agents).
  // Optional; gets the configuration path.
  std::function<void(const std::string& config, std::ostream& out)> describe_status = {};
};

// Carries out one verb. `config` and `pidfile` are paths; relative ones are taken from the
// current directory before a daemon changes to "/".
int run_service_verb(const ServiceProgram& program, const std::string& verb, const std::string& config,
                     const std::string& pidfile, double stop_timeout_seconds = 60);

// Waits until process `pid` has exited, at most `timeout_seconds`. True when it has.
bool wait_for_exit(pid_t pid, double timeout_seconds);

}  // namespace fructosa
