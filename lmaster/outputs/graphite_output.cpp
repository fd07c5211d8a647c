#include "graphite_output.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <numeric>
#include <optional>
#include <utility>

#include "carbon_connection.h"

namespace fructosa::master {

// The encoding, the option table and the connection are shared with lagent (common/carbon_*.h);
// what is the output's own: the replay window in memory, reconnecting, its counters.

namespace {

using Clock = std::chrono::steady_clock;

// The replay window holds at most this much: what can be in flight on one connection, i.e. in
// our send buffer and carbon's receive buffer (Linux autotunes them up to 4 and 6 MiB).
constexpr std::size_t kMaxReplayBytes = 16u << 20;
// Idle frame buffers kept for reuse.
constexpr std::size_t kMaxSpareBuffers = 64;

class GraphiteOutput final : public Output {
 public:
  explicit GraphiteOutput(const graphite::CarbonSettings& settings)
      : protocol_(settings.protocol),
        replay_window_(settings.replay_window),
        encoder_(settings.protocol, settings.prefix, settings.batch_size),
        connection_(settings.host, settings.port, settings.timeout),
        peer_(connection_.peer()) {}

  std::string name() const override { return "graphite"; }
  double flush_period() const override { return 0.2; }  // Graphite graphs should lag little
  std::size_t batch_samples() const override { return 2000; }

  void write(std::span<const Sample> samples) override;
  void flush() override;
  void reopen() override;

 private:
  struct SentFrame {
    Clock::time_point sent;
    std::string bytes;
    std::size_t points = 0;
  };

  void ensure_connected();
  void replay();
  void lose_connection(const std::string& reason);
  void remember(CarbonFrame& frame);
  void forget_oldest();

  const CarbonProtocol protocol_;
  const double replay_window_;
  CarbonEncoder encoder_;
  graphite::CarbonConnection connection_;
  const std::string peer_;  // "host:port", for log lines

  std::vector<CarbonFrame> frames_;  // the current write's frames; buffers reused
  // Frames sent over the current (or just lost) connection within the replay window, oldest
  // first. Carbon never acknowledges, so a frame that reached our socket may still be lost with
  // the peer: in our send queue or carbon's unread receive buffer when it restarts, or in its
  // cache not yet written to whisper (about a second's worth) when it crashes. Whisper writes
  // are idempotent (same path and timestamp, same value), so after a reconnect these frames are
  // sent again before anything new (counted as retried); nothing else can recover them.
  std::deque<SentFrame> history_;
  std::size_t history_bytes_ = 0;
  bool replay_pending_ = false;
  std::vector<std::string> spare_;  // buffers of forgotten frames, for reuse
  bool reported_down_ = false;      // one warning per outage
  bool connected_before_ = false;
  Clock::time_point next_flush_reconnect_{};
  double flush_backoff_ = 1;
};

void GraphiteOutput::write(std::span<const Sample> samples) {
  const std::size_t used = encoder_.encode(samples, frames_);
  if (used == 0) return;
  auto from = [&](std::size_t first) {  // the indices of samples [first, end)
    std::vector<std::size_t> indices(samples.size() - first);
    std::iota(indices.begin(), indices.end(), first);
    return indices;
  };
  try {
    ensure_connected();
  } catch (const std::exception& error) {
    throw OutputError(error.what(), from(0));
  }
  for (std::size_t k = 0; k < used; ++k) {
    if (auto error = connection_.send(frames_[k].bytes)) {
      // A sample cut by the failure is sent again whole; carbon overwrites the equal points.
      const std::size_t delivered = k > 0 ? frames_[k - 1].samples_done : 0;
      lose_connection(*error);
      throw OutputError(fmt::format("sending to carbon at {}: {}", peer_, *error), from(delivered));
    }
    counters_.sent += frames_[k].points;
    remember(frames_[k]);
  }
}

void GraphiteOutput::flush() {
  // Notices a carbon restart while no data comes, and re-sends what it may have lost, at most
  // once per backoff step: flush() runs every 0.2 s and must not hammer a carbon that is down.
  if (connection_.is_open() && connection_.peer_closed()) lose_connection("carbon closed the connection");
  if (connection_.is_open() || !replay_pending_ || Clock::now() < next_flush_reconnect_) return;
  try {
    ensure_connected();
  } catch (const std::exception& error) {
    spdlog::debug("graphite: {}", error.what());
    next_flush_reconnect_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(flush_backoff_));
    flush_backoff_ = std::min(flush_backoff_ * 2, 30.0);
  }
}

void GraphiteOutput::reopen() {
  // A connection we close ourselves delivers what it holds (TCP sends it before the FIN), so
  // there is nothing to replay unless the connection was already lost.
  if (connection_.is_open()) {
    spdlog::info("graphite: reconnecting to carbon at {} (reopen)", peer_);
    connection_.close();
    while (!history_.empty()) forget_oldest();
  }
}

void GraphiteOutput::ensure_connected() {
  // Carbon never sends on its receiver ports: a readable socket means EOF or a reset, i.e. the
  // carbon we were talking to is gone. Finding out before sending keeps new data out of it.
  if (connection_.is_open() && connection_.peer_closed()) lose_connection("carbon closed the connection");
  if (connection_.is_open()) return;
  try {
    connection_.open();
  } catch (const std::exception&) {
    reported_down_ = true;  // the runner logs the OutputError
    throw;
  }
  if (reported_down_ || !connected_before_)
    spdlog::info("graphite: connected to carbon at {} ({})", peer_,
                 protocol_ == CarbonProtocol::pickle ? "pickle" : "plaintext");
  reported_down_ = false;
  connected_before_ = true;
  flush_backoff_ = 1;
  if (replay_pending_) replay();
}

void GraphiteOutput::replay() {
  std::size_t points = 0;
  for (const auto& frame : history_) {
    if (auto error = connection_.send(frame.bytes)) {
      lose_connection(*error);
      throw std::runtime_error(fmt::format("re-sending to carbon at {}: {}", peer_, *error));
    }
    points += frame.points;
  }
  // They now belong to this connection's window.
  const auto now = Clock::now();
  for (auto& frame : history_) frame.sent = now;
  replay_pending_ = false;
  counters_.retried += points;
  spdlog::info(
      "graphite: sent {} points again to carbon at {} (the last {} s before the connection "
      "was lost)",
      points, peer_, replay_window_);
}

void GraphiteOutput::lose_connection(const std::string& reason) {
  connection_.close();
  if (!reported_down_)
    spdlog::warn("graphite: lost the connection to carbon at {}: {}", peer_, reason);
  reported_down_ = true;
  if (replay_pending_) return;  // still owed from an earlier loss: keep all of it
  // Only what was sent shortly before the loss can have been lost with it.
  const auto oldest = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(replay_window_));
  while (!history_.empty() && history_.front().sent < oldest) forget_oldest();
  replay_pending_ = !history_.empty();
}

void GraphiteOutput::remember(CarbonFrame& frame) {
  if (replay_window_ <= 0) return;
  const auto now = Clock::now();
  history_bytes_ += frame.bytes.size();
  history_.push_back({now, std::move(frame.bytes), frame.points});
  if (!spare_.empty()) {
    frame.bytes = std::move(spare_.back());
    spare_.pop_back();
  } else {
    frame.bytes = std::string();
  }
  const auto oldest = now - std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(replay_window_));
  while (history_.size() > 1 &&
         (history_bytes_ > kMaxReplayBytes || history_.front().sent < oldest))
    forget_oldest();
}

void GraphiteOutput::forget_oldest() {
  SentFrame& oldest = history_.front();
  history_bytes_ -= oldest.bytes.size();
  // Kept at its length: the encoder writes its next frame over those bytes (room it need not
  // zero again).
  if (spare_.size() < kMaxSpareBuffers) spare_.push_back(std::move(oldest.bytes));
  history_.pop_front();
}

}  // namespace

std::unique_ptr<Output> make_graphite_output(const Options& options, const MetricInfoStore&) {
  return std::make_unique<GraphiteOutput>(graphite::carbon_settings(options));
}

}  // namespace fructosa::master
