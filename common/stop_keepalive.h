// Keeps a long but working stop from being killed by the service manager.
//
// lmaster's outputs finish at stop what they hold, and the HDF5 output compresses the file it
// closes: with the per_host layout at 1000 hosts that took 210-240 s, past the unit's
// TimeoutStopSec (120 s), so systemd killed it half way (nothing was lost: the journal replays
// and the file is compressed at the next start, but every stop ended in a SIGKILL). While it
// stops, StopKeepAlive asks the manager for more time (EXTEND_TIMEOUT_USEC, systemd >= 236)
// only as long as work is being done: a stop that makes no progress for `extension` runs into
// the unit's timeout as before, so a hung lmaster is still killed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace fructosa {

// Units of work done (a dataset compressed, a batch delivered, a flush), counted by whatever does
// them, anywhere in the process; StopKeepAlive reads it to tell a long stop from a hung one.
void note_progress() noexcept;
std::uint64_t progress_count() noexcept;

class StopKeepAlive {
 public:
  using Notify = std::function<void(std::string_view state)>;
  using Progress = std::function<std::uint64_t()>;

  // Checks `progress` every `period` on a thread of its own and, when it moved, sends `notify`
  // "EXTEND_TIMEOUT_USEC=<extension>" (plus a STATUS line). `extension` should be a few periods.
  StopKeepAlive(std::chrono::milliseconds period, std::chrono::milliseconds extension,
                Progress progress = progress_count, Notify notify = default_notify);
  ~StopKeepAlive();
  StopKeepAlive(const StopKeepAlive&) = delete;
  StopKeepAlive& operator=(const StopKeepAlive&) = delete;

  // One check (what the thread does each period): true when it asked for more time.
  bool check();
  // Extensions asked for so far.
  std::uint64_t extensions() const;

  // notify_service_manager, or nothing when no manager asked ($NOTIFY_SOCKET unset).
  static void default_notify(std::string_view state);

 private:
  void run();

  const std::chrono::milliseconds period_, extension_;
  const Progress progress_;
  const Notify notify_;
  mutable std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::uint64_t last_progress_;
  std::uint64_t extensions_ = 0;
  std::thread thread_;
};

}  // namespace fructosa
