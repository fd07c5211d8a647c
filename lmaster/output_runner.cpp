#include "output_runner.h"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "journal.h"
#include "stop_keepalive.h"

namespace fructosa::master {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double value) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(value, 0.0)));
}

// Log lines about one failing output at most this often (the counters tell the rest).
constexpr auto kLogEvery = std::chrono::seconds(30);

}  // namespace

struct OutputRunner::Queued {
  std::uint64_t id = 0;  // the journal record
  SharedSamples samples;
  std::size_t points = 0;
  Clock::time_point since;
};

struct OutputRunner::JournalReaderHolder {
  JournalReaderHolder(const Journal& journal, const std::string& output) : reader(journal, output) {}
  Journal::Reader reader;
};

OutputRunner::OutputRunner(std::unique_ptr<Output> output, RunnerSettings settings)
    : name_(output->name()), output_(std::move(output)), settings_(std::move(settings)) {
  if (Journal* journal = settings_.journal) {
    reader_ = std::make_unique<JournalReaderHolder>(*journal, name_);
    saved_position_ = journal->saved_position(name_);
    // A new output starts at the journal's end; saved now, so that what arrives before its first
    // delivery is not skipped after a restart.
    if (!journal->has_position(name_)) {
      try {
        journal->save_position(name_, saved_position_);
      } catch (const std::exception& error) {
        spdlog::error("output {}: {}", name_, error.what());
      }
    }
    // After a crash the store may hold records past the saved position (it flushed, then lmaster
    // died before saving): those it can name are not replayed into it. Beyond the journal's end,
    // the number comes from another journal (a data directory wiped, not the HDF5 files).
    if (auto stored = output_->stored_through(); stored && *stored > saved_position_) {
      if (*stored <= journal->committed()) {
        spdlog::info("output {}: it holds journal records up to {} already (saved position {})", name_, *stored,
                     saved_position_);
        saved_position_ = *stored;
      } else {
        spdlog::warn("output {}: it says it holds journal records up to {}, past the journal's last ({}): "
                     "ignored, the journal is not the one it was written from", name_, *stored,
                     journal->committed());
      }
    }
    delivered_ = saved_position_;
    next_id_ = saved_position_ + 1;
    replay_end_ = journal->committed();
    behind_ = next_id_ <= journal->committed();
    if (behind_)
      spdlog::info("output {}: resuming after journal record {} ({} records to send first)", name_, saved_position_,
                   journal->committed() - saved_position_);
  }
  thread_ = std::thread([this] { run(); });
  // "out:graphite" in top -H and /proc/<pid>/task/*/comm: each output's CPU can be told apart
  // (bench/master_throughput.py measures it); at most 15 bytes.
  pthread_setname_np(thread_.native_handle(), ("out:" + name()).substr(0, 15).c_str());
}

OutputRunner::~OutputRunner() { stop(); }

void OutputRunner::submit(std::uint64_t id, SharedSamples samples) {
  std::size_t points = count_points(*samples);
  std::unique_lock lock(mutex_);
  const bool journal = settings_.journal != nullptr;
  if (journal && id < next_id_) return;  // already read back from the journal
  // Once behind, newer records wait in the journal, so the output sees them in order.
  if (!behind_ && memory_points_ + points <= settings_.queue_max_points) {
    memory_points_ += points;
    memory_samples_ += samples->size();
    memory_.push_back(Queued{id, std::move(samples), points, Clock::now()});
    if (journal) next_id_ = id + 1;
    lock.unlock();
    wake_.notify_one();
    return;
  }
  if (journal) {
    if (!behind_)
      spdlog::warn("output {}: {} points waiting in memory; newer ones wait in the journal ({})", name_,
                   memory_points_, settings_.journal->directory().string());
    behind_ = true;
    return;
  }
  queue_dropped_ += points;
  auto now = Clock::now();
  if (now - last_drop_log_ > kLogEvery) {
    last_drop_log_ = now;
    spdlog::error("output {}: behind by {} points in memory and no journal ([lmaster] journal_max_bytes = 0): "
                  "dropping new points (counted in lmaster {}.dropped)", name_, memory_points_, name_);
  }
}

void OutputRunner::request_reopen() {
  {
    std::lock_guard lock(mutex_);
    reopen_ = true;
  }
  wake_.notify_one();
}

void OutputRunner::begin_stop() {
  {
    std::lock_guard lock(mutex_);
    if (!stop_) {
      stop_ = true;
      stop_deadline_ = Clock::now() + seconds(settings_.stop_grace);
    }
  }
  wake_.notify_one();
}

void OutputRunner::stop() {
  begin_stop();
  if (thread_.joinable()) thread_.join();
}

RunnerStats OutputRunner::stats() const {
  RunnerStats stats;
  auto& counters = output_->counters();
  stats.sent = counters.sent;
  stats.retried = counters.retried;
  stats.dropped = counters.dropped + queue_dropped_;
  std::lock_guard lock(mutex_);
  // Points being written count as queued until the write settles.
  stats.queued_points = memory_points_ + retry_points_ + (behind_ ? reader_->reader.points_from(next_id_) : 0);
  return stats;
}

// Called with the lock held, which it releases while it reads: once memory is empty, a runner
// that is behind reads the next records from the journal, oldest first.
void OutputRunner::refill_from_journal(std::unique_lock<std::mutex>& lock) {
  if (!behind_ || !memory_.empty()) return;
  std::uint64_t from = next_id_;
  lock.unlock();
  std::vector<Queued> read;
  std::size_t points = 0;
  std::uint64_t dropped = 0, next = from;
  while (points < settings_.queue_max_points) {
    auto record = reader_->reader.read(next, dropped);
    if (!record) break;
    next = record->id + 1;
    points += record->points;
    auto samples = std::make_shared<const std::vector<Sample>>(std::move(record->samples));
    read.push_back(Queued{record->id, std::move(samples), record->points, Clock::time_point{}});
  }
  lock.lock();
  queue_dropped_ += dropped;
  for (auto& queued : read) {
    memory_points_ += queued.points;
    memory_samples_ += queued.samples->size();
    memory_.push_back(std::move(queued));
  }
  next_id_ = std::max(next_id_, next);
  // Caught up: every committed record is taken, and records committed from now on are submitted
  // after their commit, so they reach the memory queue.
  if (next_id_ > settings_.journal->committed()) {
    behind_ = false;
    spdlog::info("output {}: caught up with the journal; back to memory only", name_);
  }
}

// Tries `samples` once. On failure, what was not delivered is appended to `retry`.
bool OutputRunner::attempt(std::span<const Sample> samples, std::vector<Sample>& retry) {
  std::string error;
  std::vector<std::size_t> undelivered;
  try {
    output_->write(samples);
    note_progress();
    return true;
  } catch (const OutputError& failure) {
    error = failure.what();
    undelivered = failure.undelivered;
  } catch (const std::exception& failure) {
    error = failure.what();
  }
  if (undelivered.empty()) {
    retry.insert(retry.end(), samples.begin(), samples.end());
  } else {
    for (auto index : undelivered)
      if (index < samples.size()) retry.push_back(samples[index]);
  }
  auto now = Clock::now();
  if (now - last_failure_log_ > kLogEvery) {
    last_failure_log_ = now;
    spdlog::warn("output {}: {}; {} samples kept for a retry", name_, error, retry.size());
  }
  if (!failing_since_) failing_since_ = now;
  return false;
}

// Flushes the output; then everything written up to record `written_through` is delivered,
// and that becomes the output's journal position.
void OutputRunner::flush_output(std::uint64_t written_through) {
  try {
    if (settings_.journal) output_->handed_through(written_through);
    output_->flush();
    note_progress();
  } catch (const std::exception& error) {
    auto now = Clock::now();
    if (now - last_flush_log_ > kLogEvery) {
      last_flush_log_ = now;
      spdlog::error("output {}: flush failed: {} (kept for the next flush)", name_, error.what());
    }
    return;
  }
  if (!settings_.journal || written_through <= saved_position_) return;
  try {
    settings_.journal->save_position(name_, written_through);
    saved_position_ = written_through;
    delivered_ = written_through;
  } catch (const std::exception& error) {
    auto now = Clock::now();
    if (now - last_flush_log_ > kLogEvery) {
      last_flush_log_ = now;
      spdlog::error("output {}: {} (a restart would send records after {} again)", name_, error.what(),
                    saved_position_);
    }
  }
}

void OutputRunner::run() {
  const auto linger = seconds(std::max(output_->flush_period(), 0.01));
  const auto linger_when_behind = std::max(linger, seconds(output_->flush_period_when_behind()));
  const std::size_t batch = std::max<std::size_t>(output_->batch_samples(), 1);
  auto next_flush = Clock::now() + linger;
  std::vector<Sample> retry;  // what the last failed write left; goes before the queue
  std::uint64_t retry_through = 0;    // the last record `retry` holds part of
  std::uint64_t written_through = saved_position_;  // every record up to it is written
  if (!settings_.journal) {  // nothing is replayed: everything it gets is new
    replay_told_ = true;
    output_->journal_replayed();
  }
  double backoff = 0;
  auto last_flush = Clock::now();
  auto flush_when_due = [&](bool behind = false) {
    auto now = Clock::now();
    if (now < next_flush || (behind && now < last_flush + linger_when_behind)) return;
    flush_output(written_through);
    last_flush = Clock::now();
    next_flush = last_flush + linger;
  };

  for (;;) {
    std::unique_lock lock(mutex_);
    if (reopen_) {
      reopen_ = false;
      lock.unlock();
      flush_output(written_through);
      try {
        output_->reopen();
      } catch (const std::exception& error) {
        spdlog::error("output {}: reopen failed: {}", name_, error.what());
      }
      continue;
    }
    if (stop_ && (Clock::now() >= stop_deadline_ || (retry.empty() && memory_.empty() && !behind_))) break;

    if (!retry.empty()) {
      // Back off before trying again; a stop cuts the wait short (but not past the grace).
      auto until = Clock::now() + seconds(backoff);
      if (stop_) until = std::min(until, stop_deadline_);
      wake_.wait_until(lock, until, [&] { return reopen_ || (stop_ && Clock::now() >= stop_deadline_); });
      if (reopen_ || (stop_ && Clock::now() >= stop_deadline_)) continue;
      lock.unlock();
      std::vector<Sample> again;
      output_->counters().retried += count_points(retry);
      bool delivered = attempt(retry, again);
      retry = std::move(again);
      retry_points_ = count_points(retry);
      if (delivered) {
        written_through = retry_through;
        spdlog::info("output {}: delivering again after {:.1f} s of failures", name_,
                     std::chrono::duration<double>(Clock::now() - *failing_since_).count());
        failing_since_.reset();
        backoff = 0;
      } else {
        backoff = std::min(std::max(backoff * 2, settings_.retry_min_interval), settings_.retry_max_interval);
      }
      flush_when_due();
      continue;
    }

    refill_from_journal(lock);
    auto now = Clock::now();
    bool ready = !memory_.empty() &&
                 (stop_ || behind_ || memory_samples_ >= batch || memory_.front().since + linger <= now);
    if (!ready) {
      auto until = next_flush;
      if (!memory_.empty()) until = std::min(until, memory_.front().since + linger);
      if (stop_) until = std::min(until, stop_deadline_);
      if (until > now) wake_.wait_until(lock, until);
      lock.unlock();
      flush_when_due();
      continue;
    }

    // Take one batch: a large one alone (written in slices, no copy), small ones merged.
    std::vector<Queued> taken;
    std::size_t taken_samples = 0;
    do {
      taken_samples += memory_.front().samples->size();
      memory_points_ -= memory_.front().points;
      memory_samples_ -= memory_.front().samples->size();
      retry_points_ += memory_.front().points;  // in flight until the attempts below settle
      taken.push_back(std::move(memory_.front()));
      memory_.pop_front();
    } while (!memory_.empty() && taken_samples + memory_.front().samples->size() <= batch &&
             // The last replayed record and a newer one never share a write (journal_replayed()).
             !(taken.back().id <= replay_end_ && memory_.front().id > replay_end_));
    const bool more_waiting = behind_ || memory_samples_ >= batch;
    lock.unlock();

    if (!replay_told_ && taken.front().id > replay_end_) {
      replay_told_ = true;
      output_->journal_replayed();
    }
    std::vector<Sample> merged;
    std::span<const Sample> all;
    if (taken.size() == 1) {
      all = *taken.front().samples;
    } else {
      merged.reserve(taken_samples);
      for (const auto& queued : taken) merged.insert(merged.end(), queued.samples->begin(), queued.samples->end());
      all = merged;
    }
    bool failed = false;
    for (std::size_t at = 0; at < all.size(); at += batch) {
      auto slice = all.subspan(at, std::min(batch, all.size() - at));
      if (!attempt(slice, retry)) {
        // The rest goes after what this slice left, in order.
        if (at + slice.size() < all.size()) retry.insert(retry.end(), all.begin() + at + slice.size(), all.end());
        backoff = settings_.retry_min_interval;
        failed = true;
        break;
      }
    }
    if (failed)
      retry_through = taken.back().id;
    else
      written_through = taken.back().id;
    retry_points_ = count_points(retry);
    flush_when_due(more_waiting);
  }

  flush_output(written_through);
  std::lock_guard lock(mutex_);
  std::uint64_t left_points = memory_points_ + count_points(retry);
  if (settings_.journal) {
    if (behind_) left_points += reader_->reader.points_from(next_id_);
    if (left_points > 0)
      spdlog::warn("output {}: stopping with {} points undelivered: they stay in the journal after record {} and "
                   "are sent first at the next start", name_, left_points, saved_position_);
  } else if (left_points > 0) {
    queue_dropped_ += left_points;
    spdlog::error("output {}: stopping with {} points undelivered and no journal to keep them: dropped", name_,
                  left_points);
  }
  memory_.clear();
  memory_points_ = memory_samples_ = 0;
  retry_points_ = 0;
}

}  // namespace fructosa::master
