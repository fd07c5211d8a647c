#include "durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace fructosa {

void sync_directory(const std::filesystem::path& directory) {
  int fd = ::open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw DurabilityError(fmt::format("cannot open directory {}: {}", directory.string(), std::strerror(errno)));
  int result = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  if (result != 0) throw DurabilityError(fmt::format("cannot sync directory {}: {}", directory.string(), std::strerror(saved)));
}

void create_directories_durably(const std::filesystem::path& directory, unsigned mode) {
  // The components that do not exist yet, shallowest first.
  std::vector<std::filesystem::path> missing;
  std::error_code error;
  for (auto path = directory.lexically_normal(); !path.empty() && !std::filesystem::exists(path, error);
       path = path.parent_path()) {
    missing.insert(missing.begin(), path);
    if (path == path.parent_path()) break;
  }
  for (const auto& path : missing) {
    if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST)
      throw DurabilityError(fmt::format("cannot create directory {}: {}", path.string(), std::strerror(errno)));
    sync_directory(path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path());
  }
  if (!std::filesystem::is_directory(directory, error))
    throw DurabilityError(fmt::format("{} is not a directory", directory.string()));
}

bool read_all_at(int fd, char* data, std::size_t size, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, data + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

bool write_all_at(int fd, std::string_view data, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void write_file_durably(const std::filesystem::path& path, const std::string& text, unsigned mode) {
  auto temporary = path;
  temporary += ".tmp";
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) throw DurabilityError(fmt::format("cannot write {}: {}", temporary.string(), std::strerror(errno)));
  bool written = write_all_at(fd, text, 0) && ::fdatasync(fd) == 0;
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
