// Instants as people and tools read them: "2026-11-25T18:00:00Z".
#pragma once

#include <cstdint>
#include <string>

namespace fructosa {

// `ns` since the epoch, to the second, in UTC (ISO 8601).
std::string utc_iso8601(std::int64_t ns);

}  // namespace fructosa
