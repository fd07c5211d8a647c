// What JobDirectory keeps to list its jobs' processes (cgroup_process_tree.cpp): each job's
// cgroup tree, listed again only where it changed. Internal to the sensors.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cgroup_entry_watch.h"
#include "jobs.h"
#include "procfs.h"

namespace fructosa::sensors {

// A held directory's watch (CgroupEntryWatch), given back when its node lets it go.
class HeldWatch {
 public:
  HeldWatch() = default;
  HeldWatch(HeldWatch&& other) noexcept
      : watches_(other.watches_), watch_(std::exchange(other.watch_, -1)), overflows_seen_(other.overflows_seen_) {}
  HeldWatch& operator=(HeldWatch&& other) noexcept {
    if (this != &other) {
      reset();
      watches_ = other.watches_;
      watch_ = std::exchange(other.watch_, -1);
      overflows_seen_ = other.overflows_seen_;
    }
    return *this;
  }
  ~HeldWatch() { reset(); }

  // Watches `path` (nothing without `watches`, or when inotify refuses).
  void start(CgroupEntryWatch* watches, const std::string& path) {
    reset();
    watches_ = watches;
    if (!watches_) return;
    watch_ = watches_->add(path);
    overflows_seen_ = watches_->overflows();
  }
  // True when the watch runs and reported no change since the last time it was asked.
  bool unchanged() { return watch_ >= 0 && !watches_->take_change(watch_, overflows_seen_); }
  void reset() {
    if (watches_) watches_->remove(watch_);
    watch_ = -1;
  }

 private:
  CgroupEntryWatch* watches_ = nullptr;
  int watch_ = -1;
  std::uint64_t overflows_seen_ = 0;
};

// How a walk reads a cgroup tree: `hold` its directories and cgroup.procs open (cgroup v2),
// `watches` (optional, with hold) to learn which directories changed.
struct CgroupWalk {
  bool hold = false;
  CgroupEntryWatch* watches = nullptr;
  std::string buffer;
  // The walked job's JobCgroup::scheduler_cgroups, matched against paths relative to `root`,
  // for the nodes a listing adds.
  const std::vector<std::string>* scheduler_cgroups = nullptr;
  std::string_view root;
  bool is_scheduler_cgroup(const std::string& path) const;
};

// A cgroup directory and the subdirectories it had when last listed. Listing a cgroup means
// reading its dozens of control files' names, and several per-job sensors ask for every job's
// processes every round: a directory is listed again only when its link count (2 +
// subdirectories on cgroupfs, tmpfs and ext4) changed or one of its children went.
struct CgroupTreeNode {
  explicit CgroupTreeNode(std::string directory) : path(std::move(directory)) {}

  std::string path;
  bool scheduler_cgroup = false;  // its own processes are the scheduler's: not listed
  nlink_t links = 0;  // at the last listing; 0: list it (never listed, or a count the file system does not keep)
  std::vector<CgroupTreeNode> children;
  // On cgroup v2, the directory and its cgroup.procs stay open while the FdBudget allows: a
  // round costs a pread per cgroup (and an fstat when inotify is not at hand) instead of two
  // path lookups, an open and a close. (cgroup v1 answers a held cgroup.procs read again from 0
  // with the list it made before, for as long as that list is cached: there it is opened each
  // time.)
  HeldFd dir, procs;
  // The held directory's watch: while it reports nothing, the link count is the one known.
  HeldWatch watch;

  // Appends the pids of this directory and its descendants; false when it is gone.
  bool collect(std::vector<int>& pids, CgroupWalk& walk);
  // Appends the pids this directory lists and gives its link count; false when it is gone.
  bool read_self(std::vector<int>& pids, CgroupWalk& walk, nlink_t& nlink);
  // The subdirectories now; those known before keep what is known of them.
  void list(nlink_t links_now, const CgroupWalk& walk);
};

struct JobDirectory::ProcessListing {
  explicit ProcessListing(const JobCgroup& job);

  CgroupTreeNode tree;
  std::vector<std::string> scheduler_cgroups;
  bool hold;  // cgroup v2: its descriptors are kept open
  std::int64_t at_ns = 0;
  bool listed = false;
  std::vector<int> pids;
};

}  // namespace fructosa::sensors
