// scheduler = regex: the job directories are those whose path relative to a hierarchy matches a
// user's regex, its one capture group the job id (a batch system fructosa does not know).
#include <fmt/format.h>

#include "config.h"
#include "job_layouts.h"

namespace fructosa::sensors {
namespace {

// libstdc++ 12 reads a repeat count ({n,m}) or back-reference (\n) into a long without an
// overflow check (undefined behaviour, found by fuzz/ini_fuzz): such numbers are refused here,
// before std::regex sees them. Nine digits is far beyond any useful count.
void check_regex_numbers(const std::string& regex) {
  bool in_braces = false;
  for (std::size_t i = 0; i < regex.size(); ++i) {
    char c = regex[i];
    bool counted = false;
    if (c == '\\' && i + 1 < regex.size()) {
      counted = regex[i + 1] >= '0' && regex[i + 1] <= '9';
      if (!counted) ++i;  // an escaped character: never a brace
    } else if (c == '{') {
      in_braces = true;
      counted = true;
    } else if (c == '}') {
      in_braces = false;
    } else if (c == ',') {
      counted = in_braces;
    }
    if (!counted) continue;
    std::size_t digits = 0;
    while (i + 1 + digits < regex.size() && regex[i + 1 + digits] >= '0' && regex[i + 1 + digits] <= '9') ++digits;
    if (digits > 9)
      throw ConfigError(fmt::format("key 'regex': '{}' has a repeat count or back-reference of {} digits", regex, digits));
    i += digits;
  }
}

}  // namespace

void check_job_regex(const std::string& regex) {
  check_regex_numbers(regex);
  try {
    std::regex pattern(regex);
    if (pattern.mark_count() != 1)
      throw ConfigError(fmt::format("key 'regex': '{}' has {} capture groups; it needs exactly one, the job id",
                                    regex, pattern.mark_count()));
  } catch (const std::regex_error& error) {
    throw ConfigError(fmt::format("key 'regex': '{}' is not a valid regex: {}", regex, error.what()));
  }
}

void find_regex_jobs(const CgroupHierarchy& hierarchy, const std::regex& regex, int max_depth, JobScan& scan) {
  // Depth-first, parents before children: the shallowest match is the job's directory.
  std::function<void(const std::string&, int)> walk = [&](const std::string& rel, int depth) {
    std::string dir = rel.empty() ? hierarchy.path : hierarchy.path + "/" + rel;
    scan.watch(dir);
    for (const auto& name : subdirectories(dir)) {
      std::string child = rel.empty() ? name : rel + "/" + name;
      std::smatch match;
      std::uint64_t id = 0;
      if (std::regex_search(child, match, regex) && parse_job_id(match[1].str(), id)) {
        scan.add(hierarchy, child, name, id, nullptr);
      } else if (depth + 1 < max_depth) {
        walk(child, depth + 1);
      }
    }
  };
  walk("", 0);
}

}  // namespace fructosa::sensors
