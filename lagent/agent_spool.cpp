#include "agent_spool.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <string_view>
#include <unordered_map>

#include "crc32.h"
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
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  if (error) throw SpoolError(fmt::format("cannot create spool_dir {}: {}", directory_.string(), error.message()));
  dir_fd_ = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) throw SpoolError(fmt::format("cannot open spool_dir {}: {}", directory_.string(), errno_text()));
  try {
    take_lock();
    scan();
  } catch (...) {
    for (auto& segment : segments_) ::close(segment.fd);
    if (lock_fd_ >= 0) {
      std::lock_guard lock(held_mutex);
      held.erase(held_key(directory_));
      ::close(lock_fd_);
    }
    if (acked_fd_ >= 0) ::close(acked_fd_);
    if (reserved_fd_ >= 0) ::close(reserved_fd_);
    ::close(dir_fd_);
    throw;
  }
}

AgentSpool::~AgentSpool() {
  // A clean stop: everything on disk, and the next start continues right after the last number
  // used (no reserved numbers skipped).
  try {
    sync();
    if (reserved_fd_ >= 0 && reserved_ != next_sequence_ - 1) reserve(next_sequence_ - 1);
  } catch (const SpoolError& error) {
    spdlog::error("{}", error.what());
  }
  if (reserved_fd_ >= 0) ::close(reserved_fd_);
  for (auto& segment : segments_) ::close(segment.fd);
  if (acked_fd_ >= 0) {
    ::fdatasync(acked_fd_);  // a clean stop leaves nothing to resend twice
    ::close(acked_fd_);
  }
  ::close(dir_fd_);
  std::lock_guard lock(held_mutex);
  held.erase(held_key(directory_));
  ::close(lock_fd_);
}

void AgentSpool::take_lock() {
  auto path = directory_ / "lock";
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (lock_fd_ < 0) throw SpoolError(fmt::format("cannot write in spool_dir {}: {}", directory_.string(), errno_text()));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    int code = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (code == EWOULDBLOCK)
      throw SpoolError(fmt::format("spool_dir {} is in use by another lagent (it holds {})", directory_.string(),
                                   path.string()));
    throw SpoolError(fmt::format("cannot lock {}: {}", path.string(), std::strerror(code)));
  }
  std::lock_guard lock(held_mutex);
  held.insert(held_key(directory_));
}

std::filesystem::path AgentSpool::segment_path(std::uint64_t first_sequence) const {
  return directory_ / fmt::format("{:020}.seg", first_sequence);
}

std::uint64_t AgentSpool::segment_target() const {
  return std::clamp<std::uint64_t>(max_bytes_ / 16, 16u << 10, 16u << 20);
}

void AgentSpool::scan() {
  std::vector<std::pair<std::uint64_t, std::filesystem::path>> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    std::string name = entry.path().filename().string();
    if (name.size() != 24 || name.substr(20) != ".seg" ||
        !std::all_of(name.begin(), name.begin() + 20, [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    found.emplace_back(std::stoull(name.substr(0, 20)), entry.path());
  }
  if (error) throw SpoolError(fmt::format("cannot list spool_dir {}: {}", directory_.string(), error.message()));
  std::sort(found.begin(), found.end());

  std::uint64_t acked_on_disk = 0;
  bool have_acked = read_state(directory_ / "acked", acked_on_disk);
  acked_ = have_acked ? acked_on_disk : 0;
  for (const auto& [first, path] : found) scan_segment(path, first);

  std::uint64_t first_kept = 0, last = 0;
  for (const auto& segment : segments_) {
    if (!segment.records.empty() && !first_kept) first_kept = segment.first_sequence;
    last = std::max(last, segment.first_sequence + segment.records.size() - 1);
  }
  // Without `acked`, every batch found is sent again (lmaster drops those it has).
  if (!have_acked) acked_ = first_kept ? first_kept - 1 : 0;
  next_sequence_ = std::max({acked_ + 1, last + 1, std::uint64_t{1}});
  std::uint64_t stored = 0;
  bool have_session = read_state(directory_ / "session", stored);
  const bool new_session = !(have_session && (have_acked || first_kept || !segments_.empty()));
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
    auto temporary = directory_ / "session.tmp";
    int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0 || !write_all_at(fd, encode_state(session_), 0) || ::fsync(fd) != 0) {
      std::string reason = errno_text();
      if (fd >= 0) ::close(fd);
      throw SpoolError(fmt::format("cannot write {}: {}", temporary.string(), reason));
    }
    ::close(fd);
    if (::rename(temporary.c_str(), (directory_ / "session").c_str()) != 0)
      throw SpoolError(fmt::format("cannot rename {}: {}", temporary.string(), errno_text()));
    ::fsync(dir_fd_);
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
  acked_fd_ = ::open(acked_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (acked_fd_ < 0) throw SpoolError(fmt::format("cannot open {}: {}", acked_path.string(), errno_text()));
  write_acked();
  ::fdatasync(acked_fd_);
  auto reserved_path = directory_ / "reserved";
  reserved_fd_ = ::open(reserved_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (reserved_fd_ < 0) throw SpoolError(fmt::format("cannot open {}: {}", reserved_path.string(), errno_text()));
  reserved_ = next_sequence_ - 1;
  if (new_session || skipped) reserve(reserved_);  // the old session's (or skipped) numbers no longer count

  // Segments wholly acknowledged go, except the last, which appends continue.
  while (segments_.size() > 1 &&
         segments_.front().first_sequence + segments_.front().records.size() - 1 <= acked_)
    remove_front_segment();
  if (!empty() || !found.empty())
    spdlog::info("spool {}: session {:016x}, {} batch(es) ({} bytes) kept for lmaster, next sequence {}",
                 directory_.string(), session_, stats().batches, bytes_, next_sequence_);
}

void AgentSpool::scan_segment(const std::filesystem::path& path, std::uint64_t first_sequence) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw SpoolError(fmt::format("cannot open {}: {}", path.string(), errno_text()));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    throw SpoolError(fmt::format("cannot stat {}: {}", path.string(), errno_text()));
  }
  std::string data(static_cast<std::size_t>(info.st_size), '\0');
  if (!data.empty() && !read_all_at(fd, data.data(), data.size(), 0)) {
    ::close(fd);
    throw SpoolError(fmt::format("cannot read {}: {}", path.string(), errno_text()));
  }
  std::uint64_t previous_end = segments_.empty() ? 0 : segments_.back().first_sequence + segments_.back().records.size();
  if (first_sequence < previous_end) {
    // Cannot happen with this writer; keeping both would give two batches one number.
    spdlog::warn("spool {}: removing {}: its sequences overlap the previous segment's", directory_.string(),
                 path.string());
    ::close(fd);
    ::unlink(path.c_str());
    return;
  }
  Segment segment;
  segment.first_sequence = first_sequence;
  segment.fd = fd;
  std::uint64_t offset = 0;
  std::string problem;
  while (offset < data.size()) {
    if (data.size() - offset < kHeaderBytes) {
      problem = "a record header ends early";
      break;
    }
    const char* header = data.data() + offset;
    auto body_bytes = get<std::uint32_t>(header + 4);
    if (get<std::uint32_t>(header) != kRecordMagic) {
      problem = "a record header is damaged";
      break;
    }
    if (body_bytes < 8 || body_bytes > kMaxRecordBytes || body_bytes > data.size() - offset - kHeaderBytes) {
      problem = "a record ends early";
      break;
    }
    const char* body = header + kHeaderBytes;
    if (crc32(body, body_bytes) != get<std::uint32_t>(header + 8)) {
      problem = "a record's CRC does not match";
      break;
    }
    std::uint64_t expected = first_sequence + segment.records.size();
    if (get<std::uint64_t>(body) != expected) {
      problem = fmt::format("record {} follows {}", get<std::uint64_t>(body), expected - 1);
      break;
    }
    segment.records.push_back(
        {offset, static_cast<std::uint32_t>(kHeaderBytes + body_bytes), get<std::uint32_t>(header + 12)});
    offset += kHeaderBytes + body_bytes;
  }
  if (!problem.empty()) {
    // The last write of a killed lagent (or a damaged disk): what follows cannot be trusted.
    spdlog::warn("spool {}: cutting {} at byte {} of {} ({}); {} batch(es) before it are kept", directory_.string(),
                 path.string(), offset, data.size(), problem, segment.records.size());
    if (::ftruncate(fd, static_cast<off_t>(offset)) != 0 || ::fdatasync(fd) != 0) {
      ::close(fd);
      throw SpoolError(fmt::format("cannot cut {}: {}", path.string(), errno_text()));
    }
  }
  segment.bytes = offset;
  bytes_ += offset;
  segments_.push_back(std::move(segment));
}

std::uint64_t AgentSpool::next_kept(std::uint64_t sequence) const {
  for (const auto& segment : segments_) {
    std::uint64_t end = segment.first_sequence + segment.records.size();
    std::uint64_t first = std::max({segment.first_sequence, acked_ + 1, sequence});
    if (first < end) return first;
  }
  return next_sequence_;
}

void AgentSpool::open_new_segment() {
  auto path = segment_path(next_sequence_);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) throw SpoolError(fmt::format("cannot create {}: {}", path.string(), errno_text()));
  // The name records the next sequence durably even while the file is empty.
  ::fsync(dir_fd_);
  Segment segment;
  segment.first_sequence = next_sequence_;
  segment.fd = fd;
  segments_.push_back(std::move(segment));
}

void AgentSpool::write_acked() {
  if (!write_all_at(acked_fd_, encode_state(acked_), 0))
    spdlog::warn("spool {}: cannot write {}: {} (acknowledged batches may be sent again)", directory_.string(),
                 (directory_ / "acked").string(), errno_text());
}

void AgentSpool::remove_front_segment() {
  Segment& segment = segments_.front();
  ::close(segment.fd);
  auto path = segment_path(segment.first_sequence);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    spdlog::warn("spool {}: cannot remove {}: {}", directory_.string(), path.string(), errno_text());
  bytes_ -= segment.bytes;
  segments_.pop_front();
}

void AgentSpool::drop_oldest_segment() {
  const Segment& segment = segments_.front();
  std::uint64_t batches = 0, samples = 0, first = 0, last = 0;
  for (std::size_t i = 0; i < segment.records.size(); ++i) {
    std::uint64_t sequence = segment.first_sequence + i;
    if (sequence <= acked_) continue;
    if (!first) first = sequence;
    last = sequence;
    ++batches;
    samples += segment.records[i].samples;
  }
  if (batches) {
    dropped_.dropped_batches += batches;
    dropped_.dropped_samples += samples;
    spdlog::warn("spool {} is over spool_max_bytes ({} bytes): dropped the oldest {} batch(es), {} sample(s), "
                 "sequences {}..{}, that lmaster had not acknowledged",
                 directory_.string(), max_bytes_, batches, samples, first, last);
  }
  remove_front_segment();
}

std::uint64_t AgentSpool::append(const std::vector<Sample>& samples) {
  encode_record(next_sequence_, samples, names_, samples_part_, record_);
  const std::string& record = record_;
  if (record.size() > max_bytes_ || record.size() - kHeaderBytes > kMaxRecordBytes) {
    dropped_.dropped_batches += 1;
    dropped_.dropped_samples += samples.size();
    spdlog::warn("spool {}: a batch of {} sample(s) ({} bytes) is larger than spool_max_bytes ({}): dropped",
                 directory_.string(), samples.size(), record.size(), max_bytes_);
    return 0;
  }
  const Segment* last = segments_.empty() ? nullptr : &segments_.back();
  if (!last || (last->bytes > 0 && last->bytes + record.size() > segment_target()) ||
      last->first_sequence + last->records.size() != next_sequence_)  // acknowledge() moved past it
    open_new_segment();
  while (bytes_ + record.size() > max_bytes_ && segments_.size() > 1) drop_oldest_segment();
  if (bytes_ + record.size() > max_bytes_) {  // only the segment being written is left
    drop_oldest_segment();
    open_new_segment();
  }
  // Segments wholly acknowledged before this one are no longer needed.
  while (segments_.size() > 1 && segments_.front().first_sequence + segments_.front().records.size() - 1 <= acked_) {
    ::fdatasync(acked_fd_);
    remove_front_segment();
  }

  if (next_sequence_ > reserved_) reserve(next_sequence_ + kReservedBatches - 1);
  Segment& segment = segments_.back();
  if (!write_all_at(segment.fd, record, segment.bytes)) {
    std::string reason = errno_text();
    [[maybe_unused]] int ignored = ::ftruncate(segment.fd, static_cast<off_t>(segment.bytes));
    throw SpoolError(fmt::format("cannot write {}: {}", segment_path(segment.first_sequence).string(), reason));
  }
  segment.records.push_back({segment.bytes, static_cast<std::uint32_t>(record.size()),
                             static_cast<std::uint32_t>(samples.size())});
  segment.bytes += record.size();
  segment.unsynced = true;
  bytes_ += record.size();
  if (!unsynced_from_) {
    unsynced_from_ = next_sequence_;
    unsynced_since_ = std::chrono::steady_clock::now();
  }
  return next_sequence_++;
}

void AgentSpool::reserve(std::uint64_t through) {
  if (!write_all_at(reserved_fd_, encode_state(through), 0) || ::fdatasync(reserved_fd_) != 0)
    throw SpoolError(fmt::format("cannot write {}: {}", (directory_ / "reserved").string(), errno_text()));
  reserved_ = through;
}

void AgentSpool::sync() {
  for (auto& segment : segments_) {
    if (!segment.unsynced) continue;
    if (::fdatasync(segment.fd) != 0)
      throw SpoolError(fmt::format("cannot sync {}: {}", segment_path(segment.first_sequence).string(), errno_text()));
    segment.unsynced = false;
  }
  unsynced_from_ = 0;
}

std::optional<std::chrono::steady_clock::time_point> AgentSpool::unsynced_since() const {
  if (!unsynced_from_) return std::nullopt;
  return unsynced_since_;
}

const AgentSpool::Record& AgentSpool::record(std::uint64_t sequence, const Segment** found) const {
  for (const auto& segment : segments_) {
    if (sequence >= segment.first_sequence && sequence < segment.first_sequence + segment.records.size() &&
        sequence > acked_) {
      *found = &segment;
      return segment.records[sequence - segment.first_sequence];
    }
  }
  throw SpoolError(fmt::format("spool {}: batch {} is not kept", directory_.string(), sequence));
}

std::uint32_t AgentSpool::samples_in(std::uint64_t sequence) const {
  const Segment* segment = nullptr;
  return record(sequence, &segment).samples;
}

std::vector<Sample> AgentSpool::read(std::uint64_t sequence) const {
  const Segment* segment = nullptr;
  const Record& where = record(sequence, &segment);
  std::string path = segment_path(segment->first_sequence).string();
  std::string data(where.size, '\0');
  if (!read_all_at(segment->fd, data.data(), data.size(), where.offset))
    throw SpoolError(fmt::format("cannot read batch {} from {}: {}", sequence, path, errno_text()));
  std::string_view body(data.data() + kHeaderBytes, data.size() - kHeaderBytes);
  if (crc32(body.data(), body.size()) != get<std::uint32_t>(data.data() + 8) ||
      get<std::uint64_t>(body.data()) != sequence)
    throw SpoolError(fmt::format("batch {} in {} is damaged (CRC or sequence)", sequence, path));
  return decode_body(body, fmt::format("batch {} in {}", sequence, path));
}

void AgentSpool::acknowledge(std::uint64_t sequence) {
  if (sequence <= acked_) return;
  if (sequence >= next_sequence_) {
    spdlog::warn("spool {}: lmaster acknowledged batch {} of session {:016x}, beyond the last one made ({}); "
                 "continuing after it",
                 directory_.string(), sequence, session_, next_sequence_ - 1);
    next_sequence_ = sequence + 1;
  }
  acked_ = sequence;
  write_acked();
  // lmaster has these on disk: they need no sync of their own.
  handed_over(sequence);
  bool synced = false;
  while (segments_.size() > 1 && segments_.front().first_sequence + segments_.front().records.size() - 1 <= acked_) {
    if (!synced) ::fdatasync(acked_fd_);  // before a segment goes, `acked` must cover it
    synced = true;
    remove_front_segment();
  }
}

void AgentSpool::handed_over(std::uint64_t sequence) {
  if (unsynced_from_ && sequence >= next_sequence_ - 1) {
    unsynced_from_ = 0;
    for (auto& segment : segments_) segment.unsynced = false;
  } else if (unsynced_from_ && sequence >= unsynced_from_) {
    unsynced_from_ = sequence + 1;
  }
}

SpoolStats AgentSpool::stats() const {
  SpoolStats stats = dropped_;
  stats.bytes = bytes_;
  for (const auto& segment : segments_) {
    std::uint64_t end = segment.first_sequence + segment.records.size();
    std::uint64_t first = std::max(segment.first_sequence, acked_ + 1);
    if (first < end) stats.batches += end - first;
  }
  return stats;
}

}  // namespace fructosa::agent
