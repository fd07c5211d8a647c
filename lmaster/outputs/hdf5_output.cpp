#include "hdf5_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <hdf5.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace fructosa::master {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr const char* kTime = "time";
constexpr const char* kJob = "job";
constexpr const char* kLabels = "labels";
constexpr const char* kHost = "host";
// format_version 1: layout per_host (/<host>/<sensor>); 2: layout per_sensor (/<sensor>, with a
// host column). Readers tell them apart by the root attribute `layout` (both have it).
constexpr int kPerHostFormatVersion = 1;
constexpr int kPerSensorFormatVersion = 2;
// The jobs attributes (and late descriptions) need the file out of SWMR mode: they are brought
// up to date at most this often while the file is written, and always when it is closed.
constexpr double kAttributeRefreshSeconds = 60;
// Labels are fixed-length strings of 16, 32, 64... bytes.
constexpr std::size_t kMinLabelWidth = 16;
// A file whose flushes fail this many times in a row is given up for a new one (HDF5 may be
// unable to recover a file handle after write errors); a table that fails this many times while
// the file works has its rows dropped.
constexpr int kFailuresBeforeGivingUp = 3;

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
void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

herr_t innermost_error(unsigned n, const H5E_error2_t* error, void* data) {
  if (n == 0 && error->desc) *static_cast<std::string*>(data) = error->desc;
  return 0;
}

// The most specific message on this thread's HDF5 error stack (e.g. "unable to open file:
// name = '...', errno = 2, error message = 'No such file or directory', ...").
std::string hdf5_error() {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &detail);
  return detail.empty() ? "unknown HDF5 error" : detail;
}

// A failure of the file as a whole (reopen, flush), as opposed to one table's.
class FileFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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

herr_t collect_hard_link(hid_t, const char* name, const H5L_info_t* info, void* data) {
  if (info->type == H5L_TYPE_HARD) static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

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

void copy_attributes(const std::string& file, hid_t source, hid_t target, const char* skip,
                     const std::string& where) {
  AttributeCopy copy{target, skip};
  check(file,
        H5Aiterate2(source, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, copy_one_attribute, &copy),
        "cannot copy the attributes of " + where);
}

// --- datasets ----------------------------------------------------------------------------------

hsize_t dataset_rows(const std::string& file, hid_t dataset, const std::string& where) {
  Handle space = check(file, H5Dget_space(dataset), H5Sclose, "cannot read the size of " + where);
  hsize_t rows = 0;
  if (H5Sget_simple_extent_ndims(space.get()) != 1 ||
      H5Sget_simple_extent_dims(space.get(), &rows, nullptr) < 0)
    fail(file, "cannot read the size of " + where);
  return rows;
}

// Reads the first `count` rows of a 1-D dataset.
// Reads rows [start, start + count) of a 1-D dataset.
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

// Grows `dataset` to start + count rows and writes `data` into the new rows.
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

// Bytes that may still be written on the file system holding `directory`.
std::optional<std::uintmax_t> free_bytes(const fs::path& directory) {
  struct statvfs info {};
  if (::statvfs(directory.c_str(), &info) != 0) return std::nullopt;
  return static_cast<std::uintmax_t>(info.f_bavail) * info.f_frsize;
}

// --- superblock --------------------------------------------------------------------------------

// The file consistency flags of an HDF5 file's version 2/3 superblock (at offset 0): non-zero
// while a writer has it open, and left so by a writer that was killed. nullopt: not such a file.
std::optional<unsigned> superblock_flags(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<unsigned char, 12> head{};
  if (!in.read(reinterpret_cast<char*>(head.data()), head.size())) return std::nullopt;
  static constexpr std::array<unsigned char, 8> kSignature{0x89, 'H',  'D',  'F',
                                                           '\r', '\n', 0x1a, '\n'};
  if (!std::equal(kSignature.begin(), kSignature.end(), head.begin()) || head[8] < 2)
    return std::nullopt;
  return head[11];
}

// --- the tables --------------------------------------------------------------------------------

struct Column {
  std::string key;
  std::string link;
  Handle dataset;
  bool in_file = false;        // its dataset exists in the current file
  bool described = false;      // its unit/kind/description attributes come from the catalog
  bool has_value = false;      // some buffered row has a value
  std::vector<double> buffer;  // values of the buffered rows; missing trailing rows are NaN
};

// A text label (device, fstype, address...) stored as a fixed-length string per row: repeated
// values then compress to almost nothing (variable-length strings cost ~67 B per row).
struct LabelColumn {
  std::string key;
  std::string link;
  Handle dataset;
  bool in_file = false;
  bool has_value = false;
  std::size_t width = 0;            // bytes per row in the file
  std::vector<std::string> buffer;  // missing trailing rows are ""

  std::size_t longest_buffered() const {
    std::size_t longest = 0;
    for (const auto& value : buffer) longest = std::max(longest, value.size());
    return longest;
  }
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
  std::map<std::string, std::size_t, std::less<>> column_index;
  std::vector<LabelColumn> labels;
  std::map<std::string, std::size_t, std::less<>> label_index;
  std::set<std::uint64_t> jobs;       // in the committed rows of the current file
  std::size_t jobs_in_attribute = 0;  // how many of them the jobs attribute lists
  int failed_flushes = 0;             // in a row, while the file itself worked

  Column& column(const std::string& key) {
    auto found = column_index.find(key);
    if (found != column_index.end()) return columns[found->second];
    column_index.emplace(key, columns.size());
    Column& added = columns.emplace_back();
    added.key = key;
    added.link = hdf5_link_name(key, true);
    return added;
  }
  LabelColumn& label(const std::string& key) {
    auto found = label_index.find(key);
    if (found != label_index.end()) return labels[found->second];
    label_index.emplace(key, labels.size());
    LabelColumn& added = labels.emplace_back();
    added.key = key;
    added.link = hdf5_link_name(key);
    return added;
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
  explicit FileSeries(const std::string& configured) : link(configured) {
    directory = link.parent_path();
    if (directory.empty()) directory = ".";
    stem = link.stem().string();
    extension = link.has_extension() ? link.extension().string() : ".h5";
  }
  fs::path link;
  fs::path directory;
  std::string stem;
  std::string extension;

  // <stem>-YYYYmmddTHHMMSSZ[-N]<extension>, N > 0 when the plain name is taken.
  fs::path name(std::time_t when, int attempt) const {
    std::string file = stem + "-" + utc_stamp(when, "%Y%m%dT%H%M%SZ");
    if (attempt > 0) file += "-" + std::to_string(attempt);
    return directory / (file + extension);
  }
  // A free name for a file started at `when` (a name that exists, even as a dangling link, is
  // never reused).
  fs::path free_name(std::time_t when) const {
    for (int attempt = 0; attempt < 10000; ++attempt) {
      fs::path candidate = name(when, attempt);
      std::error_code error;
      if (!fs::exists(fs::symlink_status(candidate, error))) return candidate;
    }
    throw std::runtime_error(
        fmt::format("HDF5 output {}: no free file name in {}", link.string(), directory.string()));
  }
  bool is_member(const std::string& file) const {
    const std::string prefix = stem + "-";
    if (file.size() < prefix.size() + 16 + extension.size() || file.rfind(prefix, 0) != 0 ||
        file.compare(file.size() - extension.size(), extension.size(), extension) != 0)
      return false;
    std::string_view middle(file.data() + prefix.size(),
                            file.size() - prefix.size() - extension.size());
    auto digits = [](std::string_view text) {
      return !text.empty() &&
             std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!digits(middle.substr(0, 8)) || middle[8] != 'T' || !digits(middle.substr(9, 6)) ||
        middle[15] != 'Z')
      return false;
    middle.remove_prefix(16);
    return middle.empty() || (middle[0] == '-' && digits(middle.substr(1)));
  }
};

Handle file_access_properties(const std::string& file) {
  Handle access = check(file, H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot make properties");
  // SWMR needs the latest format (checksummed metadata).
  check(file, H5Pset_libver_bounds(access.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST),
        "cannot set the library version bounds");
  // lmaster is the only writer of its files (its lock file says so). A reader that holds the file
  // open holds a shared flock on it, which would make every reopen below fail for as long as the
  // reader stays: the writer does without the lock (HDF5_USE_FILE_LOCKING=TRUE overrides this).
  check(file, H5Pset_file_locking(access.get(), false, true), "cannot turn file locking off");
  // No chunk cache: an append to an uncompressed chunk then writes only its new rows, where a
  // cached chunk is written whole at every flush (32 KiB for 4096 rows), for every dataset. Set
  // for the file, as H5Fstart_swmr_write reopens the open datasets with the file's defaults.
  check(file, H5Pset_cache(access.get(), 0, 1, 0, 0.75), "cannot turn the chunk cache off");
  return access;
}

}  // namespace

std::string hdf5_link_name(std::string_view name, bool metric_key) {
  if (name.empty()) return "%";
  std::string link;
  link.reserve(name.size());
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c == '%')
      link += "%25";
    else if (c == '/')
      link += "%2F";
    else if (c == '.' && i == 0)
      link += "%2E";
    else
      link += c;
  }
  if (metric_key && link == kTime) return "%74ime";
  if (metric_key && link == kJob) return "%6Aob";
  if (metric_key && link == kHost) return "%68ost";
  return link;
}

const OptionTable& Hdf5Output::hdf5_options() {
  static const OptionTable table{
      {.name = "path",
       .type = OptionType::text,
       .default_value = "",
       .help = "a symbolic link to the file being written, <stem>-<UTC start>.h5 in the same "
               "directory (a new file at every start, reload and rotation)",
       .required = true,
       .relative_to_file = true},
      {.name = "layout",
       .type = OptionType::text,
       .default_value = "per_sensor",
       .help = "per_sensor: a table per sensor, /<sensor>, whose `host` column names each row's "
               "host (a flush costs per sensor, whatever the hosts); per_host: a table per host "
               "and sensor, /<host>/<sensor> (a flush costs per host and sensor: for a few dozen "
               "hosts at most, docs/hdf5.md)",
       .choices = {"per_host", "per_sensor"}},
      {.name = "complevel",
       .type = OptionType::integer,
       .default_value = "4",
       .help = "gzip level (with the shuffle filter); 0: no compression",
       .min = 0,
       .max = 9},
      {.name = "chunk",
       .type = OptionType::integer,
       .default_value = "4096",
       .help = "rows per HDF5 chunk (the unit of compression: a read decompresses whole chunks)",
       .min = 16,
       .max = 1 << 20},
      {.name = "flush_interval",
       .type = OptionType::real,
       .default_value = "5",
       .help = "seconds between writes of the buffered rows to the file (what a reader sees, "
               "rows not yet written are replayed from lmaster's journal after a crash)",
       .min = 0.1},
      {.name = "max_buffered_points",
       .type = OptionType::integer,
       .default_value = "16000000",
       .help = "points held in memory between flushes (about 10 bytes each); past this a flush "
               "comes early, and while the file refuses them new samples wait in the journal. A "
               "master that is behind flushes at most every 6 flush_intervals, to write more rows "
               "per dataset: leave room for that many seconds of its input",
       .min = 1000},
      {.name = "rotate_size",
       .type = OptionType::integer,
       .default_value = "0",
       .help = "start a new file once the file being written (uncompressed) reaches this many "
               "bytes; 0: never",
       .min = 0},
      {.name = "rotate_age",
       .type = OptionType::real,
       .default_value = "3600",
       .help = "start a new file once the file is this many seconds old (the file being "
               "written is uncompressed; closed files are compressed); 0: never",
       .min = 0},
  };
  return table;
}

struct Hdf5Output::Impl {
  Impl(const Options& options, const MetricInfoStore& store, OutputCounters& output_counters)
      : series(options.get_text("path")),
        per_sensor(options.get_text("layout") == "per_sensor"),
        complevel(static_cast<unsigned>(options.get_int("complevel"))),
        chunk(static_cast<hsize_t>(options.get_int("chunk"))),
        flush_interval(options.get_real("flush_interval")),
        max_buffered_points(static_cast<std::size_t>(options.get_int("max_buffered_points"))),
        rotate_size(static_cast<std::uint64_t>(options.get_int("rotate_size"))),
        rotate_age(options.get_real("rotate_age")),
        infos(store),
        counters(output_counters) {}

  ~Impl() {
    if (lock_fd >= 0) ::close(lock_fd);
  }

  const FileSeries series;
  const std::string link_path = series.link.string();
  const bool per_sensor;  // layout
  const unsigned complevel;
  const hsize_t chunk;
  const double flush_interval;
  const std::size_t max_buffered_points;
  const std::uint64_t rotate_size;
  const double rotate_age;
  const MetricInfoStore& infos;
  OutputCounters& counters;

  std::mutex mutex;
  int lock_fd = -1;

  // The file being written. `swmr`: readers may open it; otherwise it is open for a moment
  // without SWMR to create objects and complete chunks (or closed after a failure).
  std::string file_path;
  Handle file;
  bool swmr = false;
  std::chrono::steady_clock::time_point file_started;
  std::chrono::steady_clock::time_point attributes_refreshed;
  bool file_has_rows = false;
  int failed_flushes = 0;  // in a row
  bool abandoned = false;  // given up after failures: the next flush starts a new file
  std::vector<hid_t> abandoned_files;
  std::set<std::uint64_t> file_jobs;
  std::size_t file_jobs_in_attribute = 0;

  // host -> sensor -> table (per_sensor: the host is ""); tables outlive files (their handles are
  // closed and reopened).
  std::map<std::string, std::map<std::string, Table, std::less<>>, std::less<>> tables;
  std::map<std::string, HostGroup, std::less<>> hosts;
  std::size_t buffered_points = 0;

  // After a crash: the newest row time of each (host link, sensor link, job) in the files the
  // killed writer left. lmaster replays the journal from each output's last saved position, which
  // may be a little older than the last flush that reached the file; rows up to these times are
  // already stored and are skipped (once a series passes its mark, the mark goes).
  std::map<std::tuple<std::string, std::string, std::uint64_t>, std::int64_t> stored_before_crash;
  std::uint64_t skipped_as_stored = 0;

  // --- locking, old files, repair --------------------------------------------------------------

  void take_lock() {
    const std::string lock_path = link_path + ".lock";
    lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0)
      throw std::runtime_error(fmt::format("HDF5 output {}: cannot open the lock file {}: {}",
                                           link_path, lock_path, std::strerror(errno)));
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      ::close(lock_fd);
      lock_fd = -1;
      throw std::runtime_error(fmt::format(
          "HDF5 output {}: {}", link_path,
          error == EWOULDBLOCK ? "another lmaster writes this series (it holds " + lock_path + ")"
                               : "cannot lock " + lock_path + ": " + std::strerror(error)));
    }
  }

  // Older lmasters wrote `path` itself: keep that file under a name of the series.
  void move_away_regular_file() {
    std::error_code error;
    const fs::file_status status = fs::symlink_status(series.link, error);
    if (!fs::exists(status) || fs::is_symlink(status)) return;
    if (!fs::is_regular_file(status))
      throw std::runtime_error(fmt::format(
          "HDF5 output {}: exists and is neither a file nor a symbolic link", link_path));
    struct stat status_of_file {};
    const std::time_t when = ::stat(link_path.c_str(), &status_of_file) == 0
                                 ? status_of_file.st_mtime
                                 : std::time(nullptr);
    const fs::path kept = series.free_name(when);
    fs::rename(series.link, kept, error);
    if (error)
      throw std::runtime_error(
          fmt::format("HDF5 output {}: is a regular file and cannot be "
                      "renamed to {}: {}",
                      link_path, kept.string(), error.message()));
    spdlog::warn(
        "hdf5: {} was a regular file (written by an older lmaster): renamed it to {}; "
        "{} is now a symbolic link to the file being written",
        link_path, kept.string(), link_path);
  }

  // The name a file's compressed copy has until it replaces the file; while it exists, the
  // compression of that file was interrupted.
  fs::path compaction_name(const fs::path& file) const {
    return file.parent_path() / ("." + file.filename().string() + ".compact");
  }

  // At start: files of the series whose compression was interrupted, and files a killed lmaster
  // left open (their superblock still says so), are compressed (and so repaired) now.
  void compact_left_over_files() {
    std::error_code error;
    std::vector<fs::path> interrupted, left_open, members;
    for (const auto& entry : fs::directory_iterator(series.directory, error)) {
      std::error_code type_error;
      if (!entry.is_regular_file(type_error) || entry.is_symlink(type_error)) continue;
      const std::string name = entry.path().filename().string();
      const std::string suffix = ".compact";
      if (name.size() > 1 + suffix.size() && name[0] == '.' &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        const std::string member = name.substr(1, name.size() - 1 - suffix.size());
        if (!series.is_member(member)) continue;
        fs::remove(entry.path(), error);
        if (fs::exists(series.directory / member, error))
          interrupted.push_back(series.directory / member);
        continue;
      }
      if (!series.is_member(name)) continue;
      members.push_back(entry.path());
      auto flags = superblock_flags(entry.path());
      if (flags && *flags != 0) left_open.push_back(entry.path());
    }
    for (auto* files : {&interrupted, &left_open}) {
      std::sort(files->begin(), files->end());
      files->erase(std::unique(files->begin(), files->end()), files->end());
    }
    for (const auto& path : left_open) {
      interrupted.erase(std::remove(interrupted.begin(), interrupted.end(), path),
                        interrupted.end());
      try {
        const Compaction done = compact_file(path.string());
        spdlog::warn(
            "hdf5: {} was left open by a writer that stopped without closing it: "
            "repaired and compressed ({} -> {} bytes, {} table(s) cut back to their last "
            "complete flush) in {:.1f} s",
            path.string(), done.bytes_before, done.bytes_after, done.tables_cut, done.seconds);
      } catch (const std::exception& failure) {
        spdlog::error(
            "hdf5: {} was left open by a writer that stopped and cannot be repaired: "
            "{} (SWMR readers can read it; `h5clear -s FILE` lets other readers open it)",
            path.string(), failure.what());
      }
    }
    for (const auto& path : interrupted) compact_and_log(path.string());
    if (!left_open.empty()) {
      // A crash: what the journal replays may be in these files already (or in the newest file,
      // when the crash came right after a rotation).
      std::sort(members.begin(), members.end());
      if (std::find(left_open.begin(), left_open.end(), members.back()) == left_open.end())
        left_open.push_back(members.back());
      for (const auto& path : left_open) remember_stored_rows(path.string());
    }
  }

  struct Compaction {
    std::uintmax_t bytes_before = 0;
    std::uintmax_t bytes_after = 0;
    std::size_t tables_cut = 0;
    double seconds = 0;
  };

  void compact_and_log(const std::string& path) {
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
  Compaction compact_file(const std::string& path) {
    const auto started = std::chrono::steady_clock::now();
    const std::string temporary = compaction_name(path).string();
    std::error_code ignored;
    fs::remove(temporary, ignored);
    Compaction result;
    result.bytes_before = fs::file_size(path, ignored);
    try {
      Handle access = file_access_properties(path);
      Handle source =
          check(path, H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, access.get()),
                H5Fclose, "cannot open it");
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
        result.tables_cut += copy_table(path, table.get(), table_copy.get(), where, jobs);
        write_jobs_attribute(temporary, table_copy.get(), jobs, where);
        parent_jobs.insert(jobs.begin(), jobs.end());
      };
      for (const auto& host_link : hard_links(path, source.get(), "/")) {
        const std::string host_where = "/" + host_link;
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
    fs::rename(temporary, path, error);
    if (error) {
      fs::remove(temporary, ignored);
      throw std::runtime_error(
          fmt::format("cannot rename {} to {}: {}", temporary, path, error.message()));
    }
    result.bytes_after = fs::file_size(path, ignored);
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return result;
  }

  Handle create_group_in(const std::string& path, hid_t parent, const std::string& link,
                         const std::string& where) const {
    Handle creation = group_creation_properties(path);
    Handle link_properties = link_creation_properties(path);
    return check(
        path, H5Gcreate2(parent, link.c_str(), link_properties.get(), creation.get(), H5P_DEFAULT),
        H5Gclose, "cannot create group " + where);
  }

  // Copies a table's datasets (and labels) cut to their complete rows; returns 1 when rows were
  // cut (a flush that a killed writer left half done), else 0.
  std::size_t copy_table(const std::string& path, hid_t table, hid_t copy, const std::string& where,
                         std::set<std::uint64_t>& jobs) {
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
    return longest != complete ? 1 : 0;
  }

  // Copies the first `rows` rows of a 1-D dataset into a new compressed one (same type, chunk
  // rows, fill value and attributes). With `jobs`, also collects the values (the job column).
  void copy_dataset(const std::string& path, hid_t source_group, hid_t target_group,
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
    }
  }

  // --- files -----------------------------------------------------------------------------------

  void warn_about_file_locking() const {
    const char* setting = std::getenv("HDF5_USE_FILE_LOCKING");
    if (setting && std::string_view(setting) != "FALSE" && std::string_view(setting) != "0")
      spdlog::warn(
          "hdf5: HDF5_USE_FILE_LOCKING={} makes HDF5 lock the files lmaster writes: a "
          "reader that keeps {} open then delays new tables and columns (unset it)",
          setting, link_path);
  }

  Handle create_file(const std::string& path) const {
    Handle access = file_access_properties(path);
    Handle created = check(path, H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, access.get()),
                           H5Fclose, "cannot create the file");
    const std::time_t now = std::time(nullptr);
    write_text_attribute(path, created.get(), "format", "fructosa lmaster HDF5 output", "/");
    Handle scalar = check(path, H5Screate(H5S_SCALAR), H5Sclose, "cannot make a dataspace");
    const int version = per_sensor ? kPerSensorFormatVersion : kPerHostFormatVersion;
    write_attribute(path, created.get(), "format_version", H5T_NATIVE_INT, scalar.get(), &version,
                    "/");
    write_text_attribute(path, created.get(), "layout", per_sensor ? "per_sensor" : "per_host", "/");
    write_text_attribute(path, created.get(), "writer", "lmaster " FRUCTOSA_VERSION, "/");
    write_text_attribute(path, created.get(), "created", utc_stamp(now, "%Y-%m-%dT%H:%M:%SZ"), "/");
    check(path, H5Fstart_swmr_write(created.get()), "cannot start SWMR writing");
    return created;
  }

  // Points `path` at `target` atomically: a new link under a temporary name renamed over it.
  void point_link_at(const std::string& target) const {
    const fs::path temporary =
        series.directory / fmt::format(".{}.{}.tmp", series.link.filename().string(), ::getpid());
    std::error_code error;
    fs::remove(temporary, error);
    fs::create_symlink(fs::path(target).filename(), temporary, error);
    if (!error) fs::rename(temporary, series.link, error);
    if (error) {
      fs::remove(temporary, error);
      throw std::runtime_error(fmt::format("HDF5 output {}: cannot point it at {}: {}", link_path,
                                           target, error.message()));
    }
  }

  // Creates the next file of the series; the current one (if any) is finished and closed.
  // When the new file cannot be created, nothing changes and this throws.
  void start_new_file(bool at_start) {
    const std::string path = series.free_name(std::time(nullptr)).string();
    Handle created = create_file(path);
    const std::string previous = file_path;
    const bool compress_previous = finish_file();
    file = std::move(created);
    file_path = path;
    swmr = true;
    file_started = attributes_refreshed = std::chrono::steady_clock::now();
    file_has_rows = false;
    failed_flushes = 0;
    abandoned = false;
    file_jobs.clear();
    file_jobs_in_attribute = 0;
    for (auto& [host, group] : hosts) group = HostGroup{};
    for (auto& [host, sensors] : tables)
      for (auto& [sensor, table] : sensors) table.forget_file();
    try {
      point_link_at(path);
    } catch (const std::exception& failure) {
      if (at_start) throw;
      spdlog::error("{}", failure.what());
    }
    spdlog::info("hdf5: writing {} ({} points to it; layout {})", path, link_path,
                 per_sensor ? "per_sensor" : "per_host");
    if (compress_previous) compact_and_log(previous);
  }

  void close_handles() {
    for (auto& [host, sensors] : tables)
      for (auto& [sensor, table] : sensors) table.close_handles();
    for (auto& [host, group] : hosts) group.group.reset();
  }

  // Reopens the file without SWMR (readers cannot open it meanwhile): HDF5 1.10 cannot create
  // objects or attributes in SWMR mode.
  void leave_swmr() {
    if (file && !swmr) return;
    close_handles();
    herr_t closed = file.reset();
    swmr = false;
    if (closed < 0)
      spdlog::warn("hdf5: {}: closing it reported an error: {}", file_path, hdf5_error());
    Handle access = file_access_properties(file_path);
    file = check(file_path, H5Fopen(file_path.c_str(), H5F_ACC_RDWR, access.get()), H5Fclose,
                 "cannot reopen the file");
  }

  void enter_swmr() {
    if (swmr) return;
    check(file_path, H5Fstart_swmr_write(file.get()), "cannot start SWMR writing");
    swmr = true;
  }

  // An open file to write to: reopened after a failure, or a new one when it is gone.
  void ensure_file() {
    if (file) return;
    std::error_code error;
    if (!abandoned && !file_path.empty() && fs::exists(file_path, error)) {
      leave_swmr();
      return;
    }
    if (!abandoned && !file_path.empty())
      spdlog::error("hdf5: {} is gone; starting a new file", file_path);
    start_new_file(false);
  }

  bool attributes_stale() const {
    if (file_jobs.size() != file_jobs_in_attribute) return true;
    for (const auto& [host, group] : hosts)
      if (group.in_file && group.jobs.size() != group.jobs_in_attribute) return true;
    for (const auto& [host, sensors] : tables)
      for (const auto& [sensor, table] : sensors) {
        if (!table.in_file) continue;
        if (table.jobs.size() != table.jobs_in_attribute) return true;
        for (const auto& column : table.columns)
          if (column.in_file && !column.described && infos.find(table.sensor, column.key))
            return true;
      }
    return false;
  }

  // Outside SWMR mode: the jobs attributes and descriptions that arrived late.
  void refresh_attributes() {
    for (auto& [host_name, sensors] : tables)
      for (auto& [sensor, table] : sensors) {
        if (!table.in_file) continue;
        const bool late_description =
            std::any_of(table.columns.begin(), table.columns.end(), [&](const Column& column) {
              return column.in_file && !column.described && infos.find(table.sensor, column.key);
            });
        if (!late_description && table.jobs.size() == table.jobs_in_attribute) continue;
        open_table(table);
        if (table.jobs.size() != table.jobs_in_attribute) {
          write_jobs_attribute(file_path, table.group.get(), table.jobs, table.where());
          table.jobs_in_attribute = table.jobs.size();
        }
        for (auto& column : table.columns)
          if (column.in_file && !column.described && infos.find(table.sensor, column.key))
            describe(table, column);
      }
    for (auto& [host_name, group] : hosts) {
      if (!group.in_file || group.jobs.size() == group.jobs_in_attribute) continue;
      open_host(host_name, group);
      write_jobs_attribute(file_path, group.group.get(), group.jobs,
                           "/" + hdf5_link_name(host_name));
      group.jobs_in_attribute = group.jobs.size();
    }
    if (file_jobs.size() != file_jobs_in_attribute) {
      write_jobs_attribute(file_path, file.get(), file_jobs, "/");
      file_jobs_in_attribute = file_jobs.size();
    }
    attributes_refreshed = std::chrono::steady_clock::now();
  }

  // Brings the attributes up to date and closes the file. Its rows were flushed (or are still
  // buffered for the next file); failures here only cost attributes, so they are logged.
  // Returns true when the closed file is to be compressed.
  bool finish_file() {
    if (!file) return false;
    try {
      if (attributes_stale()) {
        leave_swmr();
        refresh_attributes();
      }
    } catch (const std::exception& failure) {
      spdlog::error("hdf5: {}: cannot write its final attributes: {}", file_path, failure.what());
    }
    close_handles();
    const bool closed = file.reset() >= 0;
    swmr = false;
    if (!closed) spdlog::error("hdf5: {}: closing it failed: {}", file_path, hdf5_error());
    return closed && file_has_rows && complevel > 0;
  }

  // --- objects ---------------------------------------------------------------------------------

  Handle open_or_create_group(hid_t parent, const std::string& link,
                              const std::string& where) const {
    htri_t exists = H5Lexists(parent, link.c_str(), H5P_DEFAULT);
    if (exists < 0) fail(file_path, "cannot look up " + where);
    if (exists > 0)
      return check(file_path, H5Gopen2(parent, link.c_str(), H5P_DEFAULT), H5Gclose,
                   "cannot open group " + where);
    Handle creation = group_creation_properties(file_path);
    Handle link_properties = link_creation_properties(file_path);
    return check(
        file_path,
        H5Gcreate2(parent, link.c_str(), link_properties.get(), creation.get(), H5P_DEFAULT),
        H5Gclose, "cannot create group " + where);
  }

  // A 1-D chunked dataset of 0 rows, unlimited; unwritten rows read as `fill` (nullptr: zero
  // bytes). Uncompressed while the file is written: an appended chunk never moves, so a SWMR
  // reader cannot follow a stale pointer, and HDF5 1.10.8's option to leave partial chunks
  // unfiltered makes readers decode chunks with the wrong filters (docs/hdf5.md). The file is
  // compressed when it is closed (compact_file).
  Handle create_dataset(hid_t group, const std::string& link, hid_t file_type, hid_t fill_type,
                        const void* fill, hsize_t chunk_rows, const std::string& where) const {
    const std::string what = "cannot create dataset " + where;
    hsize_t dims = 0;
    hsize_t max_dims = H5S_UNLIMITED;
    Handle space = check(file_path, H5Screate_simple(1, &dims, &max_dims), H5Sclose, what);
    Handle properties = check(file_path, H5Pcreate(H5P_DATASET_CREATE), H5Pclose, what);
    check(file_path, H5Pset_chunk(properties.get(), 1, &chunk_rows), what);
    if (fill) check(file_path, H5Pset_fill_value(properties.get(), fill_type, fill), what);
    // Every row up to a dataset's extent is written (NaN where a row has no value): a new chunk
    // need not be filled first, which wrote a whole chunk (32 KiB) per dataset and host.
    check(file_path, H5Pset_fill_time(properties.get(), H5D_FILL_TIME_NEVER), what);
    check(file_path, H5Pset_obj_track_times(properties.get(), false), what);
    Handle link_properties = link_creation_properties(file_path);
    return check(file_path,
                 H5Dcreate2(group, link.c_str(), file_type, space.get(), link_properties.get(),
                            properties.get(), H5P_DEFAULT),
                 H5Dclose, what);
  }

  void describe(Table& table, Column& column) const {
    const std::string where = table.where() + "/" + column.link;
    auto info = infos.find(table.sensor, column.key);
    hid_t dataset = column.dataset.get();
    write_text_attribute(file_path, dataset, "key", column.key, where);
    write_text_attribute(file_path, dataset, "unit", info ? info->unit : "", where);
    write_text_attribute(file_path, dataset, "kind", info ? std::string(to_string(info->kind)) : "",
                         where);
    write_text_attribute(file_path, dataset, "description", info ? info->description : "", where);
    column.described = info.has_value();
  }

  void open_host(const std::string& host, HostGroup& group) {
    if (group.group) return;
    const std::string link = hdf5_link_name(host);
    group.group = check(file_path, H5Gopen2(file.get(), link.c_str(), H5P_DEFAULT), H5Gclose,
                        "cannot open group /" + link);
  }

  // Opens the handles of a table that is in the file (after a reopen of the file).
  void open_table(Table& table) {
    const std::string where = table.where();
    if (!table.group) {
      hid_t parent = file.get();
      if (!table.per_sensor) {
        HostGroup& host = hosts[table.host];
        open_host(table.host, host);
        parent = host.group.get();
      }
      table.group = check(file_path, H5Gopen2(parent, table.sensor_link.c_str(), H5P_DEFAULT),
                          H5Gclose, "cannot open group " + where);
    }
    if (!table.time)
      table.time = check(file_path, H5Dopen2(table.group.get(), kTime, H5P_DEFAULT), H5Dclose,
                         "cannot open " + where + "/time");
    if (!table.job)
      table.job = check(file_path, H5Dopen2(table.group.get(), kJob, H5P_DEFAULT), H5Dclose,
                        "cannot open " + where + "/job");
    if (table.host_column.in_file && !table.host_column.dataset)
      table.host_column.dataset = check(file_path, H5Dopen2(table.group.get(), kHost, H5P_DEFAULT),
                                        H5Dclose, "cannot open " + where + "/host");
    for (auto& column : table.columns)
      if (column.in_file && !column.dataset)
        column.dataset =
            check(file_path, H5Dopen2(table.group.get(), column.link.c_str(), H5P_DEFAULT),
                  H5Dclose, "cannot open " + where + "/" + column.link);
    bool any_label = std::any_of(table.labels.begin(), table.labels.end(),
                                 [](const LabelColumn& label) { return label.in_file; });
    if (any_label && !table.label_group)
      table.label_group = check(file_path, H5Gopen2(table.group.get(), kLabels, H5P_DEFAULT),
                                H5Gclose, "cannot open " + where + "/labels");
    for (auto& label : table.labels)
      if (label.in_file && !label.dataset)
        label.dataset =
            check(file_path, H5Dopen2(table.label_group.get(), label.link.c_str(), H5P_DEFAULT),
                  H5Dclose, "cannot open " + where + "/labels/" + label.link);
  }

  // Label chunks hold as many rows as numeric ones, unless that makes them huge.
  hsize_t label_chunk_rows(std::size_t width) const {
    return std::clamp<hsize_t>((1 << 20) / width, 16, chunk);
  }

  // Outside SWMR mode: the table's group and datasets and the columns that got their first
  // value, each new column filled with NaN ("") for the rows already in the file.
  void create_objects(Table& table) {
    const std::string where = table.where();
    if (!table.in_file) {
      hid_t parent = file.get();
      if (!table.per_sensor) {
        HostGroup& host = hosts[table.host];
        if (!host.in_file) {
          host.group = open_or_create_group(file.get(), table.host_link, "/" + table.host_link);
          write_text_attribute(file_path, host.group.get(), "host", table.host,
                               "/" + table.host_link);
          host.in_file = true;
        }
        open_host(table.host, host);
        parent = host.group.get();
      }
      table.group = open_or_create_group(parent, table.sensor_link, where);
      if (!table.per_sensor)
        write_text_attribute(file_path, table.group.get(), "host", table.host, where);
      write_text_attribute(file_path, table.group.get(), "sensor", table.sensor, where);
      const std::int64_t zero = 0;
      table.time = create_dataset(table.group.get(), kTime, H5T_STD_I64LE, H5T_NATIVE_INT64, &zero,
                                  chunk, where + "/time");
      write_text_attribute(file_path, table.time.get(), "unit", "ns since epoch", where + "/time");
      table.job = create_dataset(table.group.get(), kJob, H5T_STD_U64LE, H5T_NATIVE_INT64, &zero,
                                 chunk, where + "/job");
      write_text_attribute(file_path, table.job.get(), "description",
                           "batch job id; 0: the node itself", where + "/job");
      table.rows = 0;
      table.in_file = true;
    }
    open_table(table);
    if (table.per_sensor) {
      LabelColumn& host = table.host_column;
      const std::size_t longest = host.longest_buffered();
      if (!host.in_file || longest > host.width)
        create_label(table, host, label_width(longest), table.group.get(), where + "/host");
    }
    for (auto& column : table.columns) {
      if (column.in_file || !column.has_value) continue;
      const std::string column_where = where + "/" + column.link;
      column.dataset = create_dataset(table.group.get(), column.link, H5T_IEEE_F64LE,
                                      H5T_NATIVE_DOUBLE, &kNaN, chunk, column_where);
      describe(table, column);
      if (table.rows > 0) {
        std::vector<double> missing(table.rows, kNaN);
        append(file_path, column.dataset.get(), H5T_NATIVE_DOUBLE, missing.data(), 0, table.rows,
               column_where);
      }
      column.in_file = true;
    }
    for (auto& label : table.labels) {
      if (!label.has_value) continue;
      const std::size_t longest = label.longest_buffered();
      if (label.in_file && longest <= label.width) continue;
      if (!table.label_group)
        table.label_group = open_or_create_group(table.group.get(), kLabels, where + "/labels");
      create_label(table, label, label_width(longest), table.label_group.get(),
                   where + "/labels/" + label.link);
    }
  }

  static std::size_t label_width(std::size_t longest) {
    std::size_t width = kMinLabelWidth;
    while (width < longest) width *= 2;
    return width;
  }

  // A label dataset `width` bytes wide in `parent` (the labels group; the table's group for the
  // host column); a narrower one that exists is copied into it (rare: a label value longer than
  // any before it).
  void create_label(Table& table, LabelColumn& label, std::size_t width, hid_t parent,
                    const std::string& where) {
    Handle type = text_type(width);
    if (!type) fail(file_path, "cannot make a string type for " + where);
    const std::string new_link = label.in_file ? label.link + "%7E" : label.link;
    // No fill value: unwritten rows read as zero bytes, that is "".
    Handle dataset = create_dataset(parent, new_link, type.get(), type.get(), nullptr,
                                    label_chunk_rows(width), where);
    write_text_attribute(file_path, dataset.get(), "key", label.key, where);
    if (table.rows > 0) {
      std::vector<char> rows(table.rows * width, '\0');
      // The narrow strings read as wide ones (HDF5 pads them); only the committed rows (a
      // failed flush may have left more).
      if (label.in_file)
        read_rows(file_path, label.dataset.get(), type.get(), 0, table.rows, rows.data(), where);
      append(file_path, dataset.get(), type.get(), rows.data(), 0, table.rows, where);
    }
    if (label.in_file) {
      label.dataset.reset();
      check(file_path, H5Ldelete(parent, label.link.c_str(), H5P_DEFAULT),
            "cannot replace " + where);
      dataset.reset();
      Handle link_properties = link_creation_properties(file_path);
      check(file_path,
            H5Lmove(parent, new_link.c_str(), parent, label.link.c_str(), link_properties.get(),
                    H5P_DEFAULT),
            "cannot replace " + where);
      dataset = check(file_path, H5Dopen2(parent, label.link.c_str(), H5P_DEFAULT), H5Dclose,
                      "cannot open " + where);
    }
    label.dataset = std::move(dataset);
    label.width = width;
    label.in_file = true;
  }

  bool needs_objects(const Table& table) const {
    if (!table.in_file) return true;
    for (const auto& column : table.columns)
      if (!column.in_file && column.has_value) return true;
    for (const auto& label : table.labels)
      if (label.has_value && (!label.in_file || label.longest_buffered() > label.width))
        return true;
    const LabelColumn& host = table.host_column;
    return table.per_sensor && (!host.in_file || host.longest_buffered() > host.width);
  }

  // --- writing ---------------------------------------------------------------------------------

  // Everything but `time`, for the pending rows of one table.
  void write_values(Table& table) {
    const hsize_t start = table.rows;
    const hsize_t count = table.pending();
    const std::string where = table.where();
    open_table(table);
    append(file_path, table.job.get(), H5T_NATIVE_UINT64, table.job_buffer.data(), start, count,
           where + "/job");
    for (auto& column : table.columns) {
      if (!column.in_file) continue;
      // Rows without a value are written as NaN too: HDF5 1.10.8 fails to grow a dataset past a
      // chunk it never wrote (H5D__chunk_update_old_edge_chunks finds no chunk index).
      column.buffer.resize(count, kNaN);
      append(file_path, column.dataset.get(), H5T_NATIVE_DOUBLE, column.buffer.data(), start, count,
             where + "/" + column.link);
    }
    if (table.per_sensor) write_label(table.host_column, start, count, where + "/host");
    for (auto& label : table.labels)
      if (label.in_file) write_label(label, start, count, where + "/labels/" + label.link);
  }

  void write_label(const LabelColumn& label, hsize_t start, hsize_t count,
                   const std::string& where) {
    std::vector<char> rows(count * label.width, '\0');
    for (hsize_t row = 0; row < count && row < label.buffer.size(); ++row)
      std::memcpy(rows.data() + row * label.width, label.buffer[row].data(),
                  label.buffer[row].size());
    Handle type = text_type(label.width);
    if (!type) fail(file_path, "cannot make a string type");
    append(file_path, label.dataset.get(), type.get(), rows.data(), start, count, where);
  }

  // A write that fails for want of space leaves HDF5 1.10.8 unable to flush the file ever again:
  // when the file system has clearly too little room, keep the rows and do not try.
  void check_free_space(const std::vector<Table*>& pending) const {
    const auto available = free_bytes(series.directory);
    if (!available) return;
    std::uintmax_t needed = 1 << 20;  // metadata, and a margin
    for (const Table* table : pending) {
      std::uintmax_t row_bytes = 2 * sizeof(std::int64_t);
      if (table->per_sensor)
        row_bytes += std::max<std::size_t>(
            {table->host_column.width, table->host_column.longest_buffered(), kMinLabelWidth});
      for (const auto& column : table->columns)
        if (column.in_file || column.has_value) row_bytes += sizeof(double);
      for (const auto& label : table->labels)
        if (label.in_file || label.has_value)
          row_bytes +=
              std::max<std::size_t>({label.width, label.longest_buffered(), kMinLabelWidth});
      // Rows, and a new chunk for every dataset when one may start (or the table is new).
      needed += row_bytes * (table->pending() + chunk);
    }
    if (*available < needed)
      throw std::runtime_error(fmt::format(
          "HDF5 output {}: {} bytes free on {}, a flush needs up to {}; the rows stay buffered",
          link_path, *available, series.directory.string(), needed));
  }

  // Counts file-level failures; gives the file up after too many in a row.
  void flush_all() {
    try {
      flush_rows();
    } catch (const FileFailure& failure) {
      if (++failed_flushes >= kFailuresBeforeGivingUp) abandon_file();
      throw std::runtime_error(failure.what());
    }
  }

  void abandon_file() {
    spdlog::error(
        "hdf5: {}: giving it up after {} failed flushes; it keeps every row flushed "
        "before; the buffered rows go to a new file (lmaster repairs this one at its "
        "next start if it was left open)",
        file_path, failed_flushes);
    close_handles();
    // Not closed: after a failed flush HDF5 1.10.8 cannot flush this file's metadata cache any
    // more ("slist already enabled?"), a close fails half way and leaves an id that crashes the
    // library when it terminates. Left open, the library gives up on it when it terminates.
    abandoned_files.push_back(file.release());
    swmr = false;
    abandoned = true;
  }

  // Runs a step that concerns the whole file, marking its failure as such.
  template <typename Step>
  void file_step(Step step) {
    try {
      step();
    } catch (const std::exception& failure) {
      throw FileFailure(failure.what());
    }
  }

  // Appends every buffered row. Order: the objects that must exist (created outside SWMR mode),
  // the values, H5Fflush, then `time`, H5Fflush: a reader (or a repair after kill -9) that takes
  // len(time) rows only sees complete rows.
  void flush_rows() {
    std::vector<Table*> pending;
    for (auto& [host, sensors] : tables)
      for (auto& [sensor, table] : sensors)
        if (table.pending() > 0) pending.push_back(&table);
    const auto now = std::chrono::steady_clock::now();
    const bool refresh_due = std::chrono::duration<double>(now - attributes_refreshed).count() >=
                             kAttributeRefreshSeconds;
    if (pending.empty() && !(file && refresh_due && attributes_stale())) {
      rotate_if_due();
      return;
    }
    check_free_space(pending);
    file_step([&] { ensure_file(); });

    bool outside_swmr = !swmr;
    for (const Table* table : pending)
      if (needs_objects(*table)) outside_swmr = true;
    if (refresh_due && attributes_stale()) outside_swmr = true;
    if (outside_swmr) file_step([&] { leave_swmr(); });

    // A table that fails is left out (its rows stay buffered); the others go on.
    std::exception_ptr first_error;
    std::vector<Table*> written;
    std::vector<Table*> failed;
    for (Table* table : pending) {
      try {
        if (needs_objects(*table)) create_objects(*table);
        write_values(*table);
        written.push_back(table);
      } catch (const std::exception&) {
        if (!first_error) first_error = std::current_exception();
        failed.push_back(table);
      }
    }
    if (outside_swmr && (refresh_due || attributes_stale())) {
      try {
        refresh_attributes();
      } catch (const std::exception&) {
        if (!first_error) first_error = std::current_exception();
      }
    }
    file_step(
        [&] { check(file_path, H5Fflush(file.get(), H5F_SCOPE_LOCAL), "cannot flush the file"); });
    std::vector<Table*> committed;
    for (Table* table : written) {
      try {
        append(file_path, table->time.get(), H5T_NATIVE_INT64, table->time_buffer.data(),
               table->rows, table->pending(), table->where() + "/time");
        committed.push_back(table);
      } catch (const std::exception&) {
        if (!first_error) first_error = std::current_exception();
        failed.push_back(table);
      }
    }
    file_step(
        [&] { check(file_path, H5Fflush(file.get(), H5F_SCOPE_LOCAL), "cannot flush the file"); });
    failed_flushes = 0;
    std::uint64_t points = 0;
    for (Table* table : committed) {
      table->rows += table->pending();
      table->jobs.insert(table->job_buffer.begin(), table->job_buffer.end());
      if (!table->per_sensor) {
        HostGroup& host = hosts[table->host];
        host.jobs.insert(table->job_buffer.begin(), table->job_buffer.end());
      }
      file_jobs.insert(table->job_buffer.begin(), table->job_buffer.end());
      points += table->buffered_points;
      buffered_points -= table->buffered_points;
      table->clear_buffers();
      table->failed_flushes = 0;
      file_has_rows = true;
    }
    counters.sent += points;
    for (Table* table : failed) {
      if (++table->failed_flushes < kFailuresBeforeGivingUp) continue;
      // The file takes the other tables' rows: this table's rows cannot go anywhere.
      spdlog::error("hdf5: {}: {} failed {} flushes in a row; dropping its {} buffered points",
                    file_path, table->where(), table->failed_flushes, table->buffered_points);
      counters.dropped += table->buffered_points;
      buffered_points -= table->buffered_points;
      table->clear_buffers();
      table->failed_flushes = 0;
    }
    if (!swmr) file_step([&] { enter_swmr(); });
    if (first_error) std::rethrow_exception(first_error);
    rotate_if_due();
  }

  void rotate_if_due() {
    if (!file || !file_has_rows) return;
    std::string reason;
    if (rotate_age > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - file_started).count() >=
            rotate_age)
      reason = fmt::format("older than rotate_age = {} s", rotate_age);
    if (rotate_size > 0) {
      hsize_t size = 0;
      if (H5Fget_filesize(file.get(), &size) >= 0 && size >= rotate_size)
        reason = fmt::format("{} bytes >= rotate_size", size);
    }
    if (reason.empty()) return;
    spdlog::info("hdf5: {}: {}: starting a new file", file_path, reason);
    try {
      start_new_file(false);
    } catch (const std::exception& failure) {
      spdlog::error("{} (writing on to {})", failure.what(), file_path);
    }
  }

  void write(std::span<const Sample> samples) {
    if (buffered_points >= max_buffered_points) {
      try {
        flush_all();
      } catch (const std::exception& failure) {
        throw OutputError(fmt::format("HDF5 output {}: {} points wait for the file, which "
                                      "refuses them: {}",
                                      link_path, buffered_points, failure.what()),
                          {});
      }
    }
    const std::string no_host;
    for (const auto& sample : samples) {
      const std::string& table_host = per_sensor ? no_host : sample.host;
      auto host = tables.find(table_host);
      if (host == tables.end())
        host = tables.emplace(table_host, std::map<std::string, Table, std::less<>>{}).first;
      auto found = host->second.find(sample.sensor);
      if (found == host->second.end()) {
        found = host->second.emplace(sample.sensor, Table{}).first;
        Table& added = found->second;
        added.host = table_host;
        added.sensor = sample.sensor;
        added.host_link = hdf5_link_name(table_host);
        added.sensor_link = hdf5_link_name(sample.sensor);
        added.per_sensor = per_sensor;
        added.host_column.key = kHost;
        added.host_column.link = kHost;
      }
      Table& table = found->second;
      if (!stored_before_crash.empty() && already_stored(table, sample)) continue;
      const std::size_t row = table.time_buffer.size();
      table.time_buffer.push_back(sample.time_ns);
      table.job_buffer.push_back(sample.job);
      if (per_sensor) {
        table.host_column.buffer.push_back(sample.host);
        table.host_column.has_value = true;
      }
      for (const auto& metric : sample.metrics) {
        Column& column = table.column(metric.key);
        if (column.buffer.size() <= row) column.buffer.resize(row + 1, kNaN);
        column.buffer[row] = metric.value;
        column.has_value = true;
      }
      for (const auto& text : sample.labels) {
        LabelColumn& label = table.label(text.key);
        if (label.buffer.size() <= row) label.buffer.resize(row + 1);
        label.buffer[row] = text.value;
        label.has_value = true;
      }
      table.buffered_points += sample.metrics.size();
      buffered_points += sample.metrics.size();
    }
  }

  bool already_stored(const Table& table, const Sample& sample) {
    auto mark = stored_before_crash.find({hdf5_link_name(sample.host), table.sensor_link, sample.job});
    if (mark == stored_before_crash.end()) return false;
    if (sample.time_ns > mark->second) {
      stored_before_crash.erase(mark);
      if (stored_before_crash.empty() && skipped_as_stored > 0)
        spdlog::info("hdf5: {} samples sent again after the crash were already in {} and were not stored twice",
                     skipped_as_stored, link_path);
      return false;
    }
    ++skipped_as_stored;
    return true;
  }

  // The newest row time per host and job of every table in `path` (its last rows only: a replay
  // after a crash covers seconds). Either layout: a group at the root with a `time` dataset is a
  // per_sensor table, any other group a host's.
  void remember_stored_rows(const std::string& path) {
    try {
      Handle access = file_access_properties(path);
      Handle file = check(path, H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, access.get()), H5Fclose,
                          "cannot open it");
      for (const auto& top_link : hard_links(path, file.get(), "/")) {
        Handle top = check(path, H5Oopen(file.get(), top_link.c_str(), H5P_DEFAULT), H5Oclose, "cannot open " + top_link);
        if (H5Iget_type(top.get()) != H5I_GROUP) continue;
        if (H5Lexists(top.get(), kTime, H5P_DEFAULT) > 0) {
          remember_table_rows(path, top.get(), "/" + top_link, "", top_link);
          continue;
        }
        for (const auto& sensor_link : hard_links(path, top.get(), "/" + top_link)) {
          const std::string where = "/" + top_link + "/" + sensor_link;
          Handle table = check(path, H5Oopen(top.get(), sensor_link.c_str(), H5P_DEFAULT), H5Oclose, "cannot open " + where);
          if (H5Iget_type(table.get()) == H5I_GROUP) remember_table_rows(path, table.get(), where, top_link, sensor_link);
        }
      }
    } catch (const std::exception& failure) {
      spdlog::warn("hdf5: cannot read the last rows of {} ({}): samples sent again after the crash may be "
                   "stored twice", path, failure.what());
    }
  }

  // One table's marks; `host_link` "" for a per_sensor table, whose rows name their host.
  void remember_table_rows(const std::string& path, hid_t table, const std::string& where,
                           const std::string& host_link, const std::string& sensor_link) {
    constexpr hsize_t kTailRows = 1 << 16;
    const bool host_column = host_link.empty();
    if (H5Lexists(table, kTime, H5P_DEFAULT) <= 0 || H5Lexists(table, kJob, H5P_DEFAULT) <= 0 ||
        (host_column && H5Lexists(table, kHost, H5P_DEFAULT) <= 0))
      return;
    Handle time = check(path, H5Dopen2(table, kTime, H5P_DEFAULT), H5Dclose, "cannot open " + where + "/time");
    Handle job = check(path, H5Dopen2(table, kJob, H5P_DEFAULT), H5Dclose, "cannot open " + where + "/job");
    Handle host;
    hsize_t rows = std::min(dataset_rows(path, time.get(), where + "/time"),
                            dataset_rows(path, job.get(), where + "/job"));
    if (host_column) {
      host = check(path, H5Dopen2(table, kHost, H5P_DEFAULT), H5Dclose, "cannot open " + where + "/host");
      rows = std::min(rows, dataset_rows(path, host.get(), where + "/host"));
    }
    const hsize_t start = rows > kTailRows ? rows - kTailRows : 0;
    std::vector<std::int64_t> times(rows - start);
    std::vector<std::uint64_t> jobs(rows - start);
    read_rows(path, time.get(), H5T_NATIVE_INT64, start, rows - start, times.data(), where + "/time");
    read_rows(path, job.get(), H5T_NATIVE_UINT64, start, rows - start, jobs.data(), where + "/job");
    std::vector<char> hosts;
    std::size_t width = 0;
    if (host_column) {
      Handle type = check(path, H5Dget_type(host.get()), H5Tclose, "cannot read " + where + "/host");
      width = H5Tget_size(type.get());
      if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0 || width == 0)
        fail(path, where + "/host is not a fixed-length string");
      hosts.resize((rows - start) * width);
      read_rows(path, host.get(), type.get(), start, rows - start, hosts.data(), where + "/host");
    }
    for (std::size_t i = 0; i < times.size(); ++i) {
      if (times[i] == 0) continue;  // grown, never written
      std::string row_host_link = host_link;
      if (host_column) {
        const char* text = hosts.data() + i * width;
        row_host_link = hdf5_link_name(std::string(text, strnlen(text, width)));
      }
      auto& mark = stored_before_crash[{row_host_link, sensor_link, jobs[i]}];
      mark = std::max(mark, times[i]);
    }
  }

  std::size_t buffered_rows() const {
    std::size_t rows = 0;
    for (const auto& [host, sensors] : tables)
      for (const auto& [sensor, table] : sensors) rows += table.pending();
    return rows;
  }
};

Hdf5Output::Hdf5Output(const Options& options, const MetricInfoStore& infos)
    : impl_(std::make_unique<Impl>(options, infos, counters_)) {
  std::lock_guard lock(impl_->mutex);
  // No library shutdown at exit: every file is closed by the destructor; a file given up after
  // write errors cannot be closed, and HDF5 1.10.8 crashes when it tries again at exit. (Has no
  // effect when HDF5 is already in use.)
  H5dont_atexit();
  quiet_hdf5();
  if (impl_->complevel > 0 &&
      (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0 || H5Zfilter_avail(H5Z_FILTER_SHUFFLE) <= 0))
    throw std::runtime_error(fmt::format(
        "HDF5 output {}: this HDF5 library has no gzip or shuffle filter", impl_->link_path));
  impl_->take_lock();
  impl_->warn_about_file_locking();
  impl_->move_away_regular_file();
  impl_->compact_left_over_files();
  impl_->start_new_file(true);
}

Hdf5Output::~Hdf5Output() {
  std::lock_guard lock(impl_->mutex);
  quiet_hdf5();
  try {
    impl_->flush_all();
  } catch (const std::exception& error) {
    if (impl_->buffered_points > 0) counters_.dropped += impl_->buffered_points;
    spdlog::error("{} ({} buffered points lost)", error.what(), impl_->buffered_points);
  }
  if (impl_->finish_file()) impl_->compact_and_log(impl_->file_path);
  impl_->tables.clear();
  impl_->hosts.clear();
}

std::string Hdf5Output::name() const { return "hdf5"; }

void Hdf5Output::write(std::span<const Sample> samples) {
  std::lock_guard lock(impl_->mutex);
  quiet_hdf5();
  impl_->write(samples);
}

void Hdf5Output::flush() {
  std::lock_guard lock(impl_->mutex);
  quiet_hdf5();
  impl_->flush_all();
}

double Hdf5Output::flush_period() const { return impl_->flush_interval; }
// Each flush costs a few HDF5 calls per dataset whatever its rows: writing 6 times as many rows
// per flush is what lets a file of many hosts catch up (bench/hdf5_bytes: 137k points/s at
// 200 hosts with flush_interval = 5, 424k with 30).
double Hdf5Output::flush_period_when_behind() const { return 6 * impl_->flush_interval; }

void Hdf5Output::reopen() {
  std::lock_guard lock(impl_->mutex);
  quiet_hdf5();
  try {
    impl_->flush_all();
  } catch (const std::exception& failure) {
    // The rows stay buffered and go to the new file.
    spdlog::error("{} (its buffered rows go to the next file)", failure.what());
  }
  impl_->start_new_file(false);
}

const std::string& Hdf5Output::path() const { return impl_->link_path; }

std::string Hdf5Output::file() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->file_path;
}

}  // namespace fructosa::master
