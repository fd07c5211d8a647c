// The file series: the names of its files (FileSeries), creating a file and pointing the link
// `path` at it, closing the previous one (with its final attributes and job index), reopening a
// file in or out of SWMR mode, the jobs attributes, job index and late descriptions, and rotation
// by size or age.
#include "hdf5_output_impl.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>

namespace fructosa::master {

using namespace hdf5;

namespace hdf5 {

FileSeries::FileSeries(const std::string& configured) : link(configured) {
  directory = link.parent_path();
  if (directory.empty()) directory = ".";
  stem = link.stem().string();
  extension = link.has_extension() ? link.extension().string() : ".h5";
}

// <stem>-YYYYmmddTHHMMSSZ[-N]<extension>, N > 0 when the plain name is taken.
fs::path FileSeries::name(std::time_t when, int attempt) const {
  std::string file = stem + "-" + utc_stamp(when, "%Y%m%dT%H%M%SZ");
  if (attempt > 0) file += "-" + std::to_string(attempt);
  return directory / (file + extension);
}

// A free name for a file started at `when` (a name that exists, even as a dangling link, is
// never reused).
fs::path FileSeries::free_name(std::time_t when) const {
  for (int attempt = 0; attempt < 10000; ++attempt) {
    fs::path candidate = name(when, attempt);
    std::error_code error;
    if (!fs::exists(fs::symlink_status(candidate, error))) return candidate;
  }
  throw std::runtime_error(
      fmt::format("HDF5 output {}: no free file name in {}", link.string(), directory.string()));
}

bool FileSeries::is_member(const std::string& file) const {
  const std::string prefix = stem + "-";
  if (file.size() < prefix.size() + 16 + extension.size() || file.rfind(prefix, 0) != 0 ||
      file.compare(file.size() - extension.size(), extension.size(), extension) != 0)
    return false;
  std::string_view middle(file.data() + prefix.size(),
                          file.size() - prefix.size() - extension.size());
  auto digits = [](std::string_view text) {
    return !text.empty() &&
           std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(middle.substr(0, 8)) || middle[8] != 'T' || !digits(middle.substr(9, 6)) ||
      middle[15] != 'Z')
    return false;
  middle.remove_prefix(16);
  return middle.empty() || (middle[0] == '-' && digits(middle.substr(1)));
}

}  // namespace hdf5

void Hdf5Output::Impl::warn_about_file_locking() const {
  const char* setting = std::getenv("HDF5_USE_FILE_LOCKING");
  if (setting && std::string_view(setting) != "FALSE" && std::string_view(setting) != "0")
    spdlog::warn(
        "hdf5: HDF5_USE_FILE_LOCKING={} makes HDF5 lock the files lmaster writes: a "
        "reader that keeps {} open then delays new tables and columns (unset it)",
        setting, link_path);
}

Handle Hdf5Output::Impl::create_file(const std::string& path) const {
  // Empty: its handles are kept open (and the cache the library's) until plan_handles() says.
  Handle access = file_access_properties(path);
  Handle created = check(path, H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, access.get()),
                         H5Fclose, "cannot create the file");
  const std::time_t now = std::time(nullptr);
  write_text_attribute(path, created.get(), "format", "fructosa lmaster HDF5 output", "/");
  Handle scalar = check(path, H5Screate(H5S_SCALAR), H5Sclose, "cannot make a dataspace");
  const int version = per_sensor ? kPerSensorFormatVersion : kPerHostFormatVersion;
  write_attribute(path, created.get(), "format_version", H5T_NATIVE_INT, scalar.get(), &version,
                  "/");
  write_text_attribute(path, created.get(), "layout", per_sensor ? "per_sensor" : "per_host", "/");
  write_text_attribute(path, created.get(), "writer", "lmaster " FRUCTOSA_VERSION, "/");
  write_text_attribute(path, created.get(), "created", utc_stamp(now, "%Y-%m-%dT%H:%M:%SZ"), "/");
  // No rows yet; the records the previous file's last flush named are still all stored.
  const std::uint64_t flushed[2] = {flushed_record, 0};
  Handle mark = create_dataset(path, created.get(), kFlushedLink, H5T_STD_U64LE, H5T_NATIVE_UINT64, nullptr, 2,
                               std::string("/") + kFlushedLink);
  append(path, mark.get(), H5T_NATIVE_UINT64, flushed, 0, 2, std::string("/") + kFlushedLink);
  mark.reset();
  check(path, H5Fstart_swmr_write(created.get()), "cannot start SWMR writing");
  return created;
}

// Points `path` at `target` atomically: a new link under a temporary name renamed over it.
void Hdf5Output::Impl::point_link_at(const std::string& target) const {
  const fs::path temporary =
      series.directory / fmt::format(".{}.{}.tmp", series.link.filename().string(), ::getpid());
  std::error_code error;
  fs::remove(temporary, error);
  fs::create_symlink(fs::path(target).filename(), temporary, error);
  if (!error) fs::rename(temporary, series.link, error);
  if (error) {
    fs::remove(temporary, error);
    throw std::runtime_error(fmt::format("HDF5 output {}: cannot point it at {}: {}", link_path,
                                         target, error.message()));
  }
}

// Creates the next file of the series; the current one (if any) is finished and closed.
// When the new file cannot be created, nothing changes and this throws.
void Hdf5Output::Impl::start_new_file(bool at_start) {
  const std::string path = series.free_name(std::time(nullptr)).string();
  Handle created = create_file(path);
  const std::string previous = file_path;
  const bool compress_previous = finish_file();
  job_index.start_file();
  file = std::move(created);
  file_path = path;
  swmr = true;
  file_started = attributes_refreshed = std::chrono::steady_clock::now();
  file_has_rows = false;
  failed_flushes = 0;
  abandoned = false;
  file_jobs.clear();
  file_jobs_in_attribute = 0;
  datasets = 0;
  keep_handles = true;
  handles_kept = false;
  for (auto& [host, group] : hosts) group = HostGroup{};
  for (auto& [host, sensors] : tables)
    for (auto& [sensor, table] : sensors) table.forget_file();
  directory_unsynced = true;
  try {
    point_link_at(path);
  } catch (const std::exception& failure) {
    if (at_start) throw;
    spdlog::error("{}", failure.what());
  }
  spdlog::info("hdf5: writing {} ({} points to it; layout {})", path, link_path,
               per_sensor ? "per_sensor" : "per_host");
  if (compress_previous) compactor.add(previous);
}

void Hdf5Output::Impl::close_handles() {
  for (auto& [host, sensors] : tables)
    for (auto& [sensor, table] : sensors) table.close_handles();
  for (auto& [host, group] : hosts) group.group.reset();
}

// Reopens the file without SWMR (readers cannot open it meanwhile): HDF5 1.10 cannot create
// objects or attributes in SWMR mode.
void Hdf5Output::Impl::leave_swmr() {
  if (file && !swmr) return;
  close_handles();
  herr_t closed = file.reset();
  swmr = false;
  if (closed < 0)
    spdlog::warn("hdf5: {}: closing it reported an error: {}", file_path, hdf5_error());
  Handle access = file_access_properties(file_path, keep_handles ? 0 : kSmallMetadataCache);
  file = check(file_path, H5Fopen(file_path.c_str(), H5F_ACC_RDWR, access.get()), H5Fclose,
               "cannot reopen the file");
}

// Rewrites /.flushed's two values in place (a write to a dataset SWMR mode allows).
void Hdf5Output::Impl::write_flushed_mark(std::uint64_t record, std::uint64_t rows) {
  if (H5Lexists(file.get(), kFlushedLink, H5P_DEFAULT) <= 0) return;  // a file of an older lmaster
  const std::string where = std::string("/") + kFlushedLink;
  Handle mark = check(file_path, H5Dopen2(file.get(), kFlushedLink, H5P_DEFAULT), H5Dclose, "cannot open " + where);
  const std::uint64_t values[2] = {record, rows};
  check(file_path, H5Dwrite(mark.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values),
        "cannot write " + where);
}

void Hdf5Output::Impl::enter_swmr() {
  if (swmr) return;
  check(file_path, H5Fstart_swmr_write(file.get()), "cannot start SWMR writing");
  swmr = true;
}

// An open file to write to: reopened after a failure, or a new one when it is gone.
void Hdf5Output::Impl::ensure_file() {
  if (file) return;
  std::error_code error;
  if (!abandoned && !file_path.empty() && fs::exists(file_path, error)) {
    leave_swmr();
    return;
  }
  if (!abandoned && !file_path.empty())
    spdlog::error("hdf5: {} is gone; starting a new file", file_path);
  start_new_file(false);
}

bool Hdf5Output::Impl::attributes_stale() const {
  if (file_jobs.size() != file_jobs_in_attribute || job_index.stale()) return true;
  for (const auto& [host, group] : hosts)
    if (group.in_file && group.jobs.size() != group.jobs_in_attribute) return true;
  for (const auto& [host, sensors] : tables)
    for (const auto& [sensor, table] : sensors) {
      if (!table.in_file) continue;
      if (table.jobs.size() != table.jobs_in_attribute) return true;
      for (const auto& column : table.columns)
        if (column.in_file && !column.described && infos.find(table.sensor, column.key()))
          return true;
    }
  return false;
}

// Outside SWMR mode: the jobs attributes, the job index and descriptions that arrived late.
// `closing`: the file's last write, which marks its job index complete.
void Hdf5Output::Impl::refresh_attributes(bool closing) {
  for (auto& [host_name, sensors] : tables)
    for (auto& [sensor, table] : sensors) {
      if (!table.in_file) continue;
      const std::string& sensor_name = table.sensor;  // clang 14 captures no structured binding
      const bool late_description =
          std::any_of(table.columns.begin(), table.columns.end(), [&](const Column& column) {
            return column.in_file && !column.described && infos.find(sensor_name, column.key());
          });
      if (!late_description && table.jobs.size() == table.jobs_in_attribute) continue;
      open_table(table);
      if (table.jobs.size() != table.jobs_in_attribute) {
        write_jobs_attribute(file_path, table.group.get(), table.jobs, table.where());
        table.jobs_in_attribute = table.jobs.size();
      }
      for (auto& column : table.columns)
        if (column.in_file && !column.described && infos.find(table.sensor, column.key()))
          describe(table, column);
      release(table);
    }
  for (auto& [host_name, group] : hosts) {
    if (!group.in_file || group.jobs.size() == group.jobs_in_attribute) continue;
    open_host(host_name, group);
    write_jobs_attribute(file_path, group.group.get(), group.jobs,
                         "/" + hdf5_link_name(host_name));
    group.jobs_in_attribute = group.jobs.size();
    if (!keep_handles) group.group.reset();
  }
  if (file_jobs.size() != file_jobs_in_attribute) {
    write_jobs_attribute(file_path, file.get(), file_jobs, "/");
    file_jobs_in_attribute = file_jobs.size();
  }
  if (closing || job_index.stale()) job_index.write(file_path, file.get(), closing, infos);
  attributes_refreshed = std::chrono::steady_clock::now();
}

// Brings the attributes up to date, marks the job index complete and closes the file. Its rows
// were flushed (or are still buffered for the next file); failures here only cost attributes
// (and leave the index incomplete), so they are logged. Returns true when the closed file is to
// be compressed.
bool Hdf5Output::Impl::finish_file() {
  if (!file) return false;
  try {
    leave_swmr();
    refresh_attributes(true);
  } catch (const std::exception& failure) {
    spdlog::error("hdf5: {}: cannot write its final attributes: {}", file_path, failure.what());
  }
  close_handles();
  const bool closed = file.reset() >= 0;
  swmr = false;
  if (!closed) spdlog::error("hdf5: {}: closing it failed: {}", file_path, hdf5_error());
  try {
    // What closing wrote (final attributes, the job index marked complete) survives a power cut.
    hdf5::sync_closed_file(file_path);
  } catch (const std::exception& failure) {
    spdlog::error("hdf5: {}", failure.what());
  }
  return closed && file_has_rows && complevel > 0;
}

void Hdf5Output::Impl::rotate_if_due() {
  if (!file || !file_has_rows) return;
  std::string reason;
  if (rotate_age > 0 &&
      std::chrono::duration<double>(std::chrono::steady_clock::now() - file_started).count() >=
          rotate_age)
    reason = fmt::format("older than rotate_age = {} s", rotate_age);
  if (rotate_size > 0) {
    hsize_t size = 0;
    if (H5Fget_filesize(file.get(), &size) >= 0 && size >= rotate_size)
      reason = fmt::format("{} bytes >= rotate_size", size);
  }
  if (reason.empty()) return;
  spdlog::info("hdf5: {}: {}: starting a new file", file_path, reason);
  try {
    start_new_file(false);
  } catch (const std::exception& failure) {
    spdlog::error("{} (writing on to {})", failure.what(), file_path);
  }
}

}  // namespace fructosa::master
