// hdf5_tables.h's HDF5 reading (files, attributes, objects, datasets, tables); what each
// function reads is described there.
#include "hdf5_tables.h"

#include <array>
#include <fstream>
#include <system_error>
#include <thread>

#include "hdf5_source.h"

namespace fructosa::report::hdf5_read {

namespace fs = std::filesystem;

// --- HDF5 basics --------------------------------------------------------------------------------

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
  throw SourceError(file.string() + ": " + what);
}
[[noreturn]] void fail_hdf5(const fs::path& file, const std::string& what) {
  fail(file, what + ": " + hdf5_error());
}

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
  // A SWMR reader retries a metadata read whose checksum fails (the writer changing it under
  // the reader, as lmaster does when it reopens the file without SWMR to add objects), 100
  // times by default with sleeps doubling toward an hour: a read stuck for hours. A few tries
  // (a millisecond in all) then an error, which read_file() answers by reading again.
  H5Pset_metadata_read_attempts(access.get(), kMetadataReadAttempts);
  const auto deadline = Clock::now() + retry;
  int failures_while_closed = 0;
  for (;;) {
    // Closed before it is opened: a writer that opens it again (lmaster never does) would not
    // move the chunks already written.
    const bool closed = !file_being_written(path);
    hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, access.get());
    if (id >= 0) return OpenFile{path, Handle(id, H5Fclose), true, closed};
    const std::string swmr_error = hdf5_error();
    id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get());
    if (id >= 0) return OpenFile{path, Handle(id, H5Fclose), false, closed};
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

std::optional<std::vector<std::uint64_t>> jobs_attribute(hid_t object) {
  if (H5Aexists(object, "jobs") <= 0) return std::nullopt;
  Handle attribute(H5Aopen(object, "jobs", H5P_DEFAULT), H5Aclose);
  Handle type(attribute ? H5Aget_type(attribute.get()) : -1, H5Tclose);
  Handle space(attribute ? H5Aget_space(attribute.get()) : -1, H5Sclose);
  if (!type || !space || H5Tget_class(type.get()) != H5T_INTEGER) return std::nullopt;
  const H5S_class_t shape = H5Sget_simple_extent_type(space.get());
  if (shape == H5S_NULL) return std::vector<std::uint64_t>{};
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  if (shape != H5S_SIMPLE || points < 0) return std::nullopt;
  std::vector<std::uint64_t> jobs(static_cast<std::size_t>(points));
  if (!jobs.empty() && H5Aread(attribute.get(), H5T_NATIVE_UINT64, jobs.data()) < 0)
    return std::nullopt;
  if (!std::is_sorted(jobs.begin(), jobs.end())) std::sort(jobs.begin(), jobs.end());
  return jobs;
}

// --- objects ------------------------------------------------------------------------------------

namespace {

herr_t collect_hard_link(hid_t, const char* name, const H5L_info_t* info, void* data) {
  if (info->type == H5L_TYPE_HARD) static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

}  // namespace

std::vector<std::string> hard_links(const OpenFile& file, hid_t group, const std::string& where) {
  std::vector<std::string> links;
  if (H5Literate(group, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_hard_link, &links) < 0)
    fail_hdf5(file.path, "cannot list " + where);
  return links;
}

bool has_link(hid_t group, const char* link) { return H5Lexists(group, link, H5P_DEFAULT) > 0; }

Handle open_object(const OpenFile& file, hid_t group, const std::string& link, H5I_type_t type,
                   const std::string& where) {
  if (!has_link(group, link.c_str())) return {};
  Handle object(H5Oopen(group, link.c_str(), H5P_DEFAULT), H5Oclose);
  if (!object) fail_hdf5(file.path, "cannot open " + where);
  if (H5Iget_type(object.get()) != type) return {};
  return object;
}

// --- datasets -----------------------------------------------------------------------------------

namespace {

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

}  // namespace

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

void Column::read_block(const OpenFile& file, hid_t memory_type, std::size_t element_size,
                        hsize_t start, hsize_t count, void* data) const {
  if (count == 0) return;
  if (direct && direct->reads_as(memory_type)) {
    const hsize_t size = direct->chunk_rows();
    std::vector<hsize_t> chunks;
    for (hsize_t chunk = start / size; chunk * size < start + count; ++chunk) chunks.push_back(chunk);
    auto* out = static_cast<unsigned char*>(data);
    try {
      if (direct->read(dataset.get(), chunks, [&](std::size_t k, const unsigned char* bytes) {
            const hsize_t base = chunks[k] * size;
            const hsize_t from = std::max(start, base), to = std::min(start + count, base + size);
            std::memcpy(out + (from - start) * element_size, bytes + (from - base) * element_size,
                        (to - from) * element_size);
          }))
        return;
    } catch (const SourceError&) {
      throw;
    } catch (const std::runtime_error& error) {
      fail(file.path, "cannot read " + where + ": " + error.what());
    }
  }
  read_rows(file, dataset.get(), memory_type, start, count, data, where);
}

void Column::each_piece(
    const OpenFile& file, hid_t memory_type, std::size_t element_size,
    const std::vector<hsize_t>& rows,
    const std::function<void(std::size_t, std::size_t, hsize_t, const unsigned char*)>& use) const {
  if (rows.empty()) return;
  if (direct && direct->reads_as(memory_type)) {
    const hsize_t size = direct->chunk_rows();
    std::vector<hsize_t> chunks;
    std::vector<std::size_t> firsts;  // the first of rows in each chunk; then rows.size()
    hsize_t chunk_end = 0;  // (a division per row would cost more than the rest of the loop)
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (chunks.empty() || rows[i] >= chunk_end) {
        chunks.push_back(rows[i] / size);
        chunk_end = (chunks.back() + 1) * size;
        firsts.push_back(i);
      }
    firsts.push_back(rows.size());
    try {
      if (direct->read(dataset.get(), chunks, [&](std::size_t k, const unsigned char* bytes) {
            use(firsts[k], firsts[k + 1], chunks[k] * size, bytes);
          }))
        return;
    } catch (const SourceError&) {
      throw;
    } catch (const std::runtime_error& error) {
      fail(file.path, "cannot read " + where + ": " + error.what());
    }
  }
  std::vector<unsigned char> block;
  for (std::size_t i = 0; i < rows.size();) {
    const hsize_t start = rows[i];
    const hsize_t end = std::min(start + kBlockRows, rows.back() + 1);
    block.resize((end - start) * element_size);
    read_rows(file, dataset.get(), memory_type, start, end - start, block.data(), where);
    std::size_t last = i;
    while (last < rows.size() && rows[last] < end) ++last;
    use(i, last, start, block.data());
    i = last;
  }
}

hsize_t Column::chunk_rows() const {
  if (direct) return direct->chunk_rows();
  Handle create(H5Dget_create_plist(dataset.get()), H5Pclose);
  hsize_t chunk = 0;
  if (create && H5Pget_layout(create.get()) == H5D_CHUNKED &&
      H5Pget_chunk(create.get(), 1, &chunk) == 1 && chunk > 0)
    return std::min(chunk, kBlockRows);
  return kBlockRows;
}

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
  // Read as double, int64 or uint64: those are what lmaster stores (float64; time, job).
  if (file.closed)
    for (hid_t type : {H5T_NATIVE_DOUBLE, H5T_NATIVE_INT64, H5T_NATIVE_UINT64})
      if ((column.direct = ChunkDecoder::open(column.dataset.get(), type))) break;
  return column;
}

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
  if (file.closed && !column.variable)
    column.direct = ChunkDecoder::open(column.dataset.get(), column.memory_type.get());
  return column;
}

std::vector<double> pick_numbers(const OpenFile& file, const NumberColumn& column,
                                 const std::vector<hsize_t>& rows) {
  std::vector<double> values(rows.size(), kNaN);
  const std::size_t inside =
      std::lower_bound(rows.begin(), rows.end(), column.rows) - rows.begin();
  const std::vector<hsize_t> read(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(inside));
  // The column's own type when it is read directly (a double, an int64 or a uint64). (Each
  // H5T_NATIVE_* is a call into HDF5: looked up once, not per row.)
  enum class Stored { real, int64, uint64 } stored = Stored::real;
  hid_t type = H5T_NATIVE_DOUBLE;
  if (column.direct) {
    Handle file_type(H5Dget_type(column.dataset.get()), H5Tclose);
    if (file_type && H5Tequal(file_type.get(), H5T_NATIVE_INT64) > 0) {
      stored = Stored::int64;
      type = H5T_NATIVE_INT64;
    } else if (file_type && H5Tequal(file_type.get(), H5T_NATIVE_UINT64) > 0) {
      stored = Stored::uint64;
      type = H5T_NATIVE_UINT64;
    }
  }
  column.each_piece(file, type, sizeof(double), read,
                    [&](std::size_t first, std::size_t last, hsize_t base, const unsigned char* bytes) {
                      for (std::size_t i = first; i < last; ++i) {
                        const unsigned char* at = bytes + (read[i] - base) * sizeof(double);
                        if (stored == Stored::real) {
                          std::memcpy(&values[i], at, sizeof(double));
                        } else if (stored == Stored::int64) {
                          std::int64_t value;
                          std::memcpy(&value, at, sizeof value);
                          values[i] = static_cast<double>(value);
                        } else {
                          std::uint64_t value;
                          std::memcpy(&value, at, sizeof value);
                          values[i] = static_cast<double>(value);
                        }
                      }
                    });
  return values;
}

std::vector<std::string> pick_texts(const OpenFile& file, const TextColumn& column,
                                    const std::vector<hsize_t>& rows) {
  std::vector<std::string> values(rows.size());
  if (column.variable) {
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
  const std::size_t inside =
      std::lower_bound(rows.begin(), rows.end(), column.rows) - rows.begin();
  const std::vector<hsize_t> read(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(inside));
  column.each_piece(file, column.memory_type.get(), column.width, read,
                    [&](std::size_t first, std::size_t last, hsize_t base, const unsigned char* bytes) {
                      for (std::size_t i = first; i < last; ++i)
                        values[i] = column.text(bytes + (read[i] - base) * column.width);
                    });
  return values;
}

std::vector<std::optional<std::pair<std::size_t, std::string>>> latest_texts(
    const OpenFile& file, const TextColumn& column, const std::vector<hsize_t>& rows,
    const std::vector<std::uint32_t>& group, std::size_t groups) {
  std::vector<std::optional<std::pair<std::size_t, std::string>>> latest(groups);
  std::vector<char> has_rows(groups, 0);
  for (std::uint32_t g : group) has_rows[g] = 1;
  std::size_t missing = static_cast<std::size_t>(std::count(has_rows.begin(), has_rows.end(), 1));
  // Backwards a chunk's rows at a time (the rows of one chunk read in one call).
  const hsize_t step = column.variable ? kBlockRows : column.chunk_rows();
  std::size_t end = std::lower_bound(rows.begin(), rows.end(), column.rows) - rows.begin();
  std::vector<hsize_t> piece;
  while (end > 0 && missing > 0) {
    const hsize_t from = rows[end - 1] / step * step;
    std::size_t begin = end;
    while (begin > 0 && rows[begin - 1] >= from) --begin;
    piece.assign(rows.begin() + static_cast<std::ptrdiff_t>(begin),
                 rows.begin() + static_cast<std::ptrdiff_t>(end));
    const std::vector<std::string> texts = pick_texts(file, column, piece);
    for (std::size_t k = piece.size(); k-- > 0 && missing > 0;) {
      auto& into = latest[group[begin + k]];
      if (into || texts[k].empty()) continue;
      into.emplace(begin + k, texts[k]);
      --missing;
    }
    end = begin;
  }
  return latest;
}

hsize_t first_row_at(const OpenFile& file, const NumberColumn& time, hsize_t rows,
                     std::int64_t at) {
  const hsize_t step = time.chunk_rows();
  hsize_t cached = ~hsize_t{0};
  std::vector<std::int64_t> block;
  auto time_at = [&](hsize_t row) {
    const hsize_t start = row / step * step;
    if (start != cached) {
      const hsize_t count = std::min(step, rows - start);
      block.resize(count);
      time.read_block(file, H5T_NATIVE_INT64, sizeof(std::int64_t), start, count, block.data());
      cached = start;
    }
    const std::int64_t value = block[row - start];
    return value == 0 ? std::numeric_limits<std::int64_t>::max() : value;
  };
  hsize_t low = 0, high = std::min(rows, time.rows);
  while (low < high) {
    const hsize_t middle = low + (high - low) / 2;
    if (time_at(middle) < at)
      low = middle + 1;
    else
      high = middle;
  }
  return low;
}

// --- tables -------------------------------------------------------------------------------------

std::vector<Table> tables_of(const OpenFile& file, const KeepGroup& keep) {
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
    if (link == kJobIndexLink) continue;  // the job index (hdf5_index.h), not a table
    const std::string where = "/" + link;
    Handle group = open_object(file, root, link, H5I_GROUP, where);
    if (!group) continue;
    const bool table = has_link(group.get(), "time");  // else a host's group (per_host)
    if (keep && !keep(group.get(), table)) continue;
    if (table) {  // a per_sensor table
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
      if (table && has_link(table.get(), "time") && (!keep || keep(table.get(), true)))
        add(std::move(table), sensor_link, table_where, host);
    }
  }
  return tables;
}

RowKeys::RowKeys(const OpenFile& file, const Table& table)
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
  // Wanted rows a chunk apart or more are read apart (the chunks between are not decompressed).
  gap_ = time_.chunk_rows();
}

std::optional<TextColumn> label_column(const OpenFile& file, const Table& table,
                                       const std::string& link) {
  Handle labels =
      open_object(file, table.group.get(), "labels", H5I_GROUP, table.where + "/labels");
  if (!labels || !has_link(labels.get(), link.c_str())) return std::nullopt;
  return open_text(file, labels.get(), link, table.where + "/labels/" + link);
}

}  // namespace fructosa::report::hdf5_read
