// Compaction: a file that is closed (or that a killed writer left open) is rewritten with gzip and
// shuffle into a hidden copy, each table cut to its complete rows, the job index copied as it is,
// and the copy renamed over it.
#include "hdf5_output_impl.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <system_error>

#include "durable_file.h"
#include "stop_keepalive.h"

namespace fructosa::master {

using namespace hdf5;

// The name a file's compressed copy has until it replaces the file; while it exists, the
// compression of that file was interrupted.
fs::path Hdf5Output::Impl::compaction_name(const fs::path& file) const {
  return file.parent_path() / ("." + file.filename().string() + ".compact");
}

void Hdf5Output::Impl::compact_and_log(const std::string& path) {
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  const auto available = free_bytes(series.directory);
  if (!error && available && *available < size + size / 16 + (16 << 20)) {
    // The copy needs up to the file's size: leave it complete and uncompressed, marked to be
    // compressed at the next start.
    std::ofstream(compaction_name(path));
    spdlog::error(
        "hdf5: not enough free space to compress {} ({} bytes, {} free); it stays "
        "uncompressed until lmaster starts again",
        path, size, *available);
    return;
  }
  try {
    const Compaction done = compact_file(path);
    spdlog::info("hdf5: compressed {}: {} -> {} bytes in {:.1f} s", path, done.bytes_before,
                 done.bytes_after, done.seconds);
  } catch (const std::exception& failure) {
    spdlog::error("hdf5: cannot compress {} (it stays uncompressed, complete): {}", path,
                  failure.what());
  }
}

// Rewrites a closed file (or one a killed writer left open) compressed: every object is copied
// into a new file whose datasets have the shuffle and gzip filters, each table cut to its
// complete rows (len(time), without `time` rows never written), the jobs attributes computed
// from the data; the copy is then renamed over the file. The file itself is only read (as a
// SWMR reader would), so a crash or an error here never harms it.
Hdf5Output::Impl::Compaction Hdf5Output::Impl::compact_file(const std::string& path) {
  const auto started = std::chrono::steady_clock::now();
  const std::string temporary = compaction_name(path).string();
  std::error_code ignored;
  fs::remove(temporary, ignored);
  Compaction result;
  result.bytes_before = fs::file_size(path, ignored);
  try {
    // Objects are copied one at a time: a small metadata cache (a file of 57,000 datasets:
    // 127 MiB of lmaster's memory with the default cache, 59 with this one, as fast).
    Handle access = file_access_properties(path, kSmallMetadataCache);
    Handle source = open_left_open_file(path, access.get());
    Handle target =
        check(temporary, H5Fcreate(temporary.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, access.get()),
              H5Fclose, "cannot create its compressed copy");
    copy_attributes(path, source.get(), target.get(), "jobs", "/");
    std::set<std::uint64_t> all_jobs;
    // A group at the root is a per_sensor table when it has `time`, else a host's group.
    auto copy_table_group = [&](hid_t parent, hid_t parent_copy, const std::string& link,
                                const std::string& where, std::set<std::uint64_t>& parent_jobs) {
      Handle table = check(path, H5Oopen(parent, link.c_str(), H5P_DEFAULT), H5Oclose,
                           "cannot open " + where);
      if (H5Iget_type(table.get()) != H5I_GROUP || H5Lexists(table.get(), kTime, H5P_DEFAULT) <= 0)
        return;
      Handle table_copy = create_group_in(path, parent_copy, link, where);
      copy_attributes(path, table.get(), table_copy.get(), "jobs", where);
      std::set<std::uint64_t> jobs;
      result.tables_cut += copy_table(path, table.get(), table_copy.get(), where, jobs, result.rows);
      write_jobs_attribute(temporary, table_copy.get(), jobs, where);
      parent_jobs.insert(jobs.begin(), jobs.end());
    };
    for (const auto& host_link : hard_links(path, source.get(), "/")) {
      const std::string host_where = "/" + host_link;
      if (host_link == kJobIndexLink) {  // not a table: its rows are (job, host)s
        copy_group(path, source.get(), target.get(), host_link, host_where);
        continue;
      }
      Handle host = check(path, H5Oopen(source.get(), host_link.c_str(), H5P_DEFAULT), H5Oclose,
                          "cannot open " + host_where);
      if (H5Iget_type(host.get()) != H5I_GROUP) continue;
      if (H5Lexists(host.get(), kTime, H5P_DEFAULT) > 0) {
        host.reset();
        copy_table_group(source.get(), target.get(), host_link, host_where, all_jobs);
        continue;
      }
      Handle host_copy = create_group_in(path, target.get(), host_link, host_where);
      copy_attributes(path, host.get(), host_copy.get(), "jobs", host_where);
      std::set<std::uint64_t> host_jobs;
      for (const auto& sensor_link : hard_links(path, host.get(), host_where))
        copy_table_group(host.get(), host_copy.get(), sensor_link, host_where + "/" + sensor_link,
                         host_jobs);
      write_jobs_attribute(temporary, host_copy.get(), host_jobs, host_where);
      all_jobs.insert(host_jobs.begin(), host_jobs.end());
    }
    write_jobs_attribute(temporary, target.get(), all_jobs, "/");
    source.reset();
    check(temporary, target.reset(), "cannot close the compressed copy");
  } catch (...) {
    fs::remove(temporary, ignored);
    throw;
  }
  std::error_code error;
  try {
    // The copy whole on disk before it replaces the only other copy of these rows, and the
    // rename durable before the caller counts the file as compressed.
    sync_closed_file(temporary);
  } catch (...) {
    fs::remove(temporary, ignored);
    throw;
  }
  fs::rename(temporary, path, error);
  if (error) {
    fs::remove(temporary, ignored);
    throw std::runtime_error(
        fmt::format("cannot rename {} to {}: {}", temporary, path, error.message()));
  }
  sync_directory(fs::path(path).parent_path());
  result.bytes_after = fs::file_size(path, ignored);
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

Handle Hdf5Output::Impl::create_group_in(const std::string& path, hid_t parent,
                                         const std::string& link, const std::string& where) const {
  Handle creation = group_creation_properties(path);
  Handle link_properties = link_creation_properties(path);
  return check(
      path, H5Gcreate2(parent, link.c_str(), link_properties.get(), creation.get(), H5P_DEFAULT),
      H5Gclose, "cannot create group " + where);
}

// Copies a table's datasets (and labels) cut to their complete rows; returns 1 when rows were
// cut (a flush that a killed writer left half done), else 0.
std::size_t Hdf5Output::Impl::copy_table(const std::string& path, hid_t table, hid_t copy,
                                         const std::string& where, std::set<std::uint64_t>& jobs,
                                         std::uint64_t& rows_copied) {
  std::vector<std::string> links = hard_links(path, table, where);
  Handle labels, labels_copy;
  std::vector<std::string> label_links;
  if (H5Lexists(table, kLabels, H5P_DEFAULT) > 0) {
    labels = check(path, H5Gopen2(table, kLabels, H5P_DEFAULT), H5Gclose,
                   "cannot open " + where + "/labels");
    label_links = hard_links(path, labels.get(), where + "/labels");
  }
  // Complete rows: as many as every dataset has, without trailing `time` rows that grew but
  // were never written (they read as the fill value 0).
  hsize_t complete = std::numeric_limits<hsize_t>::max(), longest = 0;
  auto measure = [&](hid_t group, const std::string& link) {
    Handle object = check(path, H5Oopen(group, link.c_str(), H5P_DEFAULT), H5Oclose,
                          "cannot open " + where + "/" + link);
    if (H5Iget_type(object.get()) != H5I_DATASET) return;
    const hsize_t rows = dataset_rows(path, object.get(), where + "/" + link);
    complete = std::min(complete, rows);
    longest = std::max(longest, rows);
  };
  for (const auto& link : links) measure(table, link);
  for (const auto& link : label_links) measure(labels.get(), link);
  {
    Handle time = check(path, H5Dopen2(table, kTime, H5P_DEFAULT), H5Dclose,
                        "cannot open " + where + "/time");
    std::vector<std::int64_t> times(complete);
    read_rows(path, time.get(), H5T_NATIVE_INT64, 0, complete, times.data(), where + "/time");
    while (complete > 0 && times[complete - 1] == 0) --complete;
  }
  for (const auto& link : links) {
    if (link == kLabels) continue;
    copy_dataset(path, table, copy, link, complete, where + "/" + link,
                 link == kJob ? &jobs : nullptr);
  }
  if (labels) {
    labels_copy = create_group_in(path, copy, kLabels, where + "/labels");
    copy_attributes(path, labels.get(), labels_copy.get(), nullptr, where + "/labels");
    for (const auto& link : label_links)
      copy_dataset(path, labels.get(), labels_copy.get(), link, complete,
                   where + "/labels/" + link, nullptr);
  }
  rows_copied += complete;
  return longest != complete ? 1 : 0;
}

// Copies a group as it is (the job index): its attributes, subgroups and datasets, every row.
void Hdf5Output::Impl::copy_group(const std::string& path, hid_t parent, hid_t parent_copy,
                                  const std::string& link, const std::string& where) {
  Handle group =
      check(path, H5Gopen2(parent, link.c_str(), H5P_DEFAULT), H5Gclose, "cannot open " + where);
  Handle copy = create_group_in(path, parent_copy, link, where);
  copy_attributes(path, group.get(), copy.get(), nullptr, where);
  for (const auto& member : hard_links(path, group.get(), where)) {
    const std::string member_where = where + "/" + member;
    Handle object = check(path, H5Oopen(group.get(), member.c_str(), H5P_DEFAULT), H5Oclose,
                          "cannot open " + member_where);
    const H5I_type_t type = H5Iget_type(object.get());
    if (type == H5I_GROUP) {
      object.reset();
      copy_group(path, group.get(), copy.get(), member, member_where);
    } else if (type == H5I_DATASET) {
      const hsize_t rows = dataset_rows(path, object.get(), member_where);
      object.reset();
      copy_dataset(path, group.get(), copy.get(), member, rows, member_where, nullptr);
    }
  }
}

// Copies the first `rows` rows of a 1-D dataset into a new compressed one (same type, chunk
// rows, fill value and attributes). With `jobs`, also collects the values (the job column).
void Hdf5Output::Impl::copy_dataset(const std::string& path, hid_t source_group, hid_t target_group,
                                    const std::string& link, hsize_t rows, const std::string& where,
                                    std::set<std::uint64_t>* jobs) {
  Handle source = check(path, H5Dopen2(source_group, link.c_str(), H5P_DEFAULT), H5Dclose,
                        "cannot open " + where);
  Handle type = check(path, H5Dget_type(source.get()), H5Tclose, "cannot read " + where);
  Handle source_creation =
      check(path, H5Dget_create_plist(source.get()), H5Pclose, "cannot read " + where);
  const bool variable =
      H5Tdetect_class(type.get(), H5T_VLEN) > 0 || H5Tis_variable_str(type.get()) > 0;
  const std::size_t size = H5Tget_size(type.get());
  hsize_t chunk_rows = chunk;
  if (H5Pget_layout(source_creation.get()) == H5D_CHUNKED)
    H5Pget_chunk(source_creation.get(), 1, &chunk_rows);
  const std::string what = "cannot copy " + where;
  Handle creation = check(path, H5Pcreate(H5P_DATASET_CREATE), H5Pclose, what);
  check(path, H5Pset_chunk(creation.get(), 1, &chunk_rows), what);
  check(path, H5Pset_obj_track_times(creation.get(), false), what);
  H5D_fill_value_t fill_state = H5D_FILL_VALUE_UNDEFINED;
  H5Pfill_value_defined(source_creation.get(), &fill_state);
  if (!variable && fill_state == H5D_FILL_VALUE_USER_DEFINED) {
    std::vector<unsigned char> fill(size);
    check(path, H5Pget_fill_value(source_creation.get(), type.get(), fill.data()), what);
    check(path, H5Pset_fill_value(creation.get(), type.get(), fill.data()), what);
  }
  if (complevel > 0) {
    if (H5Tget_class(type.get()) != H5T_STRING && size > 1)
      check(path, H5Pset_shuffle(creation.get()), what);
    check(path, H5Pset_deflate(creation.get(), complevel), what);
  }
  hsize_t max_rows = H5S_UNLIMITED;
  Handle space = check(path, H5Screate_simple(1, &rows, &max_rows), H5Sclose, what);
  Handle link_properties = link_creation_properties(path);
  Handle target = check(path,
                        H5Dcreate2(target_group, link.c_str(), type.get(), space.get(),
                                   link_properties.get(), creation.get(), H5P_DEFAULT),
                        H5Dclose, what);
  copy_attributes(path, source.get(), target.get(), nullptr, where);
  // A few chunks at a time: the copy's memory stays small whatever the file's size.
  const hsize_t block = std::max<hsize_t>(chunk_rows * 16, 1 << 16);
  std::vector<unsigned char> buffer;
  for (hsize_t start = 0; start < rows; start += block) {
    hsize_t count = std::min(block, rows - start);
    buffer.resize(count * size);
    Handle memory = check(path, H5Screate_simple(1, &count, nullptr), H5Sclose, what);
    Handle from = check(path, H5Dget_space(source.get()), H5Sclose, what);
    Handle to = check(path, H5Dget_space(target.get()), H5Sclose, what);
    check(path, H5Sselect_hyperslab(from.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr),
          what);
    check(path, H5Sselect_hyperslab(to.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr),
          what);
    check(path,
          H5Dread(source.get(), type.get(), memory.get(), from.get(), H5P_DEFAULT, buffer.data()),
          what);
    herr_t written =
        H5Dwrite(target.get(), type.get(), memory.get(), to.get(), H5P_DEFAULT, buffer.data());
    if (variable) H5Dvlen_reclaim(type.get(), memory.get(), H5P_DEFAULT, buffer.data());
    check(path, written, what);
    if (jobs && !variable && size == sizeof(std::uint64_t))
      for (hsize_t i = 0; i < count; ++i) {
        std::uint64_t job = 0;
        std::memcpy(&job, buffer.data() + i * size, size);
        jobs->insert(job);
      }
    note_progress();  // a compression at stop that moves is not a hung stop (StopKeepAlive)
  }
}

}  // namespace fructosa::master
