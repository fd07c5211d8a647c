// Users: psutil.users() on Linux: the USER_PROCESS records of utmp (struct utmp from <utmp.h>,
// what glibc's getutent() reads), in file order. The file is read directly rather than with
// getutent(), whose state is process-global and not thread-safe, and so that `utmp_path` can
// point tests at a fixture. No file, or an empty one, means no one is logged in: count 0.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utmp.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sensor.h"

namespace fructosa::sensors::users_file {
namespace {

const OptionTable kOptions{
    {"utmp_path", OptionType::text, "/var/run/utmp", "utmp file to read (glibc's _PATH_UTMP by default)"},
};

const Catalog kCatalog{
    {"count", Unit::count, Kind::gauge, "login sessions (utmp USER_PROCESS records)"},
    {"*.sessions", Unit::count, Kind::gauge, "login sessions of this user (key: the user name)"},
    {"*.pid", Unit::none, Kind::gauge,
     "process id of session <n>'s login process (key: the session's position 0..count-1; labels "
     "<n>.user, <n>.terminal, <n>.host, <n>.started give its user, tty, remote host and start time "
     "in seconds since the epoch)"},
};

// A char array of utmp (NUL-terminated or filling the whole array) as valid UTF-8: bytes that
// are not (psutil keeps them as surrogate escapes) become U+FFFD, so JSON and HDF5 accept them.
std::string field(const char* text, std::size_t size) {
  std::string_view bytes(text, ::strnlen(text, size));
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    auto byte = [&](std::size_t at) { return at < bytes.size() ? static_cast<unsigned char>(bytes[at]) : 0u; };
    unsigned lead = byte(i);
    std::size_t length = lead < 0x80 ? 1 : lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3
                                       : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
    // The second byte's range depends on the lead (no overlong forms, surrogates or > U+10FFFF).
    unsigned low = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
    unsigned high = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
    bool valid = length > 0 && (length == 1 || (byte(i + 1) >= low && byte(i + 1) <= high));
    for (std::size_t k = 2; valid && k < length; ++k) valid = byte(i + k) >= 0x80 && byte(i + k) <= 0xBF;
    if (valid) {
      out.append(bytes.substr(i, length));
      i += length;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

class UsersSensor final : public Sensor {
 public:
  explicit UsersSensor(const SensorContext& context) : path_(context.options.get_text("utmp_path")) {}

  bool sample(SampleWriter& out) override {
    read_file();
    // First the totals, then each session (its position n in file order, as psutil's list).
    per_user_.clear();
    std::size_t count = 0;
    for_each_session([&](const utmp& record) {
      ++count;
      ++per_user_[key_component(field(record.ut_user, sizeof record.ut_user))];
    });
    out.set("count", static_cast<double>(count));
    for (const auto& [user, sessions] : per_user_) out.set(user + ".sessions", static_cast<double>(sessions));
    std::size_t n = 0;
    for_each_session([&](const utmp& record) {
      std::string terminal = field(record.ut_line, sizeof record.ut_line);
      std::string host = field(record.ut_host, sizeof record.ut_host);
      if (host == ":0" || host == ":0.0") host = "localhost";  // as psutil
      std::string prefix = std::to_string(n++);
      out.set(prefix + ".pid", record.ut_pid);
      out.label(prefix + ".user", field(record.ut_user, sizeof record.ut_user));
      // psutil gives terminal None and host "" when utmp has none; such labels are left out.
      if (!terminal.empty()) out.label(prefix + ".terminal", terminal);
      if (!host.empty()) out.label(prefix + ".host", host);
      // psutil 5.9.4 passes tv_sec through a C float (a 128 s grid today); the exact second here.
      out.label(prefix + ".started", std::to_string(record.ut_tv.tv_sec));
    });
    return true;
  }

 private:
  // Calls `visit` with each USER_PROCESS record of buffer_ (whole records only, as getutent()).
  template <typename Visit>
  void for_each_session(Visit visit) const {
    for (std::size_t offset = 0; offset + sizeof(utmp) <= buffer_.size(); offset += sizeof(utmp)) {
      utmp record;
      std::memcpy(&record, buffer_.data() + offset, sizeof record);
      if (record.ut_type == USER_PROCESS) visit(record);
    }
  }

  // The whole file into buffer_ (left empty when there is no file).
  void read_file() {
    buffer_.clear();
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return;
      throw SensorUnavailable(fmt::format("cannot open {}: {}", path_, std::strerror(errno)));
    }
    struct stat info {};
    std::size_t size = ::fstat(fd, &info) == 0 && info.st_size > 0 ? static_cast<std::size_t>(info.st_size) : 0;
    buffer_.resize(size + sizeof(utmp));  // room for a record appended meanwhile
    std::size_t used = 0;
    while (used < buffer_.size()) {
      ssize_t got = ::pread(fd, buffer_.data() + used, buffer_.size() - used, static_cast<off_t>(used));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        int error = errno;
        ::close(fd);
        throw SensorUnavailable(fmt::format("cannot read {}: {}", path_, std::strerror(error)));
      }
      if (got == 0) break;
      used += static_cast<std::size_t>(got);
    }
    ::close(fd);
    buffer_.resize(used);
  }

  std::string path_;
  std::vector<char> buffer_;
  std::map<std::string, int> per_user_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("Users", "Login sessions from utmp: how many, per user, and each one's details (psutil.users)",
                         kOptions, kCatalog, UsersSensor, .row = DashboardRow::global);

}  // namespace fructosa::sensors::users_file
