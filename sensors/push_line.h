// One line pushed to lagent's push socket (docs/push.md): a statsd gauge or counter
// (`name:value|g`, `name:value|c`, `name:value|c|@0.1`) or a Prometheus text exposition sample
// (`name{label="v"} value [timestamp]`, a gauge). The parser is pure: the socket, the job and the
// limits are someone else's (pushed_metrics.h, lagent/push_server.h).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace fructosa::sensors {

// The longest name a pushed metric may have, Prometheus labels folded in.
inline constexpr std::size_t kMaxPushedNameLength = 128;
// The longest line the push socket reads; a longer one is refused whole.
inline constexpr std::size_t kMaxPushLineLength = 1024;

enum class PushedKind : unsigned char { gauge, counter };

struct PushLine {
  enum class Status : unsigned char {
    metric,   // `name`, `kind` and `value` hold it
    ignored,  // blank or a `#` comment (Prometheus' HELP and TYPE lines too)
    refused,  // `reason` says why, in words a batch script's author understands
  };
  Status status = Status::ignored;
  PushedKind kind = PushedKind::gauge;
  // One metric key component: letters, digits, '_' and '-', starting with a letter or '_'.
  // A Prometheus sample's labels are folded in as _<label>_<value>, in the order given.
  std::string name;
  double value = 0;  // finite; a counter's increment already divided by its sample rate
  std::string reason;
};

// `line` without its '\n' (a trailing '\r' is allowed).
PushLine parse_push_line(std::string_view line);

// The reason `name` cannot be a pushed metric's name, or "" when it can.
std::string pushed_name_problem(std::string_view name);

}  // namespace fructosa::sensors
