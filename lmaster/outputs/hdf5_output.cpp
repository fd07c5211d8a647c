#include "hdf5_output.h"

#include <fmt/format.h>
#include <hdf5.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

namespace fructosa::master {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr const char* kTime = "time";
constexpr const char* kJob = "job";

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

  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }

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

Handle vlen_string_type() {
  hid_t type = H5Tcopy(H5T_C_S1);
  if (type >= 0 && (H5Tset_size(type, H5T_VARIABLE) < 0 || H5Tset_cset(type, H5T_CSET_UTF8) < 0)) {
    H5Tclose(type);
    type = H5I_INVALID_HID;
  }
  return Handle(type, H5Tclose);
}

// A scalar string attribute (variable length or fixed); nullopt when absent or unreadable.
std::optional<std::string> read_string_attribute(hid_t object, const char* name) {
  if (H5Aexists(object, name) <= 0) return std::nullopt;
  Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  if (!attribute) return std::nullopt;
  Handle file_type(H5Aget_type(attribute.get()), H5Tclose);
  Handle space(H5Aget_space(attribute.get()), H5Sclose);
  if (!file_type || !space || H5Tget_class(file_type.get()) != H5T_STRING ||
      H5Sget_simple_extent_npoints(space.get()) != 1)
    return std::nullopt;
  Handle memory_type(H5Tcopy(file_type.get()), H5Tclose);
  if (!memory_type) return std::nullopt;
  if (H5Tis_variable_str(file_type.get()) > 0) {
    char* text = nullptr;
    if (H5Aread(attribute.get(), memory_type.get(), &text) < 0) return std::nullopt;
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  std::string value(H5Tget_size(file_type.get()), '\0');
  if (H5Aread(attribute.get(), memory_type.get(), value.data()) < 0) return std::nullopt;
  if (auto nul = value.find('\0'); nul != std::string::npos) value.resize(nul);
  return value;
}

std::string unescape_link_name(std::string_view link) {
  if (link == "%") return "";
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string name;
  for (std::size_t i = 0; i < link.size(); ++i) {
    if (link[i] == '%' && i + 2 < link.size() && hex(link[i + 1]) >= 0 && hex(link[i + 2]) >= 0) {
      name += static_cast<char>(hex(link[i + 1]) * 16 + hex(link[i + 2]));
      i += 2;
    } else {
      name += link[i];
    }
  }
  return name;
}

herr_t collect_hard_link(hid_t, const char* name, const H5L_info_t* info, void* data) {
  if (info->type == H5L_TYPE_HARD) static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

struct Column {
  std::string key;
  Handle dataset;
  bool described = false;      // its unit/kind/description attributes come from the catalog
  std::vector<double> buffer;  // values of the buffered rows; missing trailing rows are NaN
};

// A text label (device, fstype, address...) stored as a variable-length UTF-8 string per row.
struct LabelColumn {
  std::string key;
  Handle dataset;
  std::vector<std::string> buffer;  // missing trailing rows are ""
};

struct Table {
  std::string host;
  std::string sensor;
  Handle group;
  Handle time;
  Handle job;
  bool on_disk = false;  // group and datasets opened (or created), `rows` read from the file
  hsize_t rows = 0;      // rows already in the file
  std::vector<std::int64_t> time_buffer;
  std::vector<std::uint64_t> job_buffer;
  std::vector<Column> columns;
  std::map<std::string, std::size_t, std::less<>> column_index;
  Handle label_group;  // "labels", created with the first label
  std::vector<LabelColumn> labels;
  std::map<std::string, std::size_t, std::less<>> label_index;

  LabelColumn& label(const std::string& key) {
    auto found = label_index.find(key);
    if (found != label_index.end()) return labels[found->second];
    label_index.emplace(key, labels.size());
    LabelColumn& added = labels.emplace_back();
    added.key = key;
    return added;
  }
  Column& column(const std::string& key) {
    auto found = column_index.find(key);
    if (found != column_index.end()) return columns[found->second];
    column_index.emplace(key, columns.size());
    Column& added = columns.emplace_back();
    added.key = key;
    return added;
  }
  std::string where() const { return "/" + hdf5_link_name(host) + "/" + hdf5_link_name(sensor); }
  void close() {
    for (auto& label : labels) label.dataset.reset();
    label_group.reset();
    for (auto& column : columns) column.dataset.reset();
    job.reset();
    time.reset();
    group.reset();
    on_disk = false;
  }
};

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
  return link;
}

const OptionTable& Hdf5Output::hdf5_options() {
  static const OptionTable table{
      {.name = "path",
       .type = OptionType::text,
       .default_value = "",
       .help = "the HDF5 file; appended to when it exists",
       .required = true},
      {.name = "complevel",
       .type = OptionType::integer,
       .default_value = "4",
       .help = "gzip level (with the shuffle filter); 0: no compression",
       .min = 0,
       .max = 9},
      {.name = "chunk",
       .type = OptionType::integer,
       .default_value = "1024",
       .help = "rows per HDF5 chunk; a table is also written out when it buffers this many rows",
       .min = 16,
       .max = 1 << 20},
      {.name = "flush_interval",
       .type = OptionType::real,
       .default_value = "5",
       .help = "seconds between writes of the buffered rows to the file",
       .min = 0.1},
  };
  return table;
}

struct Hdf5Output::Impl {
  Impl(const Options& options, const MetricInfoStore& store)
      : path(options.get_text("path")),
        complevel(static_cast<unsigned>(options.get_int("complevel"))),
        chunk(static_cast<hsize_t>(options.get_int("chunk"))),
        flush_interval(options.get_real("flush_interval")),
        infos(store) {}

  const std::string path;
  const unsigned complevel;
  const hsize_t chunk;
  const double flush_interval;
  const MetricInfoStore& infos;

  std::mutex mutex;
  Handle file;
  Handle link_properties;  // UTF-8 link names
  // host -> sensor -> table; tables outlive reopen() (their handles are closed and reopened).
  std::map<std::string, std::map<std::string, Table, std::less<>>, std::less<>> tables;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(fmt::format("HDF5 output {}: {}: {}", path, what, hdf5_error()));
  }
  Handle check(hid_t id, Handle::Closer close, const std::string& what) const {
    if (id < 0) fail(what);
    return Handle(id, close);
  }
  void check(herr_t status, const std::string& what) const {
    if (status < 0) fail(what);
  }

  void open_file() {
    Handle access = check(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot create a property list");
    // The latest format: a later issue turns SWMR on, which needs it.
    check(H5Pset_libver_bounds(access.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST),
          "cannot set the library version bounds");
    std::error_code error;
    if (std::filesystem::exists(path, error))
      file = check(H5Fopen(path.c_str(), H5F_ACC_RDWR, access.get()), H5Fclose,
                   "cannot open the file");
    else
      file = check(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, access.get()), H5Fclose,
                   "cannot create the file");
    link_properties = check(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "cannot create a property list");
    check(H5Pset_char_encoding(link_properties.get(), H5T_CSET_UTF8),
          "cannot set UTF-8 link names");
  }

  void close_file() {
    for (auto& [host, sensors] : tables)
      for (auto& [sensor, table] : sensors) table.close();
    link_properties.reset();
    file.reset();
  }

  void write_string_attribute(hid_t object, const char* name, const std::string& value,
                              const std::string& where) const {
    const std::string what = fmt::format("cannot write attribute {} of {}", name, where);
    if (H5Aexists(object, name) > 0) check(H5Adelete(object, name), what);
    Handle type = vlen_string_type();
    if (!type) fail(what);
    Handle space = check(H5Screate(H5S_SCALAR), H5Sclose, what);
    Handle attribute =
        check(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
              what);
    const char* text = value.c_str();
    check(H5Awrite(attribute.get(), type.get(), &text), what);
  }

  bool link_exists(hid_t group, const std::string& link, const std::string& where) const {
    htri_t exists = H5Lexists(group, link.c_str(), H5P_DEFAULT);
    if (exists < 0) fail("cannot look up " + where);
    return exists > 0;
  }

  Handle open_or_create_group(hid_t parent, const std::string& link,
                              const std::string& where) const {
    if (link_exists(parent, link, where))
      return check(H5Gopen2(parent, link.c_str(), H5P_DEFAULT), H5Gclose,
                   "cannot open group " + where);
    Handle properties =
        check(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "cannot create a property list");
    // h5py lists members in creation order when it is tracked: time, job, then the keys as they
    // came.
    check(
        H5Pset_link_creation_order(properties.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
        "cannot track creation order");
    return check(
        H5Gcreate2(parent, link.c_str(), link_properties.get(), properties.get(), H5P_DEFAULT),
        H5Gclose, "cannot create group " + where);
  }

  // A 1-D chunked dataset of `rows` rows (unwritten rows read as `fill`), unlimited, compressed.
  Handle create_dataset(hid_t group, const std::string& link, hid_t file_type, hid_t memory_type,
                        const void* fill, hsize_t rows, const std::string& where) const {
    const std::string what = "cannot create dataset " + where;
    hsize_t dims = rows;
    hsize_t max_dims = H5S_UNLIMITED;
    Handle space = check(H5Screate_simple(1, &dims, &max_dims), H5Sclose, what);
    Handle properties = check(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, what);
    check(H5Pset_chunk(properties.get(), 1, &chunk), what);
    if (complevel > 0) {
      check(H5Pset_shuffle(properties.get()), what);
      check(H5Pset_deflate(properties.get(), complevel), what);
    }
    check(H5Pset_fill_value(properties.get(), memory_type, fill), what);
    return check(H5Dcreate2(group, link.c_str(), file_type, space.get(), link_properties.get(),
                            properties.get(), H5P_DEFAULT),
                 H5Dclose, what);
  }

  void describe(Table& table, Column& column, const std::string& where) const {
    auto info = infos.find(table.sensor, column.key);
    hid_t dataset = column.dataset.get();
    write_string_attribute(dataset, "key", column.key, where);
    write_string_attribute(dataset, "unit", info ? info->unit : "", where);
    write_string_attribute(dataset, "kind", info ? std::string(to_string(info->kind)) : "", where);
    write_string_attribute(dataset, "description", info ? info->description : "", where);
    column.described = info.has_value();
  }

  // Label datasets of an earlier run keep growing with the table (as "") so rows stay aligned.
  void load_existing_labels(Table& table, Handle group, const std::string& where) {
    std::vector<std::string> links;
    check(H5Literate(group.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_hard_link, &links),
          "cannot list " + where);
    for (const auto& link : links) {
      Handle dataset = check(H5Dopen2(group.get(), link.c_str(), H5P_DEFAULT), H5Dclose,
                             "cannot open " + where + "/" + link);
      LabelColumn& label = table.label(read_string_attribute(dataset.get(), "key").value_or(unescape_link_name(link)));
      if (!label.dataset) label.dataset = std::move(dataset);
    }
    table.label_group = std::move(group);
  }

  // Reads what the file already holds of this table: its row count and existing columns.
  void load_existing(Table& table, const std::string& where) {
    std::vector<std::string> links;
    check(H5Literate(table.group.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_hard_link,
                     &links),
          "cannot list " + where);
    for (const auto& link : links) {
      const std::string path_of = where + "/" + link;
      Handle object = check(H5Oopen(table.group.get(), link.c_str(), H5P_DEFAULT), H5Oclose,
                            "cannot open " + path_of);
      if (link == "labels" && H5Iget_type(object.get()) == H5I_GROUP) {
        load_existing_labels(table, std::move(object), path_of);
        continue;
      }
      if (H5Iget_type(object.get()) != H5I_DATASET) continue;
      if (link == kTime) {
        Handle space =
            check(H5Dget_space(object.get()), H5Sclose, "cannot read the size of " + path_of);
        hssize_t points = H5Sget_simple_extent_npoints(space.get());
        if (points < 0) fail("cannot read the size of " + path_of);
        table.rows = static_cast<hsize_t>(points);
        table.time = std::move(object);
      } else if (link == kJob) {
        table.job = std::move(object);
      } else {
        std::string key =
            read_string_attribute(object.get(), "key").value_or(unescape_link_name(link));
        Column& column = table.column(key);
        if (column.dataset) continue;
        column.described = !read_string_attribute(object.get(), "kind").value_or("").empty();
        column.dataset = std::move(object);
      }
    }
  }

  void open_table(Table& table) {
    const std::string host_link = hdf5_link_name(table.host);
    const std::string where = table.where();
    Handle host_group = open_or_create_group(file.get(), host_link, "/" + host_link);
    if (H5Aexists(host_group.get(), "host") == 0)
      write_string_attribute(host_group.get(), "host", table.host, "/" + host_link);
    table.group = open_or_create_group(host_group.get(), hdf5_link_name(table.sensor), where);
    if (H5Aexists(table.group.get(), "host") == 0)
      write_string_attribute(table.group.get(), "host", table.host, where);
    if (H5Aexists(table.group.get(), "sensor") == 0)
      write_string_attribute(table.group.get(), "sensor", table.sensor, where);
    table.rows = 0;
    load_existing(table, where);
    if (!table.time) {
      const std::int64_t zero = 0;
      table.time = create_dataset(table.group.get(), kTime, H5T_STD_I64LE, H5T_NATIVE_INT64, &zero,
                                  table.rows, where + "/time");
      write_string_attribute(table.time.get(), "unit", "ns since epoch", where + "/time");
    }
    if (!table.job) {
      const std::uint64_t zero = 0;
      table.job = create_dataset(table.group.get(), kJob, H5T_STD_U64LE, H5T_NATIVE_UINT64, &zero,
                                 table.rows, where + "/job");
      write_string_attribute(table.job.get(), "description", "batch job id; 0: the node itself",
                             where + "/job");
    }
    table.on_disk = true;
  }

  // Grows `dataset` to start + count rows and writes `data` (nullptr: leave the fill value).
  void append(hid_t dataset, hid_t memory_type, const void* data, hsize_t start, hsize_t count,
              const std::string& where) const {
    const std::string what = "cannot append to " + where;
    hsize_t size = start + count;
    check(H5Dset_extent(dataset, &size), what);
    if (!data) return;
    Handle file_space = check(H5Dget_space(dataset), H5Sclose, what);
    check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr),
          what);
    Handle memory_space = check(H5Screate_simple(1, &count, nullptr), H5Sclose, what);
    check(H5Dwrite(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, data),
          what);
  }

  // Appends the buffered rows of one table. On failure the rows stay buffered and `rows` is
  // unchanged, so the next try rewrites the same region.
  void flush_table(Table& table) {
    const hsize_t count = table.time_buffer.size();
    if (count == 0) return;
    if (!file) open_file();
    if (!table.on_disk) open_table(table);
    const std::string where = table.where();
    for (auto& column : table.columns) {
      if (column.dataset) continue;
      const std::string column_where = where + "/" + hdf5_link_name(column.key, true);
      const std::string link = hdf5_link_name(column.key, true);
      if (link_exists(table.group.get(), link, column_where)) {
        column.dataset = check(H5Dopen2(table.group.get(), link.c_str(), H5P_DEFAULT), H5Dclose,
                               "cannot open " + column_where);
      } else {
        // Rows written before this key appeared read as NaN, the fill value.
        column.dataset = create_dataset(table.group.get(), link, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                                        &kNaN, table.rows, column_where);
      }
      describe(table, column, column_where);
    }
    const hsize_t start = table.rows;
    append(table.time.get(), H5T_NATIVE_INT64, table.time_buffer.data(), start, count,
           where + "/time");
    append(table.job.get(), H5T_NATIVE_UINT64, table.job_buffer.data(), start, count,
           where + "/job");
    for (auto& column : table.columns) {
      const std::string column_where = where + "/" + hdf5_link_name(column.key, true);
      if (column.buffer.empty()) {
        // No value in these rows: growing the dataset leaves NaN, the fill value.
        append(column.dataset.get(), H5T_NATIVE_DOUBLE, nullptr, start, count, column_where);
      } else {
        column.buffer.resize(count, kNaN);
        append(column.dataset.get(), H5T_NATIVE_DOUBLE, column.buffer.data(), start, count,
               column_where);
      }
    }
    if (!table.labels.empty()) flush_labels(table, start, count, where);
    table.rows = start + count;
    table.time_buffer.clear();
    table.job_buffer.clear();
    for (auto& column : table.columns) {
      column.buffer.clear();
      // A key described by its agent's dictionary after its column was created.
      if (!column.described && infos.find(table.sensor, column.key))
        describe(table, column, where + "/" + hdf5_link_name(column.key, true));
    }
  }

  // Label columns live in the table's "labels" group, one string dataset per label key.
  void flush_labels(Table& table, hsize_t start, hsize_t count, const std::string& where) {
    const std::string group_where = where + "/labels";
    if (!table.label_group) table.label_group = open_or_create_group(table.group.get(), "labels", group_where);
    Handle text = check(H5Tcopy(H5T_C_S1), H5Tclose, "cannot make a string type for " + group_where);
    check(H5Tset_size(text.get(), H5T_VARIABLE), "cannot make a string type for " + group_where);
    check(H5Tset_cset(text.get(), H5T_CSET_UTF8), "cannot make a string type for " + group_where);
    for (auto& label : table.labels) {
      const std::string link = hdf5_link_name(label.key);
      const std::string label_where = group_where + "/" + link;
      if (!label.dataset) {
        if (link_exists(table.label_group.get(), link, label_where)) {
          label.dataset = check(H5Dopen2(table.label_group.get(), link.c_str(), H5P_DEFAULT), H5Dclose,
                                "cannot open " + label_where);
        } else {
          const char* empty = "";  // rows before this label appeared read as ""
          label.dataset = create_dataset(table.label_group.get(), link, text.get(), text.get(), &empty,
                                         table.rows, label_where);
          write_string_attribute(label.dataset.get(), "key", label.key, label_where);
        }
      }
      label.buffer.resize(count);
      std::vector<const char*> rows(count);
      for (hsize_t i = 0; i < count; ++i) rows[i] = label.buffer[i].c_str();
      append(label.dataset.get(), text.get(), rows.data(), start, count, label_where);
      label.buffer.clear();
    }
  }

  // Flushes each table in `which` (all tables when empty), trying every one before rethrowing
  // the first failure.
  void flush_tables(const std::vector<Table*>& which) {
    std::exception_ptr first_error;
    auto attempt = [&](Table& table) {
      try {
        flush_table(table);
      } catch (const std::exception&) {
        if (!first_error) first_error = std::current_exception();
      }
    };
    if (which.empty()) {
      for (auto& [host, sensors] : tables)
        for (auto& [sensor, table] : sensors) attempt(table);
    } else {
      for (Table* table : which) attempt(*table);
    }
    if (first_error) std::rethrow_exception(first_error);
  }

  void flush_all() {
    flush_tables({});
    if (!file) open_file();
    check(H5Fflush(file.get(), H5F_SCOPE_LOCAL), "cannot flush the file");
  }

  void write(std::span<const Sample> samples) {
    std::vector<Table*> full;
    for (const auto& sample : samples) {
      auto host = tables.find(sample.host);
      if (host == tables.end())
        host = tables.emplace(sample.host, std::map<std::string, Table, std::less<>>{}).first;
      auto found = host->second.find(sample.sensor);
      if (found == host->second.end()) {
        found = host->second.emplace(sample.sensor, Table{}).first;
        found->second.host = sample.host;
        found->second.sensor = sample.sensor;
      }
      Table& table = found->second;
      const std::size_t row = table.time_buffer.size();
      table.time_buffer.push_back(sample.time_ns);
      table.job_buffer.push_back(sample.job);
      for (const auto& metric : sample.metrics) {
        Column& column = table.column(metric.key);
        if (column.buffer.size() <= row) column.buffer.resize(row + 1, kNaN);
        column.buffer[row] = metric.value;
      }
      for (const auto& text : sample.labels) {
        LabelColumn& label = table.label(text.key);
        if (label.buffer.size() <= row) label.buffer.resize(row + 1);
        label.buffer[row] = text.value;
      }
      if (row + 1 >= chunk && std::find(full.begin(), full.end(), &table) == full.end())
        full.push_back(&table);
    }
    // Bounded memory: a table with a chunk's worth of rows goes to the file now.
    if (!full.empty()) flush_tables(full);
  }
};

Hdf5Output::Hdf5Output(const Options& options, const MetricInfoStore& infos)
    : impl_(std::make_unique<Impl>(options, infos)) {
  quiet_hdf5();
  if (impl_->complevel > 0 && H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0)
    throw std::runtime_error(
        fmt::format("HDF5 output {}: this HDF5 library has no gzip filter", impl_->path));
  impl_->open_file();
  spdlog::debug("hdf5: writing {}", impl_->path);
}

Hdf5Output::~Hdf5Output() {
  std::lock_guard lock(impl_->mutex);
  quiet_hdf5();
  try {
    impl_->flush_all();
  } catch (const std::exception& error) {
    spdlog::error("{} (buffered rows lost)", error.what());
  }
  impl_->close_file();
  impl_->tables.clear();
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

void Hdf5Output::reopen() {
  std::lock_guard lock(impl_->mutex);
  quiet_hdf5();
  std::exception_ptr flush_error;
  try {
    impl_->flush_all();
  } catch (const std::exception&) {
    flush_error = std::current_exception();
  }
  impl_->close_file();
  impl_->open_file();
  // Rows the old file refused go to the reopened one.
  if (flush_error) impl_->flush_all();
}

const std::string& Hdf5Output::path() const { return impl_->path; }

}  // namespace fructosa::master
