#include "jobs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>
#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "job_layouts.h"
#include "cgroup_process_tree.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors {
namespace {

namespace fs = std::filesystem;

const char* const kSchedulers[] = {"auto", "slurm", "oar", "pbs", "regex"};

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool exists(const fs::path& path) {
  std::error_code error;
  return fs::exists(path, error);
}

}  // namespace

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

bool parse_job_id(const std::string& text, std::uint64_t& id) { return parse_uint(text, id) && id != 0; }

namespace {

bool is_cgroup_dir(const std::string& path) { return exists(path + "/cgroup.procs"); }
bool is_unified(const std::string& path) { return exists(path + "/cgroup.controllers"); }

// The hierarchies under `root`: root itself when it is a v2 mount; else every mounted
// controller directory in it (cgroup v1 and the hybrid layout's "unified"); else, when root is
// one v1 controller directory (OAR's links dir), it and its siblings.
std::vector<CgroupHierarchy> hierarchies_under(const std::string& root) {
  std::vector<CgroupHierarchy> found;
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
    // Named after the real directory: "cpu,cpuacct", not its "cpu" link; its path too where
    // the real directory is beside the link (OAR's links lead elsewhere: /sys/fs/cgroup).
    std::string real_name = error ? name : real.filename().string();
    std::string hierarchy = is_unified(path) ? "" : real_name;
    if (exists(base + "/" + real_name)) path = base + "/" + real_name;
    if (hierarchy.rfind("name=", 0) == 0) hierarchy.erase(0, 5);
    found.push_back({hierarchy, path});
  }
  return found;
}

// The layouts of the schedulers named (every one for automatic), in the order they are looked for.
std::vector<JobPattern> builtin_patterns(Scheduler scheduler, const std::string& slurm_node) {
  std::vector<JobPattern> patterns;
  auto append = [&](std::vector<JobPattern> more) {
    patterns.insert(patterns.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  };
  bool any = scheduler == Scheduler::automatic;
  if (any || scheduler == Scheduler::slurm) append(slurm_patterns(slurm_node));
  if (any || scheduler == Scheduler::oar) append(oar_patterns());
  if (any || scheduler == Scheduler::pbs) append(pbs_patterns());
  return patterns;
}

// The jobs of `pattern` in `hierarchy`: the parent globs level by level, then the job regex.
void find_pattern_jobs(const CgroupHierarchy& hierarchy, const JobPattern& pattern, JobScan& scan) {
  std::function<void(const std::string&, std::size_t)> walk = [&](const std::string& rel, std::size_t level) {
    std::string dir = rel.empty() ? hierarchy.path : hierarchy.path + "/" + rel;
    scan.watch(dir);
    for (const auto& name : subdirectories(dir)) {
      std::string child = rel.empty() ? name : rel + "/" + name;
      if (level < pattern.parents.size()) {
        if (::fnmatch(pattern.parents[level].c_str(), name.c_str(), FNM_PERIOD) == 0) walk(child, level + 1);
        continue;
      }
      std::uint64_t id = 0;
      if (match_job_name(*pattern.job, name, id)) scan.add(hierarchy, child, name, id, &pattern);
    }
  };
  walk("", 0);
}

}  // namespace

const OptionTable& job_options() {
  static const OptionTable table{
      {.name = "scheduler",
       .type = OptionType::text,
       .default_value = "auto",
       .help = "which batch system's cgroups name the jobs: auto (every one below), slurm "
               "(cgroup v1 slurm[_<node>]/uid_*/job_<id>, v2 system.slice/[<node>_]slurmstepd.scope/"
               "job_<id>), oar (oar/<user>_<id>; OAR 3 on v2 oar.slice/oar-u<uid>.slice/"
               "oar-u<uid>-j<id>.slice), pbs (pbs_jobs.service/jobid/<id>, torque/<id>), "
               "regex (the `regex` key)",
       .choices = {std::begin(kSchedulers), std::end(kSchedulers)}},
      {.name = "cgroup_root",
       .type = OptionType::text,
       .default_value = "",
       .help = "directory holding the cgroup hierarchies (a v2 mount, the v1 controller "
               "directories, or one v1 controller directory); empty: <sys_root>/fs/cgroup, and "
               "for scheduler = oar or auto also " + std::string(kOarDefaultRoot) + " (OAR 2.5's links, as colmet)"},
      {.name = "regex",
       .type = OptionType::text,
       .default_value = "",
       .help = "scheduler = regex: an RE2 regex (https://github.com/google/re2/wiki/Syntax; no "
               "backreferences or lookarounds, repetition counts up to 1000) searched in each cgroup "
               "directory's path relative to its hierarchy (e.g. mybatch/job-(\\d+)); its one capture "
               "group is the numeric job id; the shallowest matching directory is the job's"},
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
    check_job_regex(settings.regex);
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

std::string JobCgroup::process_dir() const {
  if (!unified.empty()) return unified;
  for (const auto& [hierarchy, path] : v1)
    if (hierarchy == "freezer") return path;
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

JobDirectory::JobDirectory(const Roots& roots)
    : proc_root_(roots.proc), sys_root_(roots.sys), watcher_(std::make_unique<Watcher>()) {}

JobDirectory::JobDirectory(JobSettings settings, const Roots& roots) : JobDirectory(roots) {
  settings_ = std::move(settings);
  if (settings_.scheduler == Scheduler::regex) user_regex_ = compile_job_regex(settings_.regex);
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
    // OAR 3 on cgroup v2 puts its jobs in the system's tree (oar.slice), OAR 2.5 behind its links.
    roots.push_back(sys_root_ + "/fs/cgroup");
    if (settings_.scheduler == Scheduler::oar || settings_.scheduler == Scheduler::automatic)
      roots.push_back(kOarDefaultRoot);
  }
  std::map<std::uint64_t, JobCgroup> found;
  std::vector<std::pair<std::string, std::uint64_t>> relative;  // path in its hierarchy -> job
  JobScan scan;
  scan.watch = [&](const std::string& dir) { watcher_->watch(dir); };
  scan.add = [&](const CgroupHierarchy& hierarchy, const std::string& rel, const std::string& name, std::uint64_t id,
                 const JobPattern* pattern) {
    JobCgroup& job = found[id];
    job.id = id;
    if (job.name.empty()) {
      job.name = name;
      job.scheduler = pattern ? pattern->scheduler : "regex";
      if (pattern) job.scheduler_cgroups = pattern->scheduler_cgroups;
    }
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

  for (const auto& root : roots) {
    // Watch the root too, so a hierarchy (or the whole tree) appearing later is noticed.
    watcher_->watch(root);
    for (const auto& hierarchy : hierarchies_under(root)) {
      // Once each, however reached (OAR's links lead to the hierarchies under /sys/fs/cgroup).
      std::error_code error;
      auto real = fs::canonical(hierarchy.path, error);
      if (!seen_hierarchies.insert(error ? hierarchy.path : real.string()).second) continue;
      described.push_back(hierarchy.name.empty() ? hierarchy.path + " (v2)" : hierarchy.path);
      if (user_regex_) {
        find_regex_jobs(hierarchy, *user_regex_, settings_.regex_max_depth, scan);
        continue;
      }
      for (const auto& pattern : patterns) find_pattern_jobs(hierarchy, pattern, scan);
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
