#include "jobs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>
#include <spdlog/spdlog.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "cgroup_entry_watch.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors {
namespace {

namespace fs = std::filesystem;

const char* const kSchedulers[] = {"auto", "slurm", "oar", "pbs", "regex"};

// colmet's default for OAR: the links OAR's job manager makes to each job's cpuset cgroup.
constexpr const char* kOarDefaultRoot = "/dev/oar_cgroups_links/cpuset";

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool exists(const fs::path& path) {
  std::error_code error;
  return fs::exists(path, error);
}

// Subdirectory names of `dir`, sorted; empty when it vanished or cannot be read (jobs end at
// any moment, so that is normal).
std::vector<std::string> subdirectories(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    std::error_code type_error;
    if (it->is_directory(type_error)) names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// One cgroup hierarchy: a v2 tree (name "") or a v1 one named after its controllers.
struct Hierarchy {
  std::string name;
  std::string path;
};

bool is_cgroup_dir(const std::string& path) { return exists(path + "/cgroup.procs"); }
bool is_unified(const std::string& path) { return exists(path + "/cgroup.controllers"); }

// The hierarchies under `root`: root itself when it is a v2 mount; else every mounted
// controller directory in it (cgroup v1 and the hybrid layout's "unified"); else, when root is
// one v1 controller directory (OAR's links dir), it and its siblings.
std::vector<Hierarchy> hierarchies_under(const std::string& root) {
  std::vector<Hierarchy> found;
  if (is_unified(root)) return {{"", root}};
  std::string base = root;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  if (is_cgroup_dir(base)) base = fs::path(base).parent_path().string();
  std::set<std::string> seen;  // "cpu" and "cpuacct" are links to "cpu,cpuacct"
  for (const auto& name : subdirectories(base)) {
    std::string path = base + "/" + name;
    if (!is_cgroup_dir(path)) continue;
    std::error_code error;
    auto real = fs::canonical(path, error);
    if (!seen.insert(error ? path : real.string()).second) continue;
    // Named after the real directory: "cpu,cpuacct", not its "cpu" link.
    std::string real_name = error ? name : real.filename().string();
    std::string hierarchy = is_unified(path) ? "" : real_name;
    path = base + "/" + real_name;
    if (hierarchy.rfind("name=", 0) == 0) hierarchy.erase(0, 5);
    found.push_back({hierarchy, path});
  }
  return found;
}

// Where a scheduler puts its jobs, relative to a hierarchy: directory globs, then the job's
// own directory as a regex whose one group is the id.
struct JobPattern {
  std::vector<std::string> parents;
  std::regex job;
};

std::vector<JobPattern> builtin_patterns(Scheduler scheduler, const std::string& slurm_node) {
  std::vector<JobPattern> patterns;
  bool any = scheduler == Scheduler::automatic;
  if (any || scheduler == Scheduler::slurm) {
    std::string suffixed = slurm_node.empty() ? "slurm_*" : "slurm_" + slurm_node;
    std::string scope = slurm_node.empty() ? "*_slurmstepd.scope" : slurm_node + "_slurmstepd.scope";
    std::regex job(R"(job_(\d+))");
    patterns.push_back({{"slurm", "uid_*"}, job});  // cgroup v1
    patterns.push_back({{suffixed, "uid_*"}, job});  // v1, multiple slurmd
    patterns.push_back({{"system.slice", "slurmstepd.scope"}, job});  // v2
    patterns.push_back({{"system.slice", scope}, job});  // v2, multiple slurmd
  }
  if (any || scheduler == Scheduler::oar) patterns.push_back({{"oar"}, std::regex(R"(.+_(\d+))")});
  if (any || scheduler == Scheduler::pbs) {
    // "123.server", array elements "123[4].server": the id is the leading number.
    std::regex job(R"((\d+)(\[\d*\])?(\..*)?)");
    patterns.push_back({{"pbs_jobs.service", "jobid"}, job});
    patterns.push_back({{"torque"}, job});
  }
  return patterns;
}

bool parse_id(const std::string& text, std::uint64_t& id) { return parse_uint(text, id) && id != 0; }

}  // namespace

const OptionTable& job_options() {
  static const OptionTable table{
      {.name = "scheduler",
       .type = OptionType::text,
       .default_value = "auto",
       .help = "which batch system's cgroups name the jobs: auto (every one below), slurm "
               "(cgroup v1 slurm[_<node>]/uid_*/job_<id>, v2 system.slice/[<node>_]slurmstepd.scope/"
               "job_<id>), oar (oar/<user>_<id>), pbs (pbs_jobs.service/jobid/<id>, torque/<id>), "
               "regex (the `regex` key)",
       .choices = {std::begin(kSchedulers), std::end(kSchedulers)}},
      {.name = "cgroup_root",
       .type = OptionType::text,
       .default_value = "",
       .help = "directory holding the cgroup hierarchies (a v2 mount, the v1 controller "
               "directories, or one v1 controller directory); empty: <sys_root>/fs/cgroup, and "
               "for scheduler = oar " + std::string(kOarDefaultRoot) + " as colmet"},
      {.name = "regex",
       .type = OptionType::text,
       .default_value = "",
       .help = "scheduler = regex: an ECMAScript regex searched in each cgroup directory's path "
               "relative to its hierarchy (e.g. mybatch/job-(\\d+)); its one capture group is the "
               "numeric job id; the shallowest matching directory is the job's"},
      {.name = "regex_max_depth",
       .type = OptionType::integer,
       .default_value = "6",
       .help = "scheduler = regex: how many directory levels below each hierarchy are searched",
       .min = 1,
       .max = 32},
      {.name = "slurm_node_name",
       .type = OptionType::text,
       .default_value = "",
       .help = "nodes running several slurmd (multiple-slurmd): only the jobs of this slurmd node "
               "name; empty: the jobs of every slurmd on this host"},
      {.name = "rescan_interval",
       .type = OptionType::real,
       .default_value = "60",
       .help = "seconds between full rescans of the cgroup tree; jobs are otherwise found at "
               "once through inotify, this only catches what inotify could not watch",
       .min = 0},
  };
  return table;
}

// libstdc++ 12 reads a repeat count ({n,m}) or back-reference (\n) into a long without an
// overflow check (undefined behaviour, found by fuzz/ini_fuzz): such numbers are refused here,
// before std::regex sees them. Nine digits is far beyond any useful count.
static void check_regex_numbers(const std::string& regex) {
  bool in_braces = false;
  for (std::size_t i = 0; i < regex.size(); ++i) {
    char c = regex[i];
    bool counted = false;
    if (c == '\\' && i + 1 < regex.size()) {
      counted = regex[i + 1] >= '0' && regex[i + 1] <= '9';
      if (!counted) ++i;  // an escaped character: never a brace
    } else if (c == '{') {
      in_braces = true;
      counted = true;
    } else if (c == '}') {
      in_braces = false;
    } else if (c == ',') {
      counted = in_braces;
    }
    if (!counted) continue;
    std::size_t digits = 0;
    while (i + 1 + digits < regex.size() && regex[i + 1 + digits] >= '0' && regex[i + 1 + digits] <= '9') ++digits;
    if (digits > 9)
      throw ConfigError(fmt::format("key 'regex': '{}' has a repeat count or back-reference of {} digits", regex, digits));
    i += digits;
  }
}

JobSettings job_settings(const Options& options) {
  JobSettings settings;
  const std::string& scheduler = options.get_text("scheduler");
  for (std::size_t i = 0; i < std::size(kSchedulers); ++i)
    if (scheduler == kSchedulers[i]) settings.scheduler = static_cast<Scheduler>(i);
  settings.cgroup_root = options.get_text("cgroup_root");
  settings.regex = options.get_text("regex");
  settings.regex_max_depth = static_cast<int>(options.get_int("regex_max_depth"));
  settings.slurm_node_name = options.get_text("slurm_node_name");
  settings.rescan_interval = options.get_real("rescan_interval");
  if (settings.scheduler == Scheduler::regex && settings.regex.empty())
    throw ConfigError("scheduler = regex needs the key 'regex' (a pattern with one capture group for the job id)");
  if (!settings.regex.empty()) {
    check_regex_numbers(settings.regex);
    try {
      std::regex pattern(settings.regex);
      if (pattern.mark_count() != 1)
        throw ConfigError(fmt::format("key 'regex': '{}' has {} capture groups; it needs exactly one, the job id",
                                      settings.regex, pattern.mark_count()));
    } catch (const std::regex_error& error) {
      throw ConfigError(fmt::format("key 'regex': '{}' is not a valid regex: {}", settings.regex, error.what()));
    }
    if (settings.scheduler != Scheduler::regex)
      throw ConfigError("key 'regex' is only used with scheduler = regex");
  }
  return settings;
}

std::string JobCgroup::dir(std::string_view controller) const {
  for (const auto& [hierarchy, path] : v1) {
    std::string_view names = hierarchy;
    while (!names.empty()) {
      auto comma = names.find(',');
      if (names.substr(0, comma) == controller) return path;
      names = comma == std::string_view::npos ? std::string_view{} : names.substr(comma + 1);
    }
  }
  return unified;
}

std::string JobCgroup::any_dir() const {
  if (!unified.empty()) return unified;
  return v1.empty() ? std::string() : v1.front().second;
}

const JobCgroup* JobSnapshot::find(std::uint64_t id) const {
  auto it = std::lower_bound(jobs.begin(), jobs.end(), id, [](const JobCgroup& job, std::uint64_t value) { return job.id < value; });
  return it != jobs.end() && it->id == id ? &*it : nullptr;
}

// The inotify side: every directory a scan listed is watched for subdirectories appearing or
// going; any event makes the next snapshot() rescan.
struct JobDirectory::Watcher {
  int fd = -1;
  bool failed = false;  // could not watch everything: rescan every time
  std::string failure;

  ~Watcher() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  void restart() {
    close();
    failed = false;
    fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) fail(fmt::format("inotify_init1: {}", std::strerror(errno)));
  }
  void watch(const std::string& dir) {
    if (fd < 0) return;
    constexpr std::uint32_t kMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_ONLYDIR;
    if (::inotify_add_watch(fd, dir.c_str(), kMask) < 0 && errno != ENOENT)
      fail(fmt::format("inotify_add_watch {}: {}", dir, std::strerror(errno)));
  }
  void fail(std::string why) {
    if (!failed && failure != why)
      spdlog::warn("job discovery: {}; rescanning the cgroup tree every second instead", why);
    failed = true;
    failure = std::move(why);
  }
  // True when something happened since the last call.
  bool drain() {
    if (fd < 0) return true;
    alignas(inotify_event) char buffer[4096];
    bool any = false;
    for (;;) {
      ssize_t got = ::read(fd, buffer, sizeof buffer);
      if (got <= 0) break;
      any = true;
    }
    return any;
  }
};

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

}  // namespace

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
};

// A cgroup directory and the subdirectories it had when last listed. Listing a cgroup means
// reading its dozens of control files' names, and several per-job sensors ask for every job's
// processes every round: a directory is listed again only when its link count (2 +
// subdirectories on cgroupfs, tmpfs and ext4) changed or one of its children went.
struct CgroupTreeNode {
  explicit CgroupTreeNode(std::string directory) : path(std::move(directory)) {}

  std::string path;
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
  bool collect(std::vector<int>& pids, CgroupWalk& walk) {
    nlink_t nlink = 0;
    if (!read_self(pids, walk, nlink)) return false;
    if (nlink == 2) {  // a leaf, as most job directories are
      children.clear();
      links = 2;
      return true;
    }
    const bool listed = links == 0 || nlink != links;
    if (listed) list(nlink);
    bool all_there = true;
    for (auto& child : children) all_there = child.collect(pids, walk) && all_there;
    if (!all_there && !listed) {
      // A child went, maybe as another came (the same count): list again and read the new ones
      // (a pid read twice is dropped by the caller).
      list(nlink);
      for (auto& child : children) child.collect(pids, walk);
    }
    return true;
  }

  // Appends the pids this directory lists and gives its link count; false when it is gone.
  bool read_self(std::vector<int>& pids, CgroupWalk& walk, nlink_t& nlink) {
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

  // The subdirectories now; those known before keep what is known of them.
  void list(nlink_t links_now) {
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
        if (known != children.end())
          now.push_back(std::move(*known));
        else
          now.emplace_back(std::move(child_path));
      }
      ::closedir(dir);
    }
    children = std::move(now);
    links = links_now >= 2 ? links_now : 0;
  }
};

struct JobDirectory::ProcessListing {
  explicit ProcessListing(std::string directory) : tree(std::move(directory)), hold(on_cgroup2(tree.path)) {}

  CgroupTreeNode tree;
  bool hold;  // cgroup v2: its descriptors are kept open
  std::int64_t at_ns = 0;
  bool listed = false;
  std::vector<int> pids;
};

JobDirectory::JobDirectory(const Roots& roots)
    : proc_root_(roots.proc), sys_root_(roots.sys), watcher_(std::make_unique<Watcher>()) {}

JobDirectory::JobDirectory(JobSettings settings, const Roots& roots) : JobDirectory(roots) {
  settings_ = std::move(settings);
}

JobDirectory::~JobDirectory() = default;

std::unique_ptr<JobDirectory> JobDirectory::fixed(std::vector<JobCgroup> jobs, const Roots& roots) {
  std::unique_ptr<JobDirectory> directory(new JobDirectory(roots));
  directory->fixed_ = true;
  auto snapshot = std::make_shared<JobSnapshot>();
  std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  for (const auto& job : jobs) {
    if (!snapshot->involved_jobs.empty()) snapshot->involved_jobs += ',';
    snapshot->involved_jobs += std::to_string(job.id);
  }
  snapshot->jobs = std::move(jobs);
  directory->snapshot_ = std::move(snapshot);
  directory->description_ = "a fixed list of jobs";
  return directory;
}

std::shared_ptr<const JobSnapshot> JobDirectory::snapshot() {
  std::lock_guard lock(mutex_);
  if (!fixed_ && changed_locked()) rescan_locked();
  return snapshot_;
}

bool JobDirectory::changed_locked() {
  if (!snapshot_) return true;
  const std::int64_t since = steady_ns() - last_scan_ns_;
  // Without (complete) watches: rescan, but at most once a second however many sensors ask.
  if (watcher_->failed) return since >= 1'000'000'000;
  if (watcher_->drain()) return true;
  return since >= static_cast<std::int64_t>(settings_.rescan_interval * 1e9);
}

void JobDirectory::rescan_locked() {
  watcher_->restart();
  std::vector<std::string> roots;
  if (!settings_.cgroup_root.empty()) {
    roots.push_back(settings_.cgroup_root);
  } else {
    if (settings_.scheduler != Scheduler::oar) roots.push_back(sys_root_ + "/fs/cgroup");
    if (settings_.scheduler == Scheduler::oar || settings_.scheduler == Scheduler::automatic)
      roots.push_back(kOarDefaultRoot);
  }
  std::map<std::uint64_t, JobCgroup> found;
  std::vector<std::pair<std::string, std::uint64_t>> relative;  // path in its hierarchy -> job
  auto add = [&](const Hierarchy& hierarchy, const std::string& rel, const std::string& name, std::uint64_t id) {
    JobCgroup& job = found[id];
    job.id = id;
    if (job.name.empty()) job.name = name;
    std::string path = hierarchy.path + "/" + rel;
    if (hierarchy.name.empty()) {
      if (job.unified.empty()) job.unified = path;
    } else {
      job.v1.emplace_back(hierarchy.name, path);
    }
    relative.emplace_back("/" + rel, id);
  };
  std::vector<std::string> described;
  std::set<std::string> seen_hierarchies;
  auto patterns = builtin_patterns(settings_.scheduler, settings_.slurm_node_name);
  std::optional<std::regex> user_regex;
  if (settings_.scheduler == Scheduler::regex) user_regex.emplace(settings_.regex);

  for (const auto& root : roots) {
    // Watch the root too, so a hierarchy (or the whole tree) appearing later is noticed.
    watcher_->watch(root);
    for (const auto& hierarchy : hierarchies_under(root)) {
      if (!seen_hierarchies.insert(hierarchy.path).second) continue;
      described.push_back(hierarchy.name.empty() ? hierarchy.path + " (v2)" : hierarchy.path);
      if (user_regex) {
        // Depth-first, parents before children: the shallowest match is the job's directory.
        std::function<void(const std::string&, int)> walk = [&](const std::string& rel, int depth) {
          std::string dir = rel.empty() ? hierarchy.path : hierarchy.path + "/" + rel;
          watcher_->watch(dir);
          for (const auto& name : subdirectories(dir)) {
            std::string child = rel.empty() ? name : rel + "/" + name;
            std::smatch match;
            std::uint64_t id = 0;
            if (std::regex_search(child, match, *user_regex) && parse_id(match[1].str(), id)) {
              add(hierarchy, child, name, id);
            } else if (depth + 1 < settings_.regex_max_depth) {
              walk(child, depth + 1);
            }
          }
        };
        walk("", 0);
        continue;
      }
      for (const auto& pattern : patterns) {
        std::function<void(const std::string&, std::size_t)> walk = [&](const std::string& rel, std::size_t level) {
          std::string dir = rel.empty() ? hierarchy.path : hierarchy.path + "/" + rel;
          watcher_->watch(dir);
          for (const auto& name : subdirectories(dir)) {
            std::string child = rel.empty() ? name : rel + "/" + name;
            if (level < pattern.parents.size()) {
              if (::fnmatch(pattern.parents[level].c_str(), name.c_str(), FNM_PERIOD) == 0) walk(child, level + 1);
              continue;
            }
            std::smatch match;
            std::uint64_t id = 0;
            if (std::regex_match(name, match, pattern.job) && parse_id(match[1].str(), id)) add(hierarchy, child, name, id);
          }
        };
        walk("", 0);
      }
    }
  }

  auto snapshot = std::make_shared<JobSnapshot>();
  for (auto& [id, job] : found) {
    if (!snapshot->involved_jobs.empty()) snapshot->involved_jobs += ',';
    snapshot->involved_jobs += std::to_string(id);
    snapshot->jobs.push_back(std::move(job));
  }
  if (snapshot_ && snapshot_->involved_jobs != snapshot->involved_jobs)
    spdlog::debug("jobs on this node: [{}]", snapshot->involved_jobs);
  snapshot_ = std::move(snapshot);
  relative_ = std::move(relative);
  last_scan_ns_ = steady_ns();
  description_ = described.empty() ? fmt::format("no cgroup hierarchy under {}", fmt::join(roots, ", "))
                                   : fmt::format("{}", fmt::join(described, ", "));
}

namespace {

std::vector<int> sorted_unique(std::vector<int> pids) {
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

}  // namespace

std::vector<int> JobDirectory::pids(const JobCgroup& job) {
  std::vector<int> pids;
  CgroupTreeNode tree(job.any_dir());
  CgroupWalk walk;
  if (!tree.path.empty()) tree.collect(pids, walk);
  return sorted_unique(std::move(pids));
}

std::vector<int> JobDirectory::processes(const JobCgroup& job, std::int64_t at_ns) {
  std::string dir = job.any_dir();
  if (dir.empty()) return {};
  std::shared_ptr<const JobSnapshot> current;
  {
    std::lock_guard lock(mutex_);  // the snapshot the caller got: no new look for changes
    current = snapshot_;
  }
  std::lock_guard lock(processes_mutex_);
  if (current && current != listings_of_) {  // forget the jobs that ended
    for (auto it = listings_.begin(); it != listings_.end();) {
      const bool running = std::any_of(current->jobs.begin(), current->jobs.end(),
                                       [&](const JobCgroup& each) { return each.any_dir() == it->first; });
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
      if (std::string each_dir = each.any_dir(); !each_dir.empty()) list_locked(each_dir, at_ns);
  }
  return list_locked(dir, at_ns);
}

const std::vector<int>& JobDirectory::list_locked(const std::string& dir, std::int64_t at_ns) {
  auto& listing = listings_[dir];
  if (!listing) listing = std::make_unique<ProcessListing>(dir);
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
  listing->tree.collect(pids, *walk_);
  listing->pids = sorted_unique(std::move(pids));
  listing->at_ns = at_ns;
  listing->listed = true;
  return listing->pids;
}

std::uint64_t JobDirectory::job_of_pid(int pid) {
  auto current = snapshot();
  if (current->jobs.empty()) return 0;
  std::vector<std::pair<std::string, std::uint64_t>> relative;
  {
    std::lock_guard lock(mutex_);
    if (fixed_ && relative_.empty()) relative_ = relative_paths_of_fixed();
    relative = relative_;
  }
  std::ifstream file(fmt::format("{}/{}/cgroup", proc_root_, pid));
  // "hierarchy-id:controllers:/path" per line; the job is the one whose directory contains path.
  for (std::string line; std::getline(file, line);) {
    auto second = line.find(':', line.find(':') + 1);
    if (second == std::string::npos) continue;
    std::string_view path = std::string_view(line).substr(second + 1);
    for (const auto& [prefix, id] : relative) {
      if (path.size() >= prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
          (path.size() == prefix.size() || path[prefix.size()] == '/'))
        return id;
    }
  }
  return 0;
}

// A fixed snapshot's directories relative to their hierarchy: the hierarchy's mount is the
// highest ancestor that is still a cgroup directory.
std::vector<std::pair<std::string, std::uint64_t>> JobDirectory::relative_paths_of_fixed() const {
  std::vector<std::pair<std::string, std::uint64_t>> relative;
  for (const auto& job : snapshot_->jobs) {
    std::vector<std::string> dirs;
    if (!job.unified.empty()) dirs.push_back(job.unified);
    for (const auto& entry : job.v1) dirs.push_back(entry.second);
    for (const auto& dir : dirs) {
      fs::path mount = dir;
      for (fs::path up = mount.parent_path(); !up.empty() && up != up.root_path() && is_cgroup_dir(up.string());
           up = up.parent_path())
        mount = up;
      if (mount == fs::path(dir)) continue;
      relative.emplace_back("/" + fs::path(dir).lexically_relative(mount).string(), job.id);
    }
  }
  return relative;
}

std::string JobDirectory::describe() const {
  std::lock_guard lock(mutex_);
  return description_;
}

}  // namespace fructosa::sensors
