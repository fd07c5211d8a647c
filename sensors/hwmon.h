// Reading sysfs hardware attributes (hwmon, thermal zones, power supplies) the way psutil 5.9's
// sensors_temperatures(), sensors_fans() and sensors_battery() do, for the three Sensors* sensors.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace fructosa::sensors {

// One sysfs attribute kept open and re-read with a single pread at offset 0: sysfs generates an
// attribute whole on each read from offset 0, and the values read every round are short numbers.
// Move-only; reopens after a read error (the device may come back), but a file that does not
// exist is not looked for again: attributes do not appear inside a device's directory, a new
// device is a new directory, which the sensors notice and answer with new SysfsAttributes.
class SysfsAttribute {
 public:
  explicit SysfsAttribute(std::string path) : path_(std::move(path)) {}
  ~SysfsAttribute();
  SysfsAttribute(SysfsAttribute&& other) noexcept;
  SysfsAttribute& operator=(SysfsAttribute&& other) noexcept;
  SysfsAttribute(const SysfsAttribute&) = delete;
  SysfsAttribute& operator=(const SysfsAttribute&) = delete;

  // The content (at most 127 bytes), or nullopt when the file cannot be opened or read: what
  // psutil's bcat(path, fallback=...) treats as the fallback.
  std::optional<std::string_view> read();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool absent_ = false;
  char buffer_[128];
};

// The whole content of a small file read once (open, read, close), or nullopt: psutil's
// cat()/bcat() with a fallback. For names, labels and thresholds read when scanning.
std::optional<std::string> read_file(const std::string& path);

// Python's str.strip() for the ASCII whitespace sysfs uses.
std::string_view strip(std::string_view text);

// Python's float(text) and int(text) on an attribute's content (surrounding whitespace allowed,
// a sign, '_' between digits; float also takes inf/nan); nullopt where Python raises ValueError.
std::optional<double> python_float(std::string_view text);
std::optional<std::int64_t> python_int(std::string_view text);

// The names in a directory, sorted, without "." and ".."; empty when it cannot be read (as a
// glob matches nothing there). Reuses `names`.
void list_directory(const std::string& path, std::vector<std::string>& names);

// psutil's hwmon globs reduced to "bases", as its `sorted(set(x.split('_')[0] for x in ...))`:
// every <sys>/class/hwmon/hwmon*/<prefix>*_* file gives the base <dir>/<prefix>N (the file name
// up to its first '_'), and so does every <sys>/class/hwmon/hwmon*/device/<prefix>*_* file
// (CentOS's intermediate directory). Temperatures always look in both places; fans look in
// device/ only when no hwmon*/fan*_* file exists at all, exactly as psutil 5.9.4.
enum class DeviceDirectory { always, only_when_none_direct };
std::vector<std::string> hwmon_bases(const std::string& sys_root, std::string_view prefix,
                                     DeviceDirectory device);

// The directory part of a base (psutil's os.path.dirname(base)), where `name` is read.
std::string_view parent_directory(std::string_view path);

// Unique `<chip>.<label>` key prefixes for psutil's {chip: [entries with a label]} results, in
// which labels repeat (two coretemp packages both have "Core 0") or are empty. Entries are
// added in psutil's order. The label component is key_component(label), except that an empty
// label, or one already taken by an earlier entry of the same chip, gets "#<index>" appended,
// where <index> is the entry's 0-based position in psutil's list for that chip: "" -> "#0",
// the second package's "Core 0" -> "Core 0#6". (Chips are told apart by key_component(chip):
// two chip names that only differ in '.' vs '_' share one sequence of indexes.)
class SensorKeys {
 public:
  std::string add(std::string_view chip, std::string_view label);

 private:
  struct Chip {
    int entries = 0;
    std::set<std::string> used;
  };
  std::map<std::string, Chip> chips_;
};

// When to look at the sysfs tree again: at the first reading, when the entries of the watched
// directory change (a module loaded or a device hot-plugged), and every `interval` seconds
// (0: every reading, as psutil, which globs on every call).
class Rescan {
 public:
  Rescan(std::string watched, double interval)
      : watched_(std::move(watched)), interval_(interval) {}
  bool due();

 private:
  std::string watched_;
  std::chrono::duration<double> interval_;
  std::vector<std::string> listing_, previous_;
  std::chrono::steady_clock::time_point next_{};
  bool first_ = true;
};

}  // namespace fructosa::sensors
