// What the dashboard tests share: their fixtures and two helpers on lists of lines.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace fructosa::dashboards::test_helpers {

inline const std::string kFixtures = std::string(FRUCTOSA_FIXTURES) + "/dashboards";

inline bool contains(const std::vector<std::string>& list, std::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// The lines, each ended by a newline.
inline std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  return text;
}

}  // namespace fructosa::dashboards::test_helpers
