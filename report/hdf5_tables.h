// The low-level half of Hdf5Source's reading (hdf5_source.cpp), on the HDF5 C API: opening a
// file (the signature and superblock checks, SWMR or plain, retried while lmaster has it open
// without SWMR), text and integer attributes, an object's hard links and the objects behind them,
// 1-D numeric and text datasets read as columns (a block of rows at a time, or only the rows
// picked), and an lmaster file's tables in either layout with the keys of each row (time, job,
// host). Errors are SourceError naming the file. Internal to fructosa_report: what is gathered
// from these tables, and which files are read, is hdf5_source.cpp's.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hdf5_basics.h"

namespace fructosa::report::hdf5_read {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Rows read per HDF5 call: what a table costs in memory at once, whatever its length.
inline constexpr hsize_t kBlockRows = hsize_t{1} << 16;

using Clock = std::chrono::steady_clock;

// --- HDF5 basics --------------------------------------------------------------------------------

using h5::Handle;
using h5::hdf5_error;
using h5::quiet_hdf5;

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what);
[[noreturn]] void fail_hdf5(const std::filesystem::path& file, const std::string& what);

// An HDF5 file's signature at offset 0, 512, 1024, 2048... (a user block may precede it).
bool has_hdf5_signature(const std::filesystem::path& path);

bool file_being_written(const std::filesystem::path& path);

struct OpenFile {
  std::filesystem::path path;
  Handle file;
  bool swmr = false;
};

// Opens `path` read-only as a SWMR reader (a file being written), else as a plain reader (files
// of other HDF5 versions). Retries while a writer has it open without SWMR (lmaster adding
// objects), up to `retry`.
OpenFile open_file(const std::filesystem::path& path, std::chrono::milliseconds retry);

// --- attributes ---------------------------------------------------------------------------------

// A text attribute (variable- or fixed-length string, scalar); nullopt when absent or not text.
std::optional<std::string> text_attribute(hid_t object, const char* name);

std::optional<long long> integer_attribute(hid_t object, const char* name);

// --- objects ------------------------------------------------------------------------------------

std::vector<std::string> hard_links(const OpenFile& file, hid_t group, const std::string& where);

bool has_link(hid_t group, const char* link);

// The object at `link` in `group` when it is of type `type` (H5I_GROUP, H5I_DATASET).
Handle open_object(const OpenFile& file, hid_t group, const std::string& link, H5I_type_t type,
                   const std::string& where);

// --- datasets -----------------------------------------------------------------------------------

// Rows [start, start + count) of a 1-D dataset, converted to `memory_type`.
void read_rows(const OpenFile& file, hid_t dataset, hid_t memory_type, hsize_t start, hsize_t count,
               void* data, const std::string& where);

// A numeric dataset (time, job, a metric column).
struct NumberColumn {
  Handle dataset;
  hsize_t rows = 0;
  std::string where;
};

NumberColumn open_numbers(const OpenFile& file, hid_t group, const std::string& link,
                          const std::string& where);

// A text dataset (host, a label): fixed-length strings as lmaster writes them, or variable-length.
struct TextColumn {
  Handle dataset;
  Handle memory_type;
  std::size_t width = 0;  // fixed-length: bytes per row
  bool variable = false;
  bool space_padded = false;
  hsize_t rows = 0;
  std::string where;

  // Rows [start, start + count), each as the string view `row(i, text)` gets (valid for the call).
  template <typename Row>
  void read(const OpenFile& file, hsize_t start, hsize_t count, Row row) const {
    if (count == 0) return;
    if (variable) {
      std::vector<char*> texts(count, nullptr);
      read_rows(file, dataset.get(), memory_type.get(), start, count, texts.data(), where);
      for (hsize_t i = 0; i < count; ++i) row(i, std::string_view(texts[i] ? texts[i] : ""));
      Handle space(H5Screate_simple(1, &count, nullptr), H5Sclose);
      H5Dvlen_reclaim(memory_type.get(), space.get(), H5P_DEFAULT, texts.data());
      return;
    }
    std::vector<char> raw(count * width);
    read_rows(file, dataset.get(), memory_type.get(), start, count, raw.data(), where);
    for (hsize_t i = 0; i < count; ++i) {
      const char* text = raw.data() + i * width;
      std::string_view value(text, strnlen(text, width));
      if (space_padded)
        while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
      row(i, value);
    }
  }
};

TextColumn open_text(const OpenFile& file, hid_t group, const std::string& link,
                     const std::string& where);

// Values of `column` at `rows` (ascending), read a block at a time over the spans that hold
// them; rows past the dataset's end read NaN.
std::vector<double> pick_numbers(const OpenFile& file, const NumberColumn& column,
                                 const std::vector<hsize_t>& rows);

std::vector<std::string> pick_texts(const OpenFile& file, const TextColumn& column,
                                    const std::vector<hsize_t>& rows);

// --- tables -------------------------------------------------------------------------------------

struct Table {
  Handle group;
  std::string where;         // its link path, for messages
  std::string sensor;        // real name
  std::string host;          // per_host: the host of every row
  bool host_column = false;  // per_sensor: a `host` dataset names each row's host
};

// Every table of a file, either layout: /<sensor> with a host column, /<host>/<sensor> without.
std::vector<Table> tables_of(const OpenFile& file);

// The columns that say whose each row is: time, job and (per_sensor) host, read a block at a
// time. Rows: len(time) (fewer if job or host is shorter: a file a killed writer left).
class RowKeys {
 public:
  RowKeys(const OpenFile& file, const Table& table)
      : file_(file),
        time_(open_numbers(file, table.group.get(), "time", table.where + "/time")),
        job_(open_numbers(file, table.group.get(), "job", table.where + "/job")) {
    rows_ = std::min(time_.rows, job_.rows);
    if (table.host_column) {
      host_ = open_text(file, table.group.get(), "host", table.where + "/host");
      rows_ = std::min(rows_, host_->rows);
    } else {
      hosts_.push_back(table.host);
    }
  }

  // The hosts rows name (host indexes below index this).
  const std::vector<std::string>& hosts() const { return hosts_; }

  // Calls row(index, time, job, host index) for every row, in order; rows whose time is 0 (the
  // fill value: grown, never written) are left out.
  template <typename Row>
  void each(Row row) {
    std::vector<std::int64_t> times;
    std::vector<std::uint64_t> jobs;
    std::vector<std::uint32_t> host_of;
    for (hsize_t start = 0; start < rows_; start += kBlockRows) {
      const hsize_t count = std::min(kBlockRows, rows_ - start);
      times.resize(count);
      jobs.resize(count);
      read_rows(file_, time_.dataset.get(), H5T_NATIVE_INT64, start, count, times.data(),
                time_.where);
      read_rows(file_, job_.dataset.get(), H5T_NATIVE_UINT64, start, count, jobs.data(),
                job_.where);
      host_of.assign(count, 0);
      if (host_) {
        std::string previous;
        std::uint32_t previous_index = 0;
        bool have_previous = false;
        host_->read(file_, start, count, [&](hsize_t i, std::string_view host) {
          if (!have_previous || host != previous) {
            auto [found, added] = host_index_.try_emplace(
                std::string(host), static_cast<std::uint32_t>(hosts_.size()));
            if (added) hosts_.emplace_back(host);
            previous = host;
            previous_index = found->second;
            have_previous = true;
          }
          host_of[i] = previous_index;
        });
      }
      for (hsize_t i = 0; i < count; ++i)
        if (times[i] != 0) row(start + i, times[i], jobs[i], host_of[i]);
    }
  }

 private:
  const OpenFile& file_;
  NumberColumn time_;
  NumberColumn job_;
  std::optional<TextColumn> host_;
  hsize_t rows_ = 0;
  std::vector<std::string> hosts_;
  std::unordered_map<std::string, std::uint32_t> host_index_;
};

// The label dataset at labels/<link> of `table`, if any.
std::optional<TextColumn> label_column(const OpenFile& file, const Table& table,
                                       const std::string& link);

}  // namespace fructosa::report::hdf5_read
