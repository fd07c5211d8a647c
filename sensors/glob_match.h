// Shell-style name patterns as Python's fnmatch.fnmatchcase() reads them, for the include /
// exclude options of sensors that report one entry per device (NICs, disks, ...).
//   *      any run of characters (dots included)   ?      any one character
//   [seq]  one character of seq; a-z ranges         [!seq] one character not in seq
// A '[' without a closing ']' is an ordinary character, as in fnmatch. Case-sensitive.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fructosa::sensors {

namespace glob_detail {

// Matches `c` against the bracket expression starting at pattern[open] == '['. Returns -1 when
// the bracket never closes (then '[' is literal), else 1 or 0; `next` is the index after ']'.
inline int match_set(std::string_view pattern, std::size_t open, char c, std::size_t& next) {
  std::size_t j = open + 1;
  bool negate = false;
  if (j < pattern.size() && pattern[j] == '!') {
    negate = true;
    ++j;
  }
  std::size_t first = j;
  if (j < pattern.size() && pattern[j] == ']') ++j;  // "[]...]": a leading ']' is a member
  std::size_t close = pattern.find(']', j);
  if (close == std::string_view::npos) return -1;
  std::string_view members = pattern.substr(first, close - first);
  bool matched = false;
  for (std::size_t i = 0; i < members.size();) {
    if (i + 2 < members.size() && members[i + 1] == '-') {
      matched |= members[i] <= c && c <= members[i + 2];
      i += 3;
    } else {
      matched |= members[i] == c;
      ++i;
    }
  }
  next = close + 1;
  return matched != negate ? 1 : 0;
}

}  // namespace glob_detail

inline bool glob_match(std::string_view pattern, std::string_view name) {
  std::size_t p = 0, n = 0;
  std::size_t star = std::string_view::npos,
              star_n = 0;  // last '*' seen and where it started eating
  while (n < name.size()) {
    if (p < pattern.size()) {
      char c = pattern[p];
      if (c == '*') {
        star = ++p;
        star_n = n;
        continue;
      }
      if (c == '?') {
        ++p;
        ++n;
        continue;
      }
      if (c == '[') {
        std::size_t next = 0;
        int matched = glob_detail::match_set(pattern, p, name[n], next);
        if (matched == 1) {
          p = next;
          ++n;
          continue;
        }
        if (matched == -1 && name[n] == '[') {
          ++p;
          ++n;
          continue;
        }
      } else if (c == name[n]) {
        ++p;
        ++n;
        continue;
      }
    }
    if (star == std::string_view::npos) return false;
    p = star;  // let the last '*' eat one more character and retry
    n = ++star_n;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// An include / exclude pair of pattern lists: a name passes when it matches no exclude pattern
// and, if there are include patterns, at least one of them. Exclude wins.
class NameFilter {
 public:
  NameFilter() = default;
  NameFilter(std::vector<std::string> include, std::vector<std::string> exclude)
      : include_(std::move(include)), exclude_(std::move(exclude)) {}

  bool accepts(std::string_view name) const {
    for (const auto& pattern : exclude_)
      if (glob_match(pattern, name)) return false;
    if (include_.empty()) return true;
    for (const auto& pattern : include_)
      if (glob_match(pattern, name)) return true;
    return false;
  }
  bool filters() const { return !include_.empty() || !exclude_.empty(); }

 private:
  std::vector<std::string> include_;
  std::vector<std::string> exclude_;
};

}  // namespace fructosa::sensors
