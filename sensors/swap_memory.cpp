// SwapMemory: psutil.swap_memory() on Linux. Total and free from /proc/meminfo (sysinfo(2)
// when it lacks SwapTotal or SwapFree), pages swapped in/out from /proc/vmstat. A node
// without swap reports zeros, as psutil does.
#include <fcntl.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::swap_memory_file {
namespace {

const OptionTable kOptions{};

const Catalog kCatalog{
    {"total", Unit::bytes, Kind::gauge, "swap space (SwapTotal)"},
    {"used", Unit::bytes, Kind::gauge, "swap space in use (total - free)"},
    {"free", Unit::bytes, Kind::gauge, "swap space not in use (SwapFree)"},
    {"percent", Unit::percent, Kind::gauge, "used / total (0 without swap)"},
    {"sin", Unit::bytes, Kind::counter, "bytes swapped in from disk since boot (pswpin pages of 4 KiB)"},
    {"sout", Unit::bytes, Kind::counter, "bytes swapped out to disk since boot (pswpout pages of 4 KiB)"},
};

// psutil multiplies the page counts by 4 KiB whatever the page size (_pslinux.swap_memory).
constexpr double kPswpPage = 4 * 1024;

// psutil: line.split(b' ')[1], read by int() (which ignores surrounding whitespace).
std::string_view field_after_name(std::string_view line) {
  auto space = line.find(' ');
  if (space == std::string_view::npos) return {};
  line.remove_prefix(space + 1);
  line = line.substr(0, line.find(' '));
  while (!line.empty() && (line.back() == '\r' || line.back() == '\t')) line.remove_suffix(1);
  return line;
}

// The pswpin and pswpout counts of /proc/vmstat, read only as far as those lines: procfs
// formats what is read, and they sit in the first half of the file. Kept open, as ProcFile.
class SwapPages {
 public:
  explicit SwapPages(std::string path) : path_(std::move(path)) {}
  ~SwapPages() {
    if (fd_ >= 0) ::close(fd_);
  }
  SwapPages(const SwapPages&) = delete;
  SwapPages& operator=(const SwapPages&) = delete;

  // psutil's loop: the lines starting with "pswpin" and "pswpout" until both were seen.
  // False when the file cannot be read or either line is missing (psutil then reports both
  // as 0, with a warning); a line that does not parse counts as missing.
  bool read(std::uint64_t& in, std::uint64_t& out) {
    if (fd_ < 0) fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return false;
    if (buffer_.empty()) buffer_.resize(2048);
    std::optional<std::uint64_t> got_in, got_out;
    std::size_t used = 0, scanned = 0;
    for (;;) {
      ssize_t got = ::pread(fd_, buffer_.data() + used, buffer_.size() - used, static_cast<off_t>(used));
      if (got < 0) {
        if (errno == EINTR) continue;
        ::close(fd_);
        fd_ = -1;
        return false;
      }
      bool end = got == 0;
      used += static_cast<std::size_t>(got);
      // Whole lines only: a line cut by the buffer's end waits for the next read.
      std::string_view text(buffer_.data() + scanned, used - scanned);
      std::size_t complete = end ? text.size() : text.rfind('\n') + 1;  // npos + 1 == 0
      Lines lines(text.substr(0, complete));
      scanned += complete;
      std::string_view line;
      while (lines.next(line)) {
        std::uint64_t pages = 0;
        if (line.rfind("pswpin", 0) == 0) {
          if (parse_uint(field_after_name(line), pages)) got_in = pages;
        } else if (line.rfind("pswpout", 0) == 0) {
          if (parse_uint(field_after_name(line), pages)) got_out = pages;
        }
        if (got_in && got_out) {
          in = *got_in;
          out = *got_out;
          return true;
        }
      }
      if (end) return false;
      if (used == buffer_.size()) buffer_.resize(buffer_.size() * 2);
    }
  }

 private:
  std::string path_;
  std::string buffer_;
  int fd_ = -1;
};

class SwapMemorySensor final : public Sensor {
 public:
  explicit SwapMemorySensor(const SensorContext& context)
      : meminfo_(context.roots.proc + "/meminfo"), vmstat_(context.roots.proc + "/vmstat") {}

  bool sample(SampleWriter& out) override {
    std::uint64_t total_kib = 0, free_kib = 0;
    bool have_total = false, have_free = false;
    Lines lines(meminfo_.read());
    std::string_view line;
    while (lines.next(line)) {
      std::string_view name = next_field(line);
      if (name == "SwapTotal:") have_total = parse_uint(next_field(line), total_kib);
      else if (name == "SwapFree:") have_free = parse_uint(next_field(line), free_kib);
    }
    double total, free;
    if (have_total && have_free) {
      total = static_cast<double>(total_kib) * 1024;
      free = static_cast<double>(free_kib) * 1024;
    } else {
      struct sysinfo info;  // psutil's fallback (cext.linux_sysinfo)
      if (::sysinfo(&info) != 0) throw SensorUnavailable(meminfo_.path() + " lacks SwapTotal or SwapFree");
      total = static_cast<double>(info.totalswap) * info.mem_unit;
      free = static_cast<double>(info.freeswap) * info.mem_unit;
    }
    double used = total - free;
    std::uint64_t in = 0, out_pages = 0;
    if (!vmstat_.read(in, out_pages)) in = out_pages = 0;

    out.set("total", total);
    out.set("used", used);
    out.set("free", free);
    out.set("percent", usage_percent(used, total));
    out.set("sin", static_cast<double>(in) * kPswpPage);
    out.set("sout", static_cast<double>(out_pages) * kPswpPage);
    return true;
  }

 private:
  ProcFile meminfo_;
  SwapPages vmstat_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("SwapMemory", "Swap space usage and swapping since boot (psutil.swap_memory)", kOptions,
                         kCatalog, SwapMemorySensor, .row = DashboardRow::memory);

}  // namespace fructosa::sensors::swap_memory_file
