#include "output_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "sample_spool.h"

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
  SharedSamples samples;
  std::size_t points = 0;
  Clock::time_point since;
};

OutputRunner::OutputRunner(std::unique_ptr<Output> output, RunnerSettings settings)
    : name_(output->name()), output_(std::move(output)), settings_(std::move(settings)) {
  if (!settings_.spool_dir.empty() && settings_.budget && settings_.budget->max_bytes() > 0)
    spool_ = std::make_unique<SampleSpool>(settings_.spool_dir, *settings_.budget, name_);
  spooling_ = spool_ && !spool_->empty();
  thread_ = std::thread([this] { run(); });
}

OutputRunner::~OutputRunner() { stop(); }

void OutputRunner::submit(SharedSamples samples) {
  std::size_t points = count_points(*samples);
  std::unique_lock lock(mutex_);
  // Once something is on disk, newer batches follow it there, so the output sees them in order.
  if (!spooling_ && memory_points_ + points <= settings_.queue_max_points) {
    memory_points_ += points;
    memory_samples_ += samples->size();
    memory_.push_back(Queued{std::move(samples), points, Clock::now()});
    lock.unlock();
    wake_.notify_one();
    return;
  }
  if (spool_) {
    std::uint64_t dropped = 0;
    bool kept = spool_->append(*samples, dropped);
    queue_dropped_ += dropped;
    if (kept) {
      if (!spooling_)
        spdlog::warn("output {}: {} points waiting in memory; spooling newer ones to {}", name_, memory_points_,
                     spool_->directory().string());
      spooling_ = true;
      return;
    }
  }
  queue_dropped_ += points;
  auto now = Clock::now();
  if (now - last_drop_log_ > kLogEvery) {
    last_drop_log_ = now;
    spdlog::error("output {}: behind by {} points in memory{}: dropping new points (counted in lmaster {}.dropped)",
                  name_, memory_points_, spool_ ? " and the spool is full" : " and no spool ([lmaster] spool_max_bytes = 0)",
                  name_);
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
  stats.queued_points = memory_points_ + retry_points_ + (spool_ ? spool_->points() : 0);
  stats.spool_bytes = spool_ ? spool_->bytes() : 0;
  return stats;
}

// Called with the lock held: keeps the memory queue fed from the spool, oldest first.
void OutputRunner::refill_from_spool() {
  if (!spool_) return;
  while (memory_.empty() && !spool_->empty()) {
    std::uint64_t dropped = 0;
    auto batch = spool_->pop(dropped);
    queue_dropped_ += dropped;
    if (!batch) break;
    auto samples = std::make_shared<const std::vector<Sample>>(std::move(*batch));
    std::size_t points = count_points(*samples);
    memory_points_ += points;
    memory_samples_ += samples->size();
    memory_.push_back(Queued{std::move(samples), points, Clock::time_point{}});
  }
  if (spooling_ && spool_->empty()) {
    spooling_ = false;
    spdlog::info("output {}: its spool is sent; back to memory only", name_);
  }
}

// Tries `samples` once. On failure, what was not delivered is appended to `retry`.
bool OutputRunner::attempt(std::span<const Sample> samples, std::vector<Sample>& retry) {
  std::string error;
  std::vector<std::size_t> undelivered;
  try {
    output_->write(samples);
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

void OutputRunner::flush_output() {
  try {
    output_->flush();
  } catch (const std::exception& error) {
    auto now = Clock::now();
    if (now - last_flush_log_ > kLogEvery) {
      last_flush_log_ = now;
      spdlog::error("output {}: flush failed: {} (kept for the next flush)", name_, error.what());
    }
  }
}

void OutputRunner::run() {
  const auto linger = seconds(std::max(output_->flush_period(), 0.01));
  const std::size_t batch = std::max<std::size_t>(output_->batch_samples(), 1);
  auto next_flush = Clock::now() + linger;
  std::vector<Sample> retry;  // what the last failed write left; goes before the queue
  double backoff = 0;

  for (;;) {
    std::unique_lock lock(mutex_);
    if (reopen_) {
      reopen_ = false;
      lock.unlock();
      flush_output();
      try {
        output_->reopen();
      } catch (const std::exception& error) {
        spdlog::error("output {}: reopen failed: {}", name_, error.what());
      }
      continue;
    }
    if (stop_ && (Clock::now() >= stop_deadline_ ||
                  (retry.empty() && memory_.empty() && (!spool_ || spool_->empty()))))
      break;

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
        spdlog::info("output {}: delivering again after {:.1f} s of failures", name_,
                     std::chrono::duration<double>(Clock::now() - *failing_since_).count());
        failing_since_.reset();
        backoff = 0;
      } else {
        backoff = std::min(std::max(backoff * 2, settings_.retry_min_interval), settings_.retry_max_interval);
      }
      continue;
    }

    refill_from_spool();
    auto now = Clock::now();
    bool ready = !memory_.empty() &&
                 (stop_ || memory_samples_ >= batch || memory_.front().since + linger <= now);
    if (!ready) {
      auto until = next_flush;
      if (!memory_.empty()) until = std::min(until, memory_.front().since + linger);
      if (stop_) until = std::min(until, stop_deadline_);
      if (until > now) wake_.wait_until(lock, until);
      lock.unlock();
      if (Clock::now() >= next_flush) {
        flush_output();
        next_flush = Clock::now() + linger;
      }
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
    } while (!memory_.empty() && taken_samples + memory_.front().samples->size() <= batch);
    lock.unlock();

    std::vector<Sample> merged;
    std::span<const Sample> all;
    if (taken.size() == 1) {
      all = *taken.front().samples;
    } else {
      merged.reserve(taken_samples);
      for (const auto& queued : taken) merged.insert(merged.end(), queued.samples->begin(), queued.samples->end());
      all = merged;
    }
    for (std::size_t at = 0; at < all.size(); at += batch) {
      auto slice = all.subspan(at, std::min(batch, all.size() - at));
      if (!attempt(slice, retry)) {
        // The rest goes after what this slice left, in order.
        if (at + slice.size() < all.size()) retry.insert(retry.end(), all.begin() + at + slice.size(), all.end());
        backoff = settings_.retry_min_interval;
        break;
      }
    }
    retry_points_ = count_points(retry);
    if (Clock::now() >= next_flush) {
      flush_output();
      next_flush = Clock::now() + linger;
    }
  }

  flush_output();
  // What is left goes to the spool, oldest first, for the next start.
  std::vector<std::vector<Sample>> left;
  std::uint64_t left_points = 0;
  {
    std::lock_guard lock(mutex_);
    if (!retry.empty()) left.push_back(std::move(retry));
    for (auto& queued : memory_) left.push_back(*queued.samples);
    memory_.clear();
    memory_points_ = memory_samples_ = 0;
    retry_points_ = 0;
    for (const auto& batch_left : left) left_points += count_points(batch_left);
    if (!left.empty()) {
      if (spool_ && spool_->prepend(left)) {
        spdlog::warn("output {}: stopping with {} points undelivered: kept in {} for the next start", name_,
                     left_points, spool_->directory().string());
      } else {
        queue_dropped_ += left_points;
        spdlog::error("output {}: stopping with {} points undelivered and nowhere to keep them: dropped", name_,
                      left_points);
      }
    } else if (spool_ && !spool_->empty()) {
      spdlog::warn("output {}: stopping with {} points in {}, sent at the next start", name_, spool_->points(),
                   spool_->directory().string());
    }
    if (spool_) spool_->seal();
  }
}

}  // namespace fructosa::master
