// Reading procfs and sysfs files cheaply: each file is opened once and re-read with pread
// into a buffer that is reused, so a steady round allocates nothing.
#pragma once

#include <unistd.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace fructosa::sensors {

// Owns a file descriptor and closes it.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Descriptors that sensors keep open between rounds (per-job and per-process files) come out of
// one process-wide budget, a quarter of the soft RLIMIT_NOFILE as it is when first asked (lagent
// raises it to the hard limit at start), so that held files never leave the agent short of
// descriptors for its sockets, spool and perf counters. Without budget, a file is opened, read
// and closed each time, as it would be without holding.
class FdBudget {
 public:
  static bool take(std::size_t descriptors);
  static void give(std::size_t descriptors);
  static std::size_t held();
  // Tests: a budget of `limit` descriptors from now on.
  static void set_limit(std::size_t limit);
};

// A descriptor held under the FdBudget (or none: not opened, or no budget left).
class HeldFd {
 public:
  HeldFd() = default;
  HeldFd(HeldFd&&) noexcept = default;
  HeldFd& operator=(HeldFd&& other) noexcept {
    if (this != &other) {
      reset();  // gives its descriptor back to the budget
      fd_ = std::move(other.fd_);
    }
    return *this;
  }
  ~HeldFd() { reset(); }
  // Opens `name` relative to the directory `dir` (or an absolute path, dir ignored) when the
  // budget has a descriptor left; 0, ENOBUFS when it has not, or open's errno.
  int open_at(int dir, const char* name, int flags);
  int get() const { return fd_.get(); }
  explicit operator bool() const { return fd_.get() >= 0; }
  void reset();

 private:
  Fd fd_{-1};
};

// Reads the open file `fd` whole from its start into `buffer` (reused: it grows to fit and
// stays); 0 or an errno. `one_piece`: the kernel generates the file in one go (single_open
// procfs files such as /proc/<pid>/stat, status, io; one-record cgroup and sysfs files), so a
// read shorter than the buffer is all of it. Otherwise (listings such as cgroup.procs, regular
// files) it reads until the end: seq_file hands out about a page per call.
int pread_whole(int fd, std::string& buffer, bool one_piece);

// True when `path` is on procfs, sysfs or a cgroup file system: its files are generated at each
// read, and one that is removed fails its reads (a held descriptor of a regular file would go
// on reading what was deleted).
bool kernel_generated(const std::string& path);

// Files read each round by path and kept open between rounds while the FdBudget allows, so that
// a round costs one pread per file instead of an open, reads and a close. A file whose read
// fails (a cgroup removed: ENODEV; a process gone: ESRCH) or that was deleted (a regular file:
// its link count is 0) is opened again by its path once. Files that no read asked for between
// two sweeps (their job or process ended) are closed at the sweep. A file that does not exist
// (a controller not enabled for a job's cgroup) is looked for again only every kAbsentRounds
// sweeps, not at every read.
class HeldFiles {
 public:
  static constexpr int kAbsentRounds = 30;

  HeldFiles() = default;
  HeldFiles(const HeldFiles&) = delete;
  HeldFiles& operator=(const HeldFiles&) = delete;

  // The content of the file at `path` (valid until the next read), or nullopt when it cannot be
  // read (gone, or never there). `one_piece` as for pread_whole.
  std::optional<std::string_view> read(const std::string& path, bool one_piece = true);
  // Closes the files not read since the last sweep.
  void sweep();
  std::size_t size() const { return files_.size(); }

 private:
  struct Entry {
    HeldFd fd;
    bool generated = true;  // procfs, sysfs or cgroupfs: made afresh at each read
    bool read = true;       // since the last sweep
    int absent = 0;         // > 0: no such file; sweeps before it is looked for again
  };
  std::unordered_map<std::string, Entry> files_;
  std::string buffer_;
};

class ProcFile {
 public:
  explicit ProcFile(std::string path) : path_(std::move(path)) {}
  ~ProcFile();
  ProcFile(const ProcFile&) = delete;
  ProcFile& operator=(const ProcFile&) = delete;

  // The whole current content. Throws SensorUnavailable naming the file when it cannot be read.
  std::string_view read();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string buffer_;
  int fd_ = -1;
};

// A kernel file that several sensors read at one reading time: /proc/stat for BootTime,
// CPUStats, CPUTimes, CPUPercent and CPUTimesPercent (and CPUCount without sysfs). The first
// of them to ask at a reading time reads it; the others get what it read, on their own
// threads. /proc/stat costs the kernel a sum over every CPU and interrupt, which grows with the
// node. Every SharedReading of one path in the process shares the reading.
class SharedReading {
 public:
  explicit SharedReading(std::string path);
  ~SharedReading();
  SharedReading(const SharedReading&) = delete;
  SharedReading& operator=(const SharedReading&) = delete;

  // The content at reading time `at_ns` (valid until the next call). Throws SensorUnavailable
  // as ProcFile::read does; a failed read is tried again by the next to ask.
  std::string_view read(std::int64_t at_ns);
  const std::string& path() const { return path_; }

  struct Shared;  // the reading of one path (procfs.cpp)

 private:
  std::string path_;
  std::shared_ptr<Shared> shared_;
  std::string copy_;
};

// Splits text into lines without copying.
class Lines {
 public:
  explicit Lines(std::string_view text) : rest_(text) {}
  bool next(std::string_view& line) {
    if (rest_.empty()) return false;
    auto end = rest_.find('\n');
    line = rest_.substr(0, end);
    rest_ = end == std::string_view::npos ? std::string_view{} : rest_.substr(end + 1);
    return true;
  }

 private:
  std::string_view rest_;
};

// Next whitespace-separated field of `text` (consumed from the front); empty at the end.
inline std::string_view next_field(std::string_view& text) {
  auto begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) {
    text = {};
    return {};
  }
  text.remove_prefix(begin);
  auto end = text.find_first_of(" \t");
  auto field = text.substr(0, end);
  text.remove_prefix(field.size());
  return field;
}

inline bool parse_uint(std::string_view text, std::uint64_t& value) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace fructosa::sensors
