#include "round_runner.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <list>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "agent_stats.h"
#include "wakeup_fd.h"
#include "wall_clock.h"

namespace fructosa::agent {
namespace {

// Threads that read: one waiting for the instant, one on the watchdog, and two more for reads
// that are stuck (a hung file system, a slow IPMI controller).
constexpr std::size_t kMaxThreads = 4;
// An unavailable sensor (no battery, no GPU library, ...) is tried again after 1, 2, 4, ...
// intervals, at most this long apart (RetryBackoff, schedule.h): it comes back within about a
// minute, or at the next reading after a job started or ended.
constexpr std::int64_t kUnavailableRetryMaxNs = 60'000'000'000;
constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

std::int64_t interval_ns(double seconds) { return static_cast<std::int64_t>(seconds * 1e9); }

int make_fd(int fd, const char* what) {
  if (fd < 0) throw std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
  return fd;
}

void poke(int eventfd) {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(eventfd, &one, sizeof one);
}

// Arms (or with zero, disarms) a CLOCK_MONOTONIC timerfd `after` from now.
void arm_after(int timer_fd, std::chrono::nanoseconds after) {
  itimerspec spec{};
  spec.it_value.tv_sec = static_cast<time_t>(after.count() / 1'000'000'000);
  spec.it_value.tv_nsec = static_cast<long>(after.count() % 1'000'000'000);
  ::timerfd_settime(timer_fd, 0, &spec, nullptr);
}

}  // namespace

RoundTask::RoundTask(std::string name_in, double interval_seconds)
    : name(std::move(name_in)), schedule(interval_ns(interval_seconds)), retry(kUnavailableRetryMaxNs) {}

struct RoundRunner::State {
  // The readings due at one instant; whoever reads takes the next one not started.
  struct Round {
    std::vector<std::pair<std::shared_ptr<RoundTask>, std::int64_t>> due;  // task, reading time
    std::atomic<std::size_t> next{0};
  };

  State(Deliver deliver_in, std::chrono::milliseconds help_after_in)
      : deliver(std::move(deliver_in)), help_after(help_after_in) {
    change_fd = make_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "eventfd");
    stop_fd = make_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "eventfd");
    watchdog_fd = make_fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC), "timerfd_create");
    std::lock_guard lock(mutex);
    leader = 0;
    spawn();  // the leader
    spawn();  // on the watchdog
  }

  ~State() {
    for (int fd : {change_fd, stop_fd, watchdog_fd}) ::close(fd);
  }

  const Deliver deliver;
  // How long a round may run before another thread takes the readings it has not started, and
  // the wait for the next instant.
  const std::chrono::milliseconds help_after;
  int change_fd = -1;    // the tasks changed: the leader computes the next instant again
  int stop_fd = -1;      // written once, never read: every wait ends
  int watchdog_fd = -1;  // expires help_after after a round started, unless it ended

  std::mutex mutex;
  std::condition_variable spare_wakeup;
  std::vector<std::shared_ptr<RoundTask>> tasks;
  bool stopping = false;
  int leader = -1;                // the thread that waits for the next instant and reads its round
  bool follower_waiting = false;  // a thread waits on the watchdog
  std::shared_ptr<Round> round;   // the leader's round, until it is read
  std::list<std::thread> threads;
  std::size_t idle_spares = 0;  // threads whose slow read ended, asleep on spare_wakeup
  int threads_made = 0;

  void spawn() {
    int id = threads_made++;
    threads.emplace_back([this, id] { run(id); });
  }

  void run(int me) {
    std::unique_lock lock(mutex);
    while (!stopping) {
      if (leader == me) {
        lead(lock, me);
      } else if (!follower_waiting) {
        follow(lock, me);
      } else {
        ++idle_spares;
        spare_wakeup.wait(lock, [this] { return stopping || !follower_waiting; });
        --idle_spares;
      }
    }
  }

  // The next reading time of all tasks (wall clock, ns), kNever when there is none. A task's
  // deadline more than one interval ahead means the clock was stepped back: it starts again
  // from now rather than after a gap as long as the step.
  std::int64_t next_instant(std::int64_t now) {
    std::int64_t next = kNever;
    for (auto& task : tasks) {
      if (task->stopped) continue;
      if (task->deadline == 0 || task->deadline > now + task->schedule.interval())
        task->deadline = task->schedule.first(now);
      next = std::min(next, task->deadline);
    }
    return next;
  }

  // The tasks due at `now`, each moved to its next reading time (state under `mutex`).
  std::shared_ptr<Round> take_due(std::int64_t now) {
    auto due = std::make_shared<Round>();
    auto& stats = sensors::AgentStats::instance();
    for (auto& task : tasks) {
      // deadline 0: added while the leader waited; next_instant() gives it its first
      if (task->stopped || task->deadline == 0 || task->deadline > now) continue;
      std::int64_t deadline = task->deadline;
      bool retry_later = task->retry.skip(deadline, task->schedule.interval(),
                                          task->failures_in_a_row.load(std::memory_order_relaxed),
                                          task->last_read, [&task] { return task->running_jobs(); });
      if (retry_later) {
        // unavailable: not read at this reading time (nor counted as missed)
      } else if (!task->busy.exchange(true)) {
        task->last_read = deadline;
        due->due.emplace_back(task, deadline);
      } else {
        stats.record_missed(task->name, 1);
        spdlog::debug("{}: the previous reading is still running; skipping the one due now", task->name);
      }
      std::uint64_t skipped = 0;
      task->deadline = task->schedule.next(deadline, now, skipped);
      if (skipped) {
        stats.record_missed(task->name, skipped);
        spdlog::debug("{}: {} reading time(s) passed while the agent was busy", task->name, skipped);
      }
    }
    return due;
  }

  // Waits for the next instant (or a change of the tasks), then reads the round due.
  void lead(std::unique_lock<std::mutex>& lock, int me) {
    std::int64_t now = wall_clock_ns();
    std::int64_t next = next_instant(now);
    lock.unlock();
    pollfd fds[] = {{change_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int woken = 0;
    if (next == kNever) {
      woken = ::poll(fds, 2, -1);
    } else if (next > now) {
      timespec wait{static_cast<time_t>((next - now) / 1'000'000'000), static_cast<long>((next - now) % 1'000'000'000)};
      woken = ::ppoll(fds, 2, &wait, nullptr);
    }
    if (woken > 0) drain_wakeups(change_fd);
    lock.lock();
    if (stopping || leader != me) return;
    // The wait ran on the monotonic clock: a wall clock slewed by NTP may be a little short of
    // the instant waited for, which is due all the same (not one more wake-up for the rest).
    now = wall_clock_ns();
    auto due = take_due(woken == 0 ? std::max(now, next) : now);
    if (due->due.empty()) return;
    round = due;
    arm_after(watchdog_fd, help_after);
    read_round(lock, me, *due);
  }

  // Reads what is left of `due` and hands it over. Called with `lock` held, returns with it.
  void read_round(std::unique_lock<std::mutex>& lock, int me, Round& due) {
    lock.unlock();
    std::vector<Sample> samples;
    for (std::size_t i; (i = due.next.fetch_add(1)) < due.due.size();) {
      auto& [task, deadline] = due.due[i];
      if (!task->stopped) task->read(deadline, samples);
      task->busy = false;
    }
    lock.lock();
    if (leader == me) {  // else the thread that took over owns the watchdog now
      arm_after(watchdog_fd, std::chrono::nanoseconds(0));
      round.reset();
    }
    std::int64_t next = next_instant(wall_clock_ns());
    auto next_round = next == kNever ? std::chrono::steady_clock::time_point::max()
                                     : std::chrono::steady_clock::now() + std::chrono::nanoseconds(next - wall_clock_ns());
    lock.unlock();
    if (!samples.empty()) deliver(std::move(samples), next_round);
    lock.lock();
  }

  // Waits on the watchdog: when the leader's round has run help_after, this thread takes the
  // readings it has not started and becomes the leader.
  void follow(std::unique_lock<std::mutex>& lock, int me) {
    follower_waiting = true;
    lock.unlock();
    pollfd fds[] = {{watchdog_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    ::poll(fds, 2, -1);
    drain_wakeups(watchdog_fd);
    lock.lock();
    follower_waiting = false;
    if (stopping) return;
    auto slow = round;
    if (!slow) return;  // the round ended as the watchdog expired: wait again
    spdlog::debug("a round has run {} ms: another thread reads what it has not started", help_after.count());
    leader = me;
    // Someone must wait on the watchdog for this thread's own reads: a spare, or a new thread.
    if (idle_spares > 0)
      spare_wakeup.notify_one();
    else if (threads.size() < kMaxThreads)
      spawn();
    arm_after(watchdog_fd, help_after);
    read_round(lock, me, *slow);
  }


  void poke_leader() { poke(change_fd); }

  void stop() {
    {
      std::lock_guard lock(mutex);
      if (stopping) return;
      stopping = true;
    }
    poke(stop_fd);
    spare_wakeup.notify_all();
    for (auto& thread : threads) thread.join();
  }
};

RoundRunner::RoundRunner(Deliver deliver, std::chrono::milliseconds help_after)
    : state_(std::make_unique<State>(std::move(deliver), help_after)) {}

RoundRunner::~RoundRunner() { stop(); }

void RoundRunner::set_tasks(std::vector<std::shared_ptr<RoundTask>> tasks) {
  {
    std::lock_guard lock(state_->mutex);
    state_->tasks = std::move(tasks);
  }
  state_->poke_leader();
}

void RoundRunner::set_interval(const std::shared_ptr<RoundTask>& task, double interval_seconds) {
  {
    std::lock_guard lock(state_->mutex);
    task->schedule = AlignedSchedule(interval_ns(interval_seconds));
    task->deadline = task->schedule.first(wall_clock_ns());
  }
  state_->poke_leader();
}

void RoundRunner::stop() { state_->stop(); }

}  // namespace fructosa::agent
