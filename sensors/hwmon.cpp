#include "hwmon.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <string>

#include "metric.h"

namespace fructosa::sensors {

SysfsAttribute::~SysfsAttribute() {
  if (fd_ >= 0) ::close(fd_);
}

SysfsAttribute::SysfsAttribute(SysfsAttribute&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), absent_(other.absent_) {
  other.fd_ = -1;
}

SysfsAttribute& SysfsAttribute::operator=(SysfsAttribute&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    absent_ = other.absent_;
    other.fd_ = -1;
  }
  return *this;
}

std::optional<std::string_view> SysfsAttribute::read() {
  if (fd_ < 0) {
    if (absent_) return std::nullopt;
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      absent_ = errno == ENOENT;
      return std::nullopt;
    }
  }
  ssize_t got;
  do got = ::pread(fd_, buffer_, sizeof buffer_ - 1, 0);
  while (got < 0 && errno == EINTR);
  if (got < 0) {  // e.g. ENODATA from a sensor that is not ready, ENODEV from a removed device
    ::close(fd_);
    fd_ = -1;
    return std::nullopt;
  }
  return std::string_view(buffer_, static_cast<std::size_t>(got));
}

std::optional<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char chunk[4096];
  for (;;) {
    ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (got == 0) break;
    text.append(chunk, static_cast<std::size_t>(got));
  }
  ::close(fd);
  return text;
}

std::string_view strip(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  auto begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(kSpace) - begin + 1);
}

namespace {

// Python accepts '_' between two digits in numeric literals given to int() and float().
bool drop_underscores(std::string_view text, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '_') {
      out += text[i];
      continue;
    }
    bool digit_before = i > 0 && std::isdigit(static_cast<unsigned char>(text[i - 1]));
    bool digit_after = i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (!digit_before || !digit_after) return false;
  }
  return true;
}

}  // namespace

std::optional<double> python_float(std::string_view text) {
  text = strip(text);
  std::string buffer;  // short-lived: only taken for the rare '_' or '+' forms
  if (text.find('_') != std::string_view::npos) {
    if (!drop_underscores(text, buffer)) return std::nullopt;
    text = buffer;
  }
  bool negative = false;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || text[0] == '+' || text[0] == '-') return std::nullopt;
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  // from_chars also reads "nan(chars)", which Python refuses.
  if (error != std::errc() || end != text.data() + text.size() || text.find('(') != text.npos)
    return std::nullopt;
  return negative ? -value : value;
}

std::optional<std::int64_t> python_int(std::string_view text) {
  text = strip(text);
  std::string buffer;
  if (text.find('_') != std::string_view::npos) {
    if (!drop_underscores(text, buffer)) return std::nullopt;
    text = buffer;
  }
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  if (text.empty() || text[0] == '+') return std::nullopt;
  std::int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

void list_directory(const std::string& path, std::vector<std::string>& names) {
  names.clear();
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return;
  while (const dirent* entry = ::readdir(dir)) {
    std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
}

namespace {

// Adds the bases of `directory`'s <prefix>*_* entries; returns whether any entry matched.
bool add_bases(const std::string& directory, std::string_view prefix,
               std::vector<std::string>& files, std::vector<std::string>& bases) {
  list_directory(directory, files);
  bool matched = false;
  for (const auto& file : files) {
    // glob's <prefix>*_*: starts with the prefix and has a '_' after it.
    if (file.compare(0, prefix.size(), prefix) != 0 || file.find('_', prefix.size()) == file.npos)
      continue;
    matched = true;
    bases.push_back(directory + "/" + file.substr(0, file.find('_')));
  }
  return matched;
}

}  // namespace

std::vector<std::string> hwmon_bases(const std::string& sys_root, std::string_view prefix,
                                     DeviceDirectory device) {
  const std::string class_dir = sys_root + "/class/hwmon";
  std::vector<std::string> hwmons, files, bases;
  list_directory(class_dir, hwmons);
  // Entries are symlinks into /sys/devices on a real system: no d_type filter, a name that is
  // not a directory simply lists as empty.
  std::erase_if(hwmons, [](const std::string& name) { return name.rfind("hwmon", 0) != 0; });
  bool direct = false;
  for (const auto& hwmon : hwmons)
    direct |= add_bases(class_dir + "/" + hwmon, prefix, files, bases);
  if (device == DeviceDirectory::always || !direct)
    for (const auto& hwmon : hwmons)
      add_bases(class_dir + "/" + hwmon + "/device", prefix, files, bases);
  std::sort(bases.begin(), bases.end());
  bases.erase(std::unique(bases.begin(), bases.end()), bases.end());
  return bases;
}

std::string_view parent_directory(std::string_view path) {
  auto slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view{} : path.substr(0, slash);
}

std::string SensorKeys::add(std::string_view chip, std::string_view label) {
  std::string chip_key = key_component(chip);
  Chip& entries = chips_[chip_key];
  std::string index = "#" + std::to_string(entries.entries++);
  std::string component = key_component(label);
  if (component.empty() || entries.used.count(component)) component += index;
  while (entries.used.count(component)) component += index;  // a real label looked like ours
  entries.used.insert(component);
  return chip_key + "." + component;
}

bool Rescan::due() {
  auto now = std::chrono::steady_clock::now();
  list_directory(watched_, listing_);
  bool due = first_ || listing_ != previous_ || now >= next_;
  if (due) {
    first_ = false;
    next_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval_);
  }
  previous_.swap(listing_);
  return due;
}

}  // namespace fructosa::sensors
