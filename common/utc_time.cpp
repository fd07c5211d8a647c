#include "utc_time.h"

#include <ctime>

namespace fructosa {

std::string utc_iso8601(std::int64_t ns) {
  std::time_t seconds = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace fructosa
