#include "procfs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sensor.h"

namespace fructosa::sensors {

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

}  // namespace fructosa::sensors
