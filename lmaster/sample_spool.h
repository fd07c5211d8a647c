// The disk tail of an output's queue: batches of samples an output could not take yet, kept in
// segment files under <data_dir>/spool/<output>/ within a disk budget shared by every output.
//
// Files: <20-digit sequence>.spool, each a run of records
//   [u32 magic "FSP1"][u32 payload bytes][u64 samples][u64 points][payload]
// in this machine's byte order (a spool never leaves the host). Segments are read oldest first
// and deleted once consumed; the read position in the oldest one is kept in `position` at stop,
// so a restart resumes where the output was (after a crash it resends that segment from its
// start: Graphite and Elasticsearch overwrite identical points, HDF5 may store rows twice).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "metric.h"

namespace fructosa::master {

// Bytes all spools may use together ([lmaster] spool_max_bytes).
class DiskBudget {
 public:
  explicit DiskBudget(std::uint64_t max_bytes) : max_bytes_(max_bytes) {}
  bool try_take(std::uint64_t bytes);
  void give_back(std::uint64_t bytes) { used_ -= bytes; }
  std::uint64_t used() const { return used_; }
  std::uint64_t max_bytes() const { return max_bytes_; }

 private:
  std::uint64_t max_bytes_;
  std::atomic<std::uint64_t> used_{0};
};

// Not thread-safe: the runner calls it under its lock.
class SampleSpool {
 public:
  // Scans what an earlier run left in `directory` (created on first append) and takes its size
  // from `budget`. Unreadable leftovers are logged and skipped, never fatal.
  SampleSpool(std::filesystem::path directory, DiskBudget& budget, std::string output_name);
  ~SampleSpool();  // saves the read position

  // Appends one batch after everything spooled. When the budget is short, the oldest segments
  // of this spool are deleted first (their points added to `dropped_points`); returns false when
  // the batch itself could not be kept (budget taken by other outputs, disk error: logged).
  bool append(const std::vector<Sample>& samples, std::uint64_t& dropped_points);
  // The oldest spooled batch, removed from the spool; nullopt when empty. A corrupt record is
  // logged and the rest of its segment skipped (its points added to `dropped_points`).
  std::optional<std::vector<Sample>> pop(std::uint64_t& dropped_points);
  // Puts batches before everything spooled (at stop: what was still in memory is older than
  // the spool). False when the disk or the budget refused one (logged).
  bool prepend(const std::vector<std::vector<Sample>>& batches);
  // Closes the segment being written, so that the next append starts a new one (used at stop
  // so a restart's appends never share a file with replayed data).
  void seal();

  bool empty() const { return points_ == 0 && segments_.empty(); }
  std::uint64_t points() const { return points_; }
  std::uint64_t bytes() const { return bytes_; }
  const std::filesystem::path& directory() const { return directory_; }

  struct RecordHeader;  // on disk before every payload

 private:
  struct Segment {
    std::uint64_t sequence = 0;
    std::uint64_t bytes = 0;         // file size
    std::uint64_t points = 0;        // points not yet read
    std::uint64_t start_offset = 0;  // where reading starts (a restart resumes mid-file)
  };
  bool write_record(Segment& segment, const RecordHeader& header, const std::string& payload);
  void pop_front_segment();
  std::filesystem::path segment_path(std::uint64_t sequence) const;
  void scan();
  void drop_oldest(std::uint64_t& dropped_points);
  void remove_segment_file(const Segment& segment);

  std::filesystem::path directory_;
  DiskBudget& budget_;
  std::string output_name_;
  std::deque<Segment> segments_;  // oldest first; the last one is appended to
  bool tail_open_ = false;        // the last segment takes appends
  std::uint64_t read_offset_ = 0;  // in segments_.front()
  std::uint64_t points_ = 0;
  std::uint64_t bytes_ = 0;
};

// The record payload; exposed for tests.
std::string encode_samples(const std::vector<Sample>& samples);
// Throws std::runtime_error on malformed input.
std::vector<Sample> decode_samples(std::string_view payload);

}  // namespace fructosa::master
