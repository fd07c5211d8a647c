#include "mounts.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

namespace fructosa::sensors {

std::string mount_table_path(const Roots& roots) {
  // psutil 5.9.4 disk_partitions(): "/etc/mtab" when PROCFS_PATH is "/proc" and
  // os.path.isfile("/etc/mtab") (which follows symlinks).
  struct stat info;
  if (roots.proc == "/proc" && ::stat("/etc/mtab", &info) == 0 && S_ISREG(info.st_mode)) return "/etc/mtab";
  return roots.proc + "/self/mounts";
}

bool mount_table_is_rewritten(const std::string& path) {
  if (path != "/etc/mtab") return false;
  char resolved[PATH_MAX];
  return !::realpath(path.c_str(), resolved) || std::string_view(resolved).rfind("/proc/", 0) != 0;
}

std::string decode_mount_field(std::string_view field) {
  // glibc's decode_name(): only these escapes; anything else stays as written.
  std::string out;
  out.reserve(field.size());
  for (std::size_t i = 0; i < field.size(); ++i) {
    std::string_view rest = field.substr(i);
    if (rest.substr(0, 4) == "\\040") {
      out += ' ';
      i += 3;
    } else if (rest.substr(0, 4) == "\\011") {
      out += '\t';
      i += 3;
    } else if (rest.substr(0, 4) == "\\012") {
      out += '\n';
      i += 3;
    } else if (rest.substr(0, 2) == "\\\\") {
      out += '\\';
      i += 1;
    } else if (rest.substr(0, 4) == "\\134") {
      out += '\\';
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

namespace {

constexpr std::string_view kBlanks = " \t";

// strsep(&head, " \t") followed by skipping blanks, as get_mnt_entry() does per field.
// Returns false when `head` was already NULL (no field at all).
bool next_mount_field(std::string_view& head, bool& more, std::string_view& field) {
  if (!more) return false;
  auto end = head.find_first_of(kBlanks);
  field = head.substr(0, end);
  if (end == std::string_view::npos) {
    more = false;
    head = {};
  } else {
    head.remove_prefix(end + 1);
    auto skip = head.find_first_not_of(kBlanks);
    head.remove_prefix(skip == std::string_view::npos ? head.size() : skip);
  }
  return true;
}

}  // namespace

void parse_mount_table(std::string_view text, std::vector<MountEntry>& out) {
  out.clear();
  // getmntent() reads lines with fgets into a 4096-byte buffer: a longer line is cut to
  // 4095 bytes and the rest of it dropped.
  constexpr std::size_t kBuffer = 4096;
  while (!text.empty()) {
    auto newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view{} : text.substr(newline + 1);
    bool whole = newline != std::string_view::npos && line.size() + 1 < kBuffer;
    if (line.size() > kBuffer - 1) line = line.substr(0, kBuffer - 1);
    if (whole) {  // chop the newline and the blanks before it
      auto last = line.find_last_not_of(kBlanks);
      line = last == std::string_view::npos ? std::string_view{} : line.substr(0, last + 1);
    }
    auto start = line.find_first_not_of(kBlanks);
    if (start == std::string_view::npos) continue;  // empty line
    line.remove_prefix(start);
    if (line.front() == '#') continue;

    std::string_view head = line, field;
    bool more = true;
    MountEntry entry;
    std::string* targets[] = {&entry.device, &entry.mountpoint, &entry.fstype, &entry.opts};
    for (std::string* target : targets)
      if (next_mount_field(head, more, field)) *target = decode_mount_field(field);
    out.push_back(std::move(entry));
  }
}

MountWatch::~MountWatch() {
  if (fd_ >= 0) ::close(fd_);
}

bool MountWatch::changed() {
  if (!opened_) {
    opened_ = true;
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    struct statfs fs;
    constexpr long kProcSuperMagic = 0x9fa0;  // PROC_SUPER_MAGIC
    if (fd_ >= 0 && (::fstatfs(fd_, &fs) != 0 || fs.f_type != kProcSuperMagic)) {
      ::close(fd_);
      fd_ = -1;
    }
    return true;
  }
  if (fd_ < 0) return true;
  pollfd request{fd_, POLLPRI, 0};
  int ready = ::poll(&request, 1, 0);
  return ready != 0;  // an event, or poll failed: read to be sure
}

bool has_mount_option(std::string_view opts, std::string_view option) {
  while (true) {
    auto comma = opts.find(',');
    if (opts.substr(0, comma) == option) return true;
    if (comma == std::string_view::npos) return false;
    opts.remove_prefix(comma + 1);
  }
}

}  // namespace fructosa::sensors
