// The append-only segment log under both of fructosa's "nothing lost" stores: lmaster's journal
// (lmaster/journal.h) and lagent's spool (lagent/agent_spool.h). One framing, one recovery and
// one fsync discipline, so that they cannot drift apart (docs/durability.md).
//
// A log is a directory of segment files named by the id of their first record
// (`<20 digits><suffix>`). A record is a 32-byte header and a payload:
//   [u32 magic][u32 payload bytes][u32 CRC32 of payload][u32 0][u64 id][u64 count]
// in this machine's byte order (a log never leaves its host). Ids only grow (they need not
// follow each other); `count` is the client's (points, samples) and lets budgets and gauges be
// computed without reading payloads.
//
// Durability: append() writes (page cache: survives a kill -9); sync() fdatasyncs the segments
// written since and, when a segment was created or removed, fsyncs the directory, so that what
// it returns for survives a power cut, names included.
//
// Recovery, at open: every record is checked (magic, length, CRC, id above the one before and at
// least the segment's name). Bytes after the last valid record of the newest segment are a torn
// append: cut. Damage anywhere else (invalid bytes with valid records after them, or at the end of
// an older segment) is not cut away: the file is kept as `<name>.damaged`, a copy of its valid
// records takes its place, and the loss is logged with the byte range.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fructosa {

class SegmentLogError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SegmentLogFormat {
  std::uint32_t magic = 0;       // the first 4 bytes of every record
  std::string suffix;            // of segment file names: ".journal", ".seg"
  std::string what;              // names the log in messages: "journal", "spool"
  std::uint32_t max_payload_bytes = 1u << 30;
  unsigned file_mode = 0640;
};

class SegmentLog {
 public:
  struct Header {
    std::uint32_t magic = 0;
    std::uint32_t payload_bytes = 0;
    std::uint32_t crc = 0;
    std::uint32_t reserved = 0;
    std::uint64_t id = 0;
    std::uint64_t count = 0;
  };
  static_assert(sizeof(Header) == 32);

  // An open segment file, shared with readers so that removing the segment never closes a
  // descriptor under a read.
  struct File {
    File(int fd, std::filesystem::path path) : fd(fd), path(std::move(path)) {}
    ~File();
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    int fd;
    std::filesystem::path path;
  };

  // Where a record is, for reading it with read().
  struct Place {
    std::uint64_t id = 0;
    std::uint64_t count = 0;
    std::uint64_t offset = 0;  // of the header
    std::uint32_t payload_bytes = 0;
    std::shared_ptr<const File> file;
  };

  struct SegmentInfo {
    std::uint64_t first_id = 0;  // from the name
    std::uint64_t last_id = 0;   // of its last record; first_id - 1 while empty
    std::uint64_t bytes = 0;
    std::uint64_t count = 0;     // sum of its records' counts
    std::size_t records = 0;
  };

  // Opens `directory` (it must exist) and recovers it as described above. `segment_bytes`: an
  // append that would take a segment past it starts a new one. Throws SegmentLogError.
  SegmentLog(std::filesystem::path directory, SegmentLogFormat format, std::uint64_t segment_bytes);
  ~SegmentLog();
  SegmentLog(const SegmentLog&) = delete;
  SegmentLog& operator=(const SegmentLog&) = delete;

  // --- the writer (one thread) ---
  // Appends record `id` (> every id in the log); durable after sync(). On a write error the
  // segment is cut back and SegmentLogError thrown: the log is as before the call.
  void append(std::uint64_t id, std::uint64_t count, std::string_view payload);
  // Makes every append so far, and the names of segments created or removed, durable.
  void sync();
  bool unsynced() const;
  // The appends so far need no sync of their own (their destination has them).
  void forget_unsynced();
  // Removes the records with ids above `id` (appended, but their sync failed). Segments made
  // for them go too.
  void discard_after(std::uint64_t id);
  // Makes the next append go to a new segment named `first_id` (an empty newest segment
  // records the next id across a restart, once synced).
  void start_segment(std::uint64_t first_id);
  // Deletes the oldest segment (its records are no longer needed); returns what it held.
  SegmentInfo remove_front();

  // --- any thread ---
  // The first record whose id is `id` or above.
  std::optional<Place> find(std::uint64_t id) const;
  // A record's payload, checked again (the file may have been damaged since it was opened).
  // Throws SegmentLogError.
  std::string read(const Place& place) const;
  std::vector<SegmentInfo> segments() const;
  // The oldest segment (the log must have one).
  SegmentInfo front() const;
  std::size_t segment_count() const;
  std::uint64_t bytes() const;
  // --- the writer ---
  // The last record's id (0: none).
  std::uint64_t last_id() const;
  // The lowest id the next append may have: above the last record and at least the newest
  // segment's name (0 when the log has no segment).
  std::uint64_t next_id() const;
  // --- any thread ---
  // Sum of the counts of the records with ids `id` and above, and their number.
  std::uint64_t count_from(std::uint64_t id) const;
  std::uint64_t records_from(std::uint64_t id) const;
  const std::filesystem::path& directory() const { return directory_; }
  std::filesystem::path segment_path(std::uint64_t first_id) const;

  // Writes `records` (whole records, headers included, back to back) as a new segment file at
  // `path`, durably (temporary file, fdatasync, rename, directory fsync). For recovery and for
  // converting older formats.
  static void write_segment_file(const std::filesystem::path& path, const std::string& records, unsigned mode);
  // A record's header, and a whole record (header and payload) as a log with `magic` writes it.
  static Header header_for(std::uint32_t magic, std::uint64_t id, std::uint64_t count, std::string_view payload);
  static std::string encode(std::uint32_t magic, std::uint64_t id, std::uint64_t count, std::string_view payload);

 private:
  struct Record {
    std::uint64_t id;
    std::uint64_t offset;
    std::uint32_t payload_bytes;
    std::uint64_t count;
  };
  struct Segment {
    std::uint64_t first_id = 0;
    std::uint64_t bytes = 0;
    std::uint64_t count = 0;
    std::vector<Record> records;
    std::shared_ptr<File> file;
    bool unsynced = false;
    SegmentInfo info() const;
  };

  void recover();
  void recover_segment(std::uint64_t first_id, bool newest);
  void new_segment(std::uint64_t first_id);

  std::filesystem::path directory_;
  SegmentLogFormat format_;
  std::uint64_t segment_bytes_;
  mutable std::mutex mutex_;       // guards segments_ for readers; the writer changes it under it
  std::deque<Segment> segments_;   // oldest first; the last one is appended to
  std::atomic<std::uint64_t> bytes_{0};
  bool directory_unsynced_ = false;
  bool tail_broken_ = false;       // a failed append could not be cut back: next append in a new segment
};

}  // namespace fructosa
