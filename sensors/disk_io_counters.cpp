// DiskIOCounters: psutil.disk_io_counters(perdisk, nowrap=True) on Linux, from /proc/diskstats
// (psutil's fallback, <sys>/block/*/.../stat, when that file does not exist).
//
// As psutil: sectors are 512 bytes whatever the disk's hw_sector_size (the kernel counts
// /proc/diskstats sectors in 512-byte units); without perdisk the totals are summed over the
// names that <sys>/block has (whole disks, dm-*, md*, loop*, ...: partitions are left out so
// nothing counts twice), with perdisk every line is reported; counters that go backwards
// (32-bit wrap, driver reset) are continued from where they were (psutil's nowrap). Besides
// psutil, `include` and `exclude` select disks by name with fnmatch-style patterns.
#include <dirent.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <iterator>
#include <map>

#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::disk_io_counters_file {
namespace {

const OptionTable kOptions{
    {"perdisk", OptionType::boolean, "false",
     "one set of counters per disk and partition (keys <disk>.<field>) instead of totals over whole disks"},
    {"include", OptionType::list, "",
     "only disks whose name matches one of these glob patterns (e.g. sd*, nvme*); empty: all"},
    {"exclude", OptionType::list, "", "leave out disks whose name matches one of these glob patterns (wins over include)"},
};

const Catalog kCatalog{
    {"read_count", Unit::count, Kind::counter, "reads completed, all disks"},
    {"write_count", Unit::count, Kind::counter, "writes completed, all disks"},
    {"read_bytes", Unit::bytes, Kind::counter, "bytes read (512-byte sectors), all disks"},
    {"write_bytes", Unit::bytes, Kind::counter, "bytes written (512-byte sectors), all disks"},
    {"read_time", Unit::milliseconds, Kind::counter, "time spent reading, summed over requests, all disks"},
    {"write_time", Unit::milliseconds, Kind::counter, "time spent writing, summed over requests, all disks"},
    {"read_merged_count", Unit::count, Kind::counter, "adjacent reads merged into one, all disks"},
    {"write_merged_count", Unit::count, Kind::counter, "adjacent writes merged into one, all disks"},
    {"busy_time", Unit::milliseconds, Kind::counter, "time with I/O in flight (io_ticks), summed over disks"},
    {"*.read_count", Unit::count, Kind::counter, "reads completed"},
    {"*.write_count", Unit::count, Kind::counter, "writes completed"},
    {"*.read_bytes", Unit::bytes, Kind::counter, "bytes read (512-byte sectors)"},
    {"*.write_bytes", Unit::bytes, Kind::counter, "bytes written (512-byte sectors)"},
    {"*.read_time", Unit::milliseconds, Kind::counter, "time spent reading, summed over requests"},
    {"*.write_time", Unit::milliseconds, Kind::counter, "time spent writing, summed over requests"},
    {"*.read_merged_count", Unit::count, Kind::counter, "adjacent reads merged into one"},
    {"*.write_merged_count", Unit::count, Kind::counter, "adjacent writes merged into one"},
    {"*.busy_time", Unit::milliseconds, Kind::counter, "time with I/O in flight (io_ticks)"},
};

constexpr int kFields = 9;
// psutil's sdiskio order.
constexpr std::array<std::string_view, kFields> kFieldNames{
    "read_count", "write_count", "read_bytes", "write_bytes", "read_time",
    "write_time", "read_merged_count", "write_merged_count", "busy_time"};
enum { kReads, kWrites, kReadBytes, kWriteBytes, kReadTime, kWriteTime, kReadsMerged, kWritesMerged, kBusy };

// psutil's DISK_SECTOR_SIZE.
constexpr std::uint64_t kSectorSize = 512;

using Counters = std::array<std::uint64_t, kFields>;

// One line of /proc/diskstats in psutil's three layouts; false for any other line.
bool parse_diskstats_line(std::string_view line, std::string_view& name, Counters& values) {
  std::array<std::string_view, 24> fields;
  std::size_t count = 0;
  for (std::string_view field; !(field = next_field(line)).empty(); ++count)
    if (count < fields.size()) fields[count] = field;
  auto get = [&](std::size_t index, std::uint64_t& value) { return parse_uint(fields[index], value); };
  std::uint64_t ignored = 0;
  values = {};
  Counters& v = values;
  if (count == 15) {  // Linux 2.4: "major minor blocks name ..."
    name = fields[3];
    return get(2, v[kReads]) && get(4, v[kReadsMerged]) && get(5, v[kReadBytes]) && get(6, v[kReadTime]) &&
           get(7, v[kWrites]) && get(8, v[kWritesMerged]) && get(9, v[kWriteBytes]) && get(10, v[kWriteTime]) &&
           get(11, ignored) && get(12, v[kBusy]) && get(13, ignored);
  }
  if (count == 14 || count >= 18) {  // Linux 2.6+ (4.18 and 5.5 add fields at the end)
    name = fields[2];
    return get(3, v[kReads]) && get(4, v[kReadsMerged]) && get(5, v[kReadBytes]) && get(6, v[kReadTime]) &&
           get(7, v[kWrites]) && get(8, v[kWritesMerged]) && get(9, v[kWriteBytes]) && get(10, v[kWriteTime]) &&
           get(11, ignored) && get(12, v[kBusy]) && get(13, ignored);
  }
  if (count == 7) {  // a partition on Linux 2.6 before 2.6.25
    name = fields[2];
    return get(3, v[kReads]) && get(4, v[kReadBytes]) && get(5, v[kWrites]) && get(6, v[kWriteBytes]);
  }
  return false;  // psutil raises ValueError; the line is skipped here
}

// <sys>/block/<disk>[/<partition>]/stat: the first 10 fields of a diskstats line.
bool parse_sysfs_stat(std::string_view text, Counters& values) {
  std::array<std::string_view, 10> fields;
  for (auto& field : fields)
    if ((field = next_field(text)).empty()) return false;
  auto get = [&](std::size_t index, std::uint64_t& value) { return parse_uint(fields[index], value); };
  std::uint64_t ignored = 0;
  values = {};
  Counters& v = values;
  return get(0, v[kReads]) && get(1, v[kReadsMerged]) && get(2, v[kReadBytes]) && get(3, v[kReadTime]) &&
         get(4, v[kWrites]) && get(5, v[kWritesMerged]) && get(6, v[kWriteBytes]) && get(7, v[kWriteTime]) &&
         get(8, ignored) && get(9, v[kBusy]);
}

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  for (const auto& pattern : patterns)
    if (::fnmatch(pattern.c_str(), name.c_str(), FNM_NOESCAPE) == 0) return true;
  return false;
}

struct Disk {
  bool kept = false;          // a whole disk (or perdisk) and selected by include/exclude
  std::uint64_t round = 0;    // last reading that listed it
  bool known = false;         // `last` holds the previous reading
  Counters raw{};             // this reading
  Counters last{};            // the previous reading
  Counters reminder{};        // added for wraps (psutil's _WrapNumbers reminders)
  std::array<std::string, kFields> keys;  // <disk>.<field> with perdisk
};

class DiskIoCountersSensor final : public Sensor {
 public:
  explicit DiskIoCountersSensor(const SensorContext& context)
      : sys_(context.roots.sys),
        perdisk_(context.options.get_bool("perdisk")),
        include_(context.options.get_list("include")),
        exclude_(context.options.get_list("exclude")),
        diskstats_(context.roots.proc + "/diskstats") {}

  bool sample(SampleWriter& out) override {
    ++round_;
    order_.clear();
    not_kept_seen_ = 0;
    std::string_view text;
    bool procfs = true;
    try {
      text = diskstats_.read();
    } catch (const SensorUnavailable&) {
      // psutil falls back to sysfs only when the file does not exist.
      struct stat info;
      if (::stat(diskstats_.path().c_str(), &info) == 0 || !directory_exists(sys_ + "/block")) throw;
      procfs = false;
    }
    if (procfs) {
      Lines lines(text);
      std::string_view line, name;
      Counters values;
      while (lines.next(line))
        if (parse_diskstats_line(line, name, values)) add(name, values);
    } else {
      read_sysfs();
    }
    if (disks_.size() != order_.size() + not_kept_seen_) forget_gone();

    Counters totals{};
    for (Disk* disk : order_) {
      // psutil's nowrap: a value below the previous one adds the previous one for good.
      for (int i = 0; i < kFields; ++i) {
        if (disk->known && disk->raw[i] < disk->last[i]) disk->reminder[i] += disk->last[i];
        std::uint64_t value = disk->raw[i] + disk->reminder[i];
        if (perdisk_) out.set(disk->keys[i], static_cast<double>(value));
        totals[i] += value;
      }
      disk->last = disk->raw;
      disk->known = true;
    }
    if (order_.empty())
      throw SensorUnavailable(diskstats_.path() + " lists no disk" +
                              (include_.empty() && exclude_.empty() ? "" : " that include/exclude select"));
    if (!perdisk_)
      for (int i = 0; i < kFields; ++i) out.set(kFieldNames[i], static_cast<double>(totals[i]));
    return true;
  }

 private:
  void add(std::string_view name, Counters values) {
    values[kReadBytes] *= kSectorSize;
    values[kWriteBytes] *= kSectorSize;
    auto found = disks_.find(name);
    if (found == disks_.end()) found = disks_.emplace(std::string(name), make_disk(std::string(name))).first;
    Disk& disk = found->second;
    if (disk.round == round_) {  // the same name twice: psutil keeps the later line
      if (disk.kept) disk.raw = values;
      return;
    }
    disk.round = round_;
    if (!disk.kept) {
      ++not_kept_seen_;
      return;
    }
    disk.raw = values;
    order_.push_back(&disk);
  }

  Disk make_disk(const std::string& name) const {
    Disk disk;
    // psutil's is_storage_device(): the name (with '/' as '!') under <sys>/block.
    if (!perdisk_) {
      std::string sysname = name;
      for (char& c : sysname)
        if (c == '/') c = '!';
      disk.kept = ::access((sys_ + "/block/" + sysname).c_str(), F_OK) == 0;
    } else {
      disk.kept = true;
    }
    if (!include_.empty() && !matches_any(include_, name)) disk.kept = false;
    if (matches_any(exclude_, name)) disk.kept = false;
    if (perdisk_ && disk.kept) {
      std::string prefix = key_component(name) + ".";
      for (int i = 0; i < kFields; ++i) disk.keys[i] = prefix + std::string(kFieldNames[i]);
    }
    return disk;
  }

  // Disks no longer listed: their wrap state goes (psutil's _remove_dead_reminders); if
  // they come back they start afresh.
  void forget_gone() {
    for (auto it = disks_.begin(); it != disks_.end();)
      it = it->second.round == round_ ? std::next(it) : disks_.erase(it);
  }

  static bool directory_exists(const std::string& path) {
    struct stat info;
    return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
  }

  // psutil's read_sysfs(): os.walk() of each <sys>/block/<disk> (symlinked directories below
  // it are not followed), a `stat` file in a directory gives the counters of the device
  // named after that directory.
  void read_sysfs() {
    std::string block = sys_ + "/block";
    DIR* dir = ::opendir(block.c_str());
    if (!dir) throw SensorUnavailable("cannot list " + block);
    std::vector<std::string> names;
    while (dirent* item = ::readdir(dir)) {
      std::string_view name = item->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    ::closedir(dir);
    for (const auto& name : names) walk(block + "/" + name, name, 0);
  }

  void walk(const std::string& path, const std::string& name, int depth) {
    if (depth > 8) return;
    DIR* dir = ::opendir(path.c_str());
    if (!dir) return;
    std::vector<std::string> subdirs;
    bool has_stat = false;
    while (dirent* item = ::readdir(dir)) {
      std::string_view entry = item->d_name;
      if (entry == "." || entry == "..") continue;
      unsigned char type = item->d_type;
      if (type == DT_UNKNOWN) {
        struct stat info;
        std::string full = path + "/" + item->d_name;
        if (::lstat(full.c_str(), &info) == 0) type = S_ISDIR(info.st_mode) ? DT_DIR : S_ISLNK(info.st_mode) ? DT_LNK : DT_REG;
      }
      if (type == DT_DIR) {
        subdirs.emplace_back(entry);
      } else if (entry == "stat") {
        has_stat = true;
      }
    }
    ::closedir(dir);
    if (has_stat) {
      try {
        ProcFile stat(path + "/stat");
        Counters values;
        if (parse_sysfs_stat(stat.read(), values)) add(name, values);
      } catch (const SensorUnavailable&) {
      }
    }
    for (const auto& sub : subdirs) walk(path + "/" + sub, sub, depth + 1);
  }

  std::string sys_;
  bool perdisk_;
  std::vector<std::string> include_, exclude_;
  ProcFile diskstats_;
  std::map<std::string, Disk, std::less<>> disks_;
  std::vector<Disk*> order_;  // the kept disks of this reading, in file order
  std::size_t not_kept_seen_ = 0;
  std::uint64_t round_ = 0;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("DiskIOCounters", "Disk reads and writes since boot (psutil.disk_io_counters)", kOptions,
                         kCatalog, DiskIoCountersSensor, .row = DashboardRow::disk, .per_item_option = "perdisk");

}  // namespace fructosa::sensors::disk_io_counters_file
