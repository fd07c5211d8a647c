// lagent's push socket (docs/push.md): a unix stream socket any process on the node may write
// metric lines to. Each connection's sender is known from SO_PEERCRED and its job from its
// cgroup, so what it pushes is its job's, whatever it says. Serves on a thread of its own: a
// flood never delays a sensor's reading.
#pragma once

#include <memory>
#include <string>

namespace fructosa::sensors {
class JobDirectory;
}

namespace fructosa::agent {

struct AgentConfig;

struct PushServerSettings {
  std::string socket_path;
  bool allow_outside_jobs = false;  // false: a process in no job is refused
  std::shared_ptr<sensors::JobDirectory> jobs;
  std::size_t max_connections = 1024;          // open at once; more are told so and closed
  std::size_t max_connections_per_user = 64;   // of one uid (SO_PEERCRED), likewise
};

class PushServer {
 public:
  // Listens now (a stale socket file of a dead lagent is replaced; a live one is not). Throws
  // std::runtime_error naming the path and the reason.
  explicit PushServer(PushServerSettings settings);
  // Closes every connection and removes the socket file (if it is still this server's).
  ~PushServer();
  PushServer(const PushServer&) = delete;
  PushServer& operator=(const PushServer&) = delete;

  const PushServerSettings& settings() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Listens on the configuration's push_socket while it has a [sensor:User] section, opening or
// closing the store the User sensor reads (sensors/pushed_metrics.h). A server whose socket,
// job directory and push_allow_outside_jobs are unchanged is kept, with its connections.
void update_push_server(std::unique_ptr<PushServer>& server, const AgentConfig& config,
                        const std::shared_ptr<sensors::JobDirectory>& jobs);

// What the server answers, and `lagent push` reads (docs/push.md, "Replies").
inline constexpr const char* kPushRefusedPrefix = "refused: ";  // the connection is not served
inline constexpr const char* kPushErrorPrefix = "error ";      // "error LINE: REASON" per line not taken
inline constexpr const char* kPushDonePrefix = "done ";        // "done accepted=A refused=R dropped=D"

}  // namespace fructosa::agent
