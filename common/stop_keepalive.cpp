#include "stop_keepalive.h"

#include <pthread.h>

#include <atomic>

#include "service_notify.h"

namespace fructosa {

namespace {
std::atomic<std::uint64_t> work_done{0};
}  // namespace

void note_progress() noexcept { work_done.fetch_add(1, std::memory_order_relaxed); }

std::uint64_t progress_count() noexcept { return work_done.load(std::memory_order_relaxed); }

void StopKeepAlive::default_notify(std::string_view state) { notify_service_manager(state); }

StopKeepAlive::StopKeepAlive(std::chrono::milliseconds period, std::chrono::milliseconds extension,
                             Progress progress, Notify notify)
    : period_(period), extension_(extension), progress_(std::move(progress)), notify_(std::move(notify)),
      last_progress_(progress_()) {
  thread_ = std::thread([this] { run(); });
}

StopKeepAlive::~StopKeepAlive() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  thread_.join();
}

bool StopKeepAlive::check() {
  const std::uint64_t now = progress_();
  std::lock_guard lock(mutex_);
  if (now == last_progress_) return false;
  last_progress_ = now;
  ++extensions_;
  const auto microseconds = std::chrono::duration_cast<std::chrono::microseconds>(extension_).count();
  notify_("EXTEND_TIMEOUT_USEC=" + std::to_string(microseconds) + "\nSTATUS=stopping: finishing the outputs (" +
          std::to_string(now) + " steps done)");
  return true;
}

std::uint64_t StopKeepAlive::extensions() const {
  std::lock_guard lock(mutex_);
  return extensions_;
}

void StopKeepAlive::run() {
  pthread_setname_np(pthread_self(), "stop-keepalive");
  std::unique_lock lock(mutex_);
  while (!stop_.wait_for(lock, period_, [this] { return stopping_; })) {
    lock.unlock();
    check();
    lock.lock();
  }
}

}  // namespace fructosa
