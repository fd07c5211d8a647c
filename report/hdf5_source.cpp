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

#include "hdf5_index.h"
#include "hdf5_job_rows.h"
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

// A job on one host, as the complete indexes of the files that hold it say.
struct HostTally {
  Span span;
  std::set<std::string> sensors;
  std::map<std::string, MetricSummary> metrics;  // "<Sensor>.<key>"
  std::map<std::string, Latest> labels;          // "<Sensor>.<label>"
};

struct JobTally {
  std::set<std::string> hosts;
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = std::numeric_limits<std::int64_t>::min();
  Latest user;  // (time, value) of the latest
  // Whether every file that holds the job has a complete index: per_host is then its summary.
  bool summarized = true;
  std::map<std::string, HostTally> per_host;
};

using JobTallies = std::map<std::uint64_t, JobTally>;

// Whether an object's `jobs` attribute names a job (an id other than 0); true without one.
bool may_hold_jobs(hid_t object) {
  const auto jobs = jobs_attribute(object);
  return !jobs || (!jobs->empty() && jobs->back() != 0);
}

// A file's jobs from its complete index, with their per-host summaries.
JobTallies tally_index(const JobIndex& index) {
  JobTallies tallies;
  for (std::size_t row = 0; row < index.job.size(); ++row) {
    if (index.job[row] == 0) continue;
    JobTally& tally = tallies[index.job[row]];
    const std::string& host = index.host[row];
    tally.hosts.insert(host);
    tally.first = std::min(tally.first, index.first[row]);
    tally.last = std::max(tally.last, index.last[row]);
    auto [at, added] = tally.per_host.try_emplace(host);
    HostTally& into = at->second;
    into.span = added ? Span{index.first[row], index.last[row]}
                      : Span{std::min(into.span.first, index.first[row]), std::max(into.span.last, index.last[row])};
    for (const auto& sensor : index.sensors) {
      if (sensor.rows[row] == 0) continue;
      into.sensors.insert(sensor.name);
      const std::int64_t first = sensor.first[row], last = sensor.last[row];
      for (const auto& metric : sensor.metrics) {
        if (metric.count[row] == 0) continue;
        MetricSummary summary;
        // The index keeps a sensor's first and last row, not each key's: they stand for both.
        summary.first_ns = first;
        summary.last_ns = last;
        summary.count = metric.count[row];
        summary.max = metric.max[row];
        summary.sum = metric.sum[row];
        summary.last = metric.last[row];
        summary.growth = metric.growth[row];
        merge_summary(into.metrics[sensor.name + "." + metric.key], summary);
      }
      for (const auto& label : sensor.labels) {
        keep_latest(into.labels[sensor.name + "." + label.key], last, label.last[row]);
        if (sensor.name == kJobCgroup && label.key == kUserLabel) keep_latest(tally.user, last, label.last[row]);
      }
    }
  }
  return tallies;
}

// A file's jobs from its tables (no complete index): no per-host summaries.
JobTallies tally_tables(const OpenFile& file, bool closed) {
  JobTallies tallies;
  if (closed && !may_hold_jobs(file.file.get())) return tallies;
  const KeepGroup keep = closed ? KeepGroup([](hid_t group, bool) { return may_hold_jobs(group); }) : KeepGroup();
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
                  if (!current->tally) {
                    current->tally = &tallies[job];
                    current->tally->summarized = false;
                  }
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

JobTallies tally_file(const OpenFile& file, bool closed) {
  if (closed)
    if (auto index = read_job_index(file, true)) return tally_index(*index);
  return tally_tables(file, closed);
}

// Folds a later file's tally of a job into what the earlier files said.
void merge_tally(JobTally& into, JobTally& later) {
  into.hosts.merge(later.hosts);
  into.first = std::min(into.first, later.first);
  into.last = std::max(into.last, later.last);
  if (later.user) keep_latest(into.user, later.user->first, later.user->second);
  into.summarized = into.summarized && later.summarized;
  if (!into.summarized) {
    into.per_host.clear();
    return;
  }
  for (auto& [host, tally] : later.per_host) {
    auto [at, added] = into.per_host.try_emplace(host, std::move(tally));
    if (added) continue;
    HostTally& host_into = at->second;
    host_into.span = {std::min(host_into.span.first, tally.span.first), std::max(host_into.span.last, tally.span.last)};
    host_into.sensors.merge(tally.sensors);
    for (const auto& [name, summary] : tally.metrics) merge_summary(host_into.metrics[name], summary);
    for (const auto& [name, latest] : tally.labels)
      if (latest) keep_latest(host_into.labels[name], latest->first, latest->second);
  }
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
      auto [at, added] = all.try_emplace(id, std::move(tally));
      if (!added) merge_tally(at->second, tally);
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
    if (tally.summarized)
      for (auto& [host, host_tally] : tally.per_host) {
        JobSummary::Host into;
        into.host = host;
        into.first_ns = host_tally.span.first;
        into.last_ns = host_tally.span.last;
        into.metrics = std::move(host_tally.metrics);
        for (const auto& [name, latest] : host_tally.labels)
          if (latest) into.labels.emplace(name, latest->second);
        into.sensors.assign(host_tally.sensors.begin(), host_tally.sensors.end());
        summary.per_host.push_back(std::move(into));
      }
    summaries.push_back(std::move(summary));
  }
  return summaries;
}

std::optional<JobData> Hdf5Source::job(std::uint64_t id) {
  quiet_hdf5();
  if (id == 0) return std::nullopt;
  const std::size_t count = files_.size();
  // What each file's complete index says of the job (nullopt: the file has none).
  std::vector<std::optional<IndexedJob>> indexed(count);
  for (std::size_t i = 0; i < count; ++i)
    indexed[i] = read_lmaster_file(files_[i], open_retry_, [id](const OpenFile& file, bool closed) {
      std::optional<IndexedJob> job;
      if (closed)
        if (auto index = read_job_index(file, false)) job = indexed_job(*index, id);
      return job;
    });
  // Everything is read into `rows`; a file's read that fails half-way (or is done again: a file
  // being written) first takes back what it had added.
  JobRows rows;
  // The rows the indexes count, so that each series is allocated once; a node sensor that also
  // samples the job (JobCgroup, JobProc) has about as many node rows.
  const auto& node_names = node_sensors();
  for (const auto& file : indexed)
    if (file)
      for (const auto& [host, job] : file->hosts)
        for (const auto& [sensor, seen] : job.sensors) {
          rows.job[host][sensor].expect(seen.rows);
          if (std::find(node_names.begin(), node_names.end(), sensor) != node_names.end())
            rows.node[host][sensor].expect(seen.rows);
        }
  auto read = [&](std::size_t i, const FileRequest& request) {
    const JobRows::Mark mark = rows.mark();
    read_lmaster_file(files_[i], open_retry_, [&](const OpenFile& file, bool closed) {
      rows.back_to(mark);
      read_job_file(file, closed, request, rows);
      return 0;
    });
  };
  // The job's rows of the files without an index, by scanning them; its span on each host, and
  // the files that hold it.
  std::map<std::string, Span> spans;
  std::optional<std::size_t> first_file, last_file;
  for (std::size_t i = 0; i < count; ++i) {
    std::map<std::string, Span> seen;
    if (indexed[i]) {
      for (const auto& [host, job] : indexed[i]->hosts) seen[host] = job.span;
    } else {
      JobRows::Mark before = rows.mark();
      read(i, FileRequest{id, true, nullptr, {}});
      if (rows.mark() != before) seen = spans_of(rows.job);
    }
    if (seen.empty()) continue;
    if (!first_file) first_file = i;
    last_file = i;
    for (const auto& [host, span] : seen) {
      auto [at, added] = spans.try_emplace(host, span);
      if (!added) at->second = {std::min(at->second.first, span.first), std::max(at->second.last, span.last)};
    }
  }
  if (spans.empty()) return std::nullopt;
  // The indexed files' job rows, and the node rows around the job's span: in the files that
  // hold the job and the one on either side (a node row just before its first sample may be in
  // the file before).
  const std::size_t from = *first_file > 0 ? *first_file - 1 : 0;
  const std::size_t to = std::min(*last_file + 1, count - 1);
  for (std::size_t i = from; i <= to; ++i)
    read(i, FileRequest{id, indexed[i].has_value(), indexed[i] ? &*indexed[i] : nullptr, spans});
  JobData data;
  data.id = id;
  for (auto& [host, sensors] : rows.job) {
    auto node = rows.node.find(host);
    auto span = spans.find(host);
    if (span == spans.end()) continue;  // (rows of a host the index does not name: none)
    data.hosts.push_back(host_data(host, sensors, node == rows.node.end() ? nullptr : &node->second, span->second));
  }
  if (data.hosts.empty()) return std::nullopt;
  return data;
}

std::string Hdf5Source::describe() const { return description_; }

}  // namespace fructosa::report