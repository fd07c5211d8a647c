// The objects of a file, created outside SWMR mode: a host's group (per_host), a table's group
// with its time and job datasets, a column's dataset (filled with NaN for the rows before it), a
// label's fixed-length string dataset (widened when a longer value comes); and the reopening of
// their handles after the file was reopened.
#include "hdf5_output_impl.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace fructosa::master {

using namespace hdf5;

void Hdf5Output::Impl::describe(Table& table, Column& column) const {
  const std::string where = table.where() + "/" + column.link();
  auto info = infos.find(table.sensor, column.key());
  hid_t dataset = column.dataset.get();
  write_text_attribute(file_path, dataset, "key", column.key(), where);
  write_text_attribute(file_path, dataset, "unit", info ? info->unit : "", where);
  write_text_attribute(file_path, dataset, "kind", info ? std::string(to_string(info->kind)) : "",
                       where);
  write_text_attribute(file_path, dataset, "description", info ? info->description : "", where);
  column.described = info.has_value();
}

void Hdf5Output::Impl::open_host(const std::string& host, HostGroup& group) {
  if (group.group) return;
  const std::string link = hdf5_link_name(host);
  group.group = check(file_path, H5Gopen2(file.get(), link.c_str(), H5P_DEFAULT), H5Gclose,
                      "cannot open group /" + link);
}

// Whether this flush leaves the handles open, decided before it creates anything, from what the
// file will hold after it: the first flush of 200 hosts never has their 40,000 new datasets open
// at once. Past the limit the metadata cache is made small too (kSmallMetadataCache).
void Hdf5Output::Impl::plan_handles(const std::vector<Table*>& pending) {
  std::size_t planned = datasets;
  for (const Table* table : pending) planned += new_datasets(*table);
  const bool keep = planned <= datasets_kept_open;
  if (keep == keep_handles) return;
  keep_handles = keep;
  if (file) set_metadata_cache(file_path, file.get(), keep ? 0 : kSmallMetadataCache);
}

// After a table's write: past datasets_kept_open datasets, its handles (and its host's group) are
// closed, so that the library holds the objects of one table at a time. Kept open, the datasets
// of 1000 hosts (239,000) took lmaster to 3.9-6.3 GiB; reopened at every flush, they cost more
// CPU per dataset at a few hundred hosts, not at 1000 (docs/performance.md, "Bounded memory").
void Hdf5Output::Impl::release(Table& table) {
  if (keep_handles) {
    handles_kept = true;
    return;
  }
  if (handles_kept) {
    // The file just grew past the limit: the tables kept open until now are closed too.
    close_handles();
    handles_kept = false;
    return;
  }
  table.close_handles();
  if (!table.per_sensor) hosts[table.host].group.reset();
}

// The table's group (a per_host table's by its path: its host's group need not be open).
static void open_table_group(const std::string& file_path, hid_t file, Table& table) {
  if (table.group) return;
  const std::string where = table.where();
  table.group = check(file_path, H5Gopen2(file, where.c_str() + 1, H5P_DEFAULT), H5Gclose,
                      "cannot open group " + where);
}

// The table's `time`, for the second step of a flush.
void Hdf5Output::Impl::open_time(Table& table) {
  open_table_group(file_path, file.get(), table);
  if (!table.time)
    table.time = check(file_path, H5Dopen2(table.group.get(), kTime, H5P_DEFAULT), H5Dclose,
                       "cannot open " + table.where() + "/time");
}

// Opens the handles of a table that is in the file (after a reopen of the file).
void Hdf5Output::Impl::open_table(Table& table) {
  const std::string where = table.where();
  open_time(table);
  if (!table.job)
    table.job = check(file_path, H5Dopen2(table.group.get(), kJob, H5P_DEFAULT), H5Dclose,
                      "cannot open " + where + "/job");
  if (table.host_column.in_file && !table.host_column.dataset)
    table.host_column.dataset = check(file_path, H5Dopen2(table.group.get(), kHost, H5P_DEFAULT),
                                      H5Dclose, "cannot open " + where + "/host");
  for (auto& column : table.columns)
    if (column.in_file && !column.dataset)
      column.dataset =
          check(file_path, H5Dopen2(table.group.get(), column.link().c_str(), H5P_DEFAULT),
                H5Dclose, "cannot open " + where + "/" + column.link());
  bool any_label = std::any_of(table.labels.begin(), table.labels.end(),
                               [](const LabelColumn& label) { return label.in_file; });
  if (any_label && !table.label_group)
    table.label_group = check(file_path, H5Gopen2(table.group.get(), kLabels, H5P_DEFAULT),
                              H5Gclose, "cannot open " + where + "/labels");
  for (auto& label : table.labels)
    if (label.in_file && !label.dataset)
      label.dataset =
          check(file_path, H5Dopen2(table.label_group.get(), label.link().c_str(), H5P_DEFAULT),
                H5Dclose, "cannot open " + where + "/labels/" + label.link());
}

// Label chunks hold as many rows as numeric ones, unless that makes them huge.
hsize_t Hdf5Output::Impl::label_chunk_rows(std::size_t width) const {
  return std::clamp<hsize_t>((1 << 20) / width, 16, chunk);
}

// Outside SWMR mode: the table's group and datasets and the columns that got their first
// value, each new column filled with NaN ("") for the rows already in the file.
void Hdf5Output::Impl::create_objects(Table& table) {
  const std::string where = table.where();
  if (!table.in_file) {
    hid_t parent = file.get();
    if (!table.per_sensor) {
      HostGroup& host = hosts[table.host];
      if (!host.in_file) {
        host.group =
            open_or_create_group(file_path, file.get(), table.host_link, "/" + table.host_link);
        write_text_attribute(file_path, host.group.get(), "host", table.host,
                             "/" + table.host_link);
        host.in_file = true;
      }
      open_host(table.host, host);
      parent = host.group.get();
    }
    table.group = open_or_create_group(file_path, parent, table.sensor_link, where);
    if (!table.per_sensor)
      write_text_attribute(file_path, table.group.get(), "host", table.host, where);
    write_text_attribute(file_path, table.group.get(), "sensor", table.sensor, where);
    const std::int64_t zero = 0;
    table.time = create_dataset(file_path, table.group.get(), kTime, H5T_STD_I64LE,
                                H5T_NATIVE_INT64, &zero, chunk, where + "/time");
    write_text_attribute(file_path, table.time.get(), "unit", "ns since epoch", where + "/time");
    table.job = create_dataset(file_path, table.group.get(), kJob, H5T_STD_U64LE, H5T_NATIVE_INT64,
                               &zero, chunk, where + "/job");
    write_text_attribute(file_path, table.job.get(), "description",
                         "batch job id; 0: the node itself", where + "/job");
    table.rows = 0;
    table.in_file = true;
    datasets += 2;
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
    const std::string column_where = where + "/" + column.link();
    column.dataset = create_dataset(file_path, table.group.get(), column.link(), H5T_IEEE_F64LE,
                                    H5T_NATIVE_DOUBLE, &kNaN, chunk, column_where);
    describe(table, column);
    if (table.rows > 0) {
      std::vector<double> missing(table.rows, kNaN);
      append(file_path, column.dataset.get(), H5T_NATIVE_DOUBLE, missing.data(), 0, table.rows,
             column_where);
    }
    column.in_file = true;
    ++datasets;
  }
  for (auto& label : table.labels) {
    if (!label.has_value) continue;
    const std::size_t longest = label.longest_buffered();
    if (label.in_file && longest <= label.width) continue;
    if (!table.label_group)
      table.label_group =
          open_or_create_group(file_path, table.group.get(), kLabels, where + "/labels");
    create_label(table, label, label_width(longest), table.label_group.get(),
                 where + "/labels/" + label.link());
  }
}

// A label dataset `width` bytes wide in `parent` (the labels group; the table's group for the
// host column); a narrower one that exists is copied into it (rare: a label value longer than
// any before it).
void Hdf5Output::Impl::create_label(Table& table, LabelColumn& label, std::size_t width,
                                    hid_t parent, const std::string& where) {
  Handle type = text_type(width);
  if (!type) fail(file_path, "cannot make a string type for " + where);
  const std::string new_link = label.in_file ? label.link() + "%7E" : label.link();
  // No fill value: unwritten rows read as zero bytes, that is "".
  Handle dataset = create_dataset(file_path, parent, new_link, type.get(), type.get(), nullptr,
                                  label_chunk_rows(width), where);
  write_text_attribute(file_path, dataset.get(), "key", label.key(), where);
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
    check(file_path, H5Ldelete(parent, label.link().c_str(), H5P_DEFAULT),
          "cannot replace " + where);
    dataset.reset();
    Handle link_properties = link_creation_properties(file_path);
    check(file_path,
          H5Lmove(parent, new_link.c_str(), parent, label.link().c_str(), link_properties.get(),
                  H5P_DEFAULT),
          "cannot replace " + where);
    dataset = check(file_path, H5Dopen2(parent, label.link().c_str(), H5P_DEFAULT), H5Dclose,
                    "cannot open " + where);
  }
  if (!label.in_file) ++datasets;
  label.dataset = std::move(dataset);
  label.width = width;
  label.in_file = true;
}

// The datasets the table's buffered rows will add to the file.
std::size_t Hdf5Output::Impl::new_datasets(const Table& table) const {
  std::size_t added = table.in_file ? 0 : 2;  // time, job
  for (const auto& column : table.columns) added += !column.in_file && column.has_value;
  for (const auto& label : table.labels) added += !label.in_file && label.has_value;
  return added + (table.per_sensor && !table.host_column.in_file);
}

bool Hdf5Output::Impl::needs_objects(const Table& table) const {
  if (!table.in_file) return true;
  for (const auto& column : table.columns)
    if (!column.in_file && column.has_value) return true;
  for (const auto& label : table.labels)
    if (label.has_value && (!label.in_file || label.longest_buffered() > label.width))
      return true;
  const LabelColumn& host = table.host_column;
  return table.per_sensor && (!host.in_file || host.longest_buffered() > host.width);
}

}  // namespace fructosa::master
