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

namespace fructosa::master::hdf5 {

namespace fs = std::filesystem;

// Owns one hid_t and closes it with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  Handle(Handle&& other) noexcept
      : id_(std::exchange(other.id_, H5I_INVALID_HID)), close_(other.close_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      close_ = other.close_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  // Returns the close call's status (negative: HDF5 could not write what it held).
  herr_t reset() {
    herr_t status = 0;
    if (id_ >= 0 && close_) status = close_(id_);
    id_ = H5I_INVALID_HID;
    return status;
  }
  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  // Forgets the id without closing it.
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// HDF5's error stack is per thread (thread-safe build): silence it on every entry point.
void quiet_hdf5();

// The most specific message on this thread's HDF5 error stack (e.g. "unable to open file:
// name = '...', errno = 2, error message = 'No such file or directory', ...").
std::string hdf5_error();

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

// --- datasets and properties --------------------------------------------------------------------

// The number of rows of a 1-D dataset.
hsize_t dataset_rows(const std::string& file, hid_t dataset, const std::string& where);
// Reads rows [start, start + count) of a 1-D dataset.
void read_rows(const std::string& file, hid_t dataset, hid_t memory_type, hsize_t start,
               hsize_t count, void* data, const std::string& where);
// Grows `dataset` to start + count rows and writes `data` into the new rows.
void append(const std::string& file, hid_t dataset, hid_t memory_type, const void* data,
            hsize_t start, hsize_t count, const std::string& where);
// Groups that track the creation order of their links; links named in UTF-8; files opened with
// the latest format (SWMR), without HDF5's file locking and without a chunk cache.
Handle group_creation_properties(const std::string& file);
Handle link_creation_properties(const std::string& file);
Handle file_access_properties(const std::string& file);
// Bytes that may still be written on the file system holding `directory`.
std::optional<std::uintmax_t> free_bytes(const fs::path& directory);

// --- superblock --------------------------------------------------------------------------------

// The file consistency flags of an HDF5 file's version 2/3 superblock (at offset 0): non-zero
// while a writer has it open, and left so by a writer that was killed. nullopt: not such a file.
std::optional<unsigned> superblock_flags(const fs::path& path);

}  // namespace fructosa::master::hdf5
