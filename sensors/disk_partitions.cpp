// DiskPartitions: psutil.disk_partitions(all) on Linux. The mount table (mounts.h says which
// file) filtered, unless `all`, to mounts with a device whose type /proc/filesystems lists
// without "nodev" (zfs too), with psutil's /dev/root resolution. Numbers per mount point are
// the read-only flag and psutil's maxfile/maxpath; device, fstype and opts go out as labels.
//
// A mount point mounted over another appears twice in the table (and twice in psutil's
// list, which `count` keeps counting); the keys describe the last entry, the one visible.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "mounts.h"
#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::disk_partitions_file {
namespace {

const OptionTable kOptions{
    {"all", OptionType::boolean, "false",
     "list every mount (pseudo, memory and duplicate file systems too), as psutil.disk_partitions(all=True)"},
};

const Catalog kCatalog{
    {"count", Unit::count, Kind::gauge, "partitions psutil.disk_partitions() lists (a mount point mounted twice counts twice)"},
    {"*.readonly", Unit::boolean, Kind::gauge, "1 when the mount options contain 'ro'"},
    {"*.maxfile", Unit::count, Kind::gauge, "longest file name the file system allows (pathconf NAME_MAX)"},
    {"*.maxpath", Unit::count, Kind::gauge, "longest path name (pathconf PATH_MAX)"},
};

class DiskPartitionsSensor final : public Sensor {
 public:
  explicit DiskPartitionsSensor(const SensorContext& context)
      : roots_(context.roots),
        all_(context.options.get_bool("all")),
        filesystems_(context.roots.proc + "/filesystems"),
        mounts_path_(mount_table_path(context.roots)),
        watch_(mounts_path_) {
    // A procfs mount table is kept open and re-read (opened at the first reading, in the
    // process that reads it); a regular /etc/mtab is reopened each round.
    if (!mount_table_is_rewritten(mounts_path_)) mounts_.emplace(mounts_path_);
  }

  bool sample(SampleWriter& out) override {
    // The mount table rarely changes. On procfs a poll says whether it did; then (and for
    // other files, every time) it is read, and the report (with its pathconf calls) is
    // rebuilt when the table or the list of file systems differs from the last one.
    // /proc/filesystems is read along: a file system type is registered before anything
    // is mounted with it, and cannot go while mounted.
    if (watch_.changed() || !valid_) {
      valid_ = false;  // stays so if a read throws
      std::string_view filesystems = all_ ? std::string_view{} : filesystems_.read();
      std::optional<ProcFile> once;
      ProcFile& mounts = mounts_ ? *mounts_ : once.emplace(mounts_path_);
      std::string_view table = mounts.read();
      if (table != last_table_ || filesystems != last_filesystems_ || !built_) {
        rebuild(table, filesystems);
        last_table_.assign(table);
        last_filesystems_.assign(filesystems);
        built_ = true;
      }
      valid_ = true;
    }
    out.set("count", static_cast<double>(count_));
    for (const auto& [key, value] : values_) out.set(key, value);
    for (const auto& [key, text] : labels_) out.label(key, text);
    return true;
  }

 private:
  void rebuild(std::string_view table, std::string_view filesystems) {
    if (!all_) parse_filesystems(filesystems);
    root_device_.reset();
    parse_mount_table(table, entries_);
    std::vector<const MountEntry*> kept;
    for (auto& entry : entries_) {
      if (entry.device == "none") entry.device.clear();
      if (entry.device == "/dev/root" || entry.device == "rootfs") {
        if (!root_device_) root_device_ = find_root_device();
        if (!root_device_->empty()) entry.device = *root_device_;
      }
      if (!all_ && (entry.device.empty() || !fstypes_.count(entry.fstype))) continue;
      kept.push_back(&entry);
    }
    count_ = kept.size();
    // One set of keys per mount point (per key, should two names give the same key): the
    // last entry's, the mount on top.
    std::vector<std::string> keys;
    std::unordered_map<std::string_view, std::size_t> last;
    keys.reserve(kept.size());
    for (std::size_t i = 0; i < kept.size(); ++i) last[keys.emplace_back(key_component(kept[i]->mountpoint))] = i;
    values_.clear();
    labels_.clear();
    for (std::size_t i = 0; i < kept.size(); ++i) {
      if (last[keys[i]] != i) continue;
      const MountEntry& entry = *kept[i];
      std::string prefix = keys[i] + ".";
      values_.emplace_back(prefix + "readonly", has_mount_option(entry.opts, "ro") ? 1 : 0);
      // psutil: os.pathconf(), None (here: no key) when it fails.
      if (auto value = path_limit(entry.mountpoint, _PC_NAME_MAX)) values_.emplace_back(prefix + "maxfile", *value);
      if (auto value = path_limit(entry.mountpoint, _PC_PATH_MAX)) values_.emplace_back(prefix + "maxpath", *value);
      labels_.emplace_back(prefix + "device", entry.device);
      labels_.emplace_back(prefix + "fstype", entry.fstype);
      labels_.emplace_back(prefix + "opts", entry.opts);
    }
  }

  static std::optional<double> path_limit(const std::string& path, int name) {
    errno = 0;
    long value = ::pathconf(path.c_str(), name);
    if (value == -1 && errno != 0) return std::nullopt;
    return static_cast<double>(value);
  }

  // The file system types psutil counts as physical: lines of /proc/filesystems without
  // "nodev", plus "nodev zfs".
  void parse_filesystems(std::string_view text) {
    fstypes_.clear();
    Lines lines(text);
    std::string_view line;
    while (lines.next(line)) {
      line = strip(line);
      if (line.rfind("nodev", 0) != 0) {
        fstypes_.emplace(line);
        continue;
      }
      auto tab = line.find('\t');
      if (tab == std::string_view::npos) continue;  // psutil would fail on such a line
      std::string_view fstype = line.substr(tab + 1);
      fstype = fstype.substr(0, fstype.find('\t'));
      if (fstype == "zfs") fstypes_.emplace(fstype);
    }
  }

  // Python's str.strip(): leading and trailing whitespace.
  static std::string_view strip(std::string_view text) {
    constexpr std::string_view kSpace = " \t\n\r\v\f";
    auto begin = text.find_first_not_of(kSpace);
    if (begin == std::string_view::npos) return {};
    return text.substr(begin, text.find_last_not_of(kSpace) - begin + 1);
  }

  // psutil's RootFsDeviceFinder: the device of "/" (by its st_dev) from <proc>/partitions,
  // then <sys>/dev/block/MAJ:MIN/uevent, then <sys>/class/block/*/dev; kept only when the
  // /dev node exists. "" when not found (the device then stays "/dev/root").
  std::string find_root_device() const {
    struct stat root;
    if (::stat("/", &root) != 0) return {};
    unsigned major = ::major(root.st_dev), minor = ::minor(root.st_dev);
    std::string name = from_partitions(major, minor);
    if (name.empty()) name = from_uevent(major, minor);
    if (name.empty()) name = from_class_block(major, minor);
    if (name.empty()) return {};
    std::string path = "/dev/" + name;
    struct stat node;
    return ::stat(path.c_str(), &node) == 0 ? path : std::string{};
  }

  std::string from_partitions(unsigned major, unsigned minor) const {
    try {
      ProcFile partitions(roots_.proc + "/partitions");
      Lines lines(partitions.read());
      std::string_view line;
      for (int skip = 0; skip < 2 && lines.next(line); ++skip) {
      }
      while (lines.next(line)) {
        std::string_view fields[4];
        int count = 0;
        for (std::string_view field; count < 4 && !(field = next_field(line)).empty();) fields[count++] = field;
        if (count < 4) continue;
        std::uint64_t got_major = 0, got_minor = 0;
        if (parse_uint(fields[0], got_major) && parse_uint(fields[1], got_minor) && got_major == major &&
            got_minor == minor)
          return std::string(fields[3]);
      }
    } catch (const SensorUnavailable&) {
    }
    return {};
  }

  std::string from_uevent(unsigned major, unsigned minor) const {
    try {
      ProcFile uevent(roots_.sys + "/dev/block/" + std::to_string(major) + ":" + std::to_string(minor) + "/uevent");
      Lines lines(uevent.read());
      std::string_view line;
      while (lines.next(line)) {
        if (line.rfind("DEVNAME=", 0) != 0) continue;
        line = strip(line);
        std::string_view name = line.substr(line.rfind("DEVNAME=") + 8);
        if (!name.empty()) return std::string(name);
      }
    } catch (const SensorUnavailable&) {
    }
    return {};
  }

  std::string from_class_block(unsigned major, unsigned minor) const {
    std::string directory = roots_.sys + "/class/block";
    DIR* dir = ::opendir(directory.c_str());
    if (!dir) return {};
    std::string needle = std::to_string(major) + ":" + std::to_string(minor), found;
    while (dirent* item = ::readdir(dir)) {
      std::string_view name = item->d_name;
      if (name.empty() || name.front() == '.') continue;  // glob's '*' skips dot files
      try {
        ProcFile dev(directory + "/" + item->d_name + "/dev");
        if (strip(dev.read()) == needle) {
          found = item->d_name;
          break;
        }
      } catch (const SensorUnavailable&) {
      }
    }
    ::closedir(dir);
    return found;
  }

  Roots roots_;
  bool all_;
  ProcFile filesystems_;
  std::string mounts_path_;
  std::optional<ProcFile> mounts_;
  MountWatch watch_;

  bool valid_ = false;  // the last reading worked
  bool built_ = false;  // the report below exists
  std::string last_table_, last_filesystems_;
  std::unordered_set<std::string> fstypes_;
  std::vector<MountEntry> entries_;
  std::optional<std::string> root_device_;
  std::size_t count_ = 0;
  std::vector<std::pair<std::string, double>> values_;
  std::vector<std::pair<std::string, std::string>> labels_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("DiskPartitions", "Mounted file systems (psutil.disk_partitions)", kOptions, kCatalog,
                         DiskPartitionsSensor, .row = DashboardRow::filesystem);

}  // namespace fructosa::sensors::disk_partitions_file
