// The HDF5 output (docs/hdf5.md): its options, the Output adapter (Hdf5Output), and writing:
// samples buffered per table, then flushed in an order that keeps every row a reader sees
// complete, with the failures of one table and of the whole file told apart. The rest of
// Hdf5Output::Impl is declared in hdf5_output_impl.h, which says where each part lives.
#include "hdf5_output_impl.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string_view>

#include "master_catalog.h"

#include "durable_file.h"
#include "stop_keepalive.h"

namespace fructosa::master {

using namespace hdf5;

namespace {

// lmaster's own sample names every agent in its keys (agent.<host>.up, .last_seen, .rate,
// .backlog: a Graphite path, a Prometheus series each). As columns of the lmaster table they were
// four datasets per agent, 20,000 at 5000 agents, and the HDF5 library held 258 MiB for them
// (docs/performance.md, "Bounded memory"). Here they are rows instead: one per agent and
// stats interval in the table lmaster_agents, the agent as its host, the master in the label
// `master`. `own` gets the sample's other keys.
std::vector<Sample> split_agent_rows(const Sample& sample, Sample& own) {
  constexpr std::string_view kPrefix = "agent.";
  own.host = sample.host;
  own.sensor = sample.sensor;
  own.time_ns = sample.time_ns;
  own.job = sample.job;
  own.labels = sample.labels;
  std::vector<Sample> agents;
  std::map<std::string_view, std::size_t, std::less<>> index;  // agent (its key component) -> row
  for (const auto& metric : sample.metrics) {
    std::string_view key = metric.key;
    auto last_dot = key.rfind('.');
    if (!key.starts_with(kPrefix) || last_dot == std::string_view::npos || last_dot <= kPrefix.size()) {
      own.metrics.push_back(metric);
      continue;
    }
    std::string_view agent = key.substr(kPrefix.size(), last_dot - kPrefix.size());
    auto [found, added] = index.try_emplace(agent, agents.size());
    if (added) {
      Sample& row = agents.emplace_back();
      row.host = std::string(agent);
      row.sensor = kAgentsTableName;
      row.time_ns = sample.time_ns;
      row.labels = {{"master", sample.host}};
    }
    agents[found->second].metrics.push_back({std::string(key.substr(last_dot + 1)), metric.value});
  }
  return agents;
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
      {.name = "datasets_kept_open",
       .type = OptionType::integer,
       .default_value = std::to_string(Hdf5Output::kDatasetsKeptOpen),
       .help = "a file of up to this many datasets (columns and labels of every table) keeps them "
               "open between flushes, the faster way; past it (layout = per_host with more than "
               "~80 hosts) each table's are opened, written and closed at every flush: the HDF5 "
               "library holds 10-17 KiB per open dataset",
       .min = 0},
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

Hdf5Output::Impl::Impl(const Options& options, const MetricInfoStore& store,
                       OutputCounters& output_counters)
    : series(options.get_text("path")),
      per_sensor(options.get_text("layout") == "per_sensor"),
      complevel(static_cast<unsigned>(options.get_int("complevel"))),
      chunk(static_cast<hsize_t>(options.get_int("chunk"))),
      flush_interval(options.get_real("flush_interval")),
      max_buffered_points(static_cast<std::size_t>(options.get_int("max_buffered_points"))),
      datasets_kept_open(static_cast<std::size_t>(options.get_int("datasets_kept_open"))),
      rotate_size(static_cast<std::uint64_t>(options.get_int("rotate_size"))),
      rotate_age(options.get_real("rotate_age")),
      infos(store),
      counters(output_counters) {}

Hdf5Output::Impl::~Impl() {
  if (lock_fd >= 0) ::close(lock_fd);
}

// Everything but `time`, for the pending rows of one table.
void Hdf5Output::Impl::write_values(Table& table) {
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
           where + "/" + column.link());
  }
  if (table.per_sensor) write_label(table.host_column, start, count, where + "/host");
  for (auto& label : table.labels)
    if (label.in_file) write_label(label, start, count, where + "/labels/" + label.link());
}

void Hdf5Output::Impl::write_label(const LabelColumn& label, hsize_t start, hsize_t count,
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
void Hdf5Output::Impl::check_free_space(const std::vector<Table*>& pending) const {
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
void Hdf5Output::Impl::flush_all() {
  try {
    flush_rows();
  } catch (const FileFailure& failure) {
    if (++failed_flushes >= kFailuresBeforeGivingUp) abandon_file();
    throw std::runtime_error(failure.what());
  }
}

void Hdf5Output::Impl::abandon_file() {
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

// Appends every buffered row. Order: the objects that must exist (created outside SWMR mode),
// the values, H5Fflush, then `time`, H5Fflush: a reader (or a repair after kill -9) that takes
// len(time) rows only sees complete rows.
void Hdf5Output::Impl::flush_rows() {
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
  plan_handles(pending);
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
    release(*table);
    note_progress();  // a flush of a thousand hosts' tables at stop is not a hung stop
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
      open_time(*table);
      append(file_path, table->time.get(), H5T_NATIVE_INT64, table->time_buffer.data(),
             table->rows, table->pending(), table->where() + "/time");
      committed.push_back(table);
    } catch (const std::exception&) {
      if (!first_error) first_error = std::current_exception();
      failed.push_back(table);
    }
    release(*table);
    note_progress();
  }
  // /.flushed: the journal record whose samples are now all in the file, and the rows that makes
  // (the final H5Fflush below carries both; a repair that counts other rows knows this flush was
  // cut short). Not when a table failed: its rows are not in the file.
  if (!first_error) {
    std::uint64_t rows = 0;
    for (const auto& [host, sensors] : tables)
      for (const auto& [sensor, table] : sensors) rows += table.rows;
    for (const Table* table : committed) rows += table->pending();
    file_step([&] { write_flushed_mark(handed_record, rows); });
  }
  file_step([&] {
    check(file_path, H5Fflush(file.get(), H5F_SCOPE_LOCAL), "cannot flush the file");
    // Durable before the runner records these rows as delivered and the journal lets them go.
    hdf5::sync_open_file(file_path, file.get());
    if (directory_unsynced) {
      sync_directory(series.directory);  // the file's name and the link to it
      directory_unsynced = false;
    }
  });
  failed_flushes = 0;
  // Durable now: a next file starts from it (create_file).
  if (!first_error) flushed_record = handed_record;
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

void Hdf5Output::Impl::write(std::span<const Sample> samples) {
  if (buffered_points >= max_buffered_points) {
    // Rows of records after the runner's last word are buffered: this flush cannot name a record.
    handed_record = 0;
    try {
      flush_all();
    } catch (const std::exception& failure) {
      throw OutputError(fmt::format("HDF5 output {}: {} points wait for the file, which "
                                    "refuses them: {}",
                                    link_path, buffered_points, failure.what()),
                        {});
    }
  }
  for (const auto& sample : samples) {
    if (sample.sensor != kMasterSensorName) {
      write_row(sample);
      continue;
    }
    Sample own;
    std::vector<Sample> agents = split_agent_rows(sample, own);
    write_row(own);
    for (const auto& agent : agents) write_row(agent);
  }
}

hdf5::Table& Hdf5Output::Impl::find_or_add_table(const std::string& table_host, const std::string& sensor) {
  auto host = tables.find(table_host);
  if (host == tables.end())
    host = tables.emplace(table_host, std::map<std::string, Table, std::less<>>{}).first;
  auto found = host->second.find(sensor);
  if (found == host->second.end()) {
    found = host->second.emplace(sensor, Table{}).first;
    Table& added = found->second;
    added.host = table_host;
    added.sensor = sensor;
    added.host_link = hdf5_link_name(table_host);
    added.sensor_link = hdf5_link_name(sensor);
    added.per_sensor = per_sensor;
    added.host_column.name = &kHostColumnName;
    added.column_names = &column_names;
    added.label_names = &label_names;
  }
  return found->second;
}

hdf5::Table& Hdf5Output::Impl::table_for(const Sample& sample) {
  static const std::string no_host;
  const std::string& table_host = per_sensor ? no_host : sample.host;
  Table* table = last_table ? last_table->followed_by : nullptr;
  if (!table || table->sensor != sample.sensor || table->host != table_host) {
    table = &find_or_add_table(table_host, sample.sensor);
    if (last_table) last_table->followed_by = table;
  }
  last_table = table;
  return *table;
}

void Hdf5Output::Impl::write_row(const Sample& sample) {
  Table& table = table_for(sample);
  if (!stored_before_crash.empty() && already_stored(table, sample)) return;
  // A job's sample also goes to the job index, which numbers what the columns hold.
  const bool of_job = sample.job != 0;
  const JobRow job_row = of_job ? job_index.add_row(sample, table.indexed_sensor) : JobRow{};
  const std::size_t row = table.time_buffer.size();
  table.time_buffer.push_back(sample.time_ns);
  table.job_buffer.push_back(sample.job);
  if (per_sensor) {
    table.host_column.buffer.push_back(sample.host);
    table.host_column.has_value = true;
  }
  for (std::size_t i = 0; i < sample.metrics.size(); ++i) {
    const auto& metric = sample.metrics[i];
    Column& column = table.columns[table.column_of(i, metric.key)];
    auto& buffer = column.buffer;
    if (buffer.size() < row) buffer.resize(row, kNaN);  // rows without this key
    if (buffer.size() == row)
      buffer.push_back(metric.value);
    else
      buffer[row] = metric.value;  // the key twice in one sample: the last one
    column.has_value = true;
    if (of_job) JobIndex::add_metric(job_row, column.indexed_key, metric.key, metric.value);
  }
  for (std::size_t i = 0; i < sample.labels.size(); ++i) {
    const Label& text = sample.labels[i];
    LabelColumn& label = table.label_of(i, text.key);
    label.buffer.set(row, text.value);
    label.has_value = true;
    if (of_job) JobIndex::add_label(job_row, label.indexed_key, text);
  }
  table.buffered_points += sample.metrics.size();
  buffered_points += sample.metrics.size();
}

std::size_t Hdf5Output::Impl::buffered_rows() const {
  std::size_t rows = 0;
  for (const auto& [host, sensors] : tables)
    for (const auto& [sensor, table] : sensors) rows += table.pending();
  return rows;
}

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
  // The last file after the rotated ones still being compressed; all of them done on return.
  if (impl_->finish_file()) impl_->compactor.add(impl_->file_path);
  impl_->compactor.finish();
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

void Hdf5Output::journal_replayed() {
  std::lock_guard lock(impl_->mutex);
  impl_->forget_stored_rows();
}

void Hdf5Output::handed_through(std::uint64_t record) {
  std::lock_guard lock(impl_->mutex);
  impl_->handed_record = record;
}

std::optional<std::uint64_t> Hdf5Output::stored_through() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stored_through;
}

double Hdf5Output::flush_period() const { return impl_->flush_interval; }

std::size_t Hdf5Output::preferred_queue_max_points() const {
  return kQueueMaxPoints;
}

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
