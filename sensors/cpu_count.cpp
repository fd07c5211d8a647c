// CPUCount: psutil.cpu_count(logical=...) on Linux, under the scalar key "".
//
// logical = true: psutil calls os.sysconf("SC_NPROCESSORS_ONLN"); glibc (2.35+) answers it from
// /sys/devices/system/cpu/online (ranges "0-3,8"), then by counting the cpuN lines of /proc/stat,
// then with sched_getaffinity. The same steps are taken here through the roots, so the value is
// the syscall's on a live node and testable on fixtures.
// logical = false: psutil's cpu_count_cores(): distinct core_cpus_list (else thread_siblings_list)
// contents of /sys/devices/system/cpu/cpu[0-9]*/topology, else the sum of "cpu cores" per
// "physical id" in /proc/cpuinfo. The topology only changes when CPUs go on or off line, so the
// count is kept until the online file reads differently.
#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::cpu_count_file {
namespace {

const OptionTable kOptions{
    {"logical", OptionType::boolean, "true",
     "count logical CPUs (hardware threads); false: physical cores, as psutil.cpu_count(logical=False)"},
};

const Catalog kCatalog{
    {"", Unit::count, Kind::gauge, "CPUs online (logical = true) or physical cores (logical = false)"},
};

// Python's bytes.strip().
std::string_view strip(std::string_view text) {
  const char* space = " \t\n\r\v\f";
  auto begin = text.find_first_not_of(space);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(space) - begin + 1);
}

// glibc's read_sysfs_file(): CPUs in a list of ranges on the first line; 0 when malformed.
long count_cpu_list(std::string_view text) {
  long count = 0;
  std::string_view line = text.substr(0, text.find('\n'));
  while (!line.empty()) {
    auto read_number = [&](std::uint64_t& value) {
      std::size_t digits = 0;
      while (digits < line.size() && std::isdigit(static_cast<unsigned char>(line[digits]))) ++digits;
      if (digits == 0 || !parse_uint(line.substr(0, digits), value)) return false;
      line.remove_prefix(digits);
      return true;
    };
    std::uint64_t first = 0, last = 0;
    if (!read_number(first)) return 0;
    last = first;
    if (!line.empty() && line.front() == '-') {
      line.remove_prefix(1);
      if (!read_number(last)) return 0;
    }
    if (last >= first) count += static_cast<long>(last - first + 1);
    if (!line.empty() && line.front() == ',') line.remove_prefix(1);
  }
  return count;
}

// Names in `directory` matching the glob "cpu[0-9]*".
std::vector<std::string> cpu_directories(const std::string& directory) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(directory.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      std::string_view name = entry->d_name;
      if (name.size() > 3 && name.substr(0, 3) == "cpu" && std::isdigit(static_cast<unsigned char>(name[3])))
        names.emplace_back(name);
    }
    ::closedir(dir);
  }
  return names;
}

class CpuCountSensor final : public Sensor {
 public:
  explicit CpuCountSensor(const SensorContext& context)
      : roots_(context.roots),
        logical_(context.options.get_bool("logical")),
        online_(context.roots.sys + "/devices/system/cpu/online") {}

  bool sample(SampleWriter& out) override {
    std::string_view online;
    try {
      online = online_.read();
    } catch (const SensorUnavailable&) {
      online = {};
    }
    long count = 0;
    if (logical_) {
      count = count_cpu_list(online);
      if (count == 0) count = count_stat_cpus(out.time_ns());
      if (count == 0) {
        cpu_set_t set;
        if (::sched_getaffinity(0, sizeof set, &set) == 0) count = CPU_COUNT(&set);
      }
    } else {
      // Cached while the online file reads the same (recounted every time without one).
      if (online.empty() || online != cached_online_) {
        cores_ = count_cores();
        cached_online_.assign(online);
      }
      count = cores_;
    }
    // psutil: a count below 1 is None (undetermined).
    if (count < 1)
      throw SensorUnavailable(logical_ ? "cannot count online CPUs" : "no CPU topology in sysfs nor core counts in cpuinfo");
    out.set("", static_cast<double>(count));
    return true;
  }

 private:
  // glibc's get_nproc_stat(): lines "cpu<digit>..." of /proc/stat.
  long count_stat_cpus(std::int64_t at_ns) {
    std::string_view text;
    try {
      text = stat_.read(at_ns);
    } catch (const SensorUnavailable&) {
      return 0;
    }
    long count = 0;
    Lines lines(text);
    std::string_view line;
    while (lines.next(line))
      if (line.size() > 3 && line.substr(0, 3) == "cpu" && std::isdigit(static_cast<unsigned char>(line[3]))) ++count;
    return count;
  }

  long count_cores() {
    // Method 1: distinct sibling lists, one per core.
    const std::string cpu_dir = roots_.sys + "/devices/system/cpu";
    std::vector<std::string> cpus = cpu_directories(cpu_dir);
    for (const char* file : {"core_cpus_list", "thread_siblings_list"}) {
      std::set<std::string> cores;
      for (const auto& cpu : cpus) {
        ProcFile list(cpu_dir + "/" + cpu + "/topology/" + file);
        try {
          cores.emplace(strip(list.read()));
        } catch (const SensorUnavailable&) {
          // not in the glob's result
        }
      }
      if (!cores.empty()) return static_cast<long>(cores.size());
    }
    // Method 2: /proc/cpuinfo, "cpu cores" per "physical id", recorded at each blank line.
    std::string_view text;
    try {
      text = cpuinfo_.read();
    } catch (const SensorUnavailable&) {
      return 0;
    }
    std::map<long, long> cores_per_package;
    long physical_id = -1, cpu_cores = -1;
    Lines lines(text);
    std::string_view line;
    while (lines.next(line)) {
      line = strip(line);
      if (line.empty()) {
        if (physical_id >= 0 && cpu_cores >= 0) cores_per_package[physical_id] = cpu_cores;
        physical_id = cpu_cores = -1;
        continue;
      }
      // psutil splits "physical id\t: 0" on b'\t:' and keeps the value under the text before it.
      for (auto [name, value] : {std::pair{"physical id\t:", &physical_id}, std::pair{"cpu cores\t:", &cpu_cores}}) {
        std::string_view key = name;
        std::uint64_t number = 0;
        if (line.substr(0, key.size()) == key && parse_uint(strip(line.substr(key.size())), number))
          *value = static_cast<long>(number);
      }
    }
    long total = 0;
    for (const auto& [package, cores] : cores_per_package) total += cores;
    return total;
  }

  Roots roots_;
  bool logical_;
  ProcFile online_;
  SharedReading stat_{roots_.proc + "/stat"};  // read once per reading time with the CPU sensors
  ProcFile cpuinfo_{roots_.proc + "/cpuinfo"};
  std::string cached_online_;
  long cores_ = 0;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("CPUCount", "Number of logical CPUs or physical cores (psutil.cpu_count)", kOptions, kCatalog,
                         CpuCountSensor, .row = DashboardRow::global);

}  // namespace fructosa::sensors::cpu_count_file
