#include "durable_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fructosa {

void sync_directory(const std::filesystem::path& directory) {
  int fd = ::open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw DurabilityError(fmt::format("cannot open directory {}: {}", directory.string(), std::strerror(errno)));
  int result = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  if (result != 0) throw DurabilityError(fmt::format("cannot sync directory {}: {}", directory.string(), std::strerror(saved)));
}

void sync_file(int fd, const std::filesystem::path& path) {
  if (::fdatasync(fd) != 0) throw DurabilityError(fmt::format("cannot sync {}: {}", path.string(), std::strerror(errno)));
}

void write_file_durably(const std::filesystem::path& path, const std::string& text, unsigned mode) {
  auto temporary = path;
  temporary += ".tmp";
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) throw DurabilityError(fmt::format("cannot write {}: {}", temporary.string(), std::strerror(errno)));
  std::size_t done = 0;
  bool written = true;
  while (written && done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    written = n > 0;
    if (written) done += static_cast<std::size_t>(n);
  }
  written = written && ::fdatasync(fd) == 0;
  int saved = errno;
  ::close(fd);
  if (!written || ::rename(temporary.c_str(), path.c_str()) != 0) {
    if (written) saved = errno;
    ::unlink(temporary.c_str());
    throw DurabilityError(fmt::format("cannot write {}: {}", path.string(), std::strerror(saved)));
  }
  sync_directory(path.parent_path());
}

}  // namespace fructosa
