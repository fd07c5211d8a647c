// What processes pushed to lagent's push socket, per job, until the User sensor reports it
// (docs/push.md). The push server (lagent/push_server.h) hands it the lines a process of job N
// wrote; the User sensor takes each job's values once per interval; lagent's own sensor reports
// the counts. The limits protecting the node and lmaster are applied here, per job.
// Thread-safe; one per agent (instance()), as AgentStats.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "push_line.h"

namespace fructosa::sensors {

struct PushLimits {
  std::size_t max_names_per_job = 100;
  std::uint32_t max_lines_per_second = 1000;  // per job, over each second of the steady clock
  bool operator==(const PushLimits&) const = default;
};

// Lines of one job (or of the node, job 0) since lagent started. `refused` were malformed;
// `rate_dropped` and `names_dropped` went over a limit.
struct PushCounts {
  std::uint64_t accepted = 0;
  std::uint64_t refused = 0;
  std::uint64_t rate_dropped = 0;
  std::uint64_t names_dropped = 0;
};

// Why a pushed line was not taken.
enum class PushRefusal : unsigned char { malformed, rate, names };

class PushedMetrics {
 public:
  static PushedMetrics& instance();
  PushedMetrics();
  ~PushedMetrics();

  // The push socket listens with these limits (a reload may change them).
  void open(PushLimits limits);
  // It does not: `why` is what the User sensor reports as its unavailability.
  void close(std::string why);
  bool is_open() const;
  std::string why_closed() const;

  // Takes the lines of one read by a process of `job` (each without its '\n'), at `now_ns` of
  // the steady clock. `refuse(i, why, reason)` is called for each line not taken (malformed, over
  // a limit); blank lines and comments are neither taken nor refused. Returns the lines taken.
  std::size_t push(std::uint64_t job, const std::vector<std::string_view>& lines, std::int64_t now_ns,
            const std::function<void(std::size_t, PushRefusal, std::string_view)>& refuse);

  struct JobValues {
    std::uint64_t job = 0;
    std::vector<std::pair<std::string, double>> values;  // in the order first pushed
  };
  // The User sensor's reading: each job's gauges (their last value) and counters (the sum
  // pushed since the previous take, which starts them at 0 again). Jobs with no name are left out.
  std::vector<JobValues> take();
  // Forgets the names, values and counts of every job (not the node's) `running` says ended.
  void forget_ended(const std::function<bool(std::uint64_t)>& running);

  // For lagent's own sensor.
  PushCounts totals() const;  // every job's and the node's, those that ended included
  std::map<std::uint64_t, PushCounts> per_job() const;  // jobs with counts, running ones
  // A connection refused because its process is in no job (push_allow_outside_jobs = false).
  void count_outside_job();
  std::uint64_t outside_job_refusals() const;
  void count_connection();
  std::uint64_t connections() const;

  // Tests: back to a fresh, closed store.
  void reset();

 private:
  struct JobState;
  JobState& job_locked(std::uint64_t job);

  mutable std::mutex mutex_;
  bool open_ = false;
  std::string why_closed_ = "no [sensor:User] push socket is listening";
  PushLimits limits_;
  std::map<std::uint64_t, std::unique_ptr<JobState>> jobs_;
  PushCounts totals_;
  std::uint64_t outside_job_ = 0;
  std::uint64_t connections_ = 0;
};

}  // namespace fructosa::sensors
