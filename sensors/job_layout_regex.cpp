// Job regexes, with RE2: scheduler = regex, whose job directories are those whose path relative
// to a hierarchy matches a user's regex, its one capture group the job id (a batch system
// fructosa does not know), and the built-in layouts' patterns on a job directory's name.
//
// RE2 rather than std::regex, which the fuzzer (fuzz/ini_fuzz) hung: libstdc++ compiles a
// repetition count such as x{64370949} into that many states (over 10 s and 900 MB, lagent stuck
// at start or reload), and matches recursively (a long path can overflow the stack). RE2 refuses
// counts above 1000, compiles within max_mem and matches in time linear in the text.
#include <fmt/format.h>
#include <re2/re2.h>

#include <stdexcept>

#include "config.h"
#include "job_layouts.h"

namespace fructosa::sensors {
namespace {

// What one compiled job regex may take (RE2 refuses a bigger program): a path pattern needs a
// few KiB; this still admits, e.g., (\d+)\w{1000} sixteen times over.
constexpr std::int64_t kJobRegexMaxMem = 2 << 20;

RE2::Options job_regex_options() {
  RE2::Options options;
  // Byte by byte, as std::regex matched: a directory name need not be valid UTF-8.
  options.set_encoding(RE2::Options::EncodingLatin1);
  options.set_max_mem(kJobRegexMaxMem);
  options.set_log_errors(false);  // the error is the ConfigError's message, not RE2's log line
  return options;
}

// The id text of the first group, when it took part in the match, as a job id.
bool job_id_of(const re2::StringPiece& group, std::uint64_t& id) {
  return group.data() != nullptr && parse_job_id(std::string(group.data(), group.size()), id);
}

}  // namespace

std::shared_ptr<const re2::RE2> compile_job_regex(const std::string& regex) {
  auto compiled = std::make_shared<const RE2>(regex, job_regex_options());
  if (!compiled->ok()) {
    std::string why = compiled->error();
    if (compiled->error_code() == RE2::ErrorPatternTooLarge)
      why += fmt::format(" (its compiled program would take more than the {} MiB allowed)", kJobRegexMaxMem >> 20);
    throw ConfigError(fmt::format("key 'regex': '{}' is not a valid RE2 regex: {}", regex, why));
  }
  if (compiled->NumberOfCapturingGroups() != 1)
    throw ConfigError(fmt::format("key 'regex': '{}' has {} capture groups; it needs exactly one, the job id",
                                  regex, compiled->NumberOfCapturingGroups()));
  return compiled;
}

void check_job_regex(const std::string& regex) { (void)compile_job_regex(regex); }

std::shared_ptr<const re2::RE2> compile_builtin_job_regex(const char* pattern) {
  auto compiled = std::make_shared<const RE2>(pattern, job_regex_options());
  // A constant of job_layout_<scheduler>.cpp, which the job discovery tests all run: a bad one
  // is a bug, not a configuration error.
  if (!compiled->ok() || compiled->NumberOfCapturingGroups() < 1)
    throw std::logic_error(fmt::format("built-in job regex '{}': {}", pattern, compiled->error()));
  return compiled;
}

bool match_job_name(const re2::RE2& job, std::string_view name, std::uint64_t& id) {
  re2::StringPiece group;
  return RE2::FullMatch(name, job, &group) && job_id_of(group, id);
}

bool search_job_path(const re2::RE2& regex, std::string_view path, std::uint64_t& id) {
  re2::StringPiece group;
  return RE2::PartialMatch(path, regex, &group) && job_id_of(group, id);
}

void find_regex_jobs(const CgroupHierarchy& hierarchy, const re2::RE2& regex, int max_depth, JobScan& scan) {
  // Depth-first, parents before children: the shallowest match is the job's directory.
  std::function<void(const std::string&, int)> walk = [&](const std::string& rel, int depth) {
    std::string dir = rel.empty() ? hierarchy.path : hierarchy.path + "/" + rel;
    scan.watch(dir);
    for (const auto& name : subdirectories(dir)) {
      std::string child = rel.empty() ? name : rel + "/" + name;
      std::uint64_t id = 0;
      if (search_job_path(regex, child, id)) {
        scan.add(hierarchy, child, name, id, nullptr);
      } else if (depth + 1 < max_depth) {
        walk(child, depth + 1);
      }
    }
  };
  walk("", 0);
}

}  // namespace fructosa::sensors
