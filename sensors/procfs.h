// Reading procfs and sysfs files cheaply: each file is opened once and re-read with pread
// into a buffer that is reused, so a steady round allocates nothing.
#pragma once

#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace fructosa::sensors {

// Owns a file descriptor and closes it.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

class ProcFile {
 public:
  explicit ProcFile(std::string path) : path_(std::move(path)) {}
  ~ProcFile();
  ProcFile(const ProcFile&) = delete;
  ProcFile& operator=(const ProcFile&) = delete;

  // The whole current content. Throws SensorUnavailable naming the file when it cannot be read.
  std::string_view read();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string buffer_;
  int fd_ = -1;
};

// Splits text into lines without copying.
class Lines {
 public:
  explicit Lines(std::string_view text) : rest_(text) {}
  bool next(std::string_view& line) {
    if (rest_.empty()) return false;
    auto end = rest_.find('\n');
    line = rest_.substr(0, end);
    rest_ = end == std::string_view::npos ? std::string_view{} : rest_.substr(end + 1);
    return true;
  }

 private:
  std::string_view rest_;
};

// Next whitespace-separated field of `text` (consumed from the front); empty at the end.
inline std::string_view next_field(std::string_view& text) {
  auto begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) {
    text = {};
    return {};
  }
  text.remove_prefix(begin);
  auto end = text.find_first_of(" \t");
  auto field = text.substr(0, end);
  text.remove_prefix(field.size());
  return field;
}

inline bool parse_uint(std::string_view text, std::uint64_t& value) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace fructosa::sensors
