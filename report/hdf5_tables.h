// The low-level half of Hdf5Source's reading (hdf5_source.cpp), on the HDF5 C API: opening a
// file (the signature and superblock checks, SWMR or plain, retried while lmaster has it open
// without SWMR), text and integer attributes, an object's hard links and the objects behind them,
// 1-D numeric and text datasets read as columns (a block of rows at a time, only the rows
// picked, a label's latest values from the end, the row of a time by bisection; the chunks of a
// closed file decoded here: hdf5_chunks.h), and an lmaster file's tables in either layout with
// the keys of each row (time, job, host). Errors are SourceError naming the file. Internal to
// fructosa_report: what is gathered from these tables, and which files are read, is
// hdf5_source.cpp's and hdf5_job_rows.cpp's.
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
#include <utility>
#include <vector>

#include "hdf5_basics.h"
#include "hdf5_chunks.h"

namespace fructosa::report::hdf5_read {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Rows read per HDF5 call: what a table costs in memory at once, whatever its length.
// Metadata read attempts of a SWMR reader (open_file): HDF5's default is 100.
inline constexpr unsigned kMetadataReadAttempts = 10;
inline constexpr hsize_t kBlockRows = hsize_t{1} << 16;
// The link of lmaster's job index at the root (hdf5_index.h): never a table.
inline constexpr const char* kJobIndexLink = ".jobs";

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
  // No writer had it open when it was opened: its chunks are final and may be read directly
  // (hdf5_chunks.h).
  bool closed = false;
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

// What the columns below share: the dataset, its length, and how its chunks can be read
// directly (closed files, hdf5_chunks.h).
struct Column {
  Handle dataset;
  hsize_t rows = 0;
  std::string where;
  std::optional<ChunkDecoder> direct;

  // Rows [start, start + count) (within `rows`) as `memory_type`, `element_size` bytes each.
  void read_block(const OpenFile& file, hid_t memory_type, std::size_t element_size, hsize_t start,
                  hsize_t count, void* data) const;
  // Reads the chunks (or, read with H5Dread, blocks of a chunk's rows) that hold `rows` (ascending,
  // within `rows`) and calls use(first, last, base, bytes) for each: rows[first..last) lie in the
  // rows read, which start at row `base`. Calls may come from several threads at once.
  void each_piece(const OpenFile& file, hid_t memory_type, std::size_t element_size,
                  const std::vector<hsize_t>& rows,
                  const std::function<void(std::size_t, std::size_t, hsize_t, const unsigned char*)>&
                      use) const;
  // Rows per chunk (kBlockRows for a dataset that is not chunked).
  hsize_t chunk_rows() const;
};

// A numeric dataset (time, job, a metric column).
struct NumberColumn : Column {};

NumberColumn open_numbers(const OpenFile& file, hid_t group, const std::string& link,
                          const std::string& where);

// A text dataset (host, a label): fixed-length strings as lmaster writes them, or variable-length.
struct TextColumn : Column {
  Handle memory_type;
  std::size_t width = 0;  // fixed-length: bytes per row
  bool variable = false;
  bool space_padded = false;

  std::string_view text(const unsigned char* row) const {
    const char* text = reinterpret_cast<const char*>(row);
    std::string_view value(text, strnlen(text, width));
    if (space_padded)
      while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
    return value;
  }

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
    std::vector<unsigned char> raw(count * width);
    read_block(file, memory_type.get(), width, start, count, raw.data());
    for (hsize_t i = 0; i < count; ++i) row(i, text(raw.data() + i * width));
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

// For each group of rows (group[k]: the group of rows[k], below `groups`), the last of its rows
// (ascending) whose text is not empty: (its index in rows, the text); read from the end, a
// chunk at a time, until every group that has rows has one (a label's latest value costs a
// chunk or two, not the column).
std::vector<std::optional<std::pair<std::size_t, std::string>>> latest_texts(
    const OpenFile& file, const TextColumn& column, const std::vector<hsize_t>& rows,
    const std::vector<std::uint32_t>& group, std::size_t groups);

// The first row of [0, rows) whose time is at or after `time`, for a `time` column in ascending
// order (lmaster's, in the order received: nearly; callers widen what they look for). A time of 0
// (a row grown, never written) counts as after every time. Reads a chunk per step.
hsize_t first_row_at(const OpenFile& file, const NumberColumn& time, hsize_t rows,
                     std::int64_t at);

// --- tables -------------------------------------------------------------------------------------

struct Table {
  Handle group;
  std::string where;         // its link path, for messages
  std::string sensor;        // real name
  std::string host;          // per_host: the host of every row
  bool host_column = false;  // per_sensor: a `host` dataset names each row's host
};

// Every table of a file, either layout: /<sensor> with a host column, /<host>/<sensor> without;
// only those `keep` accepts (called with each per_host host group, table false, then with each
// table group, table true, before anything else of them is read), when given.
using KeepGroup = std::function<bool(hid_t group, bool table)>;
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

  hsize_t rows() const { return rows_; }
  const NumberColumn& time() const { return time_; }

  // Calls row(index, time, job, host index) for every row of [begin, end) whose job `want(job)`
  // accepts, in order; rows whose time is 0 (the fill value: grown, never written) are left out.
  template <typename Want, typename Row>
  void each(Want want, Row row, hsize_t begin = 0, hsize_t end = ~hsize_t{0}) {
    std::vector<std::uint64_t> jobs;
    std::vector<std::int64_t> times;
    std::vector<std::uint32_t> host_of;
    std::vector<std::uint32_t> wanted;  // offsets in the block
    end = std::min(end, rows_);
    for (hsize_t start = begin; start < end; start += kBlockRows) {
      const hsize_t count = std::min(kBlockRows, end - start);
      jobs.resize(count);
      job_.read_block(file_, H5T_NATIVE_UINT64, sizeof(std::uint64_t), start, count, jobs.data());
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
        time_.read_block(file_, H5T_NATIVE_INT64, sizeof(std::int64_t), start + first, span,
                         times.data());
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
