#include "segment_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "crc32.h"
#include "durable_file.h"

namespace fructosa {
namespace {

using Header = SegmentLog::Header;

std::string errno_text() { return std::strerror(errno); }

// Header and payload at `offset`, through short writes and EINTR, without copying the payload.
bool write_record_at(int fd, const Header& header, std::string_view payload, std::uint64_t offset) {
  std::size_t total = sizeof header + payload.size(), done = 0;
  while (done < total) {
    iovec parts[2];
    int count = 0;
    if (done < sizeof header) {
      parts[count++] = {const_cast<char*>(reinterpret_cast<const char*>(&header)) + done, sizeof header - done};
      parts[count++] = {const_cast<char*>(payload.data()), payload.size()};
    } else {
      parts[count++] = {const_cast<char*>(payload.data()) + (done - sizeof header), total - done};
    }
    ssize_t n = ::pwritev(fd, parts, count, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// The record at `offset` of `data` if it is whole and valid, with an id above `after` and at
// least `first_id`.
std::optional<Header> valid_record_at(std::string_view data, std::size_t offset, const SegmentLogFormat& format,
                                      std::uint64_t after, std::uint64_t first_id) {
  if (data.size() - offset < sizeof(Header)) return std::nullopt;
  Header header;
  std::memcpy(&header, data.data() + offset, sizeof header);
  if (header.magic != format.magic || header.payload_bytes > format.max_payload_bytes ||
      header.payload_bytes > data.size() - offset - sizeof header || header.id <= after || header.id < first_id)
    return std::nullopt;
  if (crc32(data.data() + offset + sizeof header, header.payload_bytes) != header.crc) return std::nullopt;
  return header;
}

}  // namespace

SegmentLog::File::~File() {
  if (fd >= 0) ::close(fd);
}

SegmentLog::SegmentInfo SegmentLog::Segment::info() const {
  return {first_id, records.empty() ? first_id - 1 : records.back().id, bytes, count, records.size()};
}

SegmentLog::SegmentLog(std::filesystem::path directory, SegmentLogFormat format, std::uint64_t segment_bytes)
    : directory_(std::move(directory)), format_(std::move(format)), segment_bytes_(segment_bytes) {
  recover();
}

SegmentLog::~SegmentLog() = default;

std::filesystem::path SegmentLog::segment_path(std::uint64_t first_id) const {
  return directory_ / fmt::format("{:020}{}", first_id, format_.suffix);
}

SegmentLog::Header SegmentLog::header_for(std::uint32_t magic, std::uint64_t id, std::uint64_t count,
                                          std::string_view payload) {
  Header header;
  header.magic = magic;
  header.payload_bytes = static_cast<std::uint32_t>(payload.size());
  header.crc = crc32(payload.data(), payload.size());
  header.id = id;
  header.count = count;
  return header;
}

std::string SegmentLog::encode(std::uint32_t magic, std::uint64_t id, std::uint64_t count, std::string_view payload) {
  Header header = header_for(magic, id, count, payload);
  std::string record(reinterpret_cast<const char*>(&header), sizeof header);
  record.append(payload);
  return record;
}

void SegmentLog::write_segment_file(const std::filesystem::path& path, const std::string& records, unsigned mode) {
  try {
    write_file_durably(path, records, mode);
  } catch (const DurabilityError& error) {
    throw SegmentLogError(error.what());
  }
}

void SegmentLog::recover() {
  std::vector<std::uint64_t> firsts;
  std::error_code error;
  const std::size_t name_size = 20 + format_.suffix.size();
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    auto name = entry.path().filename().string();
    if (name.size() == name_size && name.ends_with(format_.suffix) &&
        std::all_of(name.begin(), name.begin() + 20, [](char c) { return c >= '0' && c <= '9'; }))
      firsts.push_back(std::stoull(name.substr(0, 20)));
  }
  if (error) throw SegmentLogError(fmt::format("cannot list {} {}: {}", format_.what, directory_.string(), error.message()));
  std::sort(firsts.begin(), firsts.end());
  for (std::size_t i = 0; i < firsts.size(); ++i) recover_segment(firsts[i], i + 1 == firsts.size());
  if (directory_unsynced_) sync();
}

void SegmentLog::recover_segment(std::uint64_t first_id, bool newest) {
  auto path = segment_path(first_id);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) throw SegmentLogError(fmt::format("cannot open {}: {}", path.string(), errno_text()));
  auto file = std::make_shared<File>(fd, path);
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw SegmentLogError(fmt::format("cannot stat {}: {}", path.string(), errno_text()));
  std::string data(static_cast<std::size_t>(info.st_size), '\0');
  if (!data.empty() && !read_all_at(fd, data.data(), data.size(), 0))
    throw SegmentLogError(fmt::format("cannot read {}: {}", path.string(), errno_text()));

  Segment segment;
  segment.first_id = first_id;
  std::uint64_t after = last_id();
  std::string kept;                // the valid records, should the file have to be rewritten
  std::size_t offset = 0;
  std::uint64_t skipped = 0;       // invalid bytes followed by valid records
  std::string skipped_ranges;
  const std::string magic(reinterpret_cast<const char*>(&format_.magic), 4);
  while (offset < data.size()) {
    if (auto header = valid_record_at(data, offset, format_, after, first_id)) {
      std::size_t size = sizeof(Header) + header->payload_bytes;
      segment.records.push_back({header->id, kept.size(), header->payload_bytes, header->count});
      segment.count += header->count;
      kept.append(data, offset, size);
      after = header->id;
      offset += size;
      continue;
    }
    // Not a record here: is there a valid one further on (damage), or is this the end (a torn
    // append, or damage at the end)?
    std::size_t next = offset;
    for (next = data.find(magic, offset + 1); next != std::string::npos; next = data.find(magic, next + 1))
      if (valid_record_at(data, next, format_, after, first_id)) break;
    if (next == std::string::npos) break;
    skipped += next - offset;
    skipped_ranges += fmt::format("{}{}..{}", skipped_ranges.empty() ? "" : ", ", offset, next - 1);
    offset = next;
  }
  const std::uint64_t tail = data.size() - offset;
  const std::uint64_t records_bytes = kept.size();
  if (skipped > 0 || (tail > 0 && !newest)) {
    // Damage: the file stays as it was, beside a copy of what it holds whole.
    auto damaged = path;
    damaged += ".damaged";
    for (int n = 1; std::filesystem::exists(damaged); ++n) {
      damaged = path;
      damaged += fmt::format(".damaged.{}", n);
    }
    if (tail > 0) skipped_ranges += fmt::format("{}{}..{} (its end)", skipped_ranges.empty() ? "" : ", ", offset, data.size() - 1);
    spdlog::error("{} {}: {} is damaged: bytes {} are not whole records and are skipped; its {} whole record(s) "
                  "are kept, and the file as it was is kept as {}",
                  format_.what, directory_.string(), path.string(), skipped_ranges, segment.records.size(),
                  damaged.string());
    if (::rename(path.c_str(), damaged.c_str()) != 0)
      throw SegmentLogError(fmt::format("cannot rename {} to {}: {}", path.string(), damaged.string(), errno_text()));
    write_segment_file(path, kept, format_.file_mode);  // syncs the directory: both names durable
    fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) throw SegmentLogError(fmt::format("cannot open {}: {}", path.string(), errno_text()));
    file = std::make_shared<File>(fd, path);
  } else if (tail > 0) {
    spdlog::warn("{} {}: {} ends with {} bytes that are not a whole record (an append cut short): cut at byte {}",
                 format_.what, directory_.string(), path.string(), tail, offset);
    if (::ftruncate(fd, static_cast<off_t>(offset)) != 0 || ::fdatasync(fd) != 0)
      throw SegmentLogError(fmt::format("cannot cut {}: {}", path.string(), errno_text()));
  }
  segment.bytes = records_bytes;
  segment.file = std::move(file);
  if (segment.records.empty() && !newest) {
    // An empty segment that is not the newest says nothing.
    if (::unlink(path.c_str()) != 0)
      throw SegmentLogError(fmt::format("cannot remove {}: {}", path.string(), errno_text()));
    directory_unsynced_ = true;
    return;
  }
  bytes_ += segment.bytes;
  segments_.push_back(std::move(segment));
}

void SegmentLog::new_segment(std::uint64_t first_id) {
  auto path = segment_path(first_id);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, format_.file_mode);
  if (fd < 0) throw SegmentLogError(fmt::format("cannot create {}: {}", path.string(), errno_text()));
  Segment segment;
  segment.first_id = first_id;
  segment.file = std::make_shared<File>(fd, path);
  std::lock_guard lock(mutex_);
  segments_.push_back(std::move(segment));
  directory_unsynced_ = true;
  tail_broken_ = false;
}

void SegmentLog::start_segment(std::uint64_t first_id) {
  if (first_id <= last_id() && last_id() != 0)
    throw SegmentLogError(fmt::format("{} {}: a segment may not start at {}, the log has records up to {}",
                                      format_.what, directory_.string(), first_id, last_id()));
  if (!segments_.empty() && segments_.back().records.empty()) {
    if (segments_.back().first_id == first_id && !tail_broken_) return;
    // An empty newest segment with another name: it is replaced.
    auto path = segment_path(segments_.back().first_id);
    {
      std::lock_guard lock(mutex_);
      segments_.pop_back();
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      spdlog::warn("{} {}: cannot remove the empty segment {}: {}", format_.what, directory_.string(), path.string(),
                   errno_text());
    directory_unsynced_ = true;
  }
  new_segment(first_id);
}

void SegmentLog::append(std::uint64_t id, std::uint64_t count, std::string_view payload) {
  if (payload.size() > format_.max_payload_bytes)
    throw SegmentLogError(fmt::format("{} {}: a record of {} bytes is over the limit of {}", format_.what,
                                      directory_.string(), payload.size(), format_.max_payload_bytes));
  if (id <= last_id())
    throw SegmentLogError(fmt::format("{} {}: record {} after {}", format_.what, directory_.string(), id, last_id()));
  const std::uint64_t size = sizeof(Header) + payload.size();
  if (segments_.empty() || tail_broken_ ||
      (segments_.back().records.empty() && segments_.back().first_id > id) ||
      (!segments_.back().records.empty() && segments_.back().bytes + size > segment_bytes_))
    start_segment(id);
  Segment& tail = segments_.back();
  const Header header = header_for(format_.magic, id, count, payload);
  if (!write_record_at(tail.file->fd, header, payload, tail.bytes)) {
    std::string why = errno_text();
    if (::ftruncate(tail.file->fd, static_cast<off_t>(tail.bytes)) != 0) {
      // The partial record stays past the end we know: the next append starts a new segment,
      // and recovery keeps this one's whole records.
      spdlog::error("{} {}: cannot cut {} back after a failed write: {}", format_.what, directory_.string(),
                    tail.file->path.string(), errno_text());
      tail_broken_ = true;
    }
    throw SegmentLogError(fmt::format("cannot write to {}: {}", tail.file->path.string(), why));
  }
  {
    std::lock_guard lock(mutex_);
    tail.records.push_back({id, tail.bytes, header.payload_bytes, count});
    tail.bytes += size;
    tail.count += count;
  }
  tail.unsynced = true;
  bytes_ += size;
}

void SegmentLog::sync() {
  for (auto& segment : segments_) {
    if (!segment.unsynced) continue;
    if (::fdatasync(segment.file->fd) != 0)
      throw SegmentLogError(fmt::format("cannot sync {}: {}", segment.file->path.string(), errno_text()));
    segment.unsynced = false;
  }
  if (directory_unsynced_) {
    try {
      sync_directory(directory_);
    } catch (const DurabilityError& error) {
      throw SegmentLogError(error.what());
    }
    directory_unsynced_ = false;
  }
}

bool SegmentLog::unsynced() const {
  return directory_unsynced_ ||
         std::any_of(segments_.begin(), segments_.end(), [](const Segment& segment) { return segment.unsynced; });
}

void SegmentLog::forget_unsynced() {
  for (auto& segment : segments_) segment.unsynced = false;
}

void SegmentLog::discard_after(std::uint64_t id) {
  while (!segments_.empty()) {
    Segment& tail = segments_.back();
    if (!tail.records.empty() && tail.records.back().id > id) {
      std::lock_guard lock(mutex_);
      while (!tail.records.empty() && tail.records.back().id > id) {
        const Record& record = tail.records.back();
        bytes_ -= tail.bytes - record.offset;
        tail.bytes = record.offset;
        tail.count -= record.count;
        tail.records.pop_back();
      }
      if (::ftruncate(tail.file->fd, static_cast<off_t>(tail.bytes)) != 0) {
        spdlog::error("{} {}: cannot cut {}: {}", format_.what, directory_.string(), tail.file->path.string(),
                      errno_text());
        tail_broken_ = true;
      }
    }
    if (!tail.records.empty() || tail.first_id <= id + 1 || segments_.size() == 1) return;
    // A segment made for the discarded records: its name would claim their ids.
    auto path = tail.file->path;
    {
      std::lock_guard lock(mutex_);
      segments_.pop_back();
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      spdlog::error("{} {}: cannot remove {}: {}", format_.what, directory_.string(), path.string(), errno_text());
    directory_unsynced_ = true;
  }
}

SegmentLog::SegmentInfo SegmentLog::remove_front() {
  Segment front;
  {
    std::lock_guard lock(mutex_);
    front = std::move(segments_.front());
    segments_.pop_front();
  }
  bytes_ -= front.bytes;
  if (::unlink(front.file->path.c_str()) != 0 && errno != ENOENT)
    spdlog::error("{} {}: cannot delete {}: {}", format_.what, directory_.string(), front.file->path.string(),
                  errno_text());
  directory_unsynced_ = true;
  return front.info();
}

std::optional<SegmentLog::Place> SegmentLog::find(std::uint64_t id) const {
  std::lock_guard lock(mutex_);
  for (const auto& segment : segments_) {
    if (segment.records.empty() || segment.records.back().id < id) continue;
    auto it = std::lower_bound(segment.records.begin(), segment.records.end(), id,
                               [](const Record& record, std::uint64_t wanted) { return record.id < wanted; });
    return Place{it->id, it->count, it->offset, it->payload_bytes, segment.file};
  }
  return std::nullopt;
}

std::string SegmentLog::read(const Place& place) const {
  std::string data(sizeof(Header) + place.payload_bytes, '\0');
  if (!read_all_at(place.file->fd, data.data(), data.size(), place.offset))
    throw SegmentLogError(fmt::format("cannot read record {} of {}: {}", place.id, place.file->path.string(),
                                      errno ? errno_text() : "the file is shorter"));
  Header header;
  std::memcpy(&header, data.data(), sizeof header);
  if (header.magic != format_.magic || header.id != place.id || header.payload_bytes != place.payload_bytes ||
      crc32(data.data() + sizeof header, header.payload_bytes) != header.crc)
    throw SegmentLogError(fmt::format("record {} of {} (byte {}) is damaged", place.id, place.file->path.string(),
                                      place.offset));
  data.erase(0, sizeof header);
  return data;
}

std::vector<SegmentLog::SegmentInfo> SegmentLog::segments() const {
  std::lock_guard lock(mutex_);
  std::vector<SegmentInfo> infos;
  for (const auto& segment : segments_) infos.push_back(segment.info());
  return infos;
}

SegmentLog::SegmentInfo SegmentLog::front() const {
  std::lock_guard lock(mutex_);
  return segments_.front().info();
}

std::size_t SegmentLog::segment_count() const {
  std::lock_guard lock(mutex_);
  return segments_.size();
}

std::uint64_t SegmentLog::bytes() const { return bytes_.load(); }

std::uint64_t SegmentLog::last_id() const {
  for (auto it = segments_.rbegin(); it != segments_.rend(); ++it)
    if (!it->records.empty()) return it->records.back().id;
  return 0;
}

std::uint64_t SegmentLog::next_id() const {
  if (segments_.empty()) return 0;
  return std::max(last_id() + 1, segments_.back().first_id);
}

std::uint64_t SegmentLog::count_from(std::uint64_t id) const {
  std::lock_guard lock(mutex_);
  std::uint64_t total = 0;
  for (const auto& segment : segments_) {
    if (segment.records.empty() || segment.records.back().id < id) continue;
    if (segment.first_id >= id) {
      total += segment.count;
      continue;
    }
    for (const auto& record : segment.records)
      if (record.id >= id) total += record.count;
  }
  return total;
}

std::uint64_t SegmentLog::records_from(std::uint64_t id) const {
  std::lock_guard lock(mutex_);
  std::uint64_t total = 0;
  for (const auto& segment : segments_) {
    auto it = std::lower_bound(segment.records.begin(), segment.records.end(), id,
                               [](const Record& record, std::uint64_t wanted) { return record.id < wanted; });
    total += static_cast<std::uint64_t>(segment.records.end() - it);
  }
  return total;
}

}  // namespace fructosa
