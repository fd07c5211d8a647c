// CPUFreq: psutil.cpu_freq(percpu=...) on Linux, in MHz.
//
// With cpufreq in sysfs (<sys>/devices/system/cpu/cpufreq/policy0 or cpu0/cpufreq exists, the
// test psutil makes once at import), one entry per policy[0-9]* (else cpu[0-9]*/cpufreq) directory,
// sorted by its number: current from /proc/cpuinfo's "cpu MHz" when cpuinfo lists exactly as
// many CPUs as there are directories (psutil #1851), else scaling_cur_freq, else
// cpuinfo_cur_freq; min and max from scaling_min_freq / scaling_max_freq. Without cpufreq, one
// entry per "cpu MHz" line of /proc/cpuinfo, with min and max 0 (psutil's 0.0: unknown).
// percpu = false (psutil's default) averages the entries; percpu = true reports each as
// "<position>.current" etc.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "procfs.h"
#include "sensor.h"

namespace fructosa::sensors::cpu_freq_file {
namespace {

const OptionTable kOptions{
    {"percpu", OptionType::boolean, "false",
     "one entry per cpufreq policy or CPU (keys <n>.current...); false: their average, as psutil.cpu_freq()"},
};

const Catalog kCatalog{
    {"current", Unit::hertz_mega, Kind::gauge, "current frequency, averaged over CPUs"},
    {"min", Unit::hertz_mega, Kind::gauge, "lowest frequency the governor may set (scaling_min_freq), averaged; 0: unknown"},
    {"max", Unit::hertz_mega, Kind::gauge, "highest frequency the governor may set (scaling_max_freq), averaged; 0: unknown"},
    {"*.current", Unit::hertz_mega, Kind::gauge, "current frequency of this cpufreq policy (or CPU)"},
    {"*.min", Unit::hertz_mega, Kind::gauge, "lowest frequency the governor may set for it (scaling_min_freq); 0: unknown"},
    {"*.max", Unit::hertz_mega, Kind::gauge, "highest frequency the governor may set for it (scaling_max_freq); 0: unknown"},
};

std::string_view strip(std::string_view text) {
  const char* space = " \t\n\r\v\f";
  auto begin = text.find_first_not_of(space);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(space) - begin + 1);
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

// The number psutil sorts the directories by (the first digits in the name).
long first_number(std::string_view name) {
  auto begin = name.find_first_of("0123456789");
  std::uint64_t value = 0;
  if (begin != std::string_view::npos) std::from_chars(name.data() + begin, name.data() + name.size(), value);
  return static_cast<long>(value);
}

// Names in `directory` matching "<prefix>[0-9]*", sorted by their number.
std::vector<std::string> numbered_entries(const std::string& directory, std::string_view prefix) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(directory.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      std::string_view name = entry->d_name;
      if (name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix &&
          name[prefix.size()] >= '0' && name[prefix.size()] <= '9')
        names.emplace_back(name);
    }
    ::closedir(dir);
  }
  std::stable_sort(names.begin(), names.end(),
                   [](const std::string& a, const std::string& b) { return first_number(a) < first_number(b); });
  return names;
}

struct Frequency {
  double current = 0, min = 0, max = 0;
};

struct Policy {
  explicit Policy(const std::string& dir)
      : scaling_cur(dir + "/scaling_cur_freq"),
        cpuinfo_cur(dir + "/cpuinfo_cur_freq"),
        scaling_min(dir + "/scaling_min_freq"),
        scaling_max(dir + "/scaling_max_freq") {}
  ProcFile scaling_cur, cpuinfo_cur, scaling_min, scaling_max;
};

// psutil's int(bcat(path)): the file's integer (kHz). Throws SensorUnavailable.
double read_khz(ProcFile& file) {
  std::uint64_t khz = 0;
  if (!parse_uint(strip(file.read()), khz)) throw SensorUnavailable(file.path() + " holds no integer");
  return static_cast<double>(khz);
}

class CpuFreqSensor final : public Sensor {
 public:
  explicit CpuFreqSensor(const SensorContext& context)
      : cpu_dir_(context.roots.sys + "/devices/system/cpu"),
        cpuinfo_(context.roots.proc + "/cpuinfo"),
        percpu_(context.options.get_bool("percpu")) {}

  bool sample(SampleWriter& out) override {
    if (!discovered_) discover();
    read_cpuinfo_mhz();
    frequencies_.clear();
    if (policies_.empty()) {
      for (double mhz : cpuinfo_mhz_) frequencies_.push_back({mhz, 0.0, 0.0});
    } else {
      try {
        read_policies();
      } catch (const SensorUnavailable&) {
        discovered_ = false;  // policies may have come or gone: look again next time
        throw;
      }
    }
    if (frequencies_.empty()) throw SensorUnavailable("no cpufreq in " + cpu_dir_ + " and no cpu MHz in " + cpuinfo_.path());

    if (percpu_) {
      for (std::size_t i = 0; i < frequencies_.size(); ++i) {
        while (keys_.size() <= i) {
          std::string n = std::to_string(keys_.size());
          keys_.push_back({n + ".current", n + ".min", n + ".max"});
        }
        out.set(keys_[i][0], frequencies_[i].current);
        out.set(keys_[i][1], frequencies_[i].min);
        out.set(keys_[i][2], frequencies_[i].max);
      }
      return true;
    }
    // psutil.cpu_freq(percpu=False): the single entry as it is, else sums divided by the count.
    Frequency average = frequencies_.front();
    if (frequencies_.size() > 1) {
      const double cpus = static_cast<double>(frequencies_.size());
      double currents = 0, mins = 0, maxs = 0;
      for (const auto& frequency : frequencies_) {
        currents += frequency.current;
        mins += frequency.min;
        maxs += frequency.max;
      }
      average = {currents / cpus, mins / cpus, maxs / cpus};
    }
    out.set("current", average.current);
    out.set("min", average.min);
    out.set("max", average.max);
    return true;
  }

 private:
  void discover() {
    policies_.clear();
    if (exists(cpu_dir_ + "/cpufreq/policy0") || exists(cpu_dir_ + "/cpu0/cpufreq")) {
      std::vector<std::string> dirs;
      for (const auto& name : numbered_entries(cpu_dir_ + "/cpufreq", "policy")) dirs.push_back(cpu_dir_ + "/cpufreq/" + name);
      if (dirs.empty())
        for (const auto& name : numbered_entries(cpu_dir_, "cpu"))
          if (exists(cpu_dir_ + "/" + name + "/cpufreq")) dirs.push_back(cpu_dir_ + "/" + name + "/cpufreq");
      for (const auto& dir : dirs) policies_.push_back(std::make_unique<Policy>(dir));
    }
    discovered_ = true;
  }

  // psutil's _cpu_get_cpuinfo_freq(): float(text after ':') of each "cpu MHz" line.
  void read_cpuinfo_mhz() {
    cpuinfo_mhz_.clear();
    Lines lines(cpuinfo_.read());
    std::string_view line;
    while (lines.next(line)) {
      if (line.size() < 7) continue;
      bool match = true;
      for (std::size_t i = 0; i < 7; ++i)
        match &= static_cast<char>(std::tolower(static_cast<unsigned char>(line[i]))) == "cpu mhz"[i];
      auto colon = line.find(':');
      if (!match || colon == std::string_view::npos) continue;
      std::string_view text = strip(line.substr(colon + 1));
      double mhz = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), mhz);
      if (error == std::errc() && end == text.data() + text.size()) cpuinfo_mhz_.push_back(mhz);
    }
  }

  void read_policies() {
    const bool from_cpuinfo = policies_.size() == cpuinfo_mhz_.size();
    for (std::size_t i = 0; i < policies_.size(); ++i) {
      Policy& policy = *policies_[i];
      double khz;
      if (from_cpuinfo) {
        khz = std::trunc(cpuinfo_mhz_[i] * 1000);  // psutil: int(cpuinfo_freqs[i] * 1000)
      } else {
        try {
          khz = read_khz(policy.scaling_cur);
        } catch (const SensorUnavailable&) {
          khz = read_khz(policy.cpuinfo_cur);  // old RedHat kernels (psutil #1071)
        }
      }
      frequencies_.push_back({khz / 1000, read_khz(policy.scaling_min) / 1000, read_khz(policy.scaling_max) / 1000});
    }
  }

  std::string cpu_dir_;
  ProcFile cpuinfo_;
  bool percpu_;
  bool discovered_ = false;
  std::vector<std::unique_ptr<Policy>> policies_;
  std::vector<double> cpuinfo_mhz_;
  std::vector<Frequency> frequencies_;
  std::vector<std::array<std::string, 3>> keys_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("CPUFreq", "CPU frequencies in MHz: current, min, max, averaged or per CPU (psutil.cpu_freq)",
                         kOptions, kCatalog, CpuFreqSensor, .row = DashboardRow::cpu, .per_item_option = "percpu");

}  // namespace fructosa::sensors::cpu_freq_file
