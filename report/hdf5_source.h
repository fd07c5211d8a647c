// A JobSource over the HDF5 files lmaster writes (docs/hdf5.md): either layout (per_sensor,
// format_version 2: /<sensor> tables with a host column; per_host, format_version 1:
// /<host>/<sensor>), one file, the configured `path` (the symbolic link to the file being
// written: the whole series <stem>-<UTC time>[-N].h5 beside it is read) or a directory (every
// *.h5 file in it that lmaster wrote). The file being written is read as a SWMR reader, while
// lmaster writes it.
//
// Reading: every call (jobs(), job()) opens the files again, reads and closes them, so the file
// being written shows the rows flushed by then. A file whose job index is complete (/.jobs,
// docs/hdf5.md; every file lmaster closed) is read through it: jobs() reads only the index (with
// per-host summaries), job() only the tables and hosts it names for the job, and there only the
// rows around the job's times. Other files (being written, left by a crash, of an lmaster before
// the index) are scanned: jobs() reads the time, job and host columns (and JobCgroup's label
// `user`) of the tables whose `jobs` attributes may hold jobs, and leaves per_host empty for the
// jobs it sees there; job() reads the other columns only over the rows of the job. Each table is
// read as lmaster writes it: len(time) rows of every dataset (another dataset may be a flush
// ahead of `time`); rows whose time is 0 (grown but never written by a writer that was killed)
// are left out. Real names come from the attributes (sensor of a table, host of a per_host table,
// key of a dataset), never from the escaped link names. The chunks of closed files are decoded
// here, on two threads (hdf5_chunks.h).
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "job_data.h"

namespace fructosa::report {

class Hdf5Source final : public JobSource {
 public:
  // `where`: an lmaster HDF5 file, the configured `path` (a symbolic link: its series is read),
  // or a directory (its *.h5 files whose root attribute format is "fructosa lmaster HDF5 output";
  // other files are ignored). Opens each file once to check it and order the files (by their
  // root attribute `created`, then by name). A file lmaster has open without SWMR for a moment
  // (to add tables) is retried for up to `open_retry`. Throws SourceError naming the file: no
  // such file or directory, not an HDF5 file, not an lmaster file (a file or a series member),
  // a directory without lmaster files, a file that cannot be opened.
  explicit Hdf5Source(std::filesystem::path where,
                      std::chrono::milliseconds open_retry = std::chrono::seconds(10));

  // From the job indexes of the files that have a complete one (per_host: their summaries,
  // merged over the files), and by scanning the others (per_host empty for a job seen there).
  std::vector<JobSummary> jobs() override;
  // Job 0 (the nodes themselves) is not a job: nullopt. Metrics whose every value in the job's
  // rows is NaN (a column of other rows of a per_sensor table) are left out; a column missing
  // from some files (or rows) of a metric that has values reads NaN there: every metric of a
  // sensor on a host has the same times (the sensor's rows, ascending; one Times). node_metrics:
  // the node rows (job 0) of node_sensors() on each host, from the last at or before the job's
  // first sample there to the first at or after its last, looked for in the files that hold the
  // job and the one on either side; node_labels: their labels' latest values at or before the
  // job's last sample.
  std::optional<JobData> job(std::uint64_t id) override;
  // "data/fructosa-*.h5 (3 files)", "data/*.h5 (2 files)", or the file's name.
  std::string describe() const override;

  // The files read, oldest first.
  const std::vector<std::filesystem::path>& files() const { return files_; }

 private:
  void find_files(const std::filesystem::path& where);

  std::vector<std::filesystem::path> files_;
  std::string description_;
  std::chrono::milliseconds open_retry_;
};

// The real name of a link name lmaster escaped (hdf5_link_name: "%2F" -> '/', "%25" -> '%',
// "%2E" -> '.', "%74ime" -> "time", "%" -> ""); only used for objects without their attribute.
std::string hdf5_unescape(std::string_view link);

}  // namespace fructosa::report
