// The perf events PerfHW (perf_hw.cpp) counts, by name: colmet's 28 perfhw names and the
// composed hardware-cache names cache_<cache>_<op>_<result>. Kept apart from the sensor so the
// encodings can be tested without opening anything.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fructosa::sensors::perf {

// What perf_event_attr needs to know about an event.
struct EventCode {
  std::uint32_t type = 0;    // PERF_TYPE_HARDWARE, _SOFTWARE, _HW_CACHE
  std::uint64_t config = 0;  // PERF_COUNT_*; for _HW_CACHE: cache | op << 8 | result << 16
  bool nanoseconds = false;  // a clock event (cpu_clock, task_clock): PerfHW reports seconds
  bool operator==(const EventCode&) const = default;
};

// perf_event_attr.config of a PERF_TYPE_HW_CACHE event (perf_event_open(2)): the cache id
// (PERF_COUNT_HW_CACHE_L1D ... _NODE) in bits 0-7, the operation (_OP_READ, _WRITE, _PREFETCH)
// in bits 8-15, the result (_RESULT_ACCESS, _MISS) in bits 16-23.
constexpr std::uint64_t cache_config(std::uint64_t cache, std::uint64_t op, std::uint64_t result) {
  return cache | (op << 8) | (result << 16);
}

// The event `name` stands for; nullopt when no such name.
std::optional<EventCode> find_event(std::string_view name);

// colmet's perfhw event names, in colmet's order; find_event accepts each.
const std::vector<std::string_view>& colmet_event_names();

// Every name find_event accepts: colmet's, then the 42 composed cache names.
std::vector<std::string> event_names();

// CPU numbers of a sysfs CPU list such as <sys>/devices/system/cpu/online ("0-3,8,10-11\n");
// nullopt when the text is not such a list.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);

}  // namespace fructosa::sensors::perf
