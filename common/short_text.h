// Short texts as the hot paths compare and copy them: keys, hosts and sensor names, nearly always
// under 16 or 32 bytes. libc's memcmp and memcpy, called for a size known only at run time, cost
// more in their call and dispatch by size than the bytes themselves (perf: std::string's ==
// was 8 % of master_load; the Graphite encoder copies a path and a key per point).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace fructosa {

inline bool same_text(std::string_view a, std::string_view b) {
  const std::size_t n = a.size();
  if (n != b.size()) return false;
  const char* p = a.data();
  const char* q = b.data();
  // Two loads that overlap cover 4..16 bytes without reading outside either string.
  auto load8 = [](const char* at) {
    std::uint64_t word;
    std::memcpy(&word, at, sizeof word);
    return word;
  };
  auto load4 = [](const char* at) {
    std::uint32_t word;
    std::memcpy(&word, at, sizeof word);
    return word;
  };
  if (n > 16) return std::memcmp(p, q, n) == 0;
  if (n >= 8) return load8(p) == load8(q) && load8(p + n - 8) == load8(q + n - 8);
  if (n >= 4) return load4(p) == load4(q) && load4(p + n - 4) == load4(q + n - 4);
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != q[i]) return false;
  return true;
}

// Copies `size` bytes from `from` to `to` (not overlapping; `to` has room); returns the end.
inline char* copy_text(char* to, const char* from, std::size_t size) {
  // Two copies of a fixed size that overlap cover 4..32 bytes; the compiler inlines each.
  if (size > 32) {
    std::memcpy(to, from, size);
  } else if (size >= 16) {
    std::memcpy(to, from, 16);
    std::memcpy(to + size - 16, from + size - 16, 16);
  } else if (size >= 8) {
    std::memcpy(to, from, 8);
    std::memcpy(to + size - 8, from + size - 8, 8);
  } else if (size >= 4) {
    std::memcpy(to, from, 4);
    std::memcpy(to + size - 4, from + size - 4, 4);
  } else {
    for (std::size_t i = 0; i < size; ++i) to[i] = from[i];
  }
  return to + size;
}

// to = from; copied inline when `to` already has from's size, as the keys, hosts and sensors of
// a reused sample mostly have (std::string's assignment calls memcpy).
inline void assign_text(std::string& to, std::string_view from) {
  if (to.size() == from.size())
    copy_text(to.data(), from.data(), from.size());
  else
    to.assign(from);
}

}  // namespace fructosa
