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
#include <functional>
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
// Metadata read attempts of a SWMR reader (open_file): HDF5's default is 100.
inline constexpr unsigned kMetadataReadAttempts = 10;
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

// The `jobs` attribute lmaster writes on the file root, each table and (per_host) each host group:
// the job ids (0 included: the nodes' own rows) present below, sorted ascending (sorted here if
// not). Empty for an H5S_NULL attribute; nullopt when absent or not integers. Complete only once
// the file is closed (it lags while a writer has the file open: file_being_written).
std::optional<std::vector<std::uint64_t>> jobs_attribute(hid_t object);

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

// Every table of a file, either layout: /<sensor> with a host column, /<host>/<sensor> without;
// only those `keep` accepts (called with each per_host host group, then with each table group,
// before anything else of them is read), when given.
using KeepGroup = std::function<bool(hid_t group)>;
std::vector<Table> tables_of(const OpenFile& file, const KeepGroup& keep = {});

// The columns that say whose each row is: time, job and (per_sensor) host. Rows: len(time) (fewer
// if job or host is shorter: a file a killed writer left). `job` is read first, a block at a time;
// `time` and `host` only over the spans of the block that hold rows wanted (runs of rows wanted
// less than a chunk of `time` apart), and a row's host is looked up only when it is wanted.
class RowKeys {
 public:
  RowKeys(const OpenFile& file, const Table& table);

  // The hosts rows name (host indexes below index this).
  const std::vector<std::string>& hosts() const { return hosts_; }

  // Calls row(index, time, job, host index) for every row whose job `want(job)` accepts, in
  // order; rows whose time is 0 (the fill value: grown, never written) are left out.
  template <typename Want, typename Row>
  void each(Want want, Row row) {
    std::vector<std::uint64_t> jobs;
    std::vector<std::int64_t> times;
    std::vector<std::uint32_t> host_of;
    std::vector<std::uint32_t> wanted;  // offsets in the block
    for (hsize_t start = 0; start < rows_; start += kBlockRows) {
      const hsize_t count = std::min(kBlockRows, rows_ - start);
      jobs.resize(count);
      read_rows(file_, job_.dataset.get(), H5T_NATIVE_UINT64, start, count, jobs.data(),
                job_.where);
      wanted.clear();
      for (hsize_t i = 0; i < count; ++i)
        if (want(jobs[i])) wanted.push_back(static_cast<std::uint32_t>(i));
      // Spans [first, last] of wanted rows, split where two are a chunk or more apart.
      for (std::size_t w = 0; w < wanted.size();) {
        std::size_t end = w + 1;
        while (end < wanted.size() && wanted[end] - wanted[end - 1] < gap_) ++end;
        const hsize_t first = wanted[w];
        const hsize_t span = wanted[end - 1] - first + 1;
        times.resize(span);
        read_rows(file_, time_.dataset.get(), H5T_NATIVE_INT64, start + first, span, times.data(),
                  time_.where);
        host_of.assign(span, 0);
        if (host_) {
          std::size_t next = w;  // the next wanted row of the span
          host_->read(file_, start + first, span, [&](hsize_t i, std::string_view host) {
            if (next == end || wanted[next] != first + i) return;
            ++next;
            host_of[i] = host_index(host);
          });
        }
        for (std::size_t k = w; k < end; ++k) {
          const hsize_t i = wanted[k] - first;
          if (times[i] != 0) row(start + wanted[k], times[i], jobs[wanted[k]], host_of[i]);
        }
        w = end;
      }
    }
  }

 private:
  struct TextHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view text) const {
      return std::hash<std::string_view>{}(text);
    }
  };

  std::uint32_t host_index(std::string_view host) {
    if (have_previous_ && host == previous_) return previous_index_;
    auto found = host_index_.find(host);
    if (found == host_index_.end()) {
      found = host_index_.emplace(std::string(host), static_cast<std::uint32_t>(hosts_.size()))
                  .first;
      hosts_.emplace_back(host);
    }
    previous_.assign(host);
    previous_index_ = found->second;
    have_previous_ = true;
    return previous_index_;
  }

  const OpenFile& file_;
  NumberColumn time_;
  NumberColumn job_;
  std::optional<TextColumn> host_;
  hsize_t rows_ = 0;
  hsize_t gap_ = kBlockRows;  // rows of a chunk of `time`
  std::vector<std::string> hosts_;
  std::unordered_map<std::string, std::uint32_t, TextHash, std::equal_to<>> host_index_;
  std::string previous_;
  std::uint32_t previous_index_ = 0;
  bool have_previous_ = false;
};

// The label dataset at labels/<link> of `table`, if any.
std::optional<TextColumn> label_column(const OpenFile& file, const Table& table,
                                       const std::string& link);

}  // namespace fructosa::report::hdf5_read
