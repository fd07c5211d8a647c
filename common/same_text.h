// Equality of two strings as the hot paths compare them: keys and sensor names, nearly always
// equal and under 16 bytes. std::string's == calls libc's memcmp, whose call and dispatch by
// size cost the agent's encoder more than the comparison itself (perf: 8 % of master_load).
#pragma once

#include <cstdint>
#include <cstring>
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

}  // namespace fructosa
