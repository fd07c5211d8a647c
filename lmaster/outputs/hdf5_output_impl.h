// The HDF5 output's internals (included only by lmaster/outputs/hdf5_*.cpp): the layout's names
// and limits, the in-memory tables that buffer rows between flushes (Table, with its Column and
// LabelColumn), the file series (FileSeries: the link `path` and its timestamped files), and
// Hdf5Output::Impl, whose member functions are defined by responsibility in hdf5_repair.cpp,
// hdf5_compaction.cpp, hdf5_files.cpp, hdf5_objects.cpp and hdf5_output.cpp. The job index
// (/.jobs) is hdf5_job_index.h's.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "hdf5_compactor.h"
#include "hdf5_job_index.h"
#include "hdf5_output.h"
#include "hdf5_support.h"

namespace fructosa::master {

namespace hdf5 {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr const char* kTime = "time";
inline constexpr const char* kJob = "job";
inline constexpr const char* kLabels = "labels";
inline constexpr const char* kHost = "host";
// /.flushed, in the file being written: {journal record, rows} at its last complete flush: every
// sample of the journal's records up to `record` is in the file, which then held `rows` rows
// (all tables). After a crash it tells what the journal's replay must skip (record 0: unknown).
// Compaction leaves it out of closed files.
inline constexpr const char* kFlushedLink = ".flushed";
// format_version 1: layout per_host (/<host>/<sensor>); 2: layout per_sensor (/<sensor>, with a
// host column). Readers tell them apart by the root attribute `layout` (both have it).
inline constexpr int kPerHostFormatVersion = 1;
inline constexpr int kPerSensorFormatVersion = 2;
// The jobs attributes and the job index (and late descriptions) need the file out of SWMR mode:
// they are brought up to date at most this often while the file is written, and always when it
// is closed.
inline constexpr double kAttributeRefreshSeconds = 60;
// A file whose flushes fail this many times in a row is given up for a new one (HDF5 may be
// unable to recover a file handle after write errors); a table that fails this many times while
// the file works has its rows dropped.
inline constexpr int kFailuresBeforeGivingUp = 3;
// The metadata cache of a file whose objects are opened and closed one table at a time (past
// datasets_kept_open datasets, and compaction): the library's default grows to 32 MiB
// of entries, which take ~12 times that in memory, and a small cache is also the faster one then
// (bench/hdf5_bytes, 300 hosts per_host: 122,000 points/s with 64 KiB, 88,000 with 1 MiB,
// 64,000-73,000 with 4 MiB; docs/performance.md, "Bounded memory").
inline constexpr std::size_t kSmallMetadataCache = 64 << 10;

// --- the tables --------------------------------------------------------------------------------

// A key and its link name in the file, shared by the columns of every table that has the key:
// per_host has a table per host and sensor with the same keys on every host (205,000 columns
// for 1000 hosts), which then hold a pointer each instead of two strings.
struct ColumnName {
  std::string key;
  std::string link;
};

// The names met so far, of value columns or of labels (their links are escaped differently).
// Node-based: a name's address never changes. Kept for the output's life: keys are the agents'
// dictionaries', bounded by what their sensors declare.
class ColumnNames {
 public:
  explicit ColumnNames(bool metric_keys) : metric_keys_(metric_keys) {}
  const ColumnName& of(std::string_view key) {
    auto found = names_.find(key);
    if (found == names_.end())
      found = names_.insert(ColumnName{std::string(key), hdf5_link_name(key, metric_keys_)}).first;
    return *found;
  }

 private:
  struct ByKey {
    using is_transparent = void;
    static std::string_view key(const ColumnName& name) { return name.key; }
    static std::string_view key(std::string_view key) { return key; }
    bool operator()(const auto& a, const auto& b) const { return key(a) < key(b); }
  };
  bool metric_keys_;
  std::set<ColumnName, ByKey> names_;
};

inline const ColumnName kHostColumnName{kHost, kHost};

struct Column {
  const ColumnName* name = nullptr;
  const std::string& key() const { return name->key; }
  const std::string& link() const { return name->link; }
  Handle dataset;
  bool in_file = false;        // its dataset exists in the current file
  bool described = false;      // its unit/kind/description attributes come from the catalog
  bool has_value = false;      // some buffered row has a value
  std::vector<double> buffer;  // values of the buffered rows; missing trailing rows are NaN
  // Its key's number in the job index.
  std::size_t indexed_key = JobIndex::kUnnumbered;
};

// The text of a label's buffered rows. Strings stay allocated when the rows are flushed, so a
// value longer than std::string's inline buffer (a mount point, a long host name) is copied into
// the memory its row used before instead of a new allocation per row (profiled: a tenth of the
// HDF5 output's instructions per point went to those allocations).
class TextRows {
 public:
  std::size_t size() const { return used_; }
  const std::string& operator[](std::size_t row) const { return values_[row]; }
  // Rows skipped to reach `row` are "".
  void set(std::size_t row, std::string_view value) {
    if (row >= used_) grow_to(row + 1);
    values_[row].assign(value);
  }
  void push_back(std::string_view value) { set(used_, value); }
  void clear() { used_ = 0; }
  std::size_t longest() const {
    std::size_t longest = 0;
    for (std::size_t row = 0; row < used_; ++row) longest = std::max(longest, values_[row].size());
    return longest;
  }

 private:
  void grow_to(std::size_t rows) {
    if (values_.size() < rows) values_.resize(rows);
    for (std::size_t row = used_; row + 1 < rows; ++row) values_[row].clear();
    used_ = rows;
  }
  std::vector<std::string> values_;
  std::size_t used_ = 0;
};

// A text label (device, fstype, address...) stored as a fixed-length string per row: repeated
// values then compress to almost nothing (variable-length strings cost ~67 B per row).
struct LabelColumn {
  const ColumnName* name = nullptr;
  const std::string& key() const { return name->key; }
  const std::string& link() const { return name->link; }
  Handle dataset;
  bool in_file = false;
  bool has_value = false;
  std::size_t width = 0;            // bytes per row in the file
  TextRows buffer;                  // missing trailing rows are ""
  // Its key's number in the job index.
  std::size_t indexed_key = JobIndex::kUnnumbered;

  std::size_t longest_buffered() const { return buffer.longest(); }
};

struct Table {
  std::string host;  // "" in the per_sensor layout, where the host is a column
  std::string sensor;
  std::string host_link;
  std::string sensor_link;
  bool per_sensor = false;
  LabelColumn host_column;  // per_sensor: the host of each row (a label at the table's level)
  bool in_file = false;  // its group and time/job datasets exist in the current file
  Handle group;
  Handle time;
  Handle job;
  Handle label_group;
  hsize_t rows = 0;  // rows committed to the current file
  std::vector<std::int64_t> time_buffer;
  std::vector<std::uint64_t> job_buffer;
  std::size_t buffered_points = 0;
  std::vector<Column> columns;
  std::map<std::string_view, std::size_t> column_index;  // views of the columns' names
  std::vector<LabelColumn> labels;
  std::map<std::string_view, std::size_t> label_index;
  // The output's, shared by its tables.
  ColumnNames* column_names = nullptr;
  ColumnNames* label_names = nullptr;
  std::set<std::uint64_t> jobs;       // in the committed rows of the current file
  std::size_t jobs_in_attribute = 0;  // how many of them the jobs attribute lists
  int failed_flushes = 0;             // in a row, while the file itself worked
  // Its sensor's number in the job index.
  std::size_t indexed_sensor = JobIndex::kUnnumbered;

  std::size_t column_number(const std::string& key) {
    auto found = column_index.find(key);
    if (found != column_index.end()) return found->second;
    Column& added = columns.emplace_back();
    added.name = &column_names->of(key);
    column_index.emplace(added.key(), columns.size() - 1);
    return columns.size() - 1;
  }
  // The column of the i-th key of the last row written: a sensor's samples name their keys in
  // the same order, so one comparison finds the column instead of a lookup in column_index
  // (profiled: the lookups were a sixth of the HDF5 thread at 4 million points/s).
  std::size_t column_of(std::size_t i, const std::string& key) {
    return guess(key_order, i, key, columns, [this](const std::string& name) { return column_number(name); });
  }
  std::vector<std::size_t> key_order;
  // The label of the i-th label of a row, guessed as column_of guesses.
  LabelColumn& label_of(std::size_t i, const std::string& key) {
    return labels[guess(label_order, i, key, labels, [this](const std::string& name) { return label_number(name); })];
  }
  std::vector<std::size_t> label_order;
  // order[i] when that entry of `entries` has `key`, else what `find` says (remembered in order[i]).
  template <typename Entries, typename Find>
  static std::size_t guess(std::vector<std::size_t>& order, std::size_t i, const std::string& key,
                           const Entries& entries, const Find& find) {
    if (i < order.size() && entries[order[i]].key() == key) return order[i];
    std::size_t number = find(key);
    if (i < order.size())
      order[i] = number;
    else
      order.push_back(number);
    return number;
  }
  // The table the row after one of this table's went to last time: an agent's batch names its
  // sensors in the same order round after round (Impl::table_for).
  Table* followed_by = nullptr;
  std::size_t label_number(const std::string& key) {
    auto found = label_index.find(key);
    if (found != label_index.end()) return found->second;
    LabelColumn& added = labels.emplace_back();
    added.name = &label_names->of(key);
    label_index.emplace(added.key(), labels.size() - 1);
    return labels.size() - 1;
  }
  std::string where() const {
    return per_sensor ? "/" + sensor_link : "/" + host_link + "/" + sensor_link;
  }
  hsize_t pending() const { return time_buffer.size(); }

  void close_handles() {
    for (auto& label : labels) label.dataset.reset();
    host_column.dataset.reset();
    label_group.reset();
    for (auto& column : columns) column.dataset.reset();
    job.reset();
    time.reset();
    group.reset();
  }
  // A new file: nothing of this table is in it yet.
  void forget_file() {
    close_handles();
    in_file = false;
    rows = 0;
    for (auto& column : columns) column.in_file = false;
    for (auto& label : labels) {
      label.in_file = false;
      label.width = 0;
    }
    host_column.in_file = false;
    host_column.width = 0;
    jobs.clear();
    jobs_in_attribute = 0;
  }
  void clear_buffers() {
    time_buffer.clear();
    job_buffer.clear();
    buffered_points = 0;
    for (auto& column : columns) {
      column.buffer.clear();
      column.has_value = false;
    }
    for (auto& label : labels) {
      label.buffer.clear();
      label.has_value = false;
    }
    host_column.buffer.clear();
    host_column.has_value = false;
  }
};

struct HostGroup {
  Handle group;
  bool in_file = false;
  std::set<std::uint64_t> jobs;
  std::size_t jobs_in_attribute = 0;
};

// The symbolic link `path` and the names of the files it points to.
struct FileSeries {
  explicit FileSeries(const std::string& configured);
  fs::path link;
  fs::path directory;
  std::string stem;
  std::string extension;

  fs::path name(std::time_t when, int attempt) const;
  fs::path free_name(std::time_t when) const;
  bool is_member(const std::string& file) const;
};

}  // namespace hdf5

struct Hdf5Output::Impl {
  Impl(const Options& options, const MetricInfoStore& store, OutputCounters& output_counters);
  ~Impl();

  const hdf5::FileSeries series;
  const std::string link_path = series.link.string();
  const bool per_sensor;  // layout
  const unsigned complevel;
  const hsize_t chunk;
  const double flush_interval;
  const std::size_t max_buffered_points;
  const std::size_t datasets_kept_open;
  const std::uint64_t rotate_size;
  const double rotate_age;
  const MetricInfoStore& infos;
  OutputCounters& counters;

  std::mutex mutex;
  int lock_fd = -1;

  // The file being written. `swmr`: readers may open it; otherwise it is open for a moment
  // without SWMR to create objects and complete chunks (or closed after a failure).
  std::string file_path;
  hdf5::Handle file;
  bool swmr = false;
  std::chrono::steady_clock::time_point file_started;
  std::chrono::steady_clock::time_point attributes_refreshed;
  bool file_has_rows = false;
  int failed_flushes = 0;  // in a row
  bool abandoned = false;  // given up after failures: the next flush starts a new file
  bool directory_unsynced = false;  // a file created (or the link moved) since the last sync of its directory
  std::vector<hid_t> abandoned_files;
  std::set<std::uint64_t> file_jobs;
  std::size_t file_jobs_in_attribute = 0;
  // The current file's job index: tallied by write(), written with the attributes.
  hdf5::JobIndex job_index;
  // Datasets created in the current file (tables, columns, labels). Past datasets_kept_open a
  // table's handles are closed once it is written (release()): the library holds 10-17 KiB per
  // open dataset, and H5Fstart_swmr_write reopens every open one (3.9-6.3 GiB of lmaster's
  // memory for 1000 hosts in per_host; docs/performance.md, "Bounded memory").
  std::size_t datasets = 0;
  bool keep_handles = true;   // handles stay open between flushes (plan_handles())
  bool handles_kept = false;  // some were left open while under the limit

  // The names of the tables' columns and labels (declared before `tables`, which point to them).
  hdf5::ColumnNames column_names{true};
  hdf5::ColumnNames label_names{false};
  // host -> sensor -> table (per_sensor: the host is ""); tables outlive files (their handles are
  // closed and reopened).
  std::map<std::string, std::map<std::string, hdf5::Table, std::less<>>, std::less<>> tables;
  std::map<std::string, hdf5::HostGroup, std::less<>> hosts;
  std::size_t buffered_points = 0;

  // After a crash: the newest row time of each (host link, sensor link, job) in the files the
  // killed writer left. lmaster replays the journal from each output's last saved position, which
  // may be a little older than the last flush that reached the file; rows up to these times are
  // already stored and are skipped (once a series passes its mark, the mark goes, and they all go
  // when the runner says the replay is over: journal_replayed()).
  std::map<std::tuple<std::string, std::string, std::uint64_t>, std::int64_t> stored_before_crash;
  std::uint64_t skipped_as_stored = 0;
  // The replay keyed by journal record instead, when the newest file can say (/.flushed): set at
  // start after a crash; no marks by time are kept then.
  std::optional<std::uint64_t> stored_through;
  // What the runner said before this flush (handed_through()); 0 when not known: no journal, or
  // write() flushed on its own with rows of later records buffered. And what /.flushed says now.
  std::uint64_t handed_record = 0;
  std::uint64_t flushed_record = 0;

  // --- locking, old files, crash repair (hdf5_repair.cpp) ----------------------------------------
  void take_lock();
  void move_away_regular_file();
  void compact_left_over_files();
  void move_aside_damaged(const std::filesystem::path& path, const std::string& why);
  bool already_stored(const hdf5::Table& table, const Sample& sample);
  void write_flushed_mark(std::uint64_t record, std::uint64_t rows);
  void forget_stored_rows();
  void remember_stored_rows(const std::string& path);
  void remember_table_rows(const std::string& path, hid_t table, const std::string& where,
                           const std::string& host_link, const std::string& sensor_link);

  // --- compaction: a closed file rewritten compressed (hdf5_compaction.cpp) ----------------------
  struct Compaction {
    std::uintmax_t bytes_before = 0;
    std::uintmax_t bytes_after = 0;
    std::size_t tables_cut = 0;
    std::uint64_t rows = 0;  // complete rows copied, all tables
    double seconds = 0;
  };
  std::filesystem::path compaction_name(const std::filesystem::path& file) const;
  void compact_and_log(const std::string& path);
  Compaction compact_file(const std::string& path);
  hdf5::Handle create_group_in(const std::string& path, hid_t parent, const std::string& link,
                               const std::string& where) const;
  std::size_t copy_table(const std::string& path, hid_t table, hid_t copy, const std::string& where,
                         std::set<std::uint64_t>& jobs, std::uint64_t& rows_copied);
  void copy_dataset(const std::string& path, hid_t source_group, hid_t target_group,
                    const std::string& link, hsize_t rows, const std::string& where,
                    std::set<std::uint64_t>* jobs);
  void copy_group(const std::string& path, hid_t parent, hid_t parent_copy, const std::string& link,
                  const std::string& where);

  // --- files: creating, switching and closing them, SWMR mode, attributes (hdf5_files.cpp) -------
  void warn_about_file_locking() const;
  hdf5::Handle create_file(const std::string& path) const;
  void point_link_at(const std::string& target) const;
  void start_new_file(bool at_start);
  void close_handles();
  void leave_swmr();
  void enter_swmr();
  void ensure_file();
  bool attributes_stale() const;
  void refresh_attributes(bool closing = false);
  bool finish_file();
  void rotate_if_due();

  // --- objects: groups, tables and datasets in the file (hdf5_objects.cpp) -----------------------
  void describe(hdf5::Table& table, hdf5::Column& column) const;
  void open_host(const std::string& host, hdf5::HostGroup& group);
  void open_table(hdf5::Table& table);
  hsize_t label_chunk_rows(std::size_t width) const;
  void create_objects(hdf5::Table& table);
  void create_label(hdf5::Table& table, hdf5::LabelColumn& label, std::size_t width, hid_t parent,
                    const std::string& where);
  bool needs_objects(const hdf5::Table& table) const;
  std::size_t new_datasets(const hdf5::Table& table) const;
  void plan_handles(const std::vector<hdf5::Table*>& pending);
  void release(hdf5::Table& table);
  void open_time(hdf5::Table& table);

  // --- writing: buffering samples and flushing them (hdf5_output.cpp) ----------------------------
  void write_values(hdf5::Table& table);
  void write_label(const hdf5::LabelColumn& label, hsize_t start, hsize_t count,
                   const std::string& where);
  void check_free_space(const std::vector<hdf5::Table*>& pending) const;
  void flush_all();
  void abandon_file();
  void flush_rows();
  void write(std::span<const Sample> samples);
  void write_row(const Sample& sample);
  // The table of a sample's host (per_host) and sensor, made when new. Tried first: the one that
  // followed the last table written, which saves two lookups by name for most rows.
  hdf5::Table& table_for(const Sample& sample);
  hdf5::Table& find_or_add_table(const std::string& host, const std::string& sensor);
  hdf5::Table* last_table = nullptr;  // the last row's; tables live as long as the output
  std::size_t buffered_rows() const;

  // Runs a step that concerns the whole file, marking its failure as such.
  template <typename Step>
  void file_step(Step step) {
    try {
      step();
    } catch (const std::exception& failure) {
      throw hdf5::FileFailure(failure.what());
    }
  }

  // Rotated files are compressed on a thread of their own (hdf5_compactor.h). Declared last: it
  // finishes its files and stops before anything it uses goes.
  BackgroundCompactor compactor{[this](const std::string& path) {
    hdf5::quiet_hdf5();  // the library's error printing is per thread
    compact_and_log(path);
  }};
};

}  // namespace fructosa::master
