// What every reader and writer of HDF5 files here needs (lmaster's HDF5 output, fructosa-report):
// a handle that closes its hid_t, HDF5's error stack silenced and read, and the superblock's
// "a writer has it open" flags. Header-only: included only by code that links HDF5.
#pragma once

#include <hdf5.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

namespace fructosa::h5 {

// Owns one hid_t and closes it with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), close_(other.close_) {}
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

// HDF5 prints its error stack by default; callers report errors themselves (hdf5_error()).
// The setting is per thread: call it at every entry point.
inline void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// The most specific message on this thread's HDF5 error stack.
inline std::string hdf5_error() {
  std::string detail;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* error, void* data) -> herr_t {
        if (n == 0 && error->desc) *static_cast<std::string*>(data) = error->desc;
        return 0;
      },
      &detail);
  return detail.empty() ? "unknown HDF5 error" : detail;
}

// The file consistency flags of a version 2/3 superblock at offset 0: non-zero while a writer
// has the file open (or a killed one left it so); nullopt for other superblocks.
inline std::optional<unsigned> superblock_flags(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<unsigned char, 12> head{};
  if (!in.read(reinterpret_cast<char*>(head.data()), head.size())) return std::nullopt;
  static constexpr std::array<unsigned char, 8> kSignature{0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (!std::equal(kSignature.begin(), kSignature.end(), head.begin()) || head[8] < 2) return std::nullopt;
  return head[11];
}

}  // namespace fructosa::h5
