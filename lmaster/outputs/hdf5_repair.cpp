// What the HDF5 output does at start before it writes: takes the series' lock, moves aside a
// regular file at `path` (an older lmaster's), repairs and compresses the files a killed writer
// left open, and reads back their last rows so that samples the journal replays after a crash are
// not stored twice (already_stored).
#include "hdf5_output_impl.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <system_error>

#include "durable_file.h"

namespace fructosa::master {

using namespace hdf5;

namespace {

// HDF5's signature, at byte 0 or after a user block (512, 1024, 2048... bytes): any superblock
// version, so that files of older writers are not mistaken for damaged ones.
bool has_hdf5_signature(const fs::path& path) {
  static constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return true;  // cannot tell: leave it to the repair, which says why
  bool found = false;
  char head[8];
  for (off_t at = 0; !found && at <= (off_t{1} << 30); at = at ? at * 2 : 512) {
    if (::pread(fd, head, sizeof head, at) != sizeof head) break;
    found = std::memcmp(head, kSignature, sizeof head) == 0;
  }
  ::close(fd);
  return found;
}

// /.flushed of a file left open: {journal record, rows} of its last complete flush; nullopt when
// it has none (an older lmaster's file) or it cannot be read.
std::optional<std::array<std::uint64_t, 2>> read_flushed_mark(const fs::path& path) {
  try {
    const std::string name = path.string();
    Handle access = file_access_properties(name);
    Handle file = open_left_open_file(name, access.get());
    if (H5Lexists(file.get(), kFlushedLink, H5P_DEFAULT) <= 0) return std::nullopt;
    Handle mark = check(name, H5Dopen2(file.get(), kFlushedLink, H5P_DEFAULT), H5Dclose, "cannot open /.flushed");
    if (dataset_rows(name, mark.get(), "/.flushed") != 2) return std::nullopt;
    std::array<std::uint64_t, 2> values{};
    read_rows(name, mark.get(), H5T_NATIVE_UINT64, 0, 2, values.data(), "/.flushed");
    return values;
  } catch (const std::exception& failure) {
    spdlog::warn("hdf5: {}", failure.what());
    return std::nullopt;
  }
}

}  // namespace

void Hdf5Output::Impl::take_lock() {
  const std::string lock_path = link_path + ".lock";
  lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0)
    throw std::runtime_error(fmt::format("HDF5 output {}: cannot open the lock file {}: {}",
                                         link_path, lock_path, std::strerror(errno)));
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(lock_fd);
    lock_fd = -1;
    throw std::runtime_error(fmt::format(
        "HDF5 output {}: {}", link_path,
        error == EWOULDBLOCK ? "another lmaster writes this series (it holds " + lock_path + ")"
                             : "cannot lock " + lock_path + ": " + std::strerror(error)));
  }
}

// Older lmasters wrote `path` itself: keep that file under a name of the series.
void Hdf5Output::Impl::move_away_regular_file() {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(series.link, error);
  if (!fs::exists(status) || fs::is_symlink(status)) return;
  if (!fs::is_regular_file(status))
    throw std::runtime_error(fmt::format(
        "HDF5 output {}: exists and is neither a file nor a symbolic link", link_path));
  struct stat status_of_file {};
  const std::time_t when = ::stat(link_path.c_str(), &status_of_file) == 0
                               ? status_of_file.st_mtime
                               : std::time(nullptr);
  const fs::path kept = series.free_name(when);
  fs::rename(series.link, kept, error);
  if (error)
    throw std::runtime_error(
        fmt::format("HDF5 output {}: is a regular file and cannot be "
                    "renamed to {}: {}",
                    link_path, kept.string(), error.message()));
  spdlog::warn(
      "hdf5: {} was a regular file (written by an older lmaster): renamed it to {}; "
      "{} is now a symbolic link to the file being written",
      link_path, kept.string(), link_path);
}

// At start: files of the series whose compression was interrupted, and files a killed lmaster
// left open (their superblock still says so), are compressed (and so repaired) now.
void Hdf5Output::Impl::compact_left_over_files() {
  std::error_code error;
  std::vector<fs::path> interrupted, left_open, members;
  for (const auto& entry : fs::directory_iterator(series.directory, error)) {
    std::error_code type_error;
    if (!entry.is_regular_file(type_error) || entry.is_symlink(type_error)) continue;
    const std::string name = entry.path().filename().string();
    const std::string suffix = ".compact";
    if (name.size() > 1 + suffix.size() && name[0] == '.' &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string member = name.substr(1, name.size() - 1 - suffix.size());
      if (!series.is_member(member)) continue;
      fs::remove(entry.path(), error);
      if (fs::exists(series.directory / member, error))
        interrupted.push_back(series.directory / member);
      continue;
    }
    if (!series.is_member(name)) continue;
    if (!has_hdf5_signature(entry.path())) {
      move_aside_damaged(entry.path(), "it does not start as an HDF5 file (after a power cut: its first "
                                       "blocks never reached the disk)");
      continue;
    }
    members.push_back(entry.path());
    auto flags = superblock_flags(entry.path());
    if (flags && *flags != 0) left_open.push_back(entry.path());
  }
  for (auto* files : {&interrupted, &left_open}) {
    std::sort(files->begin(), files->end());
    files->erase(std::unique(files->begin(), files->end()), files->end());
  }
  // The newest file, when a crash left it open: which journal records its last complete flush
  // held (read before the repair, which leaves /.flushed out), and how many rows it has.
  std::optional<std::array<std::uint64_t, 2>> newest_mark;
  std::optional<std::uint64_t> newest_rows;
  // Oldest first: by time stamp, then by the -N of files started in the same second.
  auto order = [&](const fs::path& path) {
    std::string middle = path.filename().string().substr(series.stem.size() + 1);
    middle.resize(middle.size() - series.extension.size());
    const int attempt = middle.size() > 17 ? std::atoi(middle.c_str() + 17) : 0;
    return std::make_pair(middle.substr(0, 16), attempt);
  };
  std::sort(members.begin(), members.end(), [&](const fs::path& a, const fs::path& b) { return order(a) < order(b); });
  auto holds = [](const std::vector<fs::path>& files, const fs::path& path) {
    return std::find(files.begin(), files.end(), path) != files.end();
  };
  const fs::path newest = members.empty() ? fs::path() : members.back();
  if (!newest.empty() && holds(left_open, newest)) newest_mark = read_flushed_mark(newest);
  std::vector<fs::path> repaired;
  for (const auto& path : left_open) {
    interrupted.erase(std::remove(interrupted.begin(), interrupted.end(), path),
                      interrupted.end());
    try {
      const Compaction done = compact_file(path.string());
      if (path == newest) newest_rows = done.rows;
      repaired.push_back(path);
      spdlog::warn(
          "hdf5: {} was left open by a writer that stopped without closing it: "
          "repaired and compressed ({} -> {} bytes, {} table(s) cut back to their last "
          "complete flush) in {:.1f} s",
          path.string(), done.bytes_before, done.bytes_after, done.tables_cut, done.seconds);
    } catch (const std::exception& failure) {
      move_aside_damaged(path, fmt::format("it was left open by a writer that stopped and cannot be repaired: {}",
                                           failure.what()));
      members.erase(std::remove(members.begin(), members.end(), path), members.end());
    }
  }
  for (const auto& path : interrupted) compact_and_log(path.string());
  if (left_open.empty()) return;
  // A crash: what the journal replays may be in these files already. When the newest file holds
  // exactly the rows of its last complete flush, /.flushed names the journal records they are:
  // the runner skips those, and the replay needs nothing else (a clock stepped back included).
  if (newest_mark && (*newest_mark)[0] > 0 && newest_rows) {
    if ((*newest_mark)[1] == *newest_rows) {
      stored_through = (*newest_mark)[0];
      spdlog::info("hdf5: {} holds every sample of lmaster's journal up to record {} ({} rows)",
                   newest.string(), *stored_through, *newest_rows);
      return;
    }
    spdlog::warn("hdf5: {}: its last flush was cut short ({} complete rows, {} at the flush before): "
                 "samples the journal sends again are compared with its rows' times",
                 newest.string(), *newest_rows, (*newest_mark)[1]);
  }
  // Otherwise by time: rows up to the newest time of each series in the repaired files (or in
  // the newest file, when the crash came right after a rotation) are taken as stored.
  // A file moved aside holds nothing of the series any more: the journal's replay stores its rows again.
  if (!members.empty() && !holds(repaired, members.back())) repaired.push_back(members.back());
  for (const auto& path : repaired) remember_stored_rows(path.string());
}

// A file of the series that cannot be read leaves the series (readers of the series would fail on
// it), kept beside it for inspection. Its rows that the journal still holds are written again.
void Hdf5Output::Impl::move_aside_damaged(const fs::path& path, const std::string& why) {
  fs::path aside = path;
  aside += ".damaged";
  std::error_code error;
  for (int n = 1; fs::exists(aside, error); ++n) {
    aside = path;
    aside += fmt::format(".damaged.{}", n);
  }
  fs::rename(path, aside, error);
  if (error) {
    spdlog::error("hdf5: {}: {}; cannot move it aside: {}", path.string(), why, error.message());
    return;
  }
  try {
    sync_directory(path.parent_path());
  } catch (const std::exception& failure) {
    spdlog::error("hdf5: {}", failure.what());
  }
  spdlog::error("hdf5: {}: {}; moved aside as {} (the rows lmaster's journal still has are written again)",
                path.string(), why, aside.string());
}

// The journal's replay is over: the marks go, whatever series have not passed theirs (a sample
// that comes now was received after the start, even if its clock says it is older).
void Hdf5Output::Impl::forget_stored_rows() {
  if (stored_before_crash.empty()) return;
  spdlog::info("hdf5: the journal's replay is over: {} sample(s) sent again after the crash were already in {} "
               "and were not stored twice", skipped_as_stored, link_path);
  stored_before_crash.clear();
}

bool Hdf5Output::Impl::already_stored(const Table& table, const Sample& sample) {
  auto mark = stored_before_crash.find({hdf5_link_name(sample.host), table.sensor_link, sample.job});
  if (mark == stored_before_crash.end()) return false;
  if (sample.time_ns > mark->second) {
    stored_before_crash.erase(mark);
    if (stored_before_crash.empty() && skipped_as_stored > 0)
      spdlog::info("hdf5: {} samples sent again after the crash were already in {} and were not stored twice",
                   skipped_as_stored, link_path);
    return false;
  }
  ++skipped_as_stored;
  return true;
}

// The newest row time per host and job of every table in `path` (its last rows only: a replay
// after a crash covers seconds). Either layout: a group at the root with a `time` dataset is a
// per_sensor table, /.jobs the job index, any other group a host's.
void Hdf5Output::Impl::remember_stored_rows(const std::string& path) {
  try {
    Handle access = file_access_properties(path);
    Handle file = open_left_open_file(path, access.get());
    for (const auto& top_link : hard_links(path, file.get(), "/")) {
      if (top_link == kJobIndexLink) continue;  // the job index: no table
      Handle top = check(path, H5Oopen(file.get(), top_link.c_str(), H5P_DEFAULT), H5Oclose, "cannot open " + top_link);
      if (H5Iget_type(top.get()) != H5I_GROUP) continue;
      if (H5Lexists(top.get(), kTime, H5P_DEFAULT) > 0) {
        remember_table_rows(path, top.get(), "/" + top_link, "", top_link);
        continue;
      }
      for (const auto& sensor_link : hard_links(path, top.get(), "/" + top_link)) {
        const std::string where = "/" + top_link + "/" + sensor_link;
        Handle table = check(path, H5Oopen(top.get(), sensor_link.c_str(), H5P_DEFAULT), H5Oclose, "cannot open " + where);
        if (H5Iget_type(table.get()) == H5I_GROUP) remember_table_rows(path, table.get(), where, top_link, sensor_link);
      }
    }
  } catch (const std::exception& failure) {
    spdlog::warn("hdf5: cannot read the last rows of {} ({}): samples sent again after the crash may be "
                 "stored twice", path, failure.what());
  }
}

// One table's marks; `host_link` "" for a per_sensor table, whose rows name their host.
void Hdf5Output::Impl::remember_table_rows(const std::string& path, hid_t table,
                                           const std::string& where, const std::string& host_link,
                                           const std::string& sensor_link) {
  constexpr hsize_t kTailRows = 1 << 16;
  const bool host_column = host_link.empty();
  if (H5Lexists(table, kTime, H5P_DEFAULT) <= 0 || H5Lexists(table, kJob, H5P_DEFAULT) <= 0 ||
      (host_column && H5Lexists(table, kHost, H5P_DEFAULT) <= 0))
    return;
  Handle time = check(path, H5Dopen2(table, kTime, H5P_DEFAULT), H5Dclose, "cannot open " + where + "/time");
  Handle job = check(path, H5Dopen2(table, kJob, H5P_DEFAULT), H5Dclose, "cannot open " + where + "/job");
  Handle host;
  hsize_t rows = std::min(dataset_rows(path, time.get(), where + "/time"),
                          dataset_rows(path, job.get(), where + "/job"));
  if (host_column) {
    host = check(path, H5Dopen2(table, kHost, H5P_DEFAULT), H5Dclose, "cannot open " + where + "/host");
    rows = std::min(rows, dataset_rows(path, host.get(), where + "/host"));
  }
  const hsize_t start = rows > kTailRows ? rows - kTailRows : 0;
  std::vector<std::int64_t> times(rows - start);
  std::vector<std::uint64_t> jobs(rows - start);
  read_rows(path, time.get(), H5T_NATIVE_INT64, start, rows - start, times.data(), where + "/time");
  read_rows(path, job.get(), H5T_NATIVE_UINT64, start, rows - start, jobs.data(), where + "/job");
  std::vector<char> hosts;
  std::size_t width = 0;
  if (host_column) {
    Handle type = check(path, H5Dget_type(host.get()), H5Tclose, "cannot read " + where + "/host");
    width = H5Tget_size(type.get());
    if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0 || width == 0)
      fail(path, where + "/host is not a fixed-length string");
    hosts.resize((rows - start) * width);
    read_rows(path, host.get(), type.get(), start, rows - start, hosts.data(), where + "/host");
  }
  for (std::size_t i = 0; i < times.size(); ++i) {
    if (times[i] == 0) continue;  // grown, never written
    std::string row_host_link = host_link;
    if (host_column) {
      const char* text = hosts.data() + i * width;
      row_host_link = hdf5_link_name(std::string(text, strnlen(text, width)));
    }
    auto& mark = stored_before_crash[{row_host_link, sensor_link, jobs[i]}];
    mark = std::max(mark, times[i]);
  }
}

}  // namespace fructosa::master
