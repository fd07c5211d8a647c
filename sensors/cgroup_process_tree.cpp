#include "cgroup_process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>

namespace fructosa::sensors {
namespace {

// Appends the pids of a cgroup.procs content: whitespace-separated numbers (one per line); the
// first thing that is not one ends the list.
void parse_procs(std::string_view text, std::vector<int>& pids) {
  constexpr std::string_view kSpace = " \t\n";
  for (auto begin = text.find_first_not_of(kSpace); begin != std::string_view::npos;
       begin = text.find_first_not_of(kSpace)) {
    text.remove_prefix(begin);
    auto field = text.substr(0, text.find_first_of(kSpace));
    text.remove_prefix(field.size());
    std::uint64_t pid = 0;
    if (!parse_uint(field, pid)) break;
    pids.push_back(static_cast<int>(pid));
  }
}

bool on_cgroup2(const std::string& path) {
  struct statfs info {};
  return ::statfs(path.c_str(), &info) == 0 && static_cast<unsigned long>(info.f_type) == CGROUP2_SUPER_MAGIC;
}

// Appends the pids listed in the cgroup.procs file at `path` (nothing when it is gone).
void read_procs(const std::string& path, std::vector<int>& pids, std::string& buffer) {
  Fd procs(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (procs.get() < 0) return;
  // A read error: the cgroup went away meanwhile, and what was read counts.
  if (pread_whole(procs.get(), buffer, false) != 0) buffer.clear();
  parse_procs(buffer, pids);
}


std::vector<int> sorted_unique(std::vector<int> pids) {
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

}  // namespace

bool CgroupWalk::is_scheduler_cgroup(const std::string& path) const {
  if (!scheduler_cgroups || scheduler_cgroups->empty() || path.compare(0, root.size(), root) != 0) return false;
  std::string relative = path.size() > root.size() ? path.substr(root.size() + 1) : std::string();
  return std::any_of(scheduler_cgroups->begin(), scheduler_cgroups->end(), [&](const std::string& glob) {
    return ::fnmatch(glob.c_str(), relative.c_str(), FNM_PATHNAME | FNM_PERIOD) == 0;
  });
}

bool CgroupTreeNode::collect(std::vector<int>& pids, CgroupWalk& walk) {
  nlink_t nlink = 0;
  const std::size_t before = pids.size();
  if (!read_self(pids, walk, nlink)) return false;
  if (scheduler_cgroup) pids.resize(before);
  if (nlink == 2) {  // a leaf, as most job directories are
    children.clear();
    links = 2;
    return true;
  }
  const bool listed = links == 0 || nlink != links;
  if (listed) list(nlink, walk);
  bool all_there = true;
  for (auto& child : children) all_there = child.collect(pids, walk) && all_there;
  if (!all_there && !listed) {
    // A child went, maybe as another came (the same count): list again and read the new ones
    // (a pid read twice is dropped by the caller).
    list(nlink, walk);
    for (auto& child : children) child.collect(pids, walk);
  }
  return true;
}

bool CgroupTreeNode::read_self(std::vector<int>& pids, CgroupWalk& walk, nlink_t& nlink) {
  struct stat info;
  if (procs) {
    // No change reported by the watch: the count known, and a read that fails if it went.
    if (links >= 2 && watch.unchanged()) {
      if (pread_whole(procs.get(), walk.buffer, false) == 0) {
        nlink = links;
        parse_procs(walk.buffer, pids);
        return true;
      }
    } else if (::fstat(dir.get(), &info) == 0 && info.st_nlink != 0 &&  // a removed directory has no links
               pread_whole(procs.get(), walk.buffer, false) == 0) {   // a removed cgroup fails the read (ENODEV)
      nlink = info.st_nlink;
      parse_procs(walk.buffer, pids);
      return true;
    }
    watch.reset();
    dir.reset();  // gone, or gone and made again: looked up by its path below
    procs.reset();
  }
  if (::stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) return false;
  nlink = info.st_nlink;
  if (walk.hold) {
    watch.start(walk.watches, path);  // first: a child that comes after the count below is reported
    if (dir.open_at(AT_FDCWD, path.c_str(), O_RDONLY | O_DIRECTORY) == 0 &&
        procs.open_at(dir.get(), "cgroup.procs", O_RDONLY) == 0 && ::fstat(dir.get(), &info) == 0 &&
        pread_whole(procs.get(), walk.buffer, false) == 0) {
      nlink = info.st_nlink;
      parse_procs(walk.buffer, pids);
      return true;
    }
    watch.reset();
  }
  dir.reset();  // no budget left, not a cgroup, or not a cgroup file system: read it once
  procs.reset();
  read_procs(path + "/cgroup.procs", pids, walk.buffer);
  return true;
}

void CgroupTreeNode::list(nlink_t links_now, const CgroupWalk& walk) {
  std::vector<CgroupTreeNode> now;
  if (DIR* dir = ::opendir(path.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      const char* name = entry->d_name;
      if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
      if (entry->d_type != DT_DIR) {  // a link to a directory counts, as for every other lookup here
        struct stat info;
        if ((entry->d_type != DT_UNKNOWN && entry->d_type != DT_LNK) ||
            ::fstatat(::dirfd(dir), name, &info, 0) != 0 || !S_ISDIR(info.st_mode))
          continue;
      }
      std::string child_path = path + "/" + name;
      auto known = std::find_if(children.begin(), children.end(),
                                [&](const CgroupTreeNode& child) { return child.path == child_path; });
      if (known != children.end()) {
        now.push_back(std::move(*known));
      } else {
        bool scheduler_cgroup = walk.is_scheduler_cgroup(child_path);
        now.emplace_back(std::move(child_path)).scheduler_cgroup = scheduler_cgroup;
      }
    }
    ::closedir(dir);
  }
  children = std::move(now);
  links = links_now >= 2 ? links_now : 0;
}

JobDirectory::ProcessListing::ProcessListing(const JobCgroup& job)
    : tree(job.process_dir()), scheduler_cgroups(job.scheduler_cgroups), hold(on_cgroup2(tree.path)) {
  tree.scheduler_cgroup = std::find(scheduler_cgroups.begin(), scheduler_cgroups.end(), "") != scheduler_cgroups.end();
}

std::vector<int> JobDirectory::pids(const JobCgroup& job) {
  std::vector<int> pids;
  ProcessListing listing(job);
  CgroupWalk walk;
  walk.scheduler_cgroups = &listing.scheduler_cgroups;
  walk.root = listing.tree.path;
  if (!listing.tree.path.empty()) listing.tree.collect(pids, walk);
  return sorted_unique(std::move(pids));
}

std::vector<int> JobDirectory::processes(const JobCgroup& job, std::int64_t at_ns) {
  if (job.process_dir().empty()) return {};
  std::shared_ptr<const JobSnapshot> current;
  {
    std::lock_guard lock(mutex_);  // the snapshot the caller got: no new look for changes
    current = snapshot_;
  }
  std::lock_guard lock(processes_mutex_);
  if (current && current != listings_of_) {  // forget the jobs that ended
    for (auto it = listings_.begin(); it != listings_.end();) {
      const bool running = std::any_of(current->jobs.begin(), current->jobs.end(),
                                       [&](const JobCgroup& each) { return each.process_dir() == it->first; });
      it = running ? std::next(it) : listings_.erase(it);
    }
    listings_of_ = current;
  }
  // The sensors reading at one instant each ask for every job, at about the same time on their
  // own threads: the first lists them all, so that the others find them listed rather than
  // waiting for one another job after job (perf: futex waits and wake-ups were a tenth of
  // lagent's CPU with 50 jobs).
  if (current && listed_all_at_ns_ != at_ns) {
    listed_all_at_ns_ = at_ns;
    for (const auto& each : current->jobs)
      if (!each.process_dir().empty()) list_locked(each, at_ns);
  }
  return list_locked(job, at_ns);
}

const std::vector<int>& JobDirectory::list_locked(const JobCgroup& job, std::int64_t at_ns) {
  auto& listing = listings_[job.process_dir()];
  if (!listing) listing = std::make_unique<ProcessListing>(job);
  if (listing->listed && listing->at_ns == at_ns) return listing->pids;
  std::vector<int> pids;
  if (!walk_) walk_ = std::make_unique<CgroupWalk>();
  walk_->hold = listing->hold;
  if (listing->hold && !entry_watch_) entry_watch_ = std::make_unique<CgroupEntryWatch>();
  walk_->watches = listing->hold ? entry_watch_.get() : nullptr;
  if (walk_->watches && drained_at_ns_ != at_ns) {  // once per instant: what came and went since
    walk_->watches->drain();
    drained_at_ns_ = at_ns;
  }
  walk_->scheduler_cgroups = &listing->scheduler_cgroups;
  walk_->root = listing->tree.path;
  listing->tree.collect(pids, *walk_);
  listing->pids = sorted_unique(std::move(pids));
  listing->at_ns = at_ns;
  listing->listed = true;
  return listing->pids;
}

}  // namespace fructosa::sensors
