// The HDF5 output: one appendable, compressed, self-describing table per host and sensor.
//
// Layout (readable with h5py and h5dump):
//   /<host>/<sensor>            group, attributes host and sensor (the real names)
//     time                      int64, ns since the epoch (attribute unit = "ns since epoch")
//     job                       uint64, 0 = the node itself
//     <key>                     float64 per metric key, NaN where a row has no value; attributes
//                               key (the real key), unit, kind, description
//     labels/<key>              variable-length UTF-8 string per row ("" where a row has none):
//                               the text details of a sample (device, fstype, address...)
// All datasets are 1-D, of equal length, chunked, unlimited, gzip + shuffle when complevel > 0.
// Link names are escaped (see hdf5_link_name); the attributes always hold the real names.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "output.h"

namespace fructosa::master {

// The link name used for a host, sensor or key: '%' -> %25, '/' -> %2F, a leading '.' -> %2E,
// "" -> "%"; with `metric_key`, a key spelled "time" or "job" gets its first letter escaped
// (%74ime, %6Aob) so it cannot collide with those datasets. Different names never share a link.
std::string hdf5_link_name(std::string_view name, bool metric_key = false);

class Hdf5Output final : public Output {
 public:
  // The [hdf5] section: path, complevel, chunk, flush_interval.
  static const OptionTable& hdf5_options();

  // Opens (appending, continuing existing tables) or creates options.get_text("path"), which the
  // caller has already resolved. Throws std::runtime_error naming the path when it cannot.
  Hdf5Output(const Options& options, const MetricInfoStore& infos);
  ~Hdf5Output() override;  // flushes, closes every HDF5 handle
  Hdf5Output(const Hdf5Output&) = delete;
  Hdf5Output& operator=(const Hdf5Output&) = delete;

  std::string name() const override;
  // Buffers rows in memory; a table whose buffer reaches `chunk` rows is appended to the file at
  // once (that append may throw std::runtime_error; the rows then stay buffered).
  void write(std::span<const Sample> samples) override;
  // Appends every buffered row (one extent change and one write per dataset), then H5Fflush.
  // Throws std::runtime_error on an HDF5 failure; the rows stay buffered for the next try.
  void flush() override;
  double flush_period() const override;  // flush_interval
  // Flushes, closes the file and opens the same path again (appending; creates it if it is gone).
  void reopen() override;

  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fructosa::master
