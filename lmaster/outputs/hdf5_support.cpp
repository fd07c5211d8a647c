// The HDF5 wrappers declared (and documented) in hdf5_support.h.
#include "hdf5_support.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace fructosa::master::hdf5 {

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw std::runtime_error(fmt::format("HDF5 output {}: {}: {}", file, what, hdf5_error()));
}
Handle check(const std::string& file, hid_t id, Handle::Closer close, const std::string& what) {
  if (id < 0) fail(file, what);
  return Handle(id, close);
}
void check(const std::string& file, herr_t status, const std::string& what) {
  if (status < 0) fail(file, what);
}

std::string utc_stamp(std::time_t when, const char* format) {
  std::tm parts{};
  gmtime_r(&when, &parts);
  std::array<char, 32> text{};
  std::strftime(text.data(), text.size(), format, &parts);
  return text.data();
}

namespace {

herr_t collect_hard_link(hid_t, const char* name, const H5L_info_t* info, void* data) {
  if (info->type == H5L_TYPE_HARD) static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

}  // namespace

std::vector<std::string> hard_links(const std::string& file, hid_t group,
                                    const std::string& where) {
  std::vector<std::string> links;
  check(file, H5Literate(group, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_hard_link, &links),
        "cannot list " + where);
  return links;
}

// --- attributes --------------------------------------------------------------------------------

Handle text_type(std::size_t size) {
  hid_t type = H5Tcopy(H5T_C_S1);
  if (type >= 0 && (H5Tset_size(type, size) < 0 || H5Tset_cset(type, H5T_CSET_UTF8) < 0 ||
                    (size != H5T_VARIABLE && H5Tset_strpad(type, H5T_STR_NULLPAD) < 0))) {
    H5Tclose(type);
    type = H5I_INVALID_HID;
  }
  return Handle(type, H5Tclose);
}

void write_attribute(const std::string& file, hid_t object, const char* name, hid_t type,
                     hid_t space, const void* data, const std::string& where) {
  const std::string what = fmt::format("cannot write attribute {} of {}", name, where);
  if (H5Aexists(object, name) > 0) check(file, H5Adelete(object, name), what);
  Handle attribute =
      check(file, H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose, what);
  check(file, H5Awrite(attribute.get(), type, data), what);
}

void write_text_attribute(const std::string& file, hid_t object, const char* name,
                          const std::string& value, const std::string& where) {
  Handle type = text_type(H5T_VARIABLE);
  if (!type) fail(file, "cannot make a string type");
  Handle space = check(file, H5Screate(H5S_SCALAR), H5Sclose, "cannot make a dataspace");
  const char* text = value.c_str();
  write_attribute(file, object, name, type.get(), space.get(), &text, where);
}

void write_jobs_attribute(const std::string& file, hid_t object,
                          const std::set<std::uint64_t>& jobs, const std::string& where) {
  std::vector<std::uint64_t> sorted(jobs.begin(), jobs.end());
  hsize_t count = sorted.size();
  Handle space = check(file, count > 0 ? H5Screate_simple(1, &count, nullptr) : H5Screate(H5S_NULL),
                       H5Sclose, "cannot make a dataspace");
  // HDF5 1.10 refuses a null buffer even for an empty (H5S_NULL) attribute.
  const std::uint64_t none = 0;
  write_attribute(file, object, "jobs", H5T_STD_U64LE, space.get(), sorted.empty() ? &none : sorted.data(), where);
}

namespace {

struct AttributeCopy {
  hid_t target;
  const char* skip;  // an attribute not to copy (recomputed instead), or nullptr
};

herr_t copy_one_attribute(hid_t source, const char* name, const H5A_info_t*, void* data) {
  const auto* copy = static_cast<const AttributeCopy*>(data);
  if (copy->skip && std::strcmp(name, copy->skip) == 0) return 0;
  Handle attribute(H5Aopen(source, name, H5P_DEFAULT), H5Aclose);
  Handle type(attribute ? H5Aget_type(attribute.get()) : -1, H5Tclose);
  Handle space(attribute ? H5Aget_space(attribute.get()) : -1, H5Sclose);
  if (!attribute || !type || !space) return -1;
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  std::vector<unsigned char> buffer(
      std::max<std::size_t>(1, static_cast<std::size_t>(points) * H5Tget_size(type.get())));
  if (H5Aread(attribute.get(), type.get(), buffer.data()) < 0) return -1;
  Handle copied(H5Acreate2(copy->target, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                H5Aclose);
  herr_t status = copied ? H5Awrite(copied.get(), type.get(), buffer.data()) : -1;
  if (H5Tdetect_class(type.get(), H5T_VLEN) > 0 || H5Tis_variable_str(type.get()) > 0)
    H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, buffer.data());
  return status < 0 ? -1 : 0;
}

}  // namespace

void copy_attributes(const std::string& file, hid_t source, hid_t target, const char* skip,
                     const std::string& where) {
  AttributeCopy copy{target, skip};
  check(file,
        H5Aiterate2(source, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, copy_one_attribute, &copy),
        "cannot copy the attributes of " + where);
}

// --- groups, datasets and properties ------------------------------------------------------------

std::size_t label_width(std::size_t longest) {
  std::size_t width = kMinLabelWidth;
  while (width < longest) width *= 2;
  return width;
}

Handle open_or_create_group(const std::string& file, hid_t parent, const std::string& link,
                            const std::string& where) {
  htri_t exists = H5Lexists(parent, link.c_str(), H5P_DEFAULT);
  if (exists < 0) fail(file, "cannot look up " + where);
  if (exists > 0)
    return check(file, H5Gopen2(parent, link.c_str(), H5P_DEFAULT), H5Gclose,
                 "cannot open group " + where);
  Handle creation = group_creation_properties(file);
  Handle link_properties = link_creation_properties(file);
  return check(file,
               H5Gcreate2(parent, link.c_str(), link_properties.get(), creation.get(), H5P_DEFAULT),
               H5Gclose, "cannot create group " + where);
}

// Uncompressed while the file is written: an appended chunk never moves, so a SWMR reader cannot
// follow a stale pointer, and HDF5 1.10.8's option to leave partial chunks unfiltered makes
// readers decode chunks with the wrong filters (docs/hdf5.md). The output compresses a file when
// it closes it (compact_file).
Handle create_dataset(const std::string& file, hid_t group, const std::string& link,
                      hid_t file_type, hid_t fill_type, const void* fill, hsize_t chunk_rows,
                      const std::string& where) {
  const std::string what = "cannot create dataset " + where;
  hsize_t dims = 0;
  hsize_t max_dims = H5S_UNLIMITED;
  Handle space = check(file, H5Screate_simple(1, &dims, &max_dims), H5Sclose, what);
  Handle properties = check(file, H5Pcreate(H5P_DATASET_CREATE), H5Pclose, what);
  check(file, H5Pset_chunk(properties.get(), 1, &chunk_rows), what);
  if (fill) check(file, H5Pset_fill_value(properties.get(), fill_type, fill), what);
  // Every row up to a dataset's extent is written (NaN where a row has no value): a new chunk
  // need not be filled first, which wrote a whole chunk (32 KiB) per dataset and host.
  check(file, H5Pset_fill_time(properties.get(), H5D_FILL_TIME_NEVER), what);
  check(file, H5Pset_obj_track_times(properties.get(), false), what);
  Handle link_properties = link_creation_properties(file);
  return check(file,
               H5Dcreate2(group, link.c_str(), file_type, space.get(), link_properties.get(),
                          properties.get(), H5P_DEFAULT),
               H5Dclose, what);
}

hsize_t dataset_rows(const std::string& file, hid_t dataset, const std::string& where) {
  Handle space = check(file, H5Dget_space(dataset), H5Sclose, "cannot read the size of " + where);
  hsize_t rows = 0;
  if (H5Sget_simple_extent_ndims(space.get()) != 1 ||
      H5Sget_simple_extent_dims(space.get(), &rows, nullptr) < 0)
    fail(file, "cannot read the size of " + where);
  return rows;
}

void read_rows(const std::string& file, hid_t dataset, hid_t memory_type, hsize_t start, hsize_t count,
               void* data, const std::string& where) {
  if (count == 0) return;
  const std::string what = "cannot read " + where;
  Handle file_space = check(file, H5Dget_space(dataset), H5Sclose, what);
  check(file,
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr),
        what);
  Handle memory_space = check(file, H5Screate_simple(1, &count, nullptr), H5Sclose, what);
  check(file,
        H5Dread(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, data),
        what);
}

void append(const std::string& file, hid_t dataset, hid_t memory_type, const void* data,
            hsize_t start, hsize_t count, const std::string& where) {
  const std::string what = "cannot append to " + where;
  hsize_t size = start + count;
  check(file, H5Dset_extent(dataset, &size), what);
  Handle file_space = check(file, H5Dget_space(dataset), H5Sclose, what);
  check(file,
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr),
        what);
  Handle memory_space = check(file, H5Screate_simple(1, &count, nullptr), H5Sclose, what);
  check(file,
        H5Dwrite(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, data),
        what);
}

Handle group_creation_properties(const std::string& file) {
  Handle properties = check(file, H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "cannot make properties");
  // h5py lists members in creation order when it is tracked: time, job, then the keys as they
  // came.
  check(file,
        H5Pset_link_creation_order(properties.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
        "cannot track creation order");
  check(file, H5Pset_obj_track_times(properties.get(), false), "cannot set properties");
  return properties;
}

Handle link_creation_properties(const std::string& file) {
  Handle properties = check(file, H5Pcreate(H5P_LINK_CREATE), H5Pclose, "cannot make properties");
  check(file, H5Pset_char_encoding(properties.get(), H5T_CSET_UTF8), "cannot set UTF-8 names");
  return properties;
}

namespace {

// The library's default metadata cache, or one of at most `bytes` (the sizes only: how it adapts
// stays the default).
H5AC_cache_config_t metadata_cache_config(const std::string& file, std::size_t bytes) {
  Handle defaults = check(file, H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot make properties");
  H5AC_cache_config_t config{};
  config.version = H5AC__CURR_CACHE_CONFIG_VERSION;
  check(file, H5Pget_mdc_config(defaults.get(), &config),
        "cannot read the metadata cache's settings");
  if (bytes > 0) {
    config.set_initial_size = true;
    config.max_size = bytes;
    config.min_size = std::min(config.min_size, bytes);
    config.initial_size = std::clamp(config.initial_size, config.min_size, config.max_size);
  }
  return config;
}

}  // namespace

Handle file_access_properties(const std::string& file, std::size_t metadata_cache_bytes) {
  Handle access = check(file, H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot make properties");
  // SWMR needs the latest format (checksummed metadata).
  check(file, H5Pset_libver_bounds(access.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST),
        "cannot set the library version bounds");
  // lmaster is the only writer of its files (its lock file says so). A reader that holds the file
  // open holds a shared flock on it, which would make every reopen (leave_swmr) fail for as long as the
  // reader stays: the writer does without the lock (HDF5_USE_FILE_LOCKING=TRUE overrides this).
  check(file, H5Pset_file_locking(access.get(), false, true), "cannot turn file locking off");
  // No chunk cache: an append to an uncompressed chunk then writes only its new rows, where a
  // cached chunk is written whole at every flush (32 KiB for 4096 rows), for every dataset. Set
  // for the file, as H5Fstart_swmr_write reopens the open datasets with the file's defaults.
  check(file, H5Pset_cache(access.get(), 0, 1, 0, 0.75), "cannot turn the chunk cache off");
  if (metadata_cache_bytes > 0) {
    // The cache counts the bytes its entries take in the file; the library holds about 12 times
    // that in memory for them (decoded object headers, chunk index blocks).
    H5AC_cache_config_t config = metadata_cache_config(file, metadata_cache_bytes);
    check(file, H5Pset_mdc_config(access.get(), &config), "cannot size the metadata cache");
  }
  return access;
}

Handle open_left_open_file(const std::string& file, hid_t access) {
  // Killed in SWMR mode: read as a SWMR reader reads a file being written.
  hid_t id = H5Fopen(file.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, access);
  if (id >= 0) return Handle(id, H5Fclose);
  // Killed while it had the file open without SWMR (leave_swmr: adding tables), the superblock
  // says "open for write" alone, which no reader accepts: h5clear's file access property
  // ("clear_status_flags", registered in every list) ignores that. The file is opened read-only,
  // so the flags stay as they are on disk until the repaired copy replaces it.
  std::string error = hdf5_error();
  const hbool_t ignore_flags = true;
  if (H5Pexist(access, "clear_status_flags") > 0 && H5Pset(access, "clear_status_flags", &ignore_flags) >= 0) {
    id = H5Fopen(file.c_str(), H5F_ACC_RDONLY, access);
    if (id >= 0) return Handle(id, H5Fclose);
    error = hdf5_error();
  }
  throw std::runtime_error(fmt::format("HDF5 output {}: cannot open it: {}", file, error));
}

void set_metadata_cache(const std::string& file, hid_t id, std::size_t metadata_cache_bytes) {
  H5AC_cache_config_t config = metadata_cache_config(file, metadata_cache_bytes);
  check(file, H5Fset_mdc_config(id, &config), "cannot size the metadata cache");
}

std::optional<std::uintmax_t> free_bytes(const fs::path& directory) {
  struct statvfs info {};
  if (::statvfs(directory.c_str(), &info) != 0) return std::nullopt;
  return static_cast<std::uintmax_t>(info.f_bavail) * info.f_frsize;
}

void sync_open_file(const std::string& path, hid_t file) {
  void* handle = nullptr;
  check(path, H5Fget_vfd_handle(file, H5P_DEFAULT, &handle), "cannot get its file descriptor");
  // The sec2 driver (lmaster's) hands out a pointer to its descriptor.
  if (!handle || ::fdatasync(*static_cast<int*>(handle)) != 0)
    throw std::runtime_error(fmt::format("cannot sync {}: {}", path, handle ? std::strerror(errno) : "no descriptor"));
}

void sync_closed_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  bool synced = fd >= 0 && ::fdatasync(fd) == 0;
  int saved = errno;
  if (fd >= 0) ::close(fd);
  if (!synced) throw std::runtime_error(fmt::format("cannot sync {}: {}", path, std::strerror(saved)));
}

}  // namespace fructosa::master::hdf5
