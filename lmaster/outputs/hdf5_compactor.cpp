#include "hdf5_compactor.h"

#include <hdf5.h>
#include <pthread.h>

namespace fructosa::master {

namespace {

bool library_is_threadsafe() {
  hbool_t threadsafe = 0;
  return H5is_library_threadsafe(&threadsafe) >= 0 && threadsafe;
}

}  // namespace

BackgroundCompactor::BackgroundCompactor(std::function<void(const std::string& path)> compact)
    : compact_(std::move(compact)), threaded_(library_is_threadsafe()) {}

BackgroundCompactor::~BackgroundCompactor() {
  finish();
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BackgroundCompactor::add(std::string path) {
  if (!threaded_) {
    compact_(path);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(path));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  changed_.notify_all();
}

void BackgroundCompactor::finish() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

std::size_t BackgroundCompactor::waiting() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + (busy_ ? 1 : 0);
}

void BackgroundCompactor::run() {
  pthread_setname_np(pthread_self(), "hdf5:compact");
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    std::string path = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    compact_(path);
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace fructosa::master
