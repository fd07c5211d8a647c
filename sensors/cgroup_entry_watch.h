// Subdirectories that came or went in the cgroup directories a walk holds (cgroup v2,
// cgroup_process_tree.cpp), from inotify: a round asks the kernel once what changed instead of an
// fstat of every directory for its link count (6 % of lagent's CPU with 50 jobs of four cgroups
// each). mkdir, rmdir and rename of cgroups go through the VFS, which reports them; the control
// files the kernel adds are not directories. Without inotify (no instance, no watch left) each
// directory is asked with fstat.
#pragma once

#include <sys/inotify.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace fructosa::sensors {

class CgroupEntryWatch {
 public:
  CgroupEntryWatch() : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {}
  ~CgroupEntryWatch() {
    if (fd_ >= 0) ::close(fd_);
  }
  CgroupEntryWatch(const CgroupEntryWatch&) = delete;
  CgroupEntryWatch& operator=(const CgroupEntryWatch&) = delete;

  // A watch of the directory `path`, or -1.
  int add(const std::string& path) {
    if (fd_ < 0) return -1;
    int watch = ::inotify_add_watch(fd_, path.c_str(),
                                    IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                                        IN_MOVE_SELF | IN_ONLYDIR);
    if (watch >= 0) changed_.try_emplace(watch, false);  // the same directory twice: one watch
    return watch;
  }
  void remove(int watch) {
    if (watch < 0) return;
    ::inotify_rm_watch(fd_, watch);  // EINVAL once the kernel dropped it (the directory went)
    changed_.erase(watch);
  }
  // Takes in what the kernel reported since the last call. Only watches still held are kept:
  // a removed one still reports (IN_IGNORED from inotify_rm_watch, the deletion of a cgroup
  // whose job ended), and an agent sees jobs come and go for months.
  void drain() {
    if (fd_ < 0) return;
    alignas(inotify_event) char buffer[4096];
    for (ssize_t got; (got = ::read(fd_, buffer, sizeof buffer)) > 0;) {
      for (ssize_t at = 0; at < got;) {
        const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
        if (event->mask & IN_Q_OVERFLOW) {
          ++overflows_;  // events were lost: every directory is asked
        } else if (auto held = changed_.find(event->wd); held != changed_.end()) {
          held->second = true;
        }
        at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      }
    }
  }
  // True when `watch` reported a change (forgotten now), when it is not held (the kernel may
  // have dropped it: no news is no proof), or when events were lost since `overflows` (which
  // is brought up to date).
  bool take_change(int watch, std::uint64_t& overflows) {
    auto held = changed_.find(watch);
    bool changed = held == changed_.end() || held->second || overflows != overflows_;
    if (held != changed_.end()) held->second = false;
    overflows = overflows_;
    return changed;
  }
  std::uint64_t overflows() const { return overflows_; }
  // The watches it keeps news of (those added and not removed).
  std::size_t held() const { return changed_.size(); }

 private:
  int fd_;
  std::unordered_map<int, bool> changed_;  // held watch -> a change reported since last asked
  std::uint64_t overflows_ = 0;
};

}  // namespace fructosa::sensors
