#include "agent_spool.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <string_view>
#include <unordered_map>

#include "crc32.h"
#include "durable_file.h"
#include "spool_format.h"

namespace fructosa::agent {
using namespace spool_format;

namespace {

std::string errno_text() { return std::strerror(errno); }

// Spool directories held by this process (flock alone cannot tell this process from another).
std::mutex held_mutex;
std::set<std::string> held;

std::string held_key(const std::filesystem::path& directory) {
  std::error_code ignored;
  return std::filesystem::weakly_canonical(directory, ignored).string();
}

}  // namespace

bool AgentSpool::held_here(const std::filesystem::path& directory) {
  std::lock_guard lock(held_mutex);
  return held.count(held_key(directory)) > 0;
}

AgentSpool::AgentSpool(std::filesystem::path directory, std::uint64_t max_bytes)
    : directory_(std::move(directory)), max_bytes_(max_bytes) {
  try {
    create_directories_durably(directory_);
  } catch (const DurabilityError& failure) {
    throw SpoolError(fmt::format("spool_dir: {}", failure.what()));
  }
  try {
    take_lock();
    convert_legacy_segments();
    log_ = std::make_unique<SegmentLog>(
        directory_, SegmentLogFormat{kRecordMagic, ".seg", "spool", static_cast<std::uint32_t>(kMaxRecordBytes), 0640},
        segment_target());
    recover_state();
  } catch (const SegmentLogError& failure) {
    release();
    throw SpoolError(failure.what());
  } catch (...) {
    release();
    throw;
  }
}

AgentSpool::AgentSpool(MemoryOnly, std::filesystem::path directory, std::uint64_t max_bytes)
    : directory_(std::move(directory)), max_bytes_(max_bytes) {
  std::random_device random;
  do session_ = (std::uint64_t{random()} << 32) | random();
  while (session_ == 0);
}

std::unique_ptr<AgentSpool> AgentSpool::open(const std::filesystem::path& directory, std::uint64_t max_bytes) {
  try {
    return std::make_unique<AgentSpool>(directory, max_bytes);
  } catch (const SpoolInUseError&) {
    throw;
  } catch (const SpoolError& error) {
    spdlog::error("{}: the spool is in memory only until a reload or restart finds spool_dir usable (at most {} "
                  "bytes; what lmaster has not acknowledged is lost if lagent stops)",
                  error.what(), std::min(max_bytes, kMaxMemoryBytes));
    return std::unique_ptr<AgentSpool>(new AgentSpool(MemoryOnly{}, directory, max_bytes));
  }
}

void AgentSpool::release() {
  log_.reset();
  if (acked_fd_ >= 0) ::close(acked_fd_);
  if (reserved_fd_ >= 0) ::close(reserved_fd_);
  acked_fd_ = reserved_fd_ = -1;
  if (lock_fd_ >= 0) {
    std::lock_guard lock(held_mutex);
    held.erase(held_key(directory_));
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
}

AgentSpool::~AgentSpool() {
  // A clean stop: everything on disk, and the next start continues right after the last number
  // used (no reserved numbers skipped).
  try {
    if (log_) sync();
    if (reserved_fd_ >= 0 && reserved_ != next_sequence_ - 1) reserve(next_sequence_ - 1);
  } catch (const SpoolError& error) {
    spdlog::error("{}", error.what());
  }
  if (acked_fd_ >= 0) sync_acked();  // a clean stop leaves nothing to resend twice
  if (!memory_.empty())
    spdlog::error("spool {}: {} batch(es) that only memory held are lost with this stop", directory_.string(),
                  memory_.size());
  release();
}

void AgentSpool::take_lock() {
  auto path = directory_ / "lock";
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (lock_fd_ < 0) throw SpoolError(fmt::format("cannot write in spool_dir {}: {}", directory_.string(), errno_text()));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    int code = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (code == EWOULDBLOCK)
      throw SpoolInUseError(fmt::format("spool_dir {} is in use by another lagent (it holds {})",
                                        directory_.string(), path.string()));
    throw SpoolError(fmt::format("cannot lock {}: {}", path.string(), std::strerror(code)));
  }
  std::lock_guard lock(held_mutex);
  held.insert(held_key(directory_));
}

std::uint64_t AgentSpool::segment_target() const {
  return std::clamp<std::uint64_t>(max_bytes_ / 16, 16u << 10, 16u << 20);
}

// Segments of lagent versions before the shared segment log ("FAS1" records) are rewritten as
// SegmentLog segments with the same batches, so that an upgrade loses nothing it spooled. Their
// whole records up to the first bad one are kept (the old recovery rule).
void AgentSpool::convert_legacy_segments() {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    std::string name = entry.path().filename().string();
    if (name.size() != 24 || !name.ends_with(".seg")) continue;
    int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat info {};
    std::string data;
    if (::fstat(fd, &info) == 0) {
      data.resize(static_cast<std::size_t>(info.st_size));
      if (!read_all_at(fd, data.data(), data.size(), 0)) data.clear();
    }
    ::close(fd);
    if (data.size() < 4 || get<std::uint32_t>(data.data()) != kLegacyRecordMagic) continue;
    std::string converted;
    std::uint64_t offset = 0, batches = 0, previous = 0;
    while (data.size() - offset >= kLegacyHeaderBytes) {
      const char* header = data.data() + offset;
      auto body_bytes = get<std::uint32_t>(header + 4);
      if (get<std::uint32_t>(header) != kLegacyRecordMagic || body_bytes < 8 || body_bytes > kMaxRecordBytes ||
          body_bytes > data.size() - offset - kLegacyHeaderBytes ||
          crc32(header + kLegacyHeaderBytes, body_bytes) != get<std::uint32_t>(header + 8))
        break;
      auto sequence = get<std::uint64_t>(header + kLegacyHeaderBytes);
      if (sequence <= previous) break;
      std::string_view payload(header + kLegacyHeaderBytes + 8, body_bytes - 8);
      converted += SegmentLog::encode(kRecordMagic, sequence, get<std::uint32_t>(header + 12), payload);
      previous = sequence;
      ++batches;
      offset += kLegacyHeaderBytes + body_bytes;
    }
    try {
      SegmentLog::write_segment_file(entry.path(), converted, 0640);
    } catch (const SegmentLogError& failure) {
      throw SpoolError(failure.what());
    }
    spdlog::info("spool {}: converted {} ({} batch(es)) from the format of earlier versions{}", directory_.string(),
                 entry.path().string(), batches,
                 offset < data.size() ? fmt::format("; {} bytes after byte {} were not whole records", data.size() - offset, offset)
                                      : "");
  }
}

void AgentSpool::recover_state() {
  std::uint64_t acked_on_disk = 0;
  bool have_acked = read_state(directory_ / "acked", acked_on_disk);
  acked_ = have_acked ? acked_on_disk : 0;
  auto first = log_->find(0);
  std::uint64_t first_kept = first ? first->id : 0;
  // Without `acked`, every batch found is sent again (lmaster drops those it has).
  if (!have_acked) acked_ = first_kept ? first_kept - 1 : 0;
  next_sequence_ = std::max({acked_ + 1, log_->last_id() + 1, log_->next_id(), std::uint64_t{1}});
  std::uint64_t stored = 0;
  bool have_session = read_state(directory_ / "session", stored);
  const bool new_session = !(have_session && (have_acked || first_kept || log_->segment_count() > 0));
  if (!new_session) {
    session_ = stored;
  } else {
    // A new session: first start, or the sequence position is lost (a session may never
    // reuse a sequence number lmaster has seen).
    if (have_session)
      spdlog::warn("spool {}: {} is missing or damaged; starting a new link session", directory_.string(),
                   (directory_ / "acked").string());
    else if (first_kept)
      spdlog::warn("spool {}: {} is missing or damaged; its batches are sent under a new link session "
                   "(lmaster cannot recognise those it already has)",
                   directory_.string(), (directory_ / "session").string());
    std::random_device random;
    do session_ = (std::uint64_t{random()} << 32) | random();
    while (session_ == 0);
    try {
      write_file_durably(directory_ / "session", encode_state(session_));
    } catch (const DurabilityError& failure) {
      throw SpoolError(failure.what());
    }
  }
  // Numbers up to `reserved` may have reached lmaster with batches the spool no longer has (an
  // unclean stop, a power cut, a damaged segment): within the session, none is given again.
  bool skipped = false;
  std::uint64_t reserved_on_disk = 0;
  if (!new_session && read_state(directory_ / "reserved", reserved_on_disk) && reserved_on_disk >= next_sequence_) {
    spdlog::warn("spool {}: sequences up to {} may have been used by batches it no longer has (lagent did not "
                 "stop cleanly, or the disk lost them); continuing at {} (lmaster reports the ones it never "
                 "got, {}..{}, as never arrived)",
                 directory_.string(), reserved_on_disk, reserved_on_disk + 1, next_sequence_, reserved_on_disk);
    next_sequence_ = reserved_on_disk + 1;
    skipped = true;
  }
  auto acked_path = directory_ / "acked";
  acked_fd_ = ::open(acked_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (acked_fd_ < 0) throw SpoolError(fmt::format("cannot open {}: {}", acked_path.string(), errno_text()));
  write_acked();
  if (!sync_acked()) throw SpoolError(fmt::format("cannot sync {}: {}", acked_path.string(), errno_text()));
  auto reserved_path = directory_ / "reserved";
  reserved_fd_ = ::open(reserved_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (reserved_fd_ < 0) throw SpoolError(fmt::format("cannot open {}: {}", reserved_path.string(), errno_text()));
  reserved_ = next_sequence_ - 1;
  if (new_session || skipped) reserve(reserved_);  // the old session's (or skipped) numbers no longer count
  try {
    // The names of `acked` and `reserved` (new files) and of converted segments.
    sync_directory(directory_);
  } catch (const DurabilityError& failure) {
    throw SpoolError(failure.what());
  }
  // Segments wholly acknowledged go, except the last, which appends continue.
  remove_acknowledged_segments();
  if (!empty() || log_->segment_count() > 0)
    spdlog::info("spool {}: session {:016x}, {} batch(es) ({} bytes) kept for lmaster, next sequence {}",
                 directory_.string(), session_, stats().batches, log_->bytes(), next_sequence_);
}

std::uint64_t AgentSpool::next_kept(std::uint64_t sequence) const {
  const std::uint64_t from = std::max(acked_ + 1, sequence);
  std::uint64_t found = next_sequence_;
  if (log_)
    if (auto place = log_->find(from)) found = place->id;
  if (auto kept = memory_.lower_bound(from); kept != memory_.end()) found = std::min(found, kept->first);
  return found;
}

void AgentSpool::write_acked() {
  if (!write_all_at(acked_fd_, encode_state(acked_), 0))
    spdlog::warn("spool {}: cannot write {}: {} (acknowledged batches may be sent again)", directory_.string(),
                 (directory_ / "acked").string(), errno_text());
}

bool AgentSpool::sync_acked() {
  if (::fdatasync(acked_fd_) == 0) return true;
  spdlog::warn("spool {}: cannot sync {}: {} (acknowledged segments are kept until it can be)", directory_.string(),
               (directory_ / "acked").string(), errno_text());
  return false;
}

// Before a segment goes, `acked` must cover it on disk: otherwise a power cut could bring back
// an `acked` older than the batches removed, and their numbers would be handed out again.
void AgentSpool::remove_acknowledged_segments() {
  if (!log_) return;
  bool synced = false;
  while (log_->segment_count() > 1 && log_->front().last_id <= acked_) {
    if (!synced && !sync_acked()) return;
    synced = true;
    log_->remove_front();
  }
}

void AgentSpool::drop_oldest_segment() {
  auto segment = log_->front();
  std::uint64_t batches = 0, samples = 0, first = 0, last = 0;
  for (auto place = log_->find(std::max(segment.first_id, acked_ + 1)); place && place->id <= segment.last_id;
       place = log_->find(place->id + 1)) {
    if (!first) first = place->id;
    last = place->id;
    ++batches;
    samples += place->count;
  }
  if (batches) {
    dropped_.dropped_batches += batches;
    dropped_.dropped_samples += samples;
    spdlog::warn("spool {} is over spool_max_bytes ({} bytes): dropped the oldest {} batch(es), {} sample(s), "
                 "sequences {}..{}, that lmaster had not acknowledged",
                 directory_.string(), max_bytes_, batches, samples, first, last);
  }
  log_->remove_front();
}

std::uint64_t AgentSpool::append(const std::vector<Sample>& samples) {
  encode_payload(samples, names_, samples_part_, payload_);
  const std::uint64_t record_bytes = sizeof(SegmentLog::Header) + payload_.size();
  if (record_bytes > max_bytes_ || payload_.size() > kMaxRecordBytes) {
    dropped_.dropped_batches += 1;
    dropped_.dropped_samples += samples.size();
    spdlog::warn("spool {}: a batch of {} sample(s) ({} bytes) is larger than spool_max_bytes ({}): dropped",
                 directory_.string(), samples.size(), record_bytes, max_bytes_);
    return 0;
  }
  if (log_) {
    try {
      append_to_disk(record_bytes, samples.size());
      if (disk_failing_)
        spdlog::warn("spool {}: writing to the disk again; {} batch(es) were kept in memory meanwhile",
                     directory_.string(), episode_batches_);
      disk_failing_ = false;
      highest_made_ = next_sequence_;
      return next_sequence_++;
    } catch (const SpoolError& error) {
      if (!disk_failing_)
        spdlog::error("{}: batches are kept in memory until the disk takes them again (at most {} bytes; what "
                      "lmaster has not acknowledged is lost if lagent stops)",
                      error.what(), std::min(max_bytes_, kMaxMemoryBytes));
      if (!disk_failing_) episode_batches_ = 0;
      disk_failing_ = true;
    }
  }
  keep_in_memory(samples.size());
  ++episode_batches_;
  highest_made_ = next_sequence_;
  return next_sequence_++;
}

void AgentSpool::append_to_disk(std::uint64_t record_bytes, std::size_t samples) {
  while (log_->bytes() + record_bytes > max_bytes_ && log_->segment_count() > 0) drop_oldest_segment();
  remove_acknowledged_segments();
  if (next_sequence_ > reserved_) reserve(next_sequence_ + kReservedBatches - 1);
  try {
    log_->append(next_sequence_, samples, payload_);
  } catch (const SegmentLogError& failure) {
    throw SpoolError(failure.what());
  }
  if (!unsynced_from_) {
    unsynced_from_ = next_sequence_;
    unsynced_since_ = std::chrono::steady_clock::now();
  }
}

void AgentSpool::keep_in_memory(std::size_t samples) {
  const std::uint64_t cap = std::min(max_bytes_, kMaxMemoryBytes);
  while (!memory_.empty() && memory_bytes_ + payload_.size() > cap) {
    auto oldest = memory_.begin();
    dropped_.dropped_batches += 1;
    dropped_.dropped_samples += oldest->second.samples;
    if (oldest->first == next_sequence_ - 1 || dropped_.dropped_batches % 100 == 1)
      spdlog::warn("spool {}: memory for batches the disk refused is full ({} bytes): dropped batch {} ({} "
                   "dropped in all)", directory_.string(), cap, oldest->first, dropped_.dropped_batches);
    memory_bytes_ -= oldest->second.payload.size();
    memory_.erase(oldest);
  }
  memory_bytes_ += payload_.size();
  memory_.emplace(next_sequence_, MemoryBatch{payload_, static_cast<std::uint32_t>(samples)});
}

const std::string* AgentSpool::in_memory(std::uint64_t sequence, std::uint32_t* samples) const {
  auto found = memory_.find(sequence);
  if (found == memory_.end() || sequence <= acked_) return nullptr;
  if (samples) *samples = found->second.samples;
  return &found->second.payload;
}

void AgentSpool::reserve(std::uint64_t through) {
  if (!write_all_at(reserved_fd_, encode_state(through), 0) || ::fdatasync(reserved_fd_) != 0)
    throw SpoolError(fmt::format("cannot write {}: {}", (directory_ / "reserved").string(), errno_text()));
  reserved_ = through;
}

void AgentSpool::sync() {
  if (!log_) return;
  try {
    log_->sync();
  } catch (const SegmentLogError& failure) {
    throw SpoolError(failure.what());
  }
  unsynced_from_ = 0;
}

std::optional<std::chrono::steady_clock::time_point> AgentSpool::unsynced_since() const {
  if (!unsynced_from_) return std::nullopt;
  return unsynced_since_;
}

std::uint32_t AgentSpool::samples_in(std::uint64_t sequence) const {
  std::uint32_t samples = 0;
  if (in_memory(sequence, &samples)) return samples;
  auto place = log_ ? log_->find(sequence) : std::nullopt;
  if (!place || place->id != sequence || sequence <= acked_)
    throw SpoolError(fmt::format("spool {}: batch {} is not kept", directory_.string(), sequence));
  return static_cast<std::uint32_t>(place->count);
}

std::vector<Sample> AgentSpool::read(std::uint64_t sequence) const {
  if (const std::string* payload = in_memory(sequence, nullptr))
    return decode_payload(*payload, fmt::format("batch {} in memory", sequence));
  auto place = log_ ? log_->find(sequence) : std::nullopt;
  if (!place || place->id != sequence || sequence <= acked_)
    throw SpoolError(fmt::format("spool {}: batch {} is not kept", directory_.string(), sequence));
  try {
    return decode_payload(log_->read(*place), fmt::format("batch {} in {}", sequence, place->file->path.string()));
  } catch (const SegmentLogError& failure) {
    throw SpoolError(failure.what());
  }
}

void AgentSpool::acknowledge(std::uint64_t sequence) {
  if (sequence <= acked_) return;
  if (sequence >= next_sequence_) {
    if (sequence > std::max(reserved_, highest_made_)) {
      // Never handed out, not even before an unclean stop: not an acknowledgement of ours.
      if (!warned_unknown_ack_)
        spdlog::warn("spool {}: lmaster acknowledged batch {} of session {:016x}, a number never used (the last "
                     "one made is {}): ignored (logged once)",
                     directory_.string(), sequence, session_, next_sequence_ - 1);
      warned_unknown_ack_ = true;
      return;
    }
    spdlog::warn("spool {}: lmaster acknowledged batch {} of session {:016x}, beyond the last one made ({}); "
                 "continuing after it",
                 directory_.string(), sequence, session_, next_sequence_ - 1);
    next_sequence_ = sequence + 1;
  }
  acked_ = sequence;
  while (!memory_.empty() && memory_.begin()->first <= acked_) {
    memory_bytes_ -= memory_.begin()->second.payload.size();
    memory_.erase(memory_.begin());
  }
  if (!log_) return;
  write_acked();
  // lmaster has these on disk: they need no sync of their own.
  handed_over(sequence);
  remove_acknowledged_segments();
}

void AgentSpool::handed_over(std::uint64_t sequence) {
  if (!log_) return;
  if (unsynced_from_ && sequence >= next_sequence_ - 1) {
    unsynced_from_ = 0;
    log_->forget_unsynced();
  } else if (unsynced_from_ && sequence >= unsynced_from_) {
    unsynced_from_ = sequence + 1;
  }
}

SpoolStats AgentSpool::stats() const {
  SpoolStats stats = dropped_;
  stats.bytes = log_ ? log_->bytes() : 0;
  stats.batches = (log_ ? log_->records_from(acked_ + 1) : 0) + memory_.size();
  return stats;
}

}  // namespace fructosa::agent
