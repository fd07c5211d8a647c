// lagent's spool ([lagent] spool_dir, spool_max_bytes): every batch stays on disk from the
// moment it is made until lmaster acknowledges it, across reconnects and lagent restarts.
//
// Files in spool_dir (one lagent per directory, held with flock on `lock`):
//   session          the link session (u64) lagent says Hello with. It is made once per spool
//                    directory and kept, so a restarted lagent continues the same session and
//                    sequence numbers, and lmaster's per-(host, session) duplicate check also
//                    covers batches resent after a restart. A new session is made only when the
//                    sequence position is lost (no batches and no readable `acked`).
//   acked            the highest sequence lmaster acknowledged (u64 + CRC32), rewritten in place
//                    on every acknowledgement.
//   <20 digits>.seg  a SegmentLog (common/segment_log.h: the framing, recovery and fsyncs it
//                    shares with lmaster's journal) of records with magic "FAS2", id = the
//                    batch's sequence, count = its samples, payload = the self-contained
//                    samples (see below). Segments of the "FAS1" format of earlier versions are
//                    converted at open.
//
// The dictionary problem: a batch on the wire refers to the dictionary indices of the process
// that encoded it, and a restarted lagent has a new dictionary. So the spool does not keep wire
// bytes: each record holds its samples self-contained (sensor names and metric keys in a string
// table of that record), and the sender encodes them under the running dictionary when it
// (re)sends, keeping the record's sequence number.
//
//   reserved         the highest sequence that may have been handed out (u64 + CRC32): written
//                    and synced ahead, kReservedBatches at a time, and set back to the last one
//                    used at a clean stop.
//
// Durability: a sequence number lmaster has seen is never given to another batch, and a batch
// is on disk from the moment it is made until lmaster acknowledges it, short of a power cut
// in the second after it was made. append() writes the record (page cache: it survives lagent
// being killed) and returns at once; sync() makes the records durable, and the sender calls it
// when a batch has waited sync_delay (1 s) without an acknowledgement. While lmaster answers,
// batches are acknowledged within milliseconds (lmaster's journal has them on disk by then) and
// never need a flush of their own: this was an fdatasync per batch, 30 % of the sender's CPU
// and a disk flush every second on every node. Sending to carbon directly (lagent/carbon_link.h),
// where "acknowledged" means taken a replay window after the batch was written, a batch written
// to carbon is handed_over() and needs no flush either. What keeps numbers unique across a power cut,
// which may take the last unsynced batches with it, is `reserved`: append() syncs it before it
// hands out a number beyond it, and a spool opened after an unclean stop continues after it
// (lmaster then logs the numbers skipped as never arrived). `acked` is not synced on every
// write (a stale value after a power cut only resends batches lmaster drops as duplicates); it
// is synced before a segment is deleted, so sequences never go backwards.
//
// Recovery (after kill -9 or a power cut): SegmentLog's: a torn last write is cut, a damaged
// segment is kept aside as `.damaged` with its whole records copied in its place, and logged.
//
// A full or failing disk: batches that cannot be written are kept in memory (kMaxMemoryBytes at
// most, the oldest dropped and counted), logged once when it starts and once when writes work
// again; a spool_dir unusable at start gives a spool in memory only (open()). Either way lmaster
// still gets everything while lagent runs; what is only in memory is lost if it stops.
//
// Budget: segment files together stay within max_bytes. When an append needs room, the oldest
// segments are deleted with the batches in them that lmaster had not acknowledged; those are
// counted (stats().dropped_batches / dropped_samples) and logged with their sequence range.
//
// This file and agent_spool.cpp: the segment log (files, recovery, budget, acknowledgements);
// spool_format.*: the bytes of a record and of the state files.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "metric.h"
#include "segment_log.h"
#include "spool_format.h"

namespace fructosa::agent {

struct SpoolStats {
  std::uint64_t bytes = 0;            // segment files on disk
  std::uint64_t batches = 0;          // batches kept, not yet acknowledged
  std::uint64_t dropped_batches = 0;  // since this spool was opened
  std::uint64_t dropped_samples = 0;
};

class AgentSpool {
 public:
  // Opens (creating it if needed) and recovers `directory`. Throws SpoolError.
  AgentSpool(std::filesystem::path directory, std::uint64_t max_bytes);
  // The spool lagent runs with: `directory`'s, or, when it cannot be used (not writable, full,
  // failing), one that keeps batches in memory only (logged): a full /var on a compute node must
  // not stop its monitoring. Throws SpoolError only when another lagent holds `directory`.
  static std::unique_ptr<AgentSpool> open(const std::filesystem::path& directory, std::uint64_t max_bytes);
  // Batches that cannot be written (a full or failing disk) wait in memory, the oldest dropped
  // (counted) past this many bytes or spool_max_bytes, whichever is smaller.
  static constexpr std::uint64_t kMaxMemoryBytes = 32u << 20;
  ~AgentSpool();
  AgentSpool(const AgentSpool&) = delete;
  AgentSpool& operator=(const AgentSpool&) = delete;

  // True while an AgentSpool of this process holds `directory` (a replacement sender waits).
  static bool held_here(const std::filesystem::path& directory);

  std::uint64_t session() const { return session_; }
  // The sequence the next append gets.
  std::uint64_t next_sequence() const { return next_sequence_; }
  // The oldest batch kept (== next_sequence() when nothing is kept).
  std::uint64_t first_sequence() const { return next_kept(0); }
  // The first batch kept at or after `sequence` (== next_sequence() when none is): the numbers
  // kept need not follow each other (dropped batches, numbers skipped after an unclean stop).
  std::uint64_t next_kept(std::uint64_t sequence) const;
  bool empty() const { return first_sequence() == next_sequence_; }

  // Keeps `samples` as batch next_sequence() (durable once synced, see above); returns its
  // sequence, or 0 when the batch alone is larger than the budget (then it is counted as
  // dropped). Older unacknowledged batches may be dropped (counted, logged) to make room.
  // Throws SpoolError on a disk error.
  std::uint64_t append(const std::vector<Sample>& samples);

  // Makes every appended batch durable. Throws SpoolError on a disk error.
  void sync();
  // Since when appended batches wait, unacknowledged, for a sync (nullopt: none).
  std::optional<std::chrono::steady_clock::time_point> unsynced_since() const;
  // Batches appended after the reservation ran out (one synced write of `reserved` each).
  static constexpr std::uint64_t kReservedBatches = 64;

  // The samples of a kept batch (host left empty). Throws SpoolError when the record cannot be
  // read back.
  std::vector<Sample> read(std::uint64_t sequence) const;
  // Samples in a kept batch, without reading it.
  std::uint32_t samples_in(std::uint64_t sequence) const;

  // lmaster acknowledged every batch up to `sequence`. A sequence beyond what was appended but
  // within the numbers that may have been handed out (the spool lost its tail) moves
  // next_sequence() past it, so no number is used twice; one beyond those (never sent: a
  // confused or lying peer) is ignored and logged.
  void acknowledge(std::uint64_t sequence);
  // The destination has every batch up to `sequence` but confirms it only later (carbon: see
  // lagent/carbon_link.h): like acknowledged ones they need no sync of their own, and they stay
  // until acknowledge(). Only a power cut before the destination read them could lose them.
  void handed_over(std::uint64_t sequence);

  SpoolStats stats() const;
  // Batches kept in memory only (the disk refused them), not yet acknowledged.
  std::size_t in_memory() const { return memory_.size(); }
  bool memory_only() const { return !log_; }
  const std::filesystem::path& directory() const { return directory_; }

 private:
  struct MemoryOnly {};
  AgentSpool(MemoryOnly, std::filesystem::path directory, std::uint64_t max_bytes);
  void append_to_disk(std::uint64_t record_bytes, std::size_t samples);
  void keep_in_memory(std::size_t samples);
  const std::string* in_memory(std::uint64_t sequence, std::uint32_t* samples) const;
  void take_lock();
  void release();
  void convert_legacy_segments();
  void recover_state();
  void write_acked();
  bool sync_acked();
  void reserve(std::uint64_t through);
  void remove_acknowledged_segments();
  void drop_oldest_segment();
  std::uint64_t segment_target() const;

  std::filesystem::path directory_;
  std::uint64_t max_bytes_;
  int lock_fd_ = -1;
  int acked_fd_ = -1;
  int reserved_fd_ = -1;
  std::unique_ptr<SegmentLog> log_;
  std::uint64_t session_ = 0;
  std::uint64_t acked_ = 0;          // highest acknowledged sequence
  std::uint64_t next_sequence_ = 1;
  std::uint64_t reserved_ = 0;       // sequences up to it may have been handed out (synced in `reserved`)
  std::uint64_t unsynced_from_ = 0;  // the first batch appended and not synced (0: none)
  std::chrono::steady_clock::time_point unsynced_since_{};
  BatchNames names_;                 // append()'s scratch space, kept to spare allocations
  std::string samples_part_;
  std::string payload_;
  SpoolStats dropped_;               // only dropped_* used
  bool warned_unknown_ack_ = false;
  std::uint64_t highest_made_ = 0;   // the highest number handed out by this process
  // Batches the disk refused, by sequence: payload and samples. Lost if lagent stops first.
  struct MemoryBatch {
    std::string payload;
    std::uint32_t samples = 0;
  };
  std::map<std::uint64_t, MemoryBatch> memory_;
  std::uint64_t memory_bytes_ = 0;
  bool disk_failing_ = false;        // an episode of batches kept in memory: logged at its start and end
  std::uint64_t episode_batches_ = 0;
};

}  // namespace fructosa::agent
