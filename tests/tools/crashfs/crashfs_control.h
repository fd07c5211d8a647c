// crashfs's control socket: a unix stream socket taking one text command per line and
// answering each with one line, "ok ..." or "error ...":
//   cut                 power cut: only the durable state is written to the backing directory,
//                       and every later call on the mount fails with EIO
//   cut SEED            the same, also keeping a seeded choice of the pending changes
//   capacity BYTES|none writes and truncates past BYTES of live data fail with ENOSPC
//   fail-fsync on|off   fsync and fsyncdir fail with EIO (and make nothing durable)
//   stats               ok files=N directories=N ... (Stats::to_string)
// The reply to a cut comes once the image is on the disk.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "crashfs_fuse.h"

namespace crashfs {

// The reply line (without its newline) to one command line.
std::string execute_command(Filesystem& fs, const std::filesystem::path& backing, const std::string& line);

class ControlServer {
 public:
  using Handler = std::function<std::string(const std::string& line)>;

  // Listens on `path` (a stale socket there is replaced); throws std::runtime_error naming it.
  ControlServer(std::filesystem::path path, Handler handler);
  ~ControlServer();  // stops serving, closes every connection and removes the socket
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Serves connections on a thread of its own, with every signal blocked there (they are the
  // FUSE loop's).
  void start();

 private:
  void serve();

  std::filesystem::path path_;
  Handler handler_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe: writing to it stops serve()
  std::thread thread_;
};

}  // namespace crashfs
