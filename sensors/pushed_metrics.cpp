#include "pushed_metrics.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>

namespace fructosa::sensors {

struct PushedMetrics::JobState {
  struct Entry {
    std::string name;
    PushedKind kind;
    double value;  // a gauge's last value; a counter's sum since the last take()
  };
  std::map<std::string, std::size_t, std::less<>> index;  // name -> entries[i]
  std::vector<Entry> entries;
  std::int64_t window_second = INT64_MIN;  // the steady-clock second lines are counted in
  std::uint32_t window_lines = 0;
  PushCounts counts;
  bool told_rate = false;  // the one log line per job and limit
  bool told_names = false;
};

PushedMetrics& PushedMetrics::instance() {
  static PushedMetrics metrics;
  return metrics;
}

PushedMetrics::PushedMetrics() = default;
PushedMetrics::~PushedMetrics() = default;

void PushedMetrics::open(PushLimits limits) {
  std::lock_guard lock(mutex_);
  open_ = true;
  limits_ = limits;
}

void PushedMetrics::close(std::string why) {
  std::lock_guard lock(mutex_);
  open_ = false;
  why_closed_ = std::move(why);
}

bool PushedMetrics::is_open() const {
  std::lock_guard lock(mutex_);
  return open_;
}

std::string PushedMetrics::why_closed() const {
  std::lock_guard lock(mutex_);
  return why_closed_;
}

PushedMetrics::JobState& PushedMetrics::job_locked(std::uint64_t job) {
  auto& state = jobs_[job];
  if (!state) state = std::make_unique<JobState>();
  return *state;
}

namespace {
std::string whose(std::uint64_t job) { return job ? fmt::format("job {}", job) : std::string("the node (no job)"); }

// Exactly the lines parse_push_line() ignores (blank, or '#' after blanks), told without parsing.
bool ignored_line(std::string_view text) {
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  if (text.size() > kMaxPushLineLength) return false;
  auto first = text.find_first_not_of(" \t");
  return first == std::string_view::npos || text[first] == '#';
}
}  // namespace

std::size_t PushedMetrics::push(std::uint64_t job, const std::vector<std::string_view>& lines, std::int64_t now_ns,
                                const std::function<void(std::size_t, PushRefusal, std::string_view)>& refuse) {
  const std::int64_t second = now_ns / 1'000'000'000;
  std::lock_guard lock(mutex_);
  JobState& state = job_locked(job);
  if (state.window_second != second) {
    state.window_second = second;
    state.window_lines = 0;
  }
  auto count = [&](std::uint64_t PushCounts::*field) {
    ++(state.counts.*field);
    ++(totals_.*field);
  };
  std::string rate_reason;
  std::size_t taken = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    // A line over the limit is dropped unparsed: a flood costs as little as it can. Blank lines
    // and comments are the exception (they cost nothing and count for nothing).
    std::string_view text = lines[i];
    if (ignored_line(text)) continue;
    if (state.window_lines >= limits_.max_lines_per_second) {
      count(&PushCounts::rate_dropped);
      if (!state.told_rate) {
        state.told_rate = true;
        spdlog::warn("push: {} pushes more than {} lines per second; the excess is dropped and counted "
                     "([lagent] push_max_lines_per_second; lagent's push_rate_dropped)",
                     whose(job), limits_.max_lines_per_second);
      }
      // One text for every line of a flood: formatting each would cost more than dropping it.
      if (rate_reason.empty())
        rate_reason =
            fmt::format("dropped: more than {} lines per second from {}", limits_.max_lines_per_second, whose(job));
      refuse(i, PushRefusal::rate, rate_reason);
      continue;
    }
    ++state.window_lines;
    PushLine line = parse_push_line(text);
    if (line.status == PushLine::Status::ignored) continue;
    if (line.status == PushLine::Status::refused) {
      count(&PushCounts::refused);
      refuse(i, PushRefusal::malformed, line.reason);
      continue;
    }
    auto found = state.index.find(line.name);
    if (found == state.index.end()) {
      if (state.entries.size() >= limits_.max_names_per_job) {
        count(&PushCounts::names_dropped);
        if (!state.told_names) {
          state.told_names = true;
          spdlog::warn("push: {} pushed more than {} names; '{}' and other new names are dropped and counted "
                       "([lagent] push_max_names_per_job; lagent's push_names_dropped)",
                       whose(job), limits_.max_names_per_job, line.name);
        }
        refuse(i, PushRefusal::names,
               fmt::format("dropped: '{}' would be name {} of {}, more than {} allowed", line.name,
                           state.entries.size() + 1, whose(job), limits_.max_names_per_job));
        continue;
      }
      found = state.index.emplace(line.name, state.entries.size()).first;
      state.entries.push_back({std::move(line.name), line.kind, 0.0});
    }
    auto& entry = state.entries[found->second];
    if (entry.kind != line.kind) {
      count(&PushCounts::refused);
      refuse(i, PushRefusal::malformed,
             fmt::format("'{}' was pushed as a {} first; a name keeps its type while the job runs", entry.name,
                         entry.kind == PushedKind::gauge ? "gauge (|g)" : "counter (|c)"));
      continue;
    }
    // Each increment is finite, their sum need not be (1e308|c twice): what is reported must be.
    if (entry.kind == PushedKind::counter && !std::isfinite(entry.value + line.value)) {
      count(&PushCounts::refused);
      refuse(i, PushRefusal::malformed,
             fmt::format("'{}' summed since the last reading would not be finite", entry.name));
      continue;
    }
    if (entry.kind == PushedKind::gauge)
      entry.value = line.value;
    else
      entry.value += line.value;
    count(&PushCounts::accepted);
    ++taken;
  }
  return taken;
}

std::vector<PushedMetrics::JobValues> PushedMetrics::take() {
  std::vector<JobValues> taken;
  std::lock_guard lock(mutex_);
  for (auto& [job, state] : jobs_) {
    if (state->entries.empty()) continue;
    JobValues& values = taken.emplace_back();
    values.job = job;
    values.values.reserve(state->entries.size());
    for (auto& entry : state->entries) {
      values.values.emplace_back(entry.name, entry.value);
      if (entry.kind == PushedKind::counter) entry.value = 0;
    }
  }
  return taken;
}

void PushedMetrics::forget_ended(const std::function<bool(std::uint64_t)>& running) {
  std::lock_guard lock(mutex_);
  for (auto it = jobs_.begin(); it != jobs_.end();)
    it = it->first == 0 || running(it->first) ? std::next(it) : jobs_.erase(it);
}

PushCounts PushedMetrics::totals() const {
  std::lock_guard lock(mutex_);
  return totals_;
}

std::map<std::uint64_t, PushCounts> PushedMetrics::per_job() const {
  std::lock_guard lock(mutex_);
  std::map<std::uint64_t, PushCounts> counts;
  for (const auto& [job, state] : jobs_)
    if (job != 0) counts[job] = state->counts;
  return counts;
}

void PushedMetrics::count_outside_job() {
  std::lock_guard lock(mutex_);
  ++outside_job_;
}

std::uint64_t PushedMetrics::outside_job_refusals() const {
  std::lock_guard lock(mutex_);
  return outside_job_;
}

void PushedMetrics::count_connection() {
  std::lock_guard lock(mutex_);
  ++connections_;
}

std::uint64_t PushedMetrics::connections() const {
  std::lock_guard lock(mutex_);
  return connections_;
}

void PushedMetrics::reset() {
  std::lock_guard lock(mutex_);
  open_ = false;
  why_closed_ = "no [sensor:User] push socket is listening";
  limits_ = {};
  jobs_.clear();
  totals_ = {};
  outside_job_ = 0;
  connections_ = 0;
}

}  // namespace fructosa::sensors
