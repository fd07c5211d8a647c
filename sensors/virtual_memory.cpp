// VirtualMemory: psutil.virtual_memory() on Linux, from /proc/meminfo (and /proc/zoneinfo on
// kernels older than 3.14, which lack MemAvailable). Same fields, same arithmetic.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::virtual_memory_file {
namespace {

const OptionTable kOptions{};

const Catalog kCatalog{
    {"total", Unit::bytes, Kind::gauge, "physical memory (MemTotal)"},
    {"available", Unit::bytes, Kind::gauge, "memory that can be given to processes without swapping (MemAvailable)"},
    {"percent", Unit::percent, Kind::gauge, "(total - available) / total"},
    {"used", Unit::bytes, Kind::gauge, "total - free - buffers - cached, as free(1) computes it"},
    {"free", Unit::bytes, Kind::gauge, "memory not used at all (MemFree)"},
    {"active", Unit::bytes, Kind::gauge, "memory recently used (Active)"},
    {"inactive", Unit::bytes, Kind::gauge, "memory not recently used (Inactive)"},
    {"buffers", Unit::bytes, Kind::gauge, "file system metadata cache (Buffers)"},
    {"cached", Unit::bytes, Kind::gauge, "page cache plus reclaimable slab (Cached + SReclaimable)"},
    {"shared", Unit::bytes, Kind::gauge, "tmpfs and shared memory (Shmem)"},
    {"slab", Unit::bytes, Kind::gauge, "kernel data structures cache (Slab)"},
};

// The /proc/meminfo lines psutil uses, by name as written in the file.
enum Field { MemTotal, MemFree, Buffers, Cached, SReclaimable, Shmem, MemShared, Active, Inactive,
             InactDirty, InactClean, InactLaundry, Slab, MemAvailable, ActiveFile, InactiveFile, kFields };
constexpr std::array<std::string_view, kFields> kFieldNames{
    "MemTotal:", "MemFree:", "Buffers:", "Cached:", "SReclaimable:", "Shmem:", "MemShared:", "Active:",
    "Inactive:", "Inact_dirty:", "Inact_clean:", "Inact_laundry:", "Slab:", "MemAvailable:",
    "Active(file):", "Inactive(file):"};

using Meminfo = std::array<std::optional<double>, kFields>;

class VirtualMemorySensor final : public Sensor {
 public:
  explicit VirtualMemorySensor(const SensorContext& context)
      : meminfo_(context.roots.proc + "/meminfo"), zoneinfo_(context.roots.proc + "/zoneinfo") {}

  bool sample(SampleWriter& out) override {
    Meminfo mem{};
    Lines lines(meminfo_.read());
    std::string_view line;
    while (lines.next(line)) {
      std::string_view name = next_field(line);
      auto found = std::find(kFieldNames.begin(), kFieldNames.end(), name);
      std::uint64_t kib = 0;
      if (found != kFieldNames.end() && parse_uint(next_field(line), kib))
        mem[found - kFieldNames.begin()] = static_cast<double>(kib) * 1024;
    }
    if (!mem[MemTotal] || !mem[MemFree]) throw SensorUnavailable(meminfo_.path() + " lacks MemTotal or MemFree");
    auto get = [&](Field field) { return mem[field].value_or(0); };
    double total = get(MemTotal), free = get(MemFree), buffers = get(Buffers);
    double cached = mem[Cached] ? *mem[Cached] + get(SReclaimable) : 0;
    double shared = mem[Shmem] ? *mem[Shmem] : get(MemShared);
    double inactive = mem[Inactive] ? *mem[Inactive]
                      : (mem[InactDirty] && mem[InactClean] && mem[InactLaundry])
                          ? *mem[InactDirty] + *mem[InactClean] + *mem[InactLaundry]
                          : 0;
    double used = total - free - cached - buffers;
    if (used < 0) used = total - free;  // distorted values inside some containers, as psutil
    double available = mem[MemAvailable] ? *mem[MemAvailable] : estimate_available(mem);
    if (available < 0) available = 0;
    if (available > total) available = free;

    out.set("total", total);
    out.set("available", available);
    out.set("percent", usage_percent(total - available, total));
    out.set("used", used);
    out.set("free", free);
    out.set("active", get(Active));
    out.set("inactive", inactive);
    out.set("buffers", buffers);
    out.set("cached", cached);
    out.set("shared", shared);
    out.set("slab", get(Slab));
    return true;
  }

 private:
  // psutil's calculate_avail_vmem(): the kernel's MemAvailable formula for kernels < 3.14.
  double estimate_available(const Meminfo& mem) {
    double free = *mem[MemFree];
    double fallback = free + mem[Cached].value_or(0);
    if (!mem[ActiveFile] || !mem[InactiveFile] || !mem[SReclaimable]) return fallback;
    std::string_view text;
    try {
      text = zoneinfo_.read();
    } catch (const SensorUnavailable&) {
      return fallback;
    }
    double watermark_low = 0;
    Lines lines(text);
    std::string_view line;
    while (lines.next(line)) {
      std::string_view rest = line;
      std::uint64_t pages = 0;
      if (next_field(rest).substr(0, 3) == "low" && parse_uint(next_field(rest), pages)) watermark_low += static_cast<double>(pages);
    }
    watermark_low *= static_cast<double>(::sysconf(_SC_PAGESIZE));
    double available = free - watermark_low;
    double pagecache = *mem[ActiveFile] + *mem[InactiveFile];
    pagecache -= std::min(pagecache / 2, watermark_low);
    available += pagecache;
    available += *mem[SReclaimable] - std::min(*mem[SReclaimable] / 2.0, watermark_low);
    return std::trunc(available);
  }

  ProcFile meminfo_;
  ProcFile zoneinfo_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("VirtualMemory", "Physical memory usage (psutil.virtual_memory)", kOptions, kCatalog,
                         VirtualMemorySensor, .row = DashboardRow::memory);

}  // namespace fructosa::sensors::virtual_memory_file
