// User: metrics the job's own processes push to lagent (`lagent push`, or lines written to
// [lagent] push_socket; docs/push.md), each attributed to the job of the process that pushed
// it. The section also makes lagent listen: its time_interval is the period over which a
// counter's pushes are summed. Gauges are reported with their last value every interval until
// the job ends, as statsd does.
#include "jobs.h"
#include "pushed_metrics.h"
#include "sensor.h"

namespace fructosa::sensors::user_file {
namespace {

const OptionTable kOptions{};

const Catalog kCatalog{
    {"*", Unit::none, Kind::gauge,
     "user-defined, pushed from inside the job (lagent push): a gauge's last value, or a counter's sum over the "
     "interval"},
};

class UserSensor final : public Sensor {
 public:
  explicit UserSensor(const SensorContext& context) : jobs_(context.jobs) {}

  bool sample(SampleWriter& out) override {
    auto& pushed = PushedMetrics::instance();
    if (!pushed.is_open()) throw SensorUnavailable(pushed.why_closed());
    for (const auto& job : pushed.take()) {
      out.begin_job(job.job);
      for (const auto& [name, value] : job.values) out.set(name, value);
    }
    // After the take: what a job pushed in its last interval is reported before it is forgotten.
    if (jobs_) {
      auto running = jobs_->snapshot();
      pushed.forget_ended([&](std::uint64_t job) { return running->find(job) != nullptr; });
    }
    return true;
  }

 private:
  JobDirectory* jobs_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("User",
                         "metrics pushed by the job's processes to lagent's push socket (`lagent push`), attributed "
                         "to the job of the process that pushed them; this section makes lagent listen",
                         kOptions, kCatalog, UserSensor, .row = DashboardRow::jobs, .job_keys = "*");

}  // namespace fructosa::sensors::user_file
