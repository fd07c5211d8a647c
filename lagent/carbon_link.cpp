#include "carbon_link.h"

#include <fmt/format.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>

#include "carbon_connection.h"

namespace fructosa::agent {

const OptionTable& carbon_link_options() {
  static const OptionTable table = [] {
    OptionTable all = graphite::graphite_options();
    all.push_back(
        {.name = "retry_max_interval",
         .type = OptionType::real,
         .default_value = "30",
         .help =
             "longest wait in seconds between two connection attempts while carbon is away (the "
             "wait starts at 0.5 s and doubles); readings wait in the spool meanwhile",
         .min = 0.1});
    return all;
  }();
  return table;
}

std::string carbon_destination(const graphite::CarbonSettings& carbon) {
  return fmt::format("carbon at {}:{} ({})", carbon.host, carbon.port,
                     carbon.protocol == graphite::CarbonProtocol::pickle ? "pickle" : "plaintext");
}

namespace {

using Clock = LinkClock;

constexpr double kFirstRetrySeconds = 0.5;

class CarbonLink final : public Link {
 public:
  explicit CarbonLink(CarbonLinkSettings settings)
      : settings_(std::move(settings)),
        encoder_(settings_.carbon.protocol, settings_.carbon.prefix, settings_.carbon.batch_size),
        connection_(settings_.carbon.host, settings_.carbon.port, settings_.carbon.timeout),
        replay_window_(link_seconds(settings_.carbon.replay_window)) {}

  std::string destination() const override { return carbon_destination(settings_.carbon); }

  void start(LinkEvents& events) override {
    events_ = &events;
    connect();
  }

  bool can_send() const override { return connection_.is_open() && !finishing_; }

  void send(std::uint64_t sequence, std::vector<Sample>& samples) override {
    for (auto& sample : samples)
      if (sample.host.empty()) sample.host = settings_.host;
    const std::size_t used = encoder_.encode(samples, frames_);
    for (std::size_t k = 0; k < used; ++k) {
      if (auto error = connection_.send(frames_[k].bytes)) {
        // The batch stays in the spool and goes again whole once carbon is back.
        lose_connection(fmt::format("sending: {}", *error));
        return;
      }
    }
    events_->handed_over(sequence);
    if (replay_window_ <= Clock::duration::zero()) {
      events_->taken(sequence);
      return;
    }
    written_.push_back({sequence, Clock::now()});
  }

  bool watch(std::vector<pollfd>& fds, bool /*answers_awaited*/) override {
    // Carbon never sends: the socket becomes readable only when carbon closes or resets it.
    if (connection_.is_open()) fds.push_back({connection_.fd(), POLLIN | POLLRDHUP, 0});
    return false;
  }

  void service() override {
    const auto now = Clock::now();
    if (connection_.is_open()) {
      auto state = connection_.peer_state();
      if (finishing_ && state == graphite::CarbonConnection::PeerState::closed_cleanly) {
        // Carbon read up to our end of the stream before it closed: it has every batch written.
        if (!written_.empty()) events_->taken(written_.back().sequence);
        written_.clear();
        connection_.close();
        closed_after_finish_ = true;
        return;
      }
      if (state != graphite::CarbonConnection::PeerState::open) {
        lose_connection("carbon closed the connection");
      } else {
        // Still up: batches written a replay window ago are taken.
        std::uint64_t through = 0;
        while (!written_.empty() && written_.front().at + replay_window_ <= now) {
          through = written_.front().sequence;
          written_.pop_front();
        }
        if (through) events_->taken(through);
      }
    }
    if (!connection_.is_open() && !closed_after_finish_ && now >= reconnect_at_) connect();
  }

  Clock::time_point next_due() const override {
    if (!connection_.is_open())
      return closed_after_finish_ ? Clock::time_point::max() : reconnect_at_;
    return written_.empty() ? Clock::time_point::max() : written_.front().at + replay_window_;
  }

  void finish() override {
    if (!connection_.is_open() || finishing_) return;
    connection_.shutdown_write();
    finishing_ = true;
  }

 private:
  struct Written {
    std::uint64_t sequence;
    Clock::time_point at;
  };

  void connect() {
    try {
      connection_.open();
    } catch (const std::exception& error) {
      if (!reported_down_)
        spdlog::warn("{}; readings wait in the spool; retrying in {} s, backing off to {} s",
                     error.what(), backoff_, settings_.retry_max_interval);
      else
        spdlog::debug("{}", error.what());
      reported_down_ = true;
      retry_later();
      return;
    }
    backoff_ = kFirstRetrySeconds;
    reconnect_at_ = Clock::time_point::max();
    if (reported_down_ || !connected_before_) {
      std::uint64_t kept = events_->batches_kept();
      spdlog::info("sending to {}{}", destination(),
                   kept ? fmt::format(" ({} batch(es) it has not taken yet go first)", kept)
                        : std::string());
    }
    if (connected_before_ && lost_since_) events_->count_resync();
    reported_down_ = false;
    lost_since_ = false;
    connected_before_ = true;
    events_->answered(destination());
    events_->send_again();  // oldest first: what a lost connection may have lost, then the rest
  }

  void retry_later() {
    reconnect_at_ = Clock::now() + link_seconds(backoff_);
    backoff_ = std::min(backoff_ * 2, std::max(settings_.retry_max_interval, kFirstRetrySeconds));
  }

  void lose_connection(const std::string& reason) {
    connection_.close();
    written_.clear();  // not taken: they go again from the spool after the reconnect
    finishing_ = false;
    lost_since_ = true;
    if (!reported_down_)
      spdlog::warn(
          "lost the connection to {}: {}; what it has not taken is sent again once it is back",
          destination(), reason);
    reported_down_ = true;
    retry_later();
  }

  const CarbonLinkSettings settings_;
  graphite::CarbonEncoder encoder_;
  graphite::CarbonConnection connection_;
  const Clock::duration replay_window_;
  LinkEvents* events_ = nullptr;               // set by start()
  std::vector<graphite::CarbonFrame> frames_;  // the current batch's frames; buffers reused
  std::deque<Written> written_;  // written over this connection, not taken yet; oldest first
  Clock::time_point reconnect_at_ = Clock::time_point::max();
  double backoff_ = kFirstRetrySeconds;
  bool reported_down_ = false;  // one warning per outage
  bool connected_before_ = false;
  bool lost_since_ = false;  // a connection was lost since the last one was made
  bool finishing_ = false;   // our side is shut (finish()): carbon's close takes the rest
  bool closed_after_finish_ = false;
};

}  // namespace

std::unique_ptr<Link> make_carbon_link(CarbonLinkSettings settings) {
  return std::make_unique<CarbonLink>(std::move(settings));
}

}  // namespace fructosa::agent
