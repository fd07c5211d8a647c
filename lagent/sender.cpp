#include "sender.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <mutex>
#include <thread>

#include "agent_spool.h"
#include "agent_stats.h"
#include "wakeup_fd.h"

namespace fructosa::agent {
namespace {

using Clock = LinkClock;

// How long a spooled batch may wait to be taken (or handed over) before the spool makes it
// durable itself (agent_spool.h, Durability): taken batches are never flushed. With
// batch_interval, batch_interval more (State::sync_delay).
constexpr auto kSpoolSyncDelay = std::chrono::seconds(1);
// A round due this soon after a sync deadline reads lmaster's acknowledgements before the sync
// would run (Sender::deliver): what they free needs no flush, and the sender's thread is not
// woken once per round for nothing.
constexpr auto kSyncGrace = std::chrono::milliseconds(250);

}  // namespace

struct Sender::State final : LinkEvents {
  State(SenderSettings settings_in, std::unique_ptr<Link> link_in)
      : settings(std::move(settings_in)),
        link(std::move(link_in)),
        batch_interval(link_seconds(settings.batch_interval)),
        sync_delay(kSpoolSyncDelay + batch_interval) {}

  const SenderSettings settings;
  const std::unique_ptr<Link> link;
  const Clock::duration batch_interval;
  // A batch held by batch_interval is handed to the link within batch_interval of its append
  // (deliver()'s rule): counted from the append, the spool's sync then gives it the same second
  // for its acknowledgement as a batch sent at once, and no batch is flushed (nor the sender
  // thread woken) for merely waiting its turn. Only a batch that cannot be sent (lmaster away)
  // is flushed batch_interval later than without batching: a power cut's window, not a kill's.
  const Clock::duration sync_delay;

  // Everything below `link_mutex` is used by whoever holds it: the sender's thread, or a reading
  // thread handing over its round (deliver()).
  std::mutex link_mutex;

  // Shared with producers, under `mutex` (taken after link_mutex when both are).
  std::mutex mutex;
  std::vector<Sample> incoming;
  Clock::time_point first_incoming;  // when `incoming` got its first sample
  bool incoming_complete = false;    // send_queued(): no need to wait for more
  // A round queued by Sender::deliver() (the sender was busy): when the next one is due.
  Clock::time_point incoming_next_round = Clock::time_point::max();
  bool stopping = false;
  double linger = 0;
  int wake_fd = -1;

  std::thread thread;
  int timer_fd = -1;  // the sender thread's next deadline; re-armed by deliver() too

  // Under link_mutex.
  sensors::SenderStats counters;  // published to AgentStats
  std::unique_ptr<AgentSpool> spool;  // null until opened (a reload waits for the old sender's)
  std::uint64_t next_to_send = 1;     // the next spooled batch to hand to the link
  std::uint64_t highest_handed = 0;   // for batches_sent: first sends, not resends
  std::uint64_t failed_appends = 0, failed_samples = 0, last_bad_record = 0;
  std::vector<Sample> pending;
  Clock::time_point first_pending;
  bool pending_complete = false;  // send it without waiting batch_delay
  Clock::time_point pending_next_round = Clock::time_point::max();  // a queued round's (incoming_next_round)
  // batch_interval: batches spooled, each under its own number, and not sent yet; they leave
  // together, back to back, with their samples kept here so that sending them reads nothing back.
  struct HeldBatch {
    std::uint64_t sequence;
    std::vector<Sample> samples;
  };
  std::vector<HeldBatch> held;
  std::size_t held_samples = 0;
  Clock::time_point first_held;    // when the oldest of them was spooled
  bool go_counted = false;         // counters.sends counted this wake-up (or round) already
  Clock::time_point incoming_due = Clock::time_point::max();
  bool link_started = false;  // the spool is open and the link greeted its destination
  bool stop_seen = false;
  Clock::time_point linger_deadline = Clock::time_point::max();
  Clock::time_point next_spool_try{};
  Clock::time_point next_round = Clock::time_point::max();  // when deliver() is due next
  // The sender thread's wait: while `asleep`, what it watches and when its timer expires.
  bool asleep = false;
  std::vector<pollfd> asleep_watching;
  Clock::time_point timer_armed = Clock::time_point::max();

  // Any thread: the sender thread looks at `incoming` and `stopping` again.
  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  // Under `mutex`: moves the producers' samples to `pending` once their batch is due
  // (send_queued(), max_batch_samples of them, the stop, or batch_delay after the first of
  // them if the thread woke for something else). Until then they wait in `incoming`:
  // producers wake this thread once per round (send_queued()), not once per sensor reading.
  void take_incoming_if_due(Clock::duration batch_delay) {
    if (incoming.empty()) {
      incoming_due = Clock::time_point::max();
      incoming_complete = false;
      return;
    }
    incoming_due = first_incoming + batch_delay;
    if (Clock::now() < incoming_due && incoming.size() < settings.max_batch_samples && !stopping &&
        !incoming_complete)
      return;
    pending_complete = pending_complete || incoming_complete;
    incoming_complete = false;
    if (incoming_next_round != Clock::time_point::max()) next_round = incoming_next_round;
    pending_next_round = incoming_next_round;
    incoming_next_round = Clock::time_point::max();
    if (pending.empty()) {
      first_pending = first_incoming;
      pending.swap(incoming);  // both keep their capacity from round to round
    } else {
      for (auto& sample : incoming) pending.push_back(std::move(sample));
      incoming.clear();
    }
    incoming_due = Clock::time_point::max();
  }

  void publish_counters() {
    SpoolStats spool_stats = spool ? spool->stats() : SpoolStats{};
    counters.unacked = spool_stats.batches;
    counters.spool_bytes = spool_stats.bytes;
    counters.batches_dropped = spool_stats.dropped_batches + failed_appends;
    counters.samples_dropped = spool_stats.dropped_samples + failed_samples;
    sensors::AgentStats::instance().set_sender(counters);
  }

  // Hands batch `sequence` to the link. next_to_send moves first: the link may call
  // send_again() from within send(). Batches handed in one round or wake-up count as one send.
  void hand_over(std::uint64_t sequence, std::vector<Sample>& samples) {
    next_to_send = sequence + 1;
    if (sequence > highest_handed) {
      ++counters.batches_sent;
      highest_handed = sequence;
    }
    if (!go_counted) {
      ++counters.sends;
      go_counted = true;
    }
    link->send(sequence, samples);
  }

  // Spools what is pending as one batch; returns its sequence (0: not kept).
  std::uint64_t append_pending() {
    try {
      return spool->append(pending);
    } catch (const SpoolError& error) {
      // Counted and logged (every 100th after the first, so a full disk does not flood the log).
      if (failed_appends % 100 == 0)
        spdlog::error("cannot keep a batch of {} sample(s) ({} such batch(es) lost so far): {}",
                      pending.size(), failed_appends + 1, error.what());
      ++failed_appends;
      failed_samples += pending.size();
      return 0;
    }
  }

  // Makes a batch of what is pending: in the spool first, then to the link if it can take it
  // now; otherwise it waits in the spool.
  void send_batch() {
    std::uint64_t sequence = append_pending();
    if (sequence && sequence == next_to_send && link->can_send()) hand_over(sequence, pending);
    pending.clear();
    send_unsent();
    publish_counters();
  }

  // batch_interval: what is pending is spooled now, as a batch of its own, and held (not sent)
  // while the next round (`next_round_at`) comes before the oldest held batch has waited
  // batch_interval; otherwise the held batches leave now, this one last.
  void spool_and_hold(Clock::time_point next_round_at) {
    if (std::uint64_t sequence = append_pending()) {
      if (held.empty()) first_held = Clock::now();
      held_samples += pending.size();
      held.push_back({sequence, std::move(pending)});
      pending = {};
    }
    pending.clear();
    if (held.empty() || stop_seen || held_samples >= settings.max_batch_samples ||
        next_round_at >= first_held + batch_interval)
      release_held();
    publish_counters();
  }

  // The held batches go to the link, oldest first and back to back (ZeroMQ's I/O thread wakes
  // once for them), as far as its window takes them; the others are read back from the spool
  // when it opens (send_unsent()), like any batch that waited there.
  void release_held() {
    for (auto& batch : held) {
      std::uint64_t next = spool->next_kept(next_to_send);
      if (batch.sequence < next) continue;  // dropped for the spool's budget, or taken
      if (batch.sequence != next || !link->can_send()) break;
      hand_over(batch.sequence, batch.samples);
    }
    held.clear();
    held_samples = 0;
    send_unsent();
  }

  // Makes the spooled batches durable once the oldest has waited sync_delay.
  void sync_spool_if_due(Clock::time_point now) {
    auto since = spool->unsynced_since();
    if (!since || now < *since + sync_delay || now < sync_retry_at) return;
    try {
      spool->sync();
    } catch (const SpoolError& error) {
      sync_retry_at = now + kSpoolSyncDelay;
      if (failed_syncs++ % 100 == 0)
        spdlog::error(
            "{} ({} failed sync(s) so far; the batches stay in the page cache and are resent)",
            error.what(), failed_syncs);
    }
  }
  std::uint64_t failed_syncs = 0;
  std::uint64_t ignored_acks = 0;  // acknowledgements of batches never numbered (taken())
  Clock::time_point sync_retry_at{};
  bool sending_unsent = false;

  // Spooled batches not sent yet (or to be sent again), oldest first, while the link takes them,
  // up to the held ones (release_held() sends those). Not re-entered: a link may report a batch
  // taken from within send() (carbon with no replay window), and the loop already running goes
  // on from next_to_send.
  void send_unsent() {
    if (sending_unsent) return;
    sending_unsent = true;
    struct Reset {
      bool& flag;
      ~Reset() { flag = false; }
    } reset{sending_unsent};
    const std::uint64_t end = held.empty() ? spool->next_sequence() : held.front().sequence;
    while (link->can_send() && next_to_send < end) {
      next_to_send = spool->next_kept(next_to_send);  // dropped and skipped numbers have no batch
      if (next_to_send >= end) break;
      std::uint64_t sequence = next_to_send;
      std::vector<Sample> samples;
      try {
        samples = spool->read(sequence);
      } catch (const SpoolError& error) {
        ++next_to_send;
        if (sequence > last_bad_record) {
          spdlog::error("skipping a spooled batch: {}", error.what());
          ++failed_appends;
          failed_samples += spool->samples_in(sequence);
          last_bad_record = sequence;
        }
        continue;
      }
      hand_over(sequence, samples);
    }
  }

  // LinkEvents: the link's news, on this thread.
  void taken(std::uint64_t sequence) override {
    // Only numbers the spool gave out can have been taken (a restart goes on after every number
    // an earlier run may have used: agent_spool.h). An acknowledgement beyond them comes from a
    // confused or lying master: besides the spool's numbering (which ignores it too), it would
    // move next_to_send past every batch to come, and none would be sent.
    if (sequence >= spool->next_sequence()) {
      if (!ignored_acks++)
        spdlog::warn("{} acknowledged batch {}, beyond the last one this agent numbered ({}); ignoring it "
                     "(and any further such acknowledgement, logged only once)",
                     link->destination(), sequence, spool->next_sequence() - 1);
      return;
    }
    std::uint64_t before = spool->stats().batches;
    spool->acknowledge(sequence);
    std::uint64_t after = spool->stats().batches;
    counters.batches_acked += before > after ? before - after : 0;
    next_to_send = std::max(next_to_send, sequence + 1);
    send_unsent();
    publish_counters();
  }
  void handed_over(std::uint64_t sequence) override { spool->handed_over(sequence); }
  void send_again() override {
    next_to_send = spool->first_sequence();
    send_unsent();
  }
  void answered(const std::string& where) override {
    if (settings.on_connected) settings.on_connected(where);
  }
  void count_resync() override {
    ++counters.resyncs;
    publish_counters();
  }
  void count_failover() override {
    ++counters.failovers;
    publish_counters();
  }
  std::uint64_t last_handed() const override { return next_to_send - 1; }
  std::uint64_t session() const override { return spool->session(); }
  std::uint64_t batches_kept() const override { return spool->stats().batches; }

  // A reload's new sender: the previous one holds the spool until it has stopped.
  bool open_spool(bool stop_requested) {
    if (spool) return true;
    if (AgentSpool::held_here(settings.spool_dir) && !stop_requested) return false;
    try {
      spool = AgentSpool::open(settings.spool_dir, settings.spool_max_bytes);
    } catch (const SpoolError& error) {
      spdlog::error("{}", error.what());
      return false;
    }
    return true;
  }

  void start_link() {
    next_to_send = spool->first_sequence();
    link->start(*this);
    link_started = true;
    send_unsent();
    publish_counters();
  }

  // When the sender thread must run next: the link's deadlines, a batch that waits, the spool's
  // sync (later by kSyncGrace when a round comes soon after it), the end of a linger.
  Clock::time_point next_wake() const {
    if (!spool) return next_spool_try;
    auto wake_at = link->next_due();
    if (!pending.empty()) wake_at = std::min(wake_at, first_pending + link_seconds(settings.batch_delay));
    if (!held.empty()) wake_at = std::min(wake_at, held_due());
    if (stop_seen) wake_at = std::min(wake_at, linger_deadline);
    wake_at = std::min(wake_at, incoming_due);
    if (auto since = spool->unsynced_since()) {
      auto sync_at = std::max(*since + sync_delay, sync_retry_at);
      if (next_round > Clock::now() && next_round <= sync_at + kSyncGrace) sync_at = std::max(sync_at, next_round + kSyncGrace);
      wake_at = std::min(wake_at, sync_at);
    }
    return wake_at;
  }

  // When the held batches leave if no round sends them: batch_interval after the oldest was
  // spooled; later by kSyncGrace when a round comes soon after, which sends them.
  Clock::time_point held_due() const {
    auto due = first_held + batch_interval;
    if (next_round > Clock::now() && next_round <= due + kSyncGrace) due = std::max(due, next_round + kSyncGrace);
    return due;
  }

  // Arms timer_fd for `wake_at` (a syscall only when it moved).
  void arm_timer(Clock::time_point wake_at) {
    if (wake_at == timer_armed) return;
    timer_armed = wake_at;
    itimerspec spec{};  // zero: disarmed
    if (wake_at != Clock::time_point::max()) {
      auto ns = std::max<std::int64_t>(1, std::chrono::duration_cast<std::chrono::nanoseconds>(wake_at.time_since_epoch()).count());
      spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
      spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    }
    ::timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &spec, nullptr);  // steady_clock is CLOCK_MONOTONIC
  }

  // What the sender thread watches while it waits: its wake-up and timer, and the link's
  // connection only while answers are awaited (the first, a full window, a stop). Acks of
  // batches a round sent are read by the next round (deliver()), not on arrival: one thread
  // woken per round instead of two. Sets `now` when the link has news to read at once.
  std::vector<pollfd> watch_list(bool& now) const {
    std::vector<pollfd> fds{{wake_fd, POLLIN, 0}, {timer_fd, POLLIN, 0}};
    now = spool && link->watch(fds, stop_seen || !link->can_send());
    return fds;
  }

  // Under link_mutex, by a thread other than the sender's: the sender thread sleeps on a plan
  // made before; its timer follows the new deadline, and it is woken only when it must watch
  // something it does not.
  void update_sleeper() {
    if (!asleep) return;
    arm_timer(next_wake());
    bool news = false;
    auto fds = watch_list(news);
    bool watched = std::all_of(fds.begin(), fds.end(), [&](const pollfd& fd) {
      return std::any_of(asleep_watching.begin(), asleep_watching.end(),
                         [&](const pollfd& w) { return w.fd == fd.fd && (w.events & fd.events) == fd.events; });
    });
    if (news || !watched) wake();
  }

  void run() {
    std::unique_lock lock(link_mutex);
    const auto batch_delay = link_seconds(settings.batch_delay);
    next_spool_try = Clock::now();
    if (spool) start_link();
    for (;;) {
      auto now = Clock::now();
      if (!spool && now >= next_spool_try) {
        if (open_spool(false))
          start_link();
        else
          next_spool_try = now + std::chrono::milliseconds(100);
      }
      arm_timer(next_wake());
      bool news = false;
      asleep_watching = watch_list(news);
      asleep = true;
      lock.unlock();
      ::poll(asleep_watching.data(), asleep_watching.size(), news ? 0 : -1);
      drain_wakeups(wake_fd);
      drain_wakeups(timer_fd);
      lock.lock();
      asleep = false;
      go_counted = false;
      timer_armed = Clock::time_point::min();  // expired or not, arm it again
      {
        std::lock_guard incoming_lock(mutex);
        take_incoming_if_due(batch_delay);
        if (stopping && !stop_seen) {
          stop_seen = true;
          linger_deadline = Clock::now() + link_seconds(linger);
        }
      }
      if (!spool) {
        if (stop_seen && now >= linger_deadline) {
          if (!pending.empty())
            spdlog::error("stopping without the spool {}: {} sample(s) lost", settings.spool_dir,
                          pending.size());
          break;
        }
        continue;
      }
      link->service();
      send_unsent();

      now = Clock::now();
      if (!pending.empty() &&
          (pending.size() >= settings.max_batch_samples || now >= first_pending + link_seconds(settings.batch_delay) ||
           pending_complete || stop_seen)) {
        if (settings.batch_interval > 0)
          spool_and_hold(pending_next_round);  // samples not from a round (max()) are not held
        else
          send_batch();
        pending_complete = false;
        pending_next_round = Clock::time_point::max();
      }
      if (!held.empty() && (stop_seen || now >= held_due())) release_held();
      sync_spool_if_due(now);
      if (stop_seen && pending.empty() && next_to_send >= spool->next_sequence()) link->finish();
      if (stop_seen && (spool->empty() || now >= linger_deadline)) break;
    }
  }

  // A round's samples, on the reading thread: the acks that came since the last round first
  // (what they free needs no flush), then the batch, spooled and sent from this thread (with
  // batch_interval, held: spool_and_hold()).
  bool deliver(std::vector<Sample>& samples, Clock::time_point next_round_at) {
    std::unique_lock lock(link_mutex, std::try_to_lock);
    if (!lock.owns_lock() || !link_started || stop_seen) return false;  // the sender thread takes them
    next_round = next_round_at;
    go_counted = false;
    link->service();
    send_unsent();
    {
      std::lock_guard incoming_lock(mutex);
      if (stopping) return false;
      if (!incoming.empty()) {  // what a helping reader queued: it leaves now too
        if (pending.empty()) first_pending = first_incoming;
        for (auto& sample : incoming) pending.push_back(std::move(sample));
        incoming.clear();
        incoming_due = Clock::time_point::max();
        incoming_complete = false;
        incoming_next_round = Clock::time_point::max();
      }
    }
    if (pending.empty()) {
      first_pending = Clock::now();
      if (settings.batch_interval > 0) pending.swap(samples);  // it moves on to `held`: no copy
    }
    for (auto& sample : samples) pending.push_back(std::move(sample));
    samples.clear();
    if (settings.batch_interval > 0)
      spool_and_hold(next_round_at);
    else
      send_batch();
    pending_complete = false;
    pending_next_round = Clock::time_point::max();
    update_sleeper();
    return true;
  }
};

Sender::Sender(SenderSettings settings, std::unique_ptr<Link> link)
    : state_(std::make_unique<State>(std::move(settings), std::move(link))) {
  auto& s = *state_;
  if (s.settings.spool_dir.empty()) throw SpoolError("no spool_dir given to the sender");
  // At start a spool_dir that another lagent holds stops lagent, one that cannot be written gives
  // a spool in memory; after a reload the previous sender of this process may still hold it, and
  // the thread takes it over once that one has stopped.
  if (!AgentSpool::held_here(s.settings.spool_dir))
    s.spool = AgentSpool::open(s.settings.spool_dir, s.settings.spool_max_bytes);
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.wake_fd < 0) throw std::runtime_error("eventfd failed");
  s.timer_fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (s.timer_fd < 0) throw std::runtime_error("timerfd_create failed");
  s.thread = std::thread([&s] {
    try {
      s.run();
    } catch (const std::exception& error) {
      // Sampling on without a sender would fill memory and send nothing: end the process, so
      // that its service manager restarts it (the spool keeps what was made).
      spdlog::critical("sender thread failed: {}; lagent exits (status 70) to be restarted", error.what());
      spdlog::default_logger()->flush();
      std::_Exit(70);
    }
  });
}

Sender::~Sender() {
  if (state_->thread.joinable()) stop(0);
  ::close(state_->wake_fd);
  ::close(state_->timer_fd);
}

void Sender::queue(std::vector<Sample>&& samples) {
  if (samples.empty()) return;
  bool full = false;
  {
    std::lock_guard lock(state_->mutex);
    auto& incoming = state_->incoming;
    if (incoming.empty()) state_->first_incoming = Clock::now();  // batch_delay counts from it
    for (auto& sample : samples) incoming.push_back(std::move(sample));
    full = incoming.size() >= state_->settings.max_batch_samples;
  }
  if (full) state_->wake();
}

void Sender::deliver(std::vector<Sample>&& samples, LinkClock::time_point next_round) {
  if (samples.empty() || state_->deliver(samples, next_round)) return;
  {
    std::lock_guard lock(state_->mutex);  // batch_interval: the sender thread holds the round as deliver() would
    if (state_->incoming.empty()) state_->first_incoming = Clock::now();
    for (auto& sample : samples) state_->incoming.push_back(std::move(sample));
    state_->incoming_complete = true;
    state_->incoming_next_round = next_round;
  }
  state_->wake();
}

void Sender::send_queued() {
  {
    std::lock_guard lock(state_->mutex);
    if (state_->incoming.empty()) return;
    state_->incoming_complete = true;
  }
  state_->wake();
}

std::size_t Sender::stop(double linger_seconds) {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    state_->linger = linger_seconds;
  }
  state_->wake();
  if (state_->thread.joinable()) state_->thread.join();
  if (!state_->spool) return 0;
  std::size_t left = state_->spool->stats().batches;
  if (left)
    spdlog::info("{} batch(es) stay in the spool {} until {} takes them", left,
                 state_->spool->directory().string(),
                 state_->link->destination());  // the thread has ended: the link is ours to ask
  return left;
}

}  // namespace fructosa::agent
