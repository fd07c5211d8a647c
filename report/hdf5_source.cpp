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

JobTallies tally_file(const OpenFile& file) {
  JobTallies tallies;
  for (const Table& table : tables_of(file)) {
    RowKeys keys(file, table);
    std::optional<TextColumn> user;
    if (table.sensor == kJobCgroup) user = label_column(file, table, kUserLabel);
    // Rows of jobs, for the label `user` (read afterwards, over those rows only).
    std::vector<hsize_t> user_rows;
    std::vector<std::pair<std::int64_t, JobTally*>> user_row_jobs;
    std::uint64_t last_job = 0;
    JobTally* tally = nullptr;
    keys.each([&](hsize_t row, std::int64_t time, std::uint64_t job, std::uint32_t host) {
      if (job == 0) return;
      if (!tally || job != last_job) {
        tally = &tallies[job];
        last_job = job;
      }
      tally->hosts.insert(keys.hosts()[host]);
      tally->first = std::min(tally->first, time);
      tally->last = std::max(tally->last, time);
      if (user) {
        user_rows.push_back(row);
        user_row_jobs.emplace_back(time, tally);
      }
    });
    if (user && !user_rows.empty()) {
      const auto values = pick_texts(file, *user, user_rows);
      for (std::size_t i = 0; i < values.size(); ++i)
        keep_latest(user_row_jobs[i].second->user, user_row_jobs[i].first, values[i]);
    }
  }
  return tallies;
}

// One sensor's rows of the job on one host: the times, each column (NaN where a row has no
// value) and each label's latest non-empty value.
struct SensorRows {
  std::vector<std::int64_t> time;
  std::map<std::string, std::vector<double>> columns;
  std::map<std::string, std::optional<std::pair<std::int64_t, std::string>>> labels;

  // Appends rows: `times`, and the values of some columns for them; other columns read NaN there.
  void append(const std::vector<std::int64_t>& times,
              std::map<std::string, std::vector<double>>&& values) {
    const std::size_t before = time.size();
    time.insert(time.end(), times.begin(), times.end());
    for (auto& [key, column] : values) {
      auto& into = columns[key];
      into.resize(before, kNaN);
      into.insert(into.end(), column.begin(), column.end());
    }
    for (auto& [key, column] : columns) column.resize(time.size(), kNaN);
  }
  void merge_labels(
      const std::map<std::string, std::optional<std::pair<std::int64_t, std::string>>>& more) {
    for (const auto& [key, latest] : more)
      if (latest) keep_latest(labels[key], latest->first, latest->second);
  }
};

// host -> sensor -> rows
using JobRows = std::map<std::string, std::map<std::string, SensorRows>>;

JobRows job_rows_of_file(const OpenFile& file, std::uint64_t id) {
  JobRows result;
  for (const Table& table : tables_of(file)) {
    RowKeys keys(file, table);
    std::vector<hsize_t> rows;
    std::vector<std::int64_t> times;
    std::vector<std::uint32_t> hosts;
    keys.each([&](hsize_t row, std::int64_t time, std::uint64_t job, std::uint32_t host) {
      if (job != id) return;
      rows.push_back(row);
      times.push_back(time);
      hosts.push_back(host);
    });
    if (rows.empty()) continue;
    // The rows of each host (index into rows).
    std::map<std::uint32_t, std::vector<std::size_t>> by_host;
    for (std::size_t i = 0; i < rows.size(); ++i) by_host[hosts[i]].push_back(i);
    std::map<std::uint32_t, std::map<std::string, std::vector<double>>> host_columns;
    std::map<std::uint32_t,
             std::map<std::string, std::optional<std::pair<std::int64_t, std::string>>>>
        host_labels;
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
        host_columns[host][key] = std::move(mine);
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
          auto& latest = host_labels[host][key];
          for (std::size_t i : indexes) keep_latest(latest, times[i], values[i]);
        }
      }
    }
    for (const auto& [host, indexes] : by_host) {
      std::vector<std::int64_t> host_times;
      host_times.reserve(indexes.size());
      for (std::size_t i : indexes) host_times.push_back(times[i]);
      SensorRows& into = result[keys.hosts()[host]][table.sensor];
      into.append(host_times, std::move(host_columns[host]));
      into.merge_labels(host_labels[host]);
    }
  }
  return result;
}

HostData host_data(const std::string& host, std::map<std::string, SensorRows>& sensors) {
  HostData data;
  data.host = host;
  for (auto& [sensor, rows] : sensors) {
    data.sensors.push_back(sensor);
    // Time order (rows are stored in the order lmaster received them).
    std::vector<std::size_t> order(rows.time.size());
    std::iota(order.begin(), order.end(), 0);
    const bool sorted = std::is_sorted(rows.time.begin(), rows.time.end());
    if (!sorted)
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return rows.time[a] < rows.time[b]; });
    std::vector<std::int64_t> times;
    times.reserve(order.size());
    for (std::size_t i : order) times.push_back(rows.time[i]);
    for (auto& [key, values] : rows.columns) {
      if (std::all_of(values.begin(), values.end(), [](double v) { return std::isnan(v); }))
        continue;
      Series series;
      series.time_ns = times;
      if (sorted) {
        series.values = std::move(values);
      } else {
        series.values.reserve(order.size());
        for (std::size_t i : order) series.values.push_back(values[i]);
      }
      data.metrics.emplace(sensor + "." + key, std::move(series));
    }
    for (const auto& [key, latest] : rows.labels)
      if (latest) data.labels.emplace(sensor + "." + key, latest->second);
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
    JobTallies tallies = read_file(path, open_retry_, tally_file);
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
    JobRows rows = read_file(path, open_retry_,
                             [id](const OpenFile& file) { return job_rows_of_file(file, id); });
    for (auto& [host, sensors] : rows)
      for (auto& [sensor, more] : sensors) {
        SensorRows& into = all[host][sensor];
        into.append(more.time, std::move(more.columns));
        into.merge_labels(more.labels);
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