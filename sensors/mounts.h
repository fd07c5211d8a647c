// The mount table as psutil 5.9.4 reads it for disk_partitions(): which file (see
// mount_table_path) and how each line is split and unescaped (glibc's getmntent, which
// psutil's C extension calls). Shared by the storage sensors.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sensor.h"

namespace fructosa::sensors {

struct MountEntry {
  std::string device;      // mnt_fsname
  std::string mountpoint;  // mnt_dir
  std::string fstype;      // mnt_type
  std::string opts;        // mnt_opts
};

// psutil: /etc/mtab when the procfs root is the real /proc and /etc/mtab is a file (usually
// a symlink to /proc/mounts, so the same thing), else <proc>/self/mounts.
std::string mount_table_path(const Roots& roots);

// True for an /etc/mtab that is a real file (kept by mount(8), which may replace it): such
// a file must be reopened for each reading rather than kept open and re-read.
bool mount_table_is_rewritten(const std::string& path);

// Parses `text` line by line as getmntent(3) does: blank lines and lines starting with '#'
// are skipped, fields are separated by blanks, missing type/opts become "", and the octal
// escapes \040 \011 \012 \134 (and "\\") are decoded. Fills `out` (cleared first).
void parse_mount_table(std::string_view text, std::vector<MountEntry>& out);

// One field, with getmntent's escapes decoded.
std::string decode_mount_field(std::string_view field);

// Whether a mount table may have changed since the last call. On procfs the kernel flags a
// mount or unmount in the reader's namespace with POLLPRI on an open mounts file, so an
// unchanged table need not be read (and parsed) again: a poll(2) costs far less than
// reading /proc/self/mounts. Anything else (a fixture, a regular /etc/mtab) always counts
// as changed. The file is opened at the first call, in the process that reads.
class MountWatch {
 public:
  explicit MountWatch(std::string path) : path_(std::move(path)) {}
  ~MountWatch();
  MountWatch(const MountWatch&) = delete;
  MountWatch& operator=(const MountWatch&) = delete;
  bool changed();

 private:
  std::string path_;
  int fd_ = -1;
  bool opened_ = false;
};

// True when the comma-separated mount options contain `option` as a whole word.
bool has_mount_option(std::string_view opts, std::string_view option);

}  // namespace fructosa::sensors
