// libFuzzer target: what a process writes to lagent's push socket (docs/push.md).
//
// The input is split at '\n' into lines, as the push server reads them. Each line goes to
// parse_push_line(): a metric must have a name pushed_name_problem() accepts and a finite value,
// a refusal a reason. Then all the lines go to a PushedMetrics store with small limits, in
// several reads (two jobs, the node, two seconds), and the store must agree with the parser and
// with itself: each line taken, refused once or ignored as the parser ignores it; no more taken
// per job and second than the rate limit; counts equal to what was taken and refused; take()
// holding valid, finite, distinct names, at most the names limit per job; forget_ended() leaving
// the totals as they were. A broken invariant aborts, which libFuzzer reports as a crash.
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "push_line.h"
#include "pushed_metrics.h"

using namespace fructosa::sensors;

namespace {

constexpr PushLimits kLimits{.max_names_per_job = 4, .max_lines_per_second = 8};
constexpr std::int64_t kSecond = 1'000'000'000;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "push_line_fuzz: %s\n", what);
  std::abort();
}

void check(bool holds, const char* what) {
  if (!holds) broken(what);
}

void check_line(std::string_view text, const PushLine& line) {
  switch (line.status) {
    case PushLine::Status::metric:
      check(pushed_name_problem(line.name).empty(), "a metric's name is not a valid name");
      check(std::isfinite(line.value), "a metric's value is not finite");
      check(line.reason.empty(), "a metric has a reason");
      break;
    case PushLine::Status::refused:
      check(!line.reason.empty(), "a refusal has no reason");
      break;
    case PushLine::Status::ignored:
      check(line.name.empty() && line.reason.empty(), "an ignored line has a name or a reason");
      // Only what is blank or a comment once trimmed.
      {
        auto first = text.find_first_not_of(" \t\r");
        check(first == std::string_view::npos || text[first] == '#', "a line with content was ignored");
      }
      break;
  }
}

struct Tally {
  std::uint64_t taken = 0, malformed = 0, rate = 0, names = 0;
};

// One read of `lines` by a process of `job`; `window` is what that job had taken in this second.
void push_and_check(PushedMetrics& store, std::uint64_t job, const std::vector<std::string_view>& lines,
                    const std::vector<PushLine>& parsed, std::int64_t now_ns, Tally& tally, std::size_t& window) {
  std::vector<int> refusals(lines.size(), 0);
  std::size_t taken = store.push(job, lines, now_ns, [&](std::size_t i, PushRefusal why, std::string_view reason) {
    check(i < lines.size(), "a refusal's index is past the lines");
    check(++refusals[i] == 1, "a line refused twice");
    check(!reason.empty(), "a refusal without a reason");
    check(parsed[i].status != PushLine::Status::ignored, "an ignored line was refused");
    if (why == PushRefusal::malformed) ++tally.malformed;
    if (why == PushRefusal::rate) ++tally.rate;
    if (why == PushRefusal::names) ++tally.names;
    // A line the parser refuses is refused as malformed, unless the rate dropped it unread.
    if (parsed[i].status == PushLine::Status::refused)
      check(why != PushRefusal::names, "a malformed line was refused for the names limit");
  });
  std::size_t content = 0, refused = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (parsed[i].status != PushLine::Status::ignored) ++content;
    refused += refusals[i];
  }
  check(taken + refused == content, "lines neither taken, refused nor ignored");
  window += taken;
  check(window <= kLimits.max_lines_per_second, "more lines taken in a second than the rate limit");
  tally.taken += taken;
}

void check_take(const std::vector<PushedMetrics::JobValues>& taken) {
  std::set<std::uint64_t> jobs;
  for (const auto& job : taken) {
    check(jobs.insert(job.job).second, "a job twice in a take");
    check(!job.values.empty(), "a job without values in a take");
    check(job.values.size() <= kLimits.max_names_per_job, "more names than the names limit");
    std::set<std::string> names;
    for (const auto& [name, value] : job.values) {
      check(names.insert(name).second, "a name twice in a job");
      check(pushed_name_problem(name).empty(), "a taken name is not a valid name");
      check(std::isfinite(value), "a taken value is not finite");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);  // the store warns once per job and limit
    return true;
  }();
  (void)quiet;

  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start <= input.size();) {
    std::size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    lines.push_back(input.substr(start, end - start));
    start = end + 1;
  }
  std::vector<PushLine> parsed;
  parsed.reserve(lines.size());
  for (auto line : lines) {
    parsed.push_back(parse_push_line(line));
    check_line(line, parsed.back());
  }

  // A fresh store each input: a run must not depend on the inputs before it.
  PushedMetrics store;
  store.open(kLimits);
  Tally tally;
  std::size_t job1 = 0, job2 = 0, node = 0;
  push_and_check(store, 1, lines, parsed, 1 * kSecond, tally, job1);
  push_and_check(store, 2, lines, parsed, 1 * kSecond, tally, job2);
  push_and_check(store, 0, lines, parsed, 1 * kSecond, tally, node);
  check_take(store.take());
  // The same job again in the same second, then in the next one.
  push_and_check(store, 1, lines, parsed, 2 * kSecond - 1, tally, job1);
  job1 = 0;
  push_and_check(store, 1, lines, parsed, 2 * kSecond, tally, job1);
  check_take(store.take());

  PushCounts totals = store.totals();
  check(totals.accepted == tally.taken && totals.refused == tally.malformed && totals.rate_dropped == tally.rate &&
            totals.names_dropped == tally.names,
        "the totals are not what was taken and refused");
  PushCounts sum{};
  for (const auto& [job, counts] : store.per_job()) {
    check(job == 1 || job == 2, "counts of a job that pushed nothing");
    sum.accepted += counts.accepted;
    sum.refused += counts.refused;
  }
  check(sum.accepted <= totals.accepted && sum.refused <= totals.refused, "per-job counts above the totals");

  // Job 1 ends: gone from the take and the per-job counts, still in the totals.
  store.forget_ended([](std::uint64_t job) { return job != 1; });
  check(!store.per_job().count(1), "an ended job is still counted per job");
  for (const auto& job : store.take()) check(job.job != 1, "an ended job still has values");
  PushCounts after = store.totals();
  check(after.accepted == totals.accepted && after.refused == totals.refused &&
            after.rate_dropped == totals.rate_dropped && after.names_dropped == totals.names_dropped,
        "forgetting a job changed the totals");
  return 0;
}
