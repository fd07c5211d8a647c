// The agent spool's on-disk format (the layout is described in agent_spool.h): records of
// self-contained samples, each with its own string table (BatchNames numbers the names while a
// record is encoded), and the small CRC-checked state files `acked` and `reserved`. Internal to
// lagent.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "metric.h"

namespace fructosa::agent {

// A spool that cannot be used (directory not writable, held by another lagent, disk error).
class SpoolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The spool directory is held by another lagent (its `lock`): not a disk problem, so no spool
// in memory either (AgentSpool::open).
class SpoolInUseError : public SpoolError {
 public:
  using SpoolError::SpoolError;
};

// The names (sensors, metric keys, labels) of the batch being encoded, numbered in the order
// they first appear in it. Remembered from batch to batch, so that a batch of names seen before
// costs a lookup each and no allocation.
class BatchNames {
 public:
  void start_batch();
  std::uint32_t id(std::string_view name);
  const std::vector<std::string_view>& in_batch() const { return in_batch_; }
  std::size_t remembered() const { return known_.size(); }
  // Beyond this many names remembered, the next batch starts afresh.
  static constexpr std::size_t kMaxKnown = 1 << 16;

 private:
  struct Entry {
    std::uint32_t id = 0;
    std::uint64_t batch = 0;  // the batch `id` is for
  };
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
  };
  std::unordered_map<std::string, Entry, Hash, std::equal_to<>> known_;
  std::vector<std::string_view> in_batch_;  // views of known_'s keys (nodes do not move)
  std::uint64_t batch_ = 0;
};

namespace spool_format {

// Records are SegmentLog records (common/segment_log.h) with this magic, id = sequence and
// count = samples. Spools written before the shared segment log have "FAS1" records (a 16-byte
// header: magic, body bytes, CRC, samples; body: u64 sequence then the payload below); they are
// converted when a spool is opened.
constexpr std::uint32_t kRecordMagic = 0x32534146;        // "FAS2" in a little-endian file
constexpr std::uint32_t kLegacyRecordMagic = 0x31534146;  // "FAS1"
constexpr std::size_t kLegacyHeaderBytes = 16;
constexpr std::uint32_t kStateMagic = 0x31545346;         // "FST1"
constexpr std::size_t kMaxRecordBytes = 256u << 20;       // larger lengths are garbage

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <class T>
T get(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

// A batch as a record's payload, into `payload`; `samples_part` and `names` are scratch space
// kept from batch to batch.
void encode_payload(const std::vector<Sample>& samples, BatchNames& names, std::string& samples_part,
                    std::string& payload);
// The samples of a record's payload; `where` names it in the SpoolError thrown when the
// payload is malformed.
std::vector<Sample> decode_payload(std::string_view payload, const std::string& where);

// A state file's content, and its value read back (false: missing, torn or corrupt).
std::string encode_state(std::uint64_t value);
bool read_state(const std::filesystem::path& path, std::uint64_t& value);


}  // namespace spool_format
}  // namespace fructosa::agent
