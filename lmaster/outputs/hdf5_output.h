// The HDF5 output: appendable, compressed, self-describing tables, one per sensor (or per host and
// sensor), in timestamped files that h5py can read while lmaster writes them (HDF5 1.10 SWMR).
//
// Files (docs/hdf5.md): `path` (e.g. data/fructosa.h5) is a symbolic link to the file being
// written, <stem>-<UTC start YYYYmmddTHHMMSSZ>[-N].h5 in the same directory. A new file starts at
// every start of lmaster, at reopen() (SIGHUP, `lmaster reload`) and when rotate_size or
// rotate_age is exceeded. Files that a killed lmaster left open are repaired at start.
//
// Layout (readable with h5py and h5dump), `layout = per_sensor` (format_version 2):
//   /                           attributes format, format_version, layout, writer, created, jobs
//   /<sensor>                   group, attributes sensor and jobs (sorted job ids)
//     time                      int64, ns since the epoch (attribute unit = "ns since epoch")
//     host                      fixed-length UTF-8 string: the host of the row
//     job                       uint64, 0 = the node itself
//     <key>                     float64 per metric key, NaN where a row has no value; attributes
//                               key (the real key), unit, kind, description
//     labels/<key>              fixed-length UTF-8 string per row ("" where a row has none): the
//                               text details of a sample (device, fstype, address...)
// `layout = per_host` (format_version 1): /<host>/<sensor> groups (attributes host, sensor, jobs;
// /<host> has host and jobs) with the same datasets but `host`. A flush costs a few HDF5 calls per
// dataset: per_sensor's cost does not grow with the hosts. Both layouts have the job index
// /.jobs: per (job, host), what its rows of each sensor amount to (hdf5_job_index.h).
// All datasets are 1-D, chunked, unlimited. While a file is written they are uncompressed (safe
// for SWMR readers); when it is closed it is rewritten with gzip + shuffle (complevel > 0).
// `time` is written last at every flush: a reader takes len(time) rows of every dataset (others
// may be longer for a moment). Link names are escaped (see hdf5_link_name); the attributes hold
// the real names.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "config.h"
#include "output.h"

namespace fructosa::master {

// The link name used for a host, sensor or key: '%' -> %25, '/' -> %2F, a leading '.' -> %2E,
// "" -> "%"; with `metric_key`, a key spelled "time" or "job" gets its first letter escaped
// (%74ime, %6Aob) so it cannot collide with those datasets. Different names never share a link.
std::string hdf5_link_name(std::string_view name, bool metric_key = false);

class Hdf5Output final : public Output {
 public:
  // The [hdf5] section: path, complevel, chunk, flush_interval, rotate_size, rotate_age.
  static const OptionTable& hdf5_options();
  // datasets_kept_open's default: a file of up to this many datasets keeps them open between
  // flushes; past it (per_host with more than ~80 hosts) each table's are opened, written and
  // closed at every flush, which bounds the HDF5 library's memory (10-17 KiB per open dataset)
  // at some CPU (docs/hdf5.md, "Which one").
  static constexpr std::size_t kDatasetsKeptOpen = 16384;

  // Takes the lock <path>.lock, renames a regular file found at `path` (an older lmaster's),
  // repairs and compresses files of this series that a killed writer left open (or whose
  // compression was interrupted), starts a new file and points `path` at it. Throws
  // std::runtime_error naming the path when it cannot.
  Hdf5Output(const Options& options, const MetricInfoStore& infos);
  ~Hdf5Output() override;  // flushes, closes and compresses the file, releases the lock
  Hdf5Output(const Hdf5Output&) = delete;
  Hdf5Output& operator=(const Hdf5Output&) = delete;

  std::string name() const override;
  // Buffers the rows in memory; nothing reaches the file before flush(). When the buffer holds
  // too much because flushes fail, write() tries a flush and, failing, throws OutputError with
  // every sample undelivered.
  void write(std::span<const Sample> samples) override;
  // Appends every buffered row (a few HDF5 calls per dataset), then H5Fflush; counts the points in
  // counters().sent. Throws std::runtime_error on an HDF5 failure; the rows stay buffered and the
  // next flush rewrites the same rows. May start a new file (rotate_size, rotate_age).
  void flush() override;
  double flush_period() const override;  // flush_interval
  double flush_period_when_behind() const override;
  // kQueueMaxPoints: the output falls behind for seconds at a time by design (per_host's flushes
  // of 1000 hosts' datasets take 10-15 s; each rotation's compression holds the library), and a
  // queue of a million points was ~100-150 MiB of lmaster's memory meanwhile (docs/hdf5.md).
  std::size_t preferred_queue_max_points() const override;
  static constexpr std::size_t kQueueMaxPoints = 200000;
  // Flushes, starts a new timestamped file (`path` then points to it), closes and compresses the
  // old one. When the new file cannot be created, keeps writing the old one and throws.
  void reopen() override;
  void journal_replayed() override;
  // Kept in the file being written at each flush (/.flushed); after a crash, read back from the
  // newest file when its rows are those of its last complete flush.
  void handed_through(std::uint64_t record) override;
  std::optional<std::uint64_t> stored_through() const override;

  const std::string& path() const;  // the configured path: the symbolic link
  std::string file() const;         // the file being written now

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fructosa::master
