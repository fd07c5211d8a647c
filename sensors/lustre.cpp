// Lustre: client-side statistics of every Lustre mount (the llite layer), colmet's lustre
// backend.
//
// Where: <proc>/fs/lustre/llite/<instance>/stats (Lustre up to 2.11) and
// <sys>/kernel/debug/lustre/llite/<instance>/stats (debugfs, where Lustre >= 2.12 keeps it);
// both roots are looked at, an instance found under both is read from the first. <instance>
// is "<fsname>-<hex address of the superblock>" ("scratch-ffff8803d2fce800").
//
// Format (lprocfs_stats_seq_show): a "snapshot_time <secs.usecs> secs.usecs" line (and, since
// 2.12, "start_time" and "elapsed_time"), then one line per counter that has counted
// something:
//   <name> <count> samples [<unit>] [<min> <max> <sum> [<sumsq>]]
// e.g. "read_bytes 17 samples [bytes] 0 4194304 30511233", "open 8 samples [regs]" (2.5),
// "open 345 samples [usecs] 3 2500 45678 23456789" (>= 2.12, latency per call).
//
// Keys, with <fs> the fsname (made unique with "#1", "#2" when one file system is mounted
// twice, in the instances' order):
//   <fs>.<name>.count  the count (samples) of every counter line: read_bytes and write_bytes
//                      (read/write calls), open, close, getattr, setattr, statfs, seek, fsync,
//                      mmap, ...;
//   <fs>.<name>.bytes  the sum of a [bytes] line: <fs>.read_bytes.bytes is the bytes read;
//   <fs>.<name>.time   the sum of a [usecs] line / 1e6: seconds spent in that operation.
// (The count is not <fs>.<name> itself: no key may be a prefix of another, or Elasticsearch,
// which nests dotted fields, would refuse the document.)
// A counter appears when it first counts (Lustre omits lines of counters that are still 0).
//
// Availability: no llite instance under either root is "unavailable" with the reason (no
// Lustre client mount; debugfs not mounted; debugfs is root-only, 0700); an instance whose
// stats file vanishes (unmounted) is dropped at the next scan. Instances are looked for at
// the first reading, when either llite directory changes, and every `rescan_interval` seconds.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "glob_match.h"
#include "hwmon.h"
#include "procfs.h"
#include "sensor.h"
#include "sysfs_tree.h"

namespace fructosa::sensors::lustre_file {
namespace {

const OptionTable kOptions{
    {.name = "rescan_interval",
     .type = OptionType::real,
     .default_value = "60",
     .help = "seconds between looking for new or unmounted Lustre file systems (also done at "
             "once when an llite directory changes); 0: every reading",
     .min = 0},
    {.name = "include",
     .type = OptionType::list,
     .default_value = "",
     .help = "fsname patterns (fnmatch: * ? [seq]) to report, comma-separated; empty: all mounts"},
    {.name = "exclude",
     .type = OptionType::list,
     .default_value = "",
     .help = "fsname patterns to leave out; wins over include"},
};

const Catalog kCatalog{
    {"*.read_bytes.count", Unit::count, Kind::counter, "read calls on this Lustre mount"},
    {"*.write_bytes.count", Unit::count, Kind::counter, "write calls on this Lustre mount"},
    {"*.read_bytes.bytes", Unit::bytes, Kind::counter, "bytes read from this Lustre mount"},
    {"*.write_bytes.bytes", Unit::bytes, Kind::counter, "bytes written to this Lustre mount"},
    {"*.*.bytes", Unit::bytes, Kind::counter, "sum of another [bytes] llite statistic (osc_read, ...)"},
    {"*.*.time", Unit::seconds, Kind::counter,
     "time spent in this operation, sum of its [usecs] latencies (Lustre >= 2.12)"},
    {"*.*.count", Unit::count, Kind::counter,
     "llite operations of this kind on the mount (open, close, getattr, setattr, statfs, seek, "
     "fsync, mmap, ...)"},
};

struct Mount {
  std::unique_ptr<ProcFile> stats;
  std::string prefix;  // "scratch."
};

// "scratch-ffff8803d2fce800" -> "scratch"; a name without a hex suffix stays whole.
std::string_view fsname_of(std::string_view instance) {
  auto dash = instance.rfind('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 == instance.size()) return instance;
  for (char c : instance.substr(dash + 1))
    if (!std::isxdigit(static_cast<unsigned char>(c))) return instance;
  return instance.substr(0, dash);
}

class LustreSensor final : public Sensor {
 public:
  explicit LustreSensor(const SensorContext& context)
      : roots_{context.roots.proc + "/fs/lustre/llite", context.roots.sys + "/kernel/debug/lustre/llite"},
        proc_rescan_(roots_[0], context.options.get_real("rescan_interval")),
        debug_rescan_(roots_[1], context.options.get_real("rescan_interval")),
        filter_(context.options.get_list("include"), context.options.get_list("exclude")) {}

  bool sample(SampleWriter& out) override {
    bool due = proc_rescan_.due();
    due = debug_rescan_.due() || due;  // both, to keep their listings current
    if (due || vanished_) scan();
    vanished_ = false;
    if (mounts_.empty()) throw SensorUnavailable(why_empty_);
    bool any = false;
    std::string first_error;
    for (auto& mount : mounts_) {
      std::string_view text;
      try {
        text = mount.stats->read();
      } catch (const SensorUnavailable& why) {
        vanished_ = true;  // unmounted: look again next round
        if (first_error.empty()) first_error = why.what();
        continue;
      }
      any = true;
      report(mount.prefix, text, out);
    }
    if (!any) throw SensorUnavailable(first_error);
    return true;
  }

 private:
  void report(const std::string& prefix, std::string_view text, SampleWriter& out) {
    Lines lines(text);
    std::string_view line;
    while (lines.next(line)) {
      std::string_view name = next_field(line);
      std::uint64_t count = 0;
      if (!parse_uint(next_field(line), count) || next_field(line) != "samples") continue;
      std::string_view unit = next_field(line);
      key_.assign(prefix).append(key_component(name));
      const std::size_t stem = key_.size();
      out.set(key_.append(".count"), static_cast<double>(count));
      key_.resize(stem);
      std::uint64_t min = 0, max = 0, sum = 0;
      if (!parse_uint(next_field(line), min) || !parse_uint(next_field(line), max) ||
          !parse_uint(next_field(line), sum))
        continue;
      if (unit == "[bytes]") {
        key_.append(".bytes");
        out.set(key_, static_cast<double>(sum));
      } else if (unit == "[usecs]") {
        key_.append(".time");
        out.set(key_, static_cast<double>(sum) / 1e6);
      }
    }
  }

  void scan() {
    mounts_.clear();
    std::vector<std::string> seen;
    std::vector<std::pair<std::string, std::string>> found;  // instance, stats path
    std::string denied;
    std::size_t filtered = 0;
    for (const auto& root : roots_) {
      for (const auto& instance : sysfs::list(root)) {
        if (std::find(seen.begin(), seen.end(), instance) != seen.end()) continue;
        std::string path = root + "/" + instance + "/stats";
        int error = sysfs::open_error(path);
        if (error == EACCES || error == EPERM) {
          if (denied.empty()) denied = path;
          continue;
        }
        if (error != 0) continue;
        seen.push_back(instance);
        if (!filter_.accepts(fsname_of(instance))) {
          ++filtered;
          continue;
        }
        found.emplace_back(instance, path);
      }
    }
    std::sort(found.begin(), found.end(),
              [](const auto& a, const auto& b) { return sysfs::natural_less(a.first, b.first); });
    sysfs::UniqueNames names;
    for (auto& [instance, path] : found)
      mounts_.push_back(Mount{std::make_unique<ProcFile>(path), names.add(fsname_of(instance)) + "."});

    if (!denied.empty())
      why_empty_ = fmt::format("cannot read {}: {} (debugfs is root-only: run lagent as root)",
                               denied, sysfs::errno_text(EACCES));
    else if (filtered > 0)
      why_empty_ = fmt::format("none of the Lustre mounts passes include/exclude");
    else if (::access(parent_of_debug().c_str(), X_OK) != 0 && errno == EACCES)
      why_empty_ = fmt::format("no Lustre client stats under {}, and {} cannot be read: {} "
                               "(debugfs is root-only: run lagent as root)",
                               roots_[0], parent_of_debug(), sysfs::errno_text(EACCES));
    else
      why_empty_ = fmt::format("no Lustre client mount: no <instance>/stats under {} or {}",
                               roots_[0], roots_[1]);
  }

  // <sys>/kernel/debug, whose mode (0700) hides the llite directory from non-root users.
  std::string parent_of_debug() const {
    return roots_[1].substr(0, roots_[1].size() - std::string_view("/lustre/llite").size());
  }

  std::array<std::string, 2> roots_;
  Rescan proc_rescan_, debug_rescan_;
  NameFilter filter_;
  std::vector<Mount> mounts_;
  bool vanished_ = false;
  std::string why_empty_;
  std::string key_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("Lustre",
                         "Lustre client statistics per mount (llite stats: read/write bytes and "
                         "calls, open, close, getattr, ...)",
                         kOptions, kCatalog, LustreSensor, .row = DashboardRow::filesystem);

}  // namespace fructosa::sensors::lustre_file
