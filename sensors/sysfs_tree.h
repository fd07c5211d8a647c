// Small helpers for the sensors that walk a sysfs/procfs class directory of numbered or named
// entries (RAPL, Temperature, InfiniBand, Lustre): listing in natural order, opening with the
// errno kept, parsing sysfs numbers, and turning repeated names into unique key components.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "hwmon.h"
#include "metric.h"

namespace fructosa::sensors::sysfs {

// "thermal_zone2" before "thermal_zone10", "intel-rapl:0:1" before "intel-rapl:0:10": runs of
// digits compare as numbers, everything else byte by byte.
inline bool natural_less(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      std::size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      std::string_view na = a.substr(i, ei - i), nb = b.substr(j, ej - j);
      while (na.size() > 1 && na.front() == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb.front() == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ei;
      j = ej;
      continue;
    }
    if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

// The entries of `directory` whose name starts with `prefix`, in natural order; empty when the
// directory cannot be read.
inline std::vector<std::string> list(const std::string& directory, std::string_view prefix = {}) {
  std::vector<std::string> names;
  list_directory(directory, names);
  std::erase_if(names, [&](const std::string& name) { return name.rfind(prefix, 0) != 0; });
  std::sort(names.begin(), names.end(), natural_less);
  return names;
}

// Whether `path` can be opened for reading: 0, or the errno of the failed open().
inline int open_error(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

inline bool is_directory_accessible(const std::string& path) {
  return ::access(path.c_str(), R_OK | X_OK) == 0;
}

// An unsigned decimal sysfs value ("240422366267\n"); nullopt for anything else ("N/A (no
// PMA)", an empty file, a negative number).
inline std::optional<std::uint64_t> parse_u64(std::string_view text) {
  text = strip(text);
  std::uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// The integer a sysfs enumeration starts with: "4: ACTIVE" -> 4, "5: LinkUp" -> 5.
inline std::optional<std::int64_t> leading_int(std::string_view text) {
  text = strip(text);
  std::int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  return value;
}

// Unique key components for names that may repeat (two "acpitz" thermal zones, one Lustre file
// system mounted twice): the first keeps key_component(name), the following ones get "#1",
// "#2", ... in the order they are added. Stable as long as the entries and their order are.
class UniqueNames {
 public:
  std::string add(std::string_view name) {
    std::string base = key_component(name);
    int& repeats = seen_[base];
    std::string component = base;
    if (repeats > 0) component += "#" + std::to_string(repeats);
    ++repeats;
    while (!used_.insert(component).second) component += "#";  // a real name looked like ours
    return component;
  }

 private:
  std::map<std::string, int> seen_;
  std::set<std::string> used_;
};

inline std::string errno_text(int error) { return std::strerror(error); }

}  // namespace fructosa::sensors::sysfs
