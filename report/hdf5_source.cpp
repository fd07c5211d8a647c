// Hdf5Source (hdf5_source.h): a small reader of lmaster's HDF5 files on the HDF5 C API, of its
// own (the writer's helpers live in fructosa_master, which the report does not link).
#include "hdf5_source.h"

#include <hdf5.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
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

#include "hdf5_basics.h"

namespace fructosa::report {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "fructosa lmaster HDF5 output";
constexpr const char* kJobCgroup = "JobCgroup";
constexpr const char* kUserLabel = "user";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Rows read per HDF5 call: what a table costs in memory at once, whatever its length.
constexpr hsize_t kBlockRows = hsize_t{1} << 16;

using Clock = std::chrono::steady_clock;

// --- HDF5 basics --------------------------------------------------------------------------------

using h5::Handle;
using h5::hdf5_error;
using h5::quiet_hdf5;

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
  throw SourceError(file.string() + ": " + what);
}
[[noreturn]] void fail_hdf5(const fs::path& file, const std::string& what) {
  fail(file, what + ": " + hdf5_error());
}

// An HDF5 file's signature at offset 0, 512, 1024, 2048... (a user block may precede it).
bool has_hdf5_signature(const fs::path& path) {
  static constexpr std::array<char, 8> kSignature{'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::array<char, 8> head{};
  for (std::streamoff offset = 0;; offset = offset == 0 ? 512 : offset * 2) {
    in.seekg(offset);
    if (!in.read(head.data(), head.size())) return false;
    if (head == kSignature) return true;
  }
}

bool file_being_written(const fs::path& path) {
  auto flags = h5::superblock_flags(path);
  return flags && *flags != 0;
}

struct OpenFile {
  fs::path path;
  Handle file;
  bool swmr = false;
};

// Opens `path` read-only as a SWMR reader (a file being written), else as a plain reader (files
// of other HDF5 versions). Retries while a writer has it open without SWMR (lmaster adding
// objects), up to `retry`.
OpenFile open_file(const fs::path& path, std::chrono::milliseconds retry) {
  std::error_code error;
  const auto status = fs::status(path, error);
  if (!fs::exists(status)) fail(path, "no such file");
  if (!fs::is_regular_file(status)) fail(path, "not a regular file");
  if (!has_hdf5_signature(path)) fail(path, "not an HDF5 file");
  Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!access) fail_hdf5(path, "cannot make properties");
  // A reader needs no lock (lmaster does not take HDF5's either: its .lock file keeps writers
  // out); without one it never delays a writer that uses HDF5's locks.
  H5Pset_file_locking(access.get(), false, true);
  const auto deadline = Clock::now() + retry;
  int failures_while_closed = 0;
  for (;;) {
    hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, access.get());
    if (id >= 0) return OpenFile{path, Handle(id, H5Fclose), true};
    const std::string swmr_error = hdf5_error();
    id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get());
    if (id >= 0) return OpenFile{path, Handle(id, H5Fclose), false};
    const std::string plain_error = hdf5_error();
    // Not being written: tried twice, as lmaster closes the file for a moment (the flags then
    // read 0) before it reopens it without SWMR.
    const bool written = file_being_written(path);
    if (!written && ++failures_while_closed >= 2)
      fail(path, "cannot open it as an HDF5 file: " + plain_error);
    if (written && Clock::now() >= deadline)
      fail(path,
           "cannot open it: a writer has it open without SWMR (or one that was killed left it "
           "so: lmaster repairs it at its next start, `h5clear -s` clears the flag): " +
               swmr_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// --- attributes ---------------------------------------------------------------------------------

// A text attribute (variable- or fixed-length string, scalar); nullopt when absent or not text.
std::optional<std::string> text_attribute(hid_t object, const char* name) {
  if (H5Aexists(object, name) <= 0) return std::nullopt;
  Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  Handle type(attribute ? H5Aget_type(attribute.get()) : -1, H5Tclose);
  Handle space(attribute ? H5Aget_space(attribute.get()) : -1, H5Sclose);
  if (!type || !space || H5Tget_class(type.get()) != H5T_STRING ||
      H5Sget_simple_extent_npoints(space.get()) != 1)
    return std::nullopt;
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
    if (!memory || H5Tset_size(memory.get(), H5T_VARIABLE) < 0 ||
        H5Tset_cset(memory.get(), H5Tget_cset(type.get())) < 0)
      return std::nullopt;
    char* text = nullptr;
    if (H5Aread(attribute.get(), memory.get(), &text) < 0) return std::nullopt;
    std::string value = text ? text : "";
    if (text) H5free_memory(text);
    return value;
  }
  const std::size_t size = H5Tget_size(type.get());
  std::vector<char> buffer(size + 1, '\0');
  if (H5Aread(attribute.get(), type.get(), buffer.data()) < 0) return std::nullopt;
  std::string value(buffer.data(), strnlen(buffer.data(), size));
  if (H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD) value.erase(value.find_last_not_of(' ') + 1);
  return value;
}

std::optional<long long> integer_attribute(hid_t object, const char* name) {
  if (H5Aexists(object, name) <= 0) return std::nullopt;
  Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  Handle type(attribute ? H5Aget_type(attribute.get()) : -1, H5Tclose);
  Handle space(attribute ? H5Aget_space(attribute.get()) : -1, H5Sclose);
  if (!type || !space || H5Tget_class(type.get()) != H5T_INTEGER ||
      H5Sget_simple_extent_npoints(space.get()) != 1)
    return std::nullopt;
  long long value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_LLONG, &value) < 0) return std::nullopt;
  return value;
}

// --- objects ------------------------------------------------------------------------------------

herr_t collect_hard_link(hid_t, const char* name, const H5L_info_t* info, void* data) {
  if (info->type == H5L_TYPE_HARD) static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

std::vector<std::string> hard_links(const OpenFile& file, hid_t group, const std::string& where) {
  std::vector<std::string> links;
  if (H5Literate(group, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_hard_link, &links) < 0)
    fail_hdf5(file.path, "cannot list " + where);
  return links;
}

bool has_link(hid_t group, const char* link) { return H5Lexists(group, link, H5P_DEFAULT) > 0; }

// The object at `link` in `group` when it is of type `type` (H5I_GROUP, H5I_DATASET).
Handle open_object(const OpenFile& file, hid_t group, const std::string& link, H5I_type_t type,
                   const std::string& where) {
  if (!has_link(group, link.c_str())) return {};
  Handle object(H5Oopen(group, link.c_str(), H5P_DEFAULT), H5Oclose);
  if (!object) fail_hdf5(file.path, "cannot open " + where);
  if (H5Iget_type(object.get()) != type) return {};
  return object;
}

// --- datasets -----------------------------------------------------------------------------------

hsize_t dataset_rows(const OpenFile& file, hid_t dataset, const std::string& where) {
  Handle space(H5Dget_space(dataset), H5Sclose);
  hsize_t rows = 0;
  if (!space || H5Sget_simple_extent_ndims(space.get()) != 1 ||
      H5Sget_simple_extent_dims(space.get(), &rows, nullptr) < 0)
    fail_hdf5(file.path, "cannot read the size of " + where + " (not a 1-D dataset?)");
  return rows;
}

H5T_class_t dataset_class(hid_t dataset) {
  Handle type(H5Dget_type(dataset), H5Tclose);
  return type ? H5Tget_class(type.get()) : H5T_NO_CLASS;
}

// Rows [start, start + count) of a 1-D dataset, converted to `memory_type`.
void read_rows(const OpenFile& file, hid_t dataset, hid_t memory_type, hsize_t start, hsize_t count,
               void* data, const std::string& where) {
  if (count == 0) return;
  Handle file_space(H5Dget_space(dataset), H5Sclose);
  Handle memory_space(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (!file_space || !memory_space ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr) < 0 ||
      H5Dread(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, data) < 0)
    fail_hdf5(file.path, "cannot read " + where);
}

// A numeric dataset (time, job, a metric column).
struct NumberColumn {
  Handle dataset;
  hsize_t rows = 0;
  std::string where;
};

NumberColumn open_numbers(const OpenFile& file, hid_t group, const std::string& link,
                          const std::string& where) {
  NumberColumn column;
  column.where = where;
  column.dataset = Handle(H5Dopen2(group, link.c_str(), H5P_DEFAULT), H5Dclose);
  if (!column.dataset) fail_hdf5(file.path, "cannot open " + where);
  const H5T_class_t type = dataset_class(column.dataset.get());
  if (type != H5T_INTEGER && type != H5T_FLOAT)
    fail(file.path, "cannot read " + where + ": not a numeric dataset");
  column.rows = dataset_rows(file, column.dataset.get(), where);
  return column;
}

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
                     const std::string& where) {
  TextColumn column;
  column.where = where;
  column.dataset = Handle(H5Dopen2(group, link.c_str(), H5P_DEFAULT), H5Dclose);
  if (!column.dataset) fail_hdf5(file.path, "cannot open " + where);
  Handle type(H5Dget_type(column.dataset.get()), H5Tclose);
  if (!type || H5Tget_class(type.get()) != H5T_STRING)
    fail(file.path, "cannot read " + where + ": not a string dataset");
  column.variable = H5Tis_variable_str(type.get()) > 0;
  if (column.variable) {
    column.memory_type = Handle(H5Tcopy(H5T_C_S1), H5Tclose);
    if (!column.memory_type || H5Tset_size(column.memory_type.get(), H5T_VARIABLE) < 0 ||
        H5Tset_cset(column.memory_type.get(), H5Tget_cset(type.get())) < 0)
      fail_hdf5(file.path, "cannot read " + where);
  } else {
    // The file's own type: no conversion (HDF5 does not convert between character sets).
    column.width = std::max<std::size_t>(1, H5Tget_size(type.get()));
    column.space_padded = H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD;
    column.memory_type = Handle(H5Tcopy(type.get()), H5Tclose);
    if (!column.memory_type) fail_hdf5(file.path, "cannot read " + where);
  }
  column.rows = dataset_rows(file, column.dataset.get(), where);
  return column;
}

// Values of `column` at `rows` (ascending), read a block at a time over the spans that hold
// them; rows past the dataset's end read NaN.
std::vector<double> pick_numbers(const OpenFile& file, const NumberColumn& column,
                                 const std::vector<hsize_t>& rows) {
  std::vector<double> values(rows.size(), kNaN);
  std::vector<double> block;
  for (std::size_t i = 0; i < rows.size() && rows[i] < column.rows;) {
    const hsize_t start = rows[i];
    const hsize_t end = std::min({start + kBlockRows, rows.back() + 1, column.rows});
    block.resize(end - start);
    read_rows(file, column.dataset.get(), H5T_NATIVE_DOUBLE, start, end - start, block.data(),
              column.where);
    for (; i < rows.size() && rows[i] < end; ++i) values[i] = block[rows[i] - start];
  }
  return values;
}

std::vector<std::string> pick_texts(const OpenFile& file, const TextColumn& column,
                                    const std::vector<hsize_t>& rows) {
  std::vector<std::string> values(rows.size());
  for (std::size_t i = 0; i < rows.size() && rows[i] < column.rows;) {
    const hsize_t start = rows[i];
    const hsize_t end = std::min({start + kBlockRows, rows.back() + 1, column.rows});
    std::size_t next = i;
    column.read(file, start, end - start, [&](hsize_t row, std::string_view text) {
      if (next < rows.size() && rows[next] == start + row) values[next++] = text;
    });
    i = next;
  }
  return values;
}

// --- tables -------------------------------------------------------------------------------------

struct Table {
  Handle group;
  std::string where;         // its link path, for messages
  std::string sensor;        // real name
  std::string host;          // per_host: the host of every row
  bool host_column = false;  // per_sensor: a `host` dataset names each row's host
};

// Every table of a file, either layout: /<sensor> with a host column, /<host>/<sensor> without.
std::vector<Table> tables_of(const OpenFile& file) {
  std::vector<Table> tables;
  auto add = [&](Handle group, const std::string& link, const std::string& where,
                 const std::string& default_host) {
    Table table;
    table.where = where;
    table.sensor = text_attribute(group.get(), "sensor").value_or(hdf5_unescape(link));
    table.host = text_attribute(group.get(), "host").value_or(default_host);
    table.host_column = has_link(group.get(), "host");
    table.group = std::move(group);
    tables.push_back(std::move(table));
  };
  const hid_t root = file.file.get();
  for (const auto& link : hard_links(file, root, "/")) {
    const std::string where = "/" + link;
    Handle group = open_object(file, root, link, H5I_GROUP, where);
    if (!group) continue;
    if (has_link(group.get(), "time")) {  // a per_sensor table
      if (!has_link(group.get(), "host"))
        fail(file.path, where + " is a table at the root without a host column");
      add(std::move(group), link, where, "");
      continue;
    }
    // A host's group (per_host).
    const std::string host = text_attribute(group.get(), "host").value_or(hdf5_unescape(link));
    for (const auto& sensor_link : hard_links(file, group.get(), where)) {
      const std::string table_where = where + "/" + sensor_link;
      Handle table = open_object(file, group.get(), sensor_link, H5I_GROUP, table_where);
      if (table && has_link(table.get(), "time"))
        add(std::move(table), sensor_link, table_where, host);
    }
  }
  return tables;
}

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
                                       const std::string& link) {
  Handle labels =
      open_object(file, table.group.get(), "labels", H5I_GROUP, table.where + "/labels");
  if (!labels || !has_link(labels.get(), link.c_str())) return std::nullopt;
  return open_text(file, labels.get(), link, table.where + "/labels/" + link);
}

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

// --- what is gathered ---------------------------------------------------------------------------

struct JobTally {
  std::set<std::string> hosts;
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = std::numeric_limits<std::int64_t>::min();
  std::optional<std::pair<std::int64_t, std::string>> user;  // (time, value) of the latest
};

// A label's latest non-empty value: later rows win (time, then order read).
void keep_latest(std::optional<std::pair<std::int64_t, std::string>>& latest, std::int64_t time,
                 std::string_view value) {
  if (value.empty() || (latest && time < latest->first)) return;
  latest.emplace(time, std::string(value));
}

using JobTallies = std::map<std::uint64_t, JobTally>;

JobTallies tally_file(const OpenFile& file) {
  JobTallies tallies;
  for (const Table& table : tables_of(file)) {
    RowKeys keys(file, table);
    std::optional<TextColumn> user;
    if (table.sensor == kJobCgroup) user = label_column(file, table, kUserLabel);
    // Rows of jobs, for the label `user` (read afterwards, over those rows only).
    std::vector<hsize_t> user_rows;
    std::vector<std::pair<std::int64_t, JobTally*>> user_row_jobs;
    std::uint64_t last_job = 0;
    JobTally* tally = nullptr;
    keys.each([&](hsize_t row, std::int64_t time, std::uint64_t job, std::uint32_t host) {
      if (job == 0) return;
      if (!tally || job != last_job) {
        tally = &tallies[job];
        last_job = job;
      }
      tally->hosts.insert(keys.hosts()[host]);
      tally->first = std::min(tally->first, time);
      tally->last = std::max(tally->last, time);
      if (user) {
        user_rows.push_back(row);
        user_row_jobs.emplace_back(time, tally);
      }
    });
    if (user && !user_rows.empty()) {
      const auto values = pick_texts(file, *user, user_rows);
      for (std::size_t i = 0; i < values.size(); ++i)
        keep_latest(user_row_jobs[i].second->user, user_row_jobs[i].first, values[i]);
    }
  }
  return tallies;
}

// One sensor's rows of the job on one host: the times, each column (NaN where a row has no
// value) and each label's latest non-empty value.
struct SensorRows {
  std::vector<std::int64_t> time;
  std::map<std::string, std::vector<double>> columns;
  std::map<std::string, std::optional<std::pair<std::int64_t, std::string>>> labels;

  // Appends rows: `times`, and the values of some columns for them; other columns read NaN there.
  void append(const std::vector<std::int64_t>& times,
              std::map<std::string, std::vector<double>>&& values) {
    const std::size_t before = time.size();
    time.insert(time.end(), times.begin(), times.end());
    for (auto& [key, column] : values) {
      auto& into = columns[key];
      into.resize(before, kNaN);
      into.insert(into.end(), column.begin(), column.end());
    }
    for (auto& [key, column] : columns) column.resize(time.size(), kNaN);
  }
  void merge_labels(
      const std::map<std::string, std::optional<std::pair<std::int64_t, std::string>>>& more) {
    for (const auto& [key, latest] : more)
      if (latest) keep_latest(labels[key], latest->first, latest->second);
  }
};

// host -> sensor -> rows
using JobRows = std::map<std::string, std::map<std::string, SensorRows>>;

JobRows job_rows_of_file(const OpenFile& file, std::uint64_t id) {
  JobRows result;
  for (const Table& table : tables_of(file)) {
    RowKeys keys(file, table);
    std::vector<hsize_t> rows;
    std::vector<std::int64_t> times;
    std::vector<std::uint32_t> hosts;
    keys.each([&](hsize_t row, std::int64_t time, std::uint64_t job, std::uint32_t host) {
      if (job != id) return;
      rows.push_back(row);
      times.push_back(time);
      hosts.push_back(host);
    });
    if (rows.empty()) continue;
    // The rows of each host (index into rows).
    std::map<std::uint32_t, std::vector<std::size_t>> by_host;
    for (std::size_t i = 0; i < rows.size(); ++i) by_host[hosts[i]].push_back(i);
    std::map<std::uint32_t, std::map<std::string, std::vector<double>>> host_columns;
    std::map<std::uint32_t,
             std::map<std::string, std::optional<std::pair<std::int64_t, std::string>>>>
        host_labels;
    for (const auto& link : hard_links(file, table.group.get(), table.where)) {
      if (link == "time" || link == "job" || link == "host") continue;
      const std::string where = table.where + "/" + link;
      Handle dataset = open_object(file, table.group.get(), link, H5I_DATASET, where);
      if (!dataset) continue;  // the labels group
      const std::string key = text_attribute(dataset.get(), "key").value_or(hdf5_unescape(link));
      dataset.reset();
      const NumberColumn column = open_numbers(file, table.group.get(), link, where);
      const std::vector<double> values = pick_numbers(file, column, rows);
      for (const auto& [host, indexes] : by_host) {
        std::vector<double> mine;
        mine.reserve(indexes.size());
        for (std::size_t i : indexes) mine.push_back(values[i]);
        host_columns[host][key] = std::move(mine);
      }
    }
    Handle labels =
        open_object(file, table.group.get(), "labels", H5I_GROUP, table.where + "/labels");
    if (labels) {
      for (const auto& link : hard_links(file, labels.get(), table.where + "/labels")) {
        const std::string where = table.where + "/labels/" + link;
        Handle dataset = open_object(file, labels.get(), link, H5I_DATASET, where);
        if (!dataset) continue;
        const std::string key = text_attribute(dataset.get(), "key").value_or(hdf5_unescape(link));
        dataset.reset();
        const TextColumn column = open_text(file, labels.get(), link, where);
        const std::vector<std::string> values = pick_texts(file, column, rows);
        for (const auto& [host, indexes] : by_host) {
          auto& latest = host_labels[host][key];
          for (std::size_t i : indexes) keep_latest(latest, times[i], values[i]);
        }
      }
    }
    for (const auto& [host, indexes] : by_host) {
      std::vector<std::int64_t> host_times;
      host_times.reserve(indexes.size());
      for (std::size_t i : indexes) host_times.push_back(times[i]);
      SensorRows& into = result[keys.hosts()[host]][table.sensor];
      into.append(host_times, std::move(host_columns[host]));
      into.merge_labels(host_labels[host]);
    }
  }
  return result;
}

HostData host_data(const std::string& host, std::map<std::string, SensorRows>& sensors) {
  HostData data;
  data.host = host;
  for (auto& [sensor, rows] : sensors) {
    data.sensors.push_back(sensor);
    // Time order (rows are stored in the order lmaster received them).
    std::vector<std::size_t> order(rows.time.size());
    std::iota(order.begin(), order.end(), 0);
    const bool sorted = std::is_sorted(rows.time.begin(), rows.time.end());
    if (!sorted)
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return rows.time[a] < rows.time[b]; });
    std::vector<std::int64_t> times;
    times.reserve(order.size());
    for (std::size_t i : order) times.push_back(rows.time[i]);
    for (auto& [key, values] : rows.columns) {
      if (std::all_of(values.begin(), values.end(), [](double v) { return std::isnan(v); }))
        continue;
      Series series;
      series.time_ns = times;
      if (sorted) {
        series.values = std::move(values);
      } else {
        series.values.reserve(order.size());
        for (std::size_t i : order) series.values.push_back(values[i]);
      }
      data.metrics.emplace(sensor + "." + key, std::move(series));
    }
    for (const auto& [key, latest] : rows.labels)
      if (latest) data.labels.emplace(sensor + "." + key, latest->second);
  }
  return data;
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
    JobTallies tallies = read_file(path, open_retry_, tally_file);
    for (auto& [id, tally] : tallies) {
      JobTally& into = all[id];
      into.hosts.merge(tally.hosts);
      into.first = std::min(into.first, tally.first);
      into.last = std::max(into.last, tally.last);
      if (tally.user) keep_latest(into.user, tally.user->first, tally.user->second);
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
    summaries.push_back(std::move(summary));
  }
  return summaries;
}

std::optional<JobData> Hdf5Source::job(std::uint64_t id) {
  quiet_hdf5();
  if (id == 0) return std::nullopt;
  JobRows all;
  for (const auto& path : files_) {
    JobRows rows = read_file(path, open_retry_,
                             [id](const OpenFile& file) { return job_rows_of_file(file, id); });
    for (auto& [host, sensors] : rows)
      for (auto& [sensor, more] : sensors) {
        SensorRows& into = all[host][sensor];
        into.append(more.time, std::move(more.columns));
        into.merge_labels(more.labels);
      }
  }
  if (all.empty()) return std::nullopt;
  JobData data;
  data.id = id;
  for (auto& [host, sensors] : all) data.hosts.push_back(host_data(host, sensors));
  return data;
}

std::string Hdf5Source::describe() const { return description_; }

}  // namespace fructosa::report
