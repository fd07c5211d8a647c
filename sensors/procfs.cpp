#include "procfs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "sensor.h"

namespace fructosa::sensors {

namespace {

std::size_t initial_fd_budget() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1024;
  return static_cast<std::size_t>(limit.rlim_cur / 4);
}

std::atomic<std::size_t>& fd_budget_limit() {
  static std::atomic<std::size_t> limit{initial_fd_budget()};
  return limit;
}

std::atomic<std::size_t> fd_budget_held{0};

// Kernel-generated files: re-read in place; a removed one fails its reads.
bool generated_file(int fd) {
  struct statfs info {};
  if (::fstatfs(fd, &info) != 0) return false;
  switch (static_cast<unsigned long>(info.f_type)) {
    case PROC_SUPER_MAGIC:
    case SYSFS_MAGIC:
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
      return true;
    default:
      return false;
  }
}

}  // namespace

bool FdBudget::take(std::size_t descriptors) {
  std::size_t held = fd_budget_held.load(std::memory_order_relaxed);
  do {
    if (held + descriptors > fd_budget_limit().load(std::memory_order_relaxed)) return false;
  } while (!fd_budget_held.compare_exchange_weak(held, held + descriptors, std::memory_order_relaxed));
  return true;
}

void FdBudget::give(std::size_t descriptors) { fd_budget_held.fetch_sub(descriptors, std::memory_order_relaxed); }

std::size_t FdBudget::held() { return fd_budget_held.load(std::memory_order_relaxed); }

void FdBudget::set_limit(std::size_t limit) { fd_budget_limit().store(limit, std::memory_order_relaxed); }

bool kernel_generated(const std::string& path) {
  Fd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
  return fd.get() >= 0 && generated_file(fd.get());
}

int HeldFd::open_at(int dir, const char* name, int flags) {
  reset();
  if (!FdBudget::take(1)) return ENOBUFS;
  int fd = ::openat(dir, name, flags | O_CLOEXEC);
  if (fd < 0) {
    int error = errno;
    FdBudget::give(1);
    return error;
  }
  fd_ = Fd(fd);
  return 0;
}

void HeldFd::reset() {
  if (fd_.get() < 0) return;
  fd_.reset();
  FdBudget::give(1);
}

int pread_whole(int fd, std::string& buffer, bool one_piece) {
  if (buffer.size() < 4096) buffer.resize(4096);
  std::size_t used = 0;
  for (;;) {
    ssize_t got = ::pread(fd, buffer.data() + used, buffer.size() - used, static_cast<off_t>(used));
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) break;
    used += static_cast<std::size_t>(got);
    if (used < buffer.size()) {
      if (one_piece) break;
      continue;
    }
    if (one_piece) {  // cut at the buffer's end: read it all again into a bigger one
      buffer.resize(buffer.size() * 2);
      used = 0;
      continue;
    }
    buffer.resize(buffer.size() * 2);
  }
  buffer.resize(used);
  return 0;
}

std::optional<std::string_view> HeldFiles::read(const std::string& path, bool one_piece) {
  auto found = files_.find(path);
  if (found != files_.end() && found->second.absent > 0) {
    found->second.read = true;
    return std::nullopt;
  }
  if (found != files_.end() && found->second.fd) {
    Entry& entry = found->second;
    entry.read = true;
    struct stat info {};
    bool current = entry.generated || (::fstat(entry.fd.get(), &info) == 0 && info.st_nlink > 0);
    if (current && pread_whole(entry.fd.get(), buffer_, one_piece && entry.generated) == 0) return std::string_view(buffer_);
  }
  if (found != files_.end()) files_.erase(found);  // gone, replaced, or to be looked for again
  Entry entry;
  int error = entry.fd.open_at(AT_FDCWD, path.c_str(), O_RDONLY);
  if (error == ENOBUFS) {  // no budget left: open, read, close
    Fd once(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (once.get() < 0 || pread_whole(once.get(), buffer_, one_piece && generated_file(once.get())) != 0)
      return std::nullopt;
    return std::string_view(buffer_);
  }
  if (error == ENOENT) {
    entry.absent = kAbsentRounds;
    files_.emplace(path, std::move(entry));
  }
  if (error != 0) return std::nullopt;
  entry.generated = generated_file(entry.fd.get());
  if (pread_whole(entry.fd.get(), buffer_, one_piece && entry.generated) != 0) return std::nullopt;
  files_.emplace(path, std::move(entry));
  return std::string_view(buffer_);
}

void HeldFiles::sweep() {
  for (auto file = files_.begin(); file != files_.end();) {
    if (!std::exchange(file->second.read, false)) {
      file = files_.erase(file);
      continue;
    }
    if (file->second.absent > 0) --file->second.absent;
    ++file;
  }
}

ProcFile::~ProcFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string_view ProcFile::read() {
  if (fd_ < 0) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw SensorUnavailable(fmt::format("cannot open {}: {}", path_, std::strerror(errno)));
    if (buffer_.empty()) buffer_.resize(4096);
  }
  std::size_t used = 0;
  for (;;) {
    // pread at offset 0 makes procfs/sysfs generate the content afresh.
    ssize_t got = ::pread(fd_, buffer_.data() + used, buffer_.size() - used, static_cast<off_t>(used));
    if (got < 0) {
      if (errno == EINTR) continue;
      int error = errno;
      ::close(fd_);
      fd_ = -1;  // reopen next time: the file may come back (hot-plug, remount)
      throw SensorUnavailable(fmt::format("cannot read {}: {}", path_, std::strerror(error)));
    }
    // Only 0 is the end: seq_file hands out at most a page per call, so a short read may be
    // the middle of a big file (diskstats, mounts). The closing read at the current position
    // is cheap for ordinary files; /proc/net/tcp* is the exception (net_connections.cpp).
    if (got == 0) break;
    used += static_cast<std::size_t>(got);
    if (used == buffer_.size()) buffer_.resize(buffer_.size() * 2);  // grows to fit, then stays
  }
  return std::string_view(buffer_.data(), used);
}

struct SharedReading::Shared {
  explicit Shared(const std::string& path) : file(path) {}
  std::mutex mutex;
  ProcFile file;
  std::int64_t at_ns = INT64_MIN;
  std::string content;
};

namespace {
// One Shared per path while any SharedReading of it exists. Never destroyed, so that a sensor
// that outlives main() (a static in a test) still finds it.
struct SharedReadings {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<SharedReading::Shared>, std::less<>> by_path;
};
SharedReadings& shared_readings() {
  static auto* readings = new SharedReadings;
  return *readings;
}
}  // namespace

SharedReading::SharedReading(std::string path) : path_(std::move(path)) {
  auto& readings = shared_readings();
  std::lock_guard lock(readings.mutex);
  auto& entry = readings.by_path[path_];
  shared_ = entry.lock();
  if (!shared_) {
    shared_ = std::make_shared<Shared>(path_);
    entry = shared_;
  }
}

SharedReading::~SharedReading() {
  auto& readings = shared_readings();
  std::lock_guard lock(readings.mutex);
  shared_.reset();
  auto it = readings.by_path.find(path_);
  if (it != readings.by_path.end() && it->second.expired()) readings.by_path.erase(it);
}

std::string_view SharedReading::read(std::int64_t at_ns) {
  std::lock_guard lock(shared_->mutex);
  if (shared_->at_ns != at_ns) {
    shared_->content.assign(shared_->file.read());  // throws: at_ns stays, the next one retries
    shared_->at_ns = at_ns;
  }
  copy_.assign(shared_->content);  // reuses its capacity: no allocation in a steady round
  return copy_;
}

}  // namespace fructosa::sensors
