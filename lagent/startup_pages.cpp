#include "startup_pages.h"

#include <sys/mman.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace fructosa::agent {
namespace {

struct Mapping {
  std::uintptr_t start = 0, end = 0;
  bool clean_file_copy = false;  // private, read-only, of a regular file
  std::uint64_t rss_kb = 0, anonymous_kb = 0, locked_kb = 0;
};

// "start-end perms offset dev inode   path" (proc_pid_maps(5)).
bool parse_header(const std::string& line, Mapping& mapping) {
  unsigned long long start = 0, end = 0;
  char perms[5] = {};
  int path_at = 0;
  if (std::sscanf(line.c_str(), "%llx-%llx %4s %*s %*s %*s %n", &start, &end, perms, &path_at) < 3) return false;
  mapping = Mapping{};
  mapping.start = start;
  mapping.end = end;
  const char* path = path_at > 0 ? line.c_str() + path_at : "";
  // /dev mappings (a GPU driver's) are device memory, not page cache; [vdso] and the like are
  // the kernel's.
  bool file = path[0] == '/' && std::strncmp(path, "/dev/", 5) != 0;
  mapping.clean_file_copy = file && perms[1] == '-' && perms[3] == 'p';
  return true;
}

std::uint64_t kb_of(const std::string& line, const char* key) {
  std::size_t length = std::strlen(key);
  if (line.compare(0, length, key) != 0) return UINT64_MAX;
  return std::strtoull(line.c_str() + length, nullptr, 10);
}

}  // namespace

ReleasedPages release_clean_file_pages() {
  std::vector<Mapping> mappings;
  {
    std::ifstream in("/proc/self/smaps");
    std::string line;
    Mapping current;
    bool have = false;
    while (std::getline(in, line)) {
      Mapping header;
      if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && parse_header(line, header)) {
        if (have) mappings.push_back(current);
        current = header;
        have = true;
      } else if (std::uint64_t kb = kb_of(line, "Rss:"); kb != UINT64_MAX) {
        current.rss_kb = kb;
      } else if (std::uint64_t kb = kb_of(line, "Anonymous:"); kb != UINT64_MAX) {
        current.anonymous_kb = kb;
      } else if (std::uint64_t kb = kb_of(line, "Locked:"); kb != UINT64_MAX) {
        current.locked_kb = kb;
      }
    }
    if (have) mappings.push_back(current);
  }
  ReleasedPages released;
  for (const auto& mapping : mappings) {
    if (!mapping.clean_file_copy || mapping.rss_kb == 0 || mapping.anonymous_kb != 0 || mapping.locked_kb != 0) continue;
    if (::madvise(reinterpret_cast<void*>(mapping.start), mapping.end - mapping.start, MADV_DONTNEED) != 0) continue;
    ++released.mappings;
    released.bytes += mapping.rss_kb * 1024;
  }
  return released;
}

}  // namespace fructosa::agent
