// Hdf5Source (hdf5_source.h): a small reader of lmaster's HDF5 files on the HDF5 C API, of its
// own (the writer's helpers live in fructosa_master, which the report does not link). This file
// finds the files (a series, a directory) and orders them, and gathers what jobs() and job()
// return; the HDF5 reading itself (files, attributes, datasets, tables) is hdf5_tables.h's.
#include "hdf5_source.h"

#include <hdf5.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <regex>
#include <set>
#include <system_error>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "hdf5_tables.h"

namespace fructosa::report {

namespace fs = std::filesystem;
using namespace hdf5_read;

namespace {

constexpr const char* kFormat = "fructosa lmaster HDF5 output";
constexpr const char* kJobCgroup = "JobCgroup";
constexpr const char* kUserLabel = "user";

// --- files --------------------------------------------------------------------------------------

struct FileInfo {
  fs::path path;
  std::string created;
};

// The root attributes of an lmaster file; nullopt when the HDF5 file is not one.
std::optional<FileInfo> lmaster_file(const fs::path& path, std::chrono::milliseconds retry) {
  OpenFile file = open_file(path, retry);
  const hid_t root = file.file.get();
  if (text_attribute(root, "format") != kFormat) return std::nullopt;
  const auto version = integer_attribute(root, "format_version");
  if (version && *version != 1 && *version != 2)
    fail(path, "format_version " + std::to_string(*version) +
                   ": this reader knows versions 1 (per_host) and 2 (per_sensor)");
  return FileInfo{path, text_attribute(root, "created").value_or("")};
}

FileInfo require_lmaster_file(const fs::path& path, std::chrono::milliseconds retry) {
  auto info = lmaster_file(path, retry);
  if (!info)
    fail(path, std::string("not an lmaster HDF5 file (its root attribute format is not \"") +
                   kFormat + "\")");
  return *info;
}

// (UTC time, N) of a name <anything>-YYYYmmddTHHMMSSZ[-N].<ext>; ("", 0) for other names.
std::pair<std::string, long> series_stamp(const fs::path& path) {
  static const std::regex stamp(R"(-(\d{8}T\d{6}Z)(?:-(\d+))?\.[^.]*$)");
  std::smatch match;
  const std::string name = path.filename().string();
  if (!std::regex_search(name, match, stamp)) return {"", 0};
  return {match[1].str(), match[2].matched ? std::strtol(match[2].str().c_str(), nullptr, 10) : 0};
}

std::vector<fs::path> in_time_order(std::vector<FileInfo> files) {
  std::sort(files.begin(), files.end(), [](const FileInfo& a, const FileInfo& b) {
    return std::make_tuple(a.created, series_stamp(a.path), a.path.filename().string()) <
           std::make_tuple(b.created, series_stamp(b.path), b.path.filename().string());
  });
  std::vector<fs::path> paths;
  for (auto& file : files) paths.push_back(std::move(file.path));
  return paths;
}

fs::path canonical_or_self(const fs::path& path) {
  std::error_code error;
  fs::path canonical = fs::canonical(path, error);
  return error ? path : canonical;
}

std::string count_files(std::size_t count) {
  return " (" + std::to_string(count) + (count == 1 ? " file)" : " files)");
}

// Runs `read` on a freshly opened `path`; a file being written is read again (reopened) when
// HDF5 fails meanwhile (lmaster reopened it without SWMR and rewrote metadata the reader had
// cached), up to `retry`.
template <typename Read>
auto read_file(const fs::path& path, std::chrono::milliseconds retry, Read read) {
  const auto deadline = Clock::now() + retry;
  for (;;) {
    OpenFile file = open_file(path, retry);
    try {
      return read(file);
    } catch (const SourceError&) {
      if (!file_being_written(path) || Clock::now() >= deadline) throw;
    }
    file.file.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// read_file with read(file, closed): `closed` when no writer had the file open, before it was
// opened and after it was read, so that its `jobs` attributes are complete and may be used to
// skip the file, tables and hosts without a job. While a writer has it open they lag by up to a
// minute (docs/hdf5.md): only the `job` columns say then. (lmaster closes the file being written
// for a moment to add objects and attributes; a read that began in such a moment and saw the
// attributes from before them is read again when the writer has the file open by its end.)
template <typename Read>
auto read_lmaster_file(const fs::path& path, std::chrono::milliseconds retry, Read read) {
  const bool closed = !file_being_written(path);
  auto result = read_file(path, retry, [&](const OpenFile& file) { return read(file, closed); });
  if (closed && file_being_written(path))
    result = read_file(path, retry, [&](const OpenFile& file) { return read(file, false); });
  return result;
}

// --- what is gathered ---------------------------------------------------------------------------

struct JobTally {
  std::set<std::string> hosts;
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = std::numeric_limits<std::int64_t>::min();
  std::optional<std::pair<std::int64_t, std::string>> user;  // (time, value) of the latest
};

// A label's latest non-empty value: later rows win (time, then order read).
void keep_latest(std::optional<std::pair<std::int64_t, std::string>>& latest, std::int64_t time,
                 std::string_view value) {
  if (value.empty() || (latest && time < latest->first)) return;
  latest.emplace(time, std::string(value));
}

using JobTallies = std::map<std::uint64_t, JobTally>;

// Whether an object's `jobs` attribute names a job (an id other than 0); true without one.
bool may_hold_jobs(hid_t object) {
  const auto jobs = jobs_attribute(object);
  return !jobs || (!jobs->empty() && jobs->back() != 0);
}

// Whether an object's `jobs` attribute names `id`; true without one.
bool may_hold_job(hid_t object, std::uint64_t id) {
  const auto jobs = jobs_attribute(object);
  return !jobs || std::binary_search(jobs->begin(), jobs->end(), id);
}

JobTallies tally_file(const OpenFile& file, bool closed) {
  JobTallies tallies;
  if (closed && !may_hold_jobs(file.file.get())) return tallies;
  const KeepGroup keep = closed ? KeepGroup(may_hold_jobs) : KeepGroup();
  for (const Table& table : tables_of(file, keep)) {
    RowKeys keys(file, table);
    std::optional<TextColumn> user;
    if (table.sensor == kJobCgroup) user = label_column(file, table, kUserLabel);
    // Rows of jobs, for the label `user` (read afterwards, over those rows only).
    std::vector<hsize_t> user_rows;
    std::vector<std::pair<std::int64_t, JobTally*>> user_row_jobs;
    // The hosts (indexes of keys.hosts()) of each job in this table.
    struct TableJob {
      JobTally* tally = nullptr;
      std::vector<char> hosts;
    };
    std::unordered_map<std::uint64_t, TableJob> table_jobs;
    std::uint64_t last_job = 0;
    TableJob* current = nullptr;
    keys.each([](std::uint64_t job) { return job != 0; },
              [&](hsize_t row, std::int64_t time, std::uint64_t job, std::uint32_t host) {
                if (!current || job != last_job) {
                  current = &table_jobs[job];
                  if (!current->tally) current->tally = &tallies[job];
                  last_job = job;
                }
                if (host >= current->hosts.size()) current->hosts.resize(host + 1, 0);
                current->hosts[host] = 1;
                JobTally* tally = current->tally;
                tally->first = std::min(tally->first, time);
                tally->last = std::max(tally->last, time);
                if (user) {
                  user_rows.push_back(row);
                  user_row_jobs.emplace_back(time, tally);
                }
              });
    for (const auto& [job, seen] : table_jobs)
      for (std::size_t host = 0; host < seen.hosts.size(); ++host)
        if (seen.hosts[host]) seen.tally->hosts.insert(keys.hosts()[host]);
    if (user && !user_rows.empty()) {
      const auto values = pick_texts(file, *user, user_rows);
      for (std::size_t i = 0; i < values.size(); ++i)
        keep_latest(user_row_jobs[i].second->user, user_row_jobs[i].first, values[i]);
    }
  }
  return tallies;
}

using Latest = std::optional<std::pair<std::int64_t, std::string>>;

// One sensor's rows of the job on one host in one table of one file: the times, each column of
// the table (NaN where a row has no value) and each label's latest non-empty value.
struct Piece {
  std::vector<std::int64_t> time;
  std::map<std::string, std::vector<double>> columns;
  std::map<std::string, Latest> labels;
};

// host -> sensor -> pieces, in the order read (files oldest first). Kept apart until the whole
// job is read, so that every series is made once at its size (no vector grown by appending).
using JobRows = std::map<std::string, std::map<std::string, std::vector<Piece>>>;

JobRows job_rows_of_file(const OpenFile& file, std::uint64_t id, bool closed) {
  JobRows result;
  auto may_hold = [id](hid_t object) { return may_hold_job(object, id); };
  if (closed && !may_hold(file.file.get())) return result;
  const KeepGroup keep = closed ? KeepGroup(may_hold) : KeepGroup();
  for (const Table& table : tables_of(file, keep)) {
    RowKeys keys(file, table);
    std::vector<hsize_t> rows;
    std::vector<std::int64_t> times;
    std::vector<std::uint32_t> hosts;
    keys.each([id](std::uint64_t job) { return job == id; },
              [&](hsize_t row, std::int64_t time, std::uint64_t, std::uint32_t host) {
                rows.push_back(row);
                times.push_back(time);
                hosts.push_back(host);
              });
    if (rows.empty()) continue;
    // The rows of each host (index into rows), and its piece.
    std::map<std::uint32_t, std::vector<std::size_t>> by_host;
    for (std::size_t i = 0; i < rows.size(); ++i) by_host[hosts[i]].push_back(i);
    std::map<std::uint32_t, Piece> pieces;
    for (const auto& [host, indexes] : by_host) {
      Piece& piece = pieces[host];
      piece.time.reserve(indexes.size());
      for (std::size_t i : indexes) piece.time.push_back(times[i]);
    }
    for (const auto& link : hard_links(file, table.group.get(), table.where)) {
      if (link == "time" || link == "job" || link == "host") continue;
      const std::string where = table.where + "/" + link;
      Handle dataset = open_object(file, table.group.get(), link, H5I_DATASET, where);
      if (!dataset) continue;  // the labels group
      const std::string key = text_attribute(dataset.get(), "key").value_or(hdf5_unescape(link));
      dataset.reset();
      const NumberColumn column = open_numbers(file, table.group.get(), link, where);
      const std::vector<double> values = pick_numbers(file, column, rows);
      for (const auto& [host, indexes] : by_host) {
        std::vector<double> mine;
        mine.reserve(indexes.size());
        for (std::size_t i : indexes) mine.push_back(values[i]);
        pieces[host].columns[key] = std::move(mine);
      }
    }
    Handle labels =
        open_object(file, table.group.get(), "labels", H5I_GROUP, table.where + "/labels");
    if (labels) {
      for (const auto& link : hard_links(file, labels.get(), table.where + "/labels")) {
        const std::string where = table.where + "/labels/" + link;
        Handle dataset = open_object(file, labels.get(), link, H5I_DATASET, where);
        if (!dataset) continue;
        const std::string key = text_attribute(dataset.get(), "key").value_or(hdf5_unescape(link));
        dataset.reset();
        const TextColumn column = open_text(file, labels.get(), link, where);
        const std::vector<std::string> values = pick_texts(file, column, rows);
        for (const auto& [host, indexes] : by_host) {
          auto& latest = pieces[host].labels[key];
          for (std::size_t i : indexes) keep_latest(latest, times[i], values[i]);
        }
      }
    }
    for (auto& [host, piece] : pieces)
      result[keys.hosts()[host]][table.sensor].push_back(std::move(piece));
  }
  return result;
}

// A host's series and labels from its pieces (freed as they are used: the pieces and the series
// made of them are not held twice).
HostData host_data(const std::string& host, std::map<std::string, std::vector<Piece>>& sensors) {
  HostData data;
  data.host = host;
  for (auto& [sensor, pieces] : sensors) {
    data.sensors.push_back(sensor);
    std::vector<std::size_t> piece_rows;
    for (const Piece& piece : pieces) piece_rows.push_back(piece.time.size());
    const std::size_t rows = std::accumulate(piece_rows.begin(), piece_rows.end(), std::size_t{0});
    std::vector<std::int64_t> times;
    times.reserve(rows);
    for (Piece& piece : pieces) {
      times.insert(times.end(), piece.time.begin(), piece.time.end());
      std::vector<std::int64_t>().swap(piece.time);
    }
    // Time order (rows are stored in the order lmaster received them).
    std::vector<std::size_t> order;
    const bool sorted = std::is_sorted(times.begin(), times.end());
    if (!sorted) {
      order.resize(rows);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return times[a] < times[b]; });
      std::vector<std::int64_t> in_order;
      in_order.reserve(rows);
      for (std::size_t i : order) in_order.push_back(times[i]);
      times.swap(in_order);
    }
    // Every key of any piece: NaN in the rows of pieces without it.
    std::set<std::string> keys;
    for (const Piece& piece : pieces)
      for (const auto& [key, values] : piece.columns) keys.insert(key);
    std::vector<std::pair<std::string, std::vector<double>>> kept;
    for (const auto& key : keys) {
      std::vector<double> values;
      if (pieces.size() == 1) {
        values = std::move(pieces.front().columns.at(key));
      } else {
        values.reserve(rows);
        for (std::size_t p = 0; p < pieces.size(); ++p) {
          auto found = pieces[p].columns.find(key);
          if (found == pieces[p].columns.end()) {
            values.insert(values.end(), piece_rows[p], kNaN);
          } else {
            values.insert(values.end(), found->second.begin(), found->second.end());
            pieces[p].columns.erase(found);
          }
        }
      }
      if (std::all_of(values.begin(), values.end(), [](double v) { return std::isnan(v); }))
        continue;
      if (!sorted) {
        std::vector<double> in_order;
        in_order.reserve(rows);
        for (std::size_t i : order) in_order.push_back(values[i]);
        values.swap(in_order);
      }
      kept.emplace_back(sensor + "." + key, std::move(values));
    }
    // Every series of the sensor has these times: a copy each (Series owns its times), the last
    // takes them.
    for (std::size_t i = 0; i < kept.size(); ++i) {
      Series series;
      series.time_ns = i + 1 == kept.size() ? std::move(times) : times;
      series.values = std::move(kept[i].second);
      data.metrics.emplace(std::move(kept[i].first), std::move(series));
    }
    std::map<std::string, Latest> labels;
    for (const Piece& piece : pieces)
      for (const auto& [key, latest] : piece.labels)
        if (latest) keep_latest(labels[key], latest->first, latest->second);
    for (const auto& [key, latest] : labels)
      if (latest) data.labels.emplace(sensor + "." + key, latest->second);
    pieces.clear();
  }
  return data;
}

// `text` as a regular expression that matches it literally.
std::string regex_quote(const std::string& text) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(text, special, R"(\$&)");
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string hdf5_unescape(std::string_view link) {
  if (link == "%") return "";
  std::string name;
  name.reserve(link.size());
  for (std::size_t i = 0; i < link.size(); ++i) {
    if (link[i] == '%' && i + 2 < link.size() && hex_digit(link[i + 1]) >= 0 &&
        hex_digit(link[i + 2]) >= 0) {
      name += static_cast<char>(hex_digit(link[i + 1]) * 16 + hex_digit(link[i + 2]));
      i += 2;
    } else {
      name += link[i];
    }
  }
  return name;
}

Hdf5Source::Hdf5Source(fs::path where, std::chrono::milliseconds open_retry)
    : open_retry_(open_retry) {
  quiet_hdf5();
  try {
    find_files(where);
  } catch (const fs::filesystem_error& error) {
    fail(error.path1().empty() ? where : error.path1(), error.code().message());
  }
}

void Hdf5Source::find_files(const fs::path& where) {
  std::error_code error;
  const auto link_status = fs::symlink_status(where, error);
  if (!fs::exists(link_status)) fail(where, "no such file or directory");
  const auto status = fs::status(where, error);
  if (!fs::exists(status))
    fail(where, "a symbolic link to " + fs::read_symlink(where, error).string() +
                    ", which does not exist");
  std::vector<FileInfo> found;
  if (fs::is_directory(status)) {
    // Every *.h5 that lmaster wrote (the link `path` and its target are the same file once).
    std::set<fs::path> seen;
    for (const auto& entry : fs::directory_iterator(where, error)) {
      if (entry.path().extension() != ".h5" || !fs::is_regular_file(entry.status())) continue;
      if (!seen.insert(canonical_or_self(entry.path())).second) continue;
      if (!has_hdf5_signature(entry.path())) continue;
      if (auto info = lmaster_file(entry.path(), open_retry_)) found.push_back(*info);
    }
    if (error) fail(where, "cannot list the directory: " + error.message());
    if (found.empty()) fail(where, std::string("no lmaster HDF5 files (") + kFormat + ") in it");
    description_ = (where / "*.h5").string() + count_files(found.size());
  } else if (fs::is_symlink(link_status)) {
    // The configured `path`: the series <stem>-<UTC time>[-N]<ext> beside it, and its target.
    fs::path directory = where.parent_path();
    if (directory.empty()) directory = ".";
    const std::string stem = where.stem().string();
    const std::string extension = where.has_extension() ? where.extension().string() : ".h5";
    const std::regex member(regex_quote(stem) + R"(-\d{8}T\d{6}Z(-\d+)?)" + regex_quote(extension));
    // The target as the link names it (lmaster's: the file name), beside the link.
    fs::path target = fs::read_symlink(where);
    if (target.is_relative()) target = directory / target;
    std::set<fs::path> seen{canonical_or_self(target)};
    found.push_back(require_lmaster_file(target, open_retry_));
    for (const auto& entry : fs::directory_iterator(directory, error)) {
      const std::string name = entry.path().filename().string();
      if (!std::regex_match(name, member) || entry.is_symlink() || !entry.is_regular_file())
        continue;
      if (!seen.insert(canonical_or_self(entry.path())).second) continue;
      found.push_back(require_lmaster_file(entry.path(), open_retry_));
    }
    if (error) fail(directory, "cannot list the directory: " + error.message());
    description_ = (directory / (stem + "-*" + extension)).string() + count_files(found.size());
  } else {
    found.push_back(require_lmaster_file(where, open_retry_));
    description_ = where.string();
  }
  files_ = in_time_order(std::move(found));
}

std::vector<JobSummary> Hdf5Source::jobs() {
  quiet_hdf5();
  JobTallies all;
  for (const auto& path : files_) {
    JobTallies tallies = read_lmaster_file(path, open_retry_, tally_file);
    for (auto& [id, tally] : tallies) {
      JobTally& into = all[id];
      into.hosts.merge(tally.hosts);
      into.first = std::min(into.first, tally.first);
      into.last = std::max(into.last, tally.last);
      if (tally.user) keep_latest(into.user, tally.user->first, tally.user->second);
    }
  }
  std::vector<JobSummary> summaries;
  for (auto& [id, tally] : all) {
    JobSummary summary;
    summary.id = id;
    summary.user = tally.user ? tally.user->second : "";
    summary.hosts.assign(tally.hosts.begin(), tally.hosts.end());
    summary.first_ns = tally.first;
    summary.last_ns = tally.last;
    summaries.push_back(std::move(summary));
  }
  return summaries;
}

std::optional<JobData> Hdf5Source::job(std::uint64_t id) {
  quiet_hdf5();
  if (id == 0) return std::nullopt;
  JobRows all;
  for (const auto& path : files_) {
    JobRows rows = read_lmaster_file(path, open_retry_, [id](const OpenFile& file, bool closed) {
      return job_rows_of_file(file, id, closed);
    });
    for (auto& [host, sensors] : rows)
      for (auto& [sensor, pieces] : sensors) {
        auto& into = all[host][sensor];
        for (Piece& piece : pieces) into.push_back(std::move(piece));
      }
  }
  if (all.empty()) return std::nullopt;
  JobData data;
  data.id = id;
  for (auto& [host, sensors] : all) data.hosts.push_back(host_data(host, sensors));
  return data;
}

std::string Hdf5Source::describe() const { return description_; }

}  // namespace fructosa::report