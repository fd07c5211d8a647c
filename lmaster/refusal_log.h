// Log lines for refused peers that a peer retrying every few seconds, or many peers at once,
// cannot turn into a flood (zap_handler.cpp, agent_identity.cpp). A refusal of one kind (e.g.
// an address and a reason) is logged at once the first time, then at most once per kEvery with
// the number held back in between. Kinds are forgotten after a quiet kEvery; at most kMaxKinds
// are tracked, and refusals of new kinds beyond them share one line (an attacker's many
// addresses or keys cost neither memory nor log lines without bound).
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace fructosa::master {

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kEvery = std::chrono::seconds(60);
  static constexpr std::size_t kMaxKinds = 1024;
  using Writer = std::function<void(const std::string& line)>;

  // `write`: where lines go (tests); spdlog's warnings by default.
  explicit RefusalLog(Writer write = [](const std::string& line) { spdlog::warn("{}", line); })
      : write_(std::move(write)) {}

  void refuse(const std::string& kind, std::string line, Clock::time_point now = Clock::now()) {
    auto it = entries_.find(kind);
    if (it == entries_.end()) {
      if (entries_.size() >= kMaxKinds) {
        it = entries_.try_emplace(kOverflow).first;
        line += fmt::format(" [refusals of more than {} kinds within {} s: the others are counted on this line]",
                            kMaxKinds, seconds());
      } else {
        it = entries_.try_emplace(kind).first;
      }
    }
    auto& entry = it->second;
    if (!entry.logged || now - *entry.logged >= kEvery) {
      write_(line);
      entry.logged = now;
      entry.held_back = 0;
    } else {
      ++entry.held_back;
      entry.last_line = std::move(line);
    }
  }

  // Logs what was held back for a whole kEvery and forgets quiet kinds; returns when it needs
  // to be called again (nothing when nothing is tracked).
  std::optional<Clock::time_point> flush(Clock::time_point now = Clock::now()) {
    std::optional<Clock::time_point> next;
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto& entry = it->second;
      if (now - *entry.logged >= kEvery) {
        if (entry.held_back == 0) {
          it = entries_.erase(it);
          continue;
        }
        write_(fmt::format("{} ({} more such refusals in the last {} s)", entry.last_line, entry.held_back,
                           seconds()));
        entry.logged = now;
        entry.held_back = 0;
      }
      auto due = *entry.logged + kEvery;
      if (!next || due < *next) next = due;
      ++it;
    }
    return next;
  }

  std::size_t kinds() const { return entries_.size(); }

 private:
  static long seconds() { return static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(kEvery).count()); }

  // Not a kind any caller makes (callers' kinds are addresses, key names and reasons).
  static inline const std::string kOverflow{"\x01overflow"};

  struct Entry {
    std::optional<Clock::time_point> logged;
    std::uint64_t held_back = 0;
    std::string last_line;
  };
  Writer write_;
  std::map<std::string, Entry> entries_;
};

}  // namespace fructosa::master
