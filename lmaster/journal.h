// The master's journal: what lmaster accepts is durable before the agent hears "ack".
//
// Every poll round, the master appends the samples it accepted (one record) with the last batch
// sequence it accepted from each agent session, calls commit() (one fdatasync), and only then
// sends the acks and hands the record to the outputs. Each output reads the journal back at its
// own pace when it is behind (or after a restart) and saves the id of the last record it has
// delivered; segments every output has delivered are deleted. So a kill -9 of lmaster, an output
// that is down or a full disk under HDF5 loses nothing that was acknowledged, and the dedup state
// (host, session) -> last sequence is rebuilt from the journal at start.
//
// Files under <data_dir>/journal/:
//   <20-digit first record id>.journal  a SegmentLog (common/segment_log.h: framing, recovery,
//                                        fsyncs) of records: magic "FJR1", id, count = points;
//                                        payload: u32 marks, each (text host, u64 session,
//                                        u64 sequence), then the samples (encode_samples:
//                                        journal.cpp gives both versions' layouts)
//   <output>.position                   the last record id that output delivered
//   sessions.json                       the dedup state and next id, saved before segments go
// in this machine's byte order (a journal never leaves the host). Past journal_max_bytes the
// oldest segments are deleted even if an output has not read them: those points are counted as
// dropped by each output that misses them, and logged.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "metric.h"
#include "segment_log.h"

namespace fructosa::master {

// (host, agent session) -> the last batch sequence accepted from it.
using SessionKey = std::pair<std::string, std::uint64_t>;
using SequenceMarks = std::map<SessionKey, std::uint64_t>;

// A disk error: the records since the last commit are cut, nothing of them is acknowledged.
class JournalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct JournalRecord {
  std::uint64_t id = 0;
  std::uint64_t points = 0;
  std::vector<Sample> samples;
};

// Encodes the samples part of records into memory it keeps from record to record: a record
// holds every point lmaster accepts, and a std::string per record cost an allocation, the
// zeroing of its bytes by resize() and a copy into the record's payload.
class SamplesEncoder {
 public:
  // The bytes of `samples` after `head` (the record's marks), valid until the next call.
  std::string_view encode(std::string_view head, const std::vector<Sample>& samples);

 private:
  std::unique_ptr<char[]> bytes_;  // not zeroed: every byte handed out is written first
  std::size_t capacity_ = 0;
  std::vector<std::uint32_t> keys_from_;
};

class Journal {
 public:
  // Opens (creating) `directory`: checks every record (a torn tail a crash left is cut, a
  // damaged segment kept aside: SegmentLog) and rebuilds the dedup marks. Throws JournalError
  // when the directory is unusable.
  Journal(std::filesystem::path directory, std::uint64_t max_bytes);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // --- the master's thread ---
  // Appends one record (not durable until commit()); returns its id.
  std::uint64_t append(const SequenceMarks& marks, const std::vector<Sample>& samples);
  // Makes what was appended durable and readable. On failure the uncommitted records are cut
  // (JournalError): nothing of them may be acknowledged.
  void commit();
  // Every (host, session)'s last committed sequence: recovered at open, then kept up to date.
  const SequenceMarks& marks() const { return marks_; }
  // Deletes the segments every output has delivered (ids <= `delivered_by_all`).
  void trim(std::uint64_t delivered_by_all);

  // --- any thread ---
  std::uint64_t committed() const { return committed_id_.load(); }
  std::uint64_t bytes() const { return log_->bytes(); }
  const std::filesystem::path& directory() const { return directory_; }
  // The last record `output` delivered, as saved; a new output starts at the journal's end.
  std::uint64_t saved_position(const std::string& output) const;
  bool has_position(const std::string& output) const { return positions_at_open_.count(output) > 0; }
  // Durably records that `output` delivered every record up to `id`.
  void save_position(const std::string& output, std::uint64_t id);
  // Forgets the positions of outputs no longer configured (they would keep every segment).
  void forget_other_positions(const std::vector<std::string>& outputs);

  // Reads records back for one output; used by that output's thread only.
  class Reader {
   public:
    Reader(const Journal& journal, std::string output);
    // Record `id`, or the first one after it when records were deleted over the budget (their
    // points added to `dropped_points`); nullopt when `id` is not committed yet.
    std::optional<JournalRecord> read(std::uint64_t id, std::uint64_t& dropped_points);
    // Points in the committed records from `id` on (what the output still has to read).
    std::uint64_t points_from(std::uint64_t id) const;

   private:
    const Journal& journal_;
    std::string output_;
    std::uint64_t missing_counted_below_ = 0;  // ids found missing below it were counted once
  };

 private:
  std::filesystem::path position_path(const std::string& output) const;
  void recover_marks();
  void load_sessions();
  void save_sessions();
  void delete_front_segment(bool over_budget);
  void enforce_budget();
  // Points of committed records with ids in [from, to] that the journal no longer has.
  std::uint64_t deleted_points_between(std::uint64_t from, std::uint64_t to) const;

  std::filesystem::path directory_;
  std::uint64_t max_bytes_;
  std::unique_ptr<SegmentLog> log_;  // the records, on disk
  SequenceMarks marks_;
  SequenceMarks pending_marks_;  // appended, not committed
  std::map<std::string, std::uint64_t> positions_at_open_;
  std::string marks_bytes_;  // append(): the record's marks, then...
  SamplesEncoder samples_encoder_;  // ...its samples, in memory kept from record to record

  mutable std::mutex mutex_;  // guards deleted_ (readers look it up)
  // Segments deleted over the budget (first id, last id, points), for readers' drop counts.
  std::deque<SegmentLog::SegmentInfo> deleted_;
  std::uint64_t next_id_ = 1;
  std::atomic<std::uint64_t> committed_id_{0};
};

// The samples part of a record (SamplesEncoder); for tests and bench/point_path.
std::string encode_samples(const std::vector<Sample>& samples);
// Throws std::runtime_error on malformed input.
std::vector<Sample> decode_samples(std::string_view payload);

}  // namespace fructosa::master
