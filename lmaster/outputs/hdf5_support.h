// Thin wrappers over the HDF5 C API for the HDF5 output (included only by lmaster/outputs/hdf5_*):
// Handle owns an hid_t; fail() and check() turn HDF5 failures into exceptions that name the file;
// attributes, reads and appends of 1-D datasets, property lists, and two facts about files on
// disk (free space, an HDF5 superblock's flags). Nothing here knows the output's layout: that is
// hdf5_output_impl.h.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hdf5_basics.h"

namespace fructosa::master::hdf5 {

namespace fs = std::filesystem;

// The handle, quiet_hdf5(), hdf5_error() and superblock_flags() shared with fructosa-report.
using h5::Handle;
using h5::hdf5_error;
using h5::quiet_hdf5;
using h5::superblock_flags;

// A failure of the file as a whole (reopen, flush), as opposed to one table's.
class FileFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws std::runtime_error "HDF5 output <file>: <what>: <hdf5_error()>"; check() does so when
// `id` or `status` is negative, and otherwise returns `id` as a Handle closed with `close`.
[[noreturn]] void fail(const std::string& file, const std::string& what);
Handle check(const std::string& file, hid_t id, Handle::Closer close, const std::string& what);
void check(const std::string& file, herr_t status, const std::string& what);

// `when` formatted with strftime in UTC.
std::string utc_stamp(std::time_t when, const char* format);
// The names of `group`'s hard links (`where` names the group in errors).
std::vector<std::string> hard_links(const std::string& file, hid_t group,
                                    const std::string& where);

// --- attributes --------------------------------------------------------------------------------

// A UTF-8 string type of `size` bytes (null-padded), or H5T_VARIABLE; an empty Handle on failure.
Handle text_type(std::size_t size);
// (Re)writes an attribute of `object`.
void write_attribute(const std::string& file, hid_t object, const char* name, hid_t type,
                     hid_t space, const void* data, const std::string& where);
void write_text_attribute(const std::string& file, hid_t object, const char* name,
                          const std::string& value, const std::string& where);
// The attribute `jobs`: the sorted job ids (an empty attribute when there are none).
void write_jobs_attribute(const std::string& file, hid_t object,
                          const std::set<std::uint64_t>& jobs, const std::string& where);
// Copies every attribute of `source` to `target`, but `skip` (nullptr: none).
void copy_attributes(const std::string& file, hid_t source, hid_t target, const char* skip,
                     const std::string& where);

// --- groups, datasets and properties -----------------------------------------------------------

// Labels (and other text columns) are fixed-length strings of 16, 32, 64... bytes: repeated
// values then compress to almost nothing (variable-length strings cost ~67 B per row).
inline constexpr std::size_t kMinLabelWidth = 16;
// The width for strings of up to `longest` bytes.
std::size_t label_width(std::size_t longest);
// The group `link` of `parent`, created (tracking the creation order of its links) when missing.
Handle open_or_create_group(const std::string& file, hid_t parent, const std::string& link,
                            const std::string& where);
// A 1-D chunked dataset of 0 rows, unlimited, uncompressed; unwritten rows read as `fill`
// (nullptr: zero bytes), and every row is to be written (no fill at allocation).
Handle create_dataset(const std::string& file, hid_t group, const std::string& link,
                      hid_t file_type, hid_t fill_type, const void* fill, hsize_t chunk_rows,
                      const std::string& where);

// The number of rows of a 1-D dataset.
hsize_t dataset_rows(const std::string& file, hid_t dataset, const std::string& where);
// Reads rows [start, start + count) of a 1-D dataset.
void read_rows(const std::string& file, hid_t dataset, hid_t memory_type, hsize_t start,
               hsize_t count, void* data, const std::string& where);
// Grows `dataset` to start + count rows and writes `data` into the new rows.
void append(const std::string& file, hid_t dataset, hid_t memory_type, const void* data,
            hsize_t start, hsize_t count, const std::string& where);
// Groups that track the creation order of their links; links named in UTF-8; files opened with
// the latest format (SWMR), without HDF5's file locking and without a chunk cache, and with a
// metadata cache of at most `metadata_cache_bytes` (0: the library's default, up to 32 MiB).
Handle group_creation_properties(const std::string& file);
Handle link_creation_properties(const std::string& file);
Handle file_access_properties(const std::string& file, std::size_t metadata_cache_bytes = 0);
// Opens, to read it only, a file a writer that is gone left open (its lock is ours). `access`:
// from file_access_properties(), changed here. Throws std::runtime_error naming the file.
Handle open_left_open_file(const std::string& file, hid_t access);
// Resizes the metadata cache of an open file (0: back to the library's default).
void set_metadata_cache(const std::string& file, hid_t id, std::size_t metadata_cache_bytes);
// Bytes that may still be written on the file system holding `directory`.
std::optional<std::uintmax_t> free_bytes(const fs::path& directory);

// Makes what HDF5 has handed to the kernel durable (H5Fflush is not: it ends in the page cache):
// fdatasync of the open file's descriptor. Throws std::runtime_error naming the file.
void sync_open_file(const std::string& path, hid_t file);
// The same for a closed file, by its name, and for the names in a directory (fsync).
void sync_closed_file(const std::string& path);

}  // namespace fructosa::master::hdf5
