#include "journal.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "crc32.h"

namespace fructosa::master {

struct Journal::Header {
  std::uint32_t magic = 0;
  std::uint32_t payload_bytes = 0;
  std::uint32_t crc = 0;
  std::uint32_t reserved = 0;
  std::uint64_t id = 0;
  std::uint64_t points = 0;
};
static_assert(sizeof(Journal::Header) == 32);
using Header = Journal::Header;

namespace {

constexpr std::uint32_t kMagic = 0x31524A46;  // "FJR1" in a little-endian file
constexpr std::uint64_t kMaxSegmentBytes = 16 << 20;
constexpr std::uint64_t kMinSegmentBytes = 64 << 10;
constexpr std::uint32_t kMaxPayloadBytes = 1u << 30;
constexpr const char* kSuffix = ".journal";
constexpr const char* kPositionSuffix = ".position";

std::string errno_text() { return std::strerror(errno); }

void put_u32(std::string& out, std::uint32_t value) { out.append(reinterpret_cast<const char*>(&value), 4); }
void put_u64(std::string& out, std::uint64_t value) { out.append(reinterpret_cast<const char*>(&value), 8); }
void put_text(std::string& out, std::string_view text) {
  put_u32(out, static_cast<std::uint32_t>(text.size()));
  out.append(text);
}

// Bounds-checked reading of a payload (a CRC match does not make a bug-free writer).
class PayloadReader {
 public:
  explicit PayloadReader(std::string_view data) : data_(data) {}
  template <typename T>
  T number() {
    T value;
    need(sizeof value);
    std::memcpy(&value, data_.data() + at_, sizeof value);
    at_ += sizeof value;
    return value;
  }
  std::string text() {
    auto size = number<std::uint32_t>();
    need(size);
    std::string value(data_.substr(at_, size));
    at_ += size;
    return value;
  }
  std::uint32_t count(std::size_t min_bytes_each) {
    auto n = number<std::uint32_t>();
    if (static_cast<std::uint64_t>(n) * min_bytes_each > data_.size() - at_)
      throw std::runtime_error("count larger than the record");
    return n;
  }
  std::string_view rest() const { return data_.substr(at_); }
  bool done() const { return at_ == data_.size(); }

 private:
  void need(std::size_t bytes) const {
    if (data_.size() - at_ < bytes) throw std::runtime_error("record ends early");
  }
  std::string_view data_;
  std::size_t at_ = 0;
};

// One record at `offset` of `fd`, checked: nullopt at the end of the file or at a torn or
// corrupt record (the caller tells them apart by the file size when it matters).
struct RawRecord {
  Header header;
  std::string payload;
};
std::optional<RawRecord> read_record(int fd, std::uint64_t offset) {
  RawRecord record;
  if (::pread(fd, &record.header, sizeof record.header, static_cast<off_t>(offset)) != sizeof record.header)
    return std::nullopt;
  if (record.header.magic != kMagic || record.header.payload_bytes > kMaxPayloadBytes) return std::nullopt;
  record.payload.resize(record.header.payload_bytes);
  if (::pread(fd, record.payload.data(), record.payload.size(), static_cast<off_t>(offset + sizeof(Header))) !=
      static_cast<ssize_t>(record.payload.size()))
    return std::nullopt;
  if (crc32(record.payload.data(), record.payload.size()) != record.header.crc) return std::nullopt;
  return record;
}

// The marks at the start of a payload; `samples` gets the rest.
SequenceMarks decode_marks(std::string_view payload, std::string_view* samples) {
  PayloadReader in(payload);
  SequenceMarks marks;
  for (auto n = in.count(20); n > 0; --n) {
    std::string host = in.text();
    auto session = in.number<std::uint64_t>();
    marks[{std::move(host), session}] = in.number<std::uint64_t>();
  }
  if (samples) *samples = in.rest();
  return marks;
}

void raise_marks(SequenceMarks& into, const SequenceMarks& from) {
  for (const auto& [key, sequence] : from) {
    auto& mark = into[key];
    mark = std::max(mark, sequence);
  }
}

// Writes `text` to `path` durably: a temporary file, fdatasync, rename.
void write_file_durably(const std::filesystem::path& path, const std::string& text) {
  auto temporary = path;
  temporary += ".tmp";
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) throw JournalError(fmt::format("cannot write {}: {}", temporary.string(), errno_text()));
  bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fdatasync(fd) == 0;
  int saved = errno;
  ::close(fd);
  if (!written || ::rename(temporary.c_str(), path.c_str()) != 0) {
    if (written) saved = errno;
    ::unlink(temporary.c_str());
    throw JournalError(fmt::format("cannot write {}: {}", path.string(), std::strerror(saved)));
  }
}

}  // namespace

std::string encode_samples(const std::vector<Sample>& samples) {
  std::string out;
  put_u32(out, static_cast<std::uint32_t>(samples.size()));
  for (const auto& sample : samples) {
    put_text(out, sample.host);
    put_text(out, sample.sensor);
    put_u64(out, static_cast<std::uint64_t>(sample.time_ns));
    put_u64(out, sample.job);
    put_u32(out, static_cast<std::uint32_t>(sample.metrics.size()));
    for (const auto& metric : sample.metrics) {
      put_text(out, metric.key);
      out.append(reinterpret_cast<const char*>(&metric.value), sizeof metric.value);
    }
    put_u32(out, static_cast<std::uint32_t>(sample.labels.size()));
    for (const auto& label : sample.labels) {
      put_text(out, label.key);
      put_text(out, label.value);
    }
  }
  return out;
}

std::vector<Sample> decode_samples(std::string_view payload) {
  PayloadReader in(payload);
  std::vector<Sample> samples(in.count(32));
  for (auto& sample : samples) {
    sample.host = in.text();
    sample.sensor = in.text();
    sample.time_ns = static_cast<std::int64_t>(in.number<std::uint64_t>());
    sample.job = in.number<std::uint64_t>();
    sample.metrics.resize(in.count(12));
    for (auto& metric : sample.metrics) {
      metric.key = in.text();
      metric.value = in.number<double>();
    }
    sample.labels.resize(in.count(8));
    for (auto& label : sample.labels) {
      label.key = in.text();
      label.value = in.text();
    }
  }
  if (!in.done()) throw std::runtime_error("trailing bytes after the last sample");
  return samples;
}

Journal::Journal(std::filesystem::path directory, std::uint64_t max_bytes)
    : directory_(std::move(directory)),
      max_bytes_(max_bytes),
      segment_bytes_(std::clamp(max_bytes / 8, kMinSegmentBytes, kMaxSegmentBytes)) {
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  if (error) throw JournalError(fmt::format("cannot create the journal directory {}: {}", directory_.string(), error.message()));
  load_sessions();
  scan();
  committed_id_ = next_id_ - 1;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    auto name = entry.path().filename().string();
    if (!name.ends_with(kPositionSuffix)) continue;
    std::ifstream in(entry.path());
    std::uint64_t id = 0;
    if (in >> id) positions_at_open_[name.substr(0, name.size() - std::strlen(kPositionSuffix))] = id;
  }
  start_segment();
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

std::filesystem::path Journal::segment_path(std::uint64_t first_id) const {
  return directory_ / fmt::format("{:020}{}", first_id, kSuffix);
}

std::filesystem::path Journal::position_path(const std::string& output) const {
  return directory_ / (output + kPositionSuffix);
}

void Journal::load_sessions() {
  std::ifstream in(directory_ / "sessions.json");
  if (!in) return;
  auto state = nlohmann::json::parse(in, nullptr, false);
  if (state.is_discarded() || !state.is_object()) {
    spdlog::error("journal {}: sessions.json is unreadable: the dedup state of agents whose batches left the "
                  "journal is lost (a resend may be stored twice)", directory_.string());
    return;
  }
  next_id_ = std::max<std::uint64_t>(next_id_, state.value("next_id", std::uint64_t{1}));
  for (const auto& entry : state.value("sessions", nlohmann::json::array()))
    if (entry.is_array() && entry.size() == 3)
      marks_[{entry[0].get<std::string>(), entry[1].get<std::uint64_t>()}] = entry[2].get<std::uint64_t>();
}

void Journal::save_sessions() {
  nlohmann::json sessions = nlohmann::json::array();
  for (const auto& [key, sequence] : marks_) sessions.push_back({key.first, key.second, sequence});
  nlohmann::json state{{"next_id", next_id_}, {"sessions", std::move(sessions)}};
  write_file_durably(directory_ / "sessions.json",
                     state.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void Journal::scan() {
  std::error_code error;
  std::vector<std::uint64_t> firsts;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    auto name = entry.path().filename().string();
    if (name.size() == 20 + std::strlen(kSuffix) && name.ends_with(kSuffix) &&
        name.find_first_not_of("0123456789") == 20)
      firsts.push_back(std::stoull(name.substr(0, 20)));
  }
  std::sort(firsts.begin(), firsts.end());
  std::uint64_t records = 0, points = 0;
  for (auto first : firsts) {
    auto path = segment_path(first);
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      spdlog::error("journal: cannot read {}: {} (its records are skipped)", path.string(), errno_text());
      continue;
    }
    Segment segment{first, first - 1, 0, 0};
    std::uint64_t offset = 0;
    while (auto record = read_record(fd, offset)) {
      if (record->header.id != segment.last_id + 1) break;
      try {
        std::string_view samples;
        raise_marks(marks_, decode_marks(record->payload, &samples));
      } catch (const std::exception&) {
        break;
      }
      segment.last_id = record->header.id;
      segment.points += record->header.points;
      offset += sizeof(Header) + record->payload.size();
    }
    auto size = std::filesystem::file_size(path, error);
    if (!error && size > offset) {
      // A crash in the middle of an append (never acknowledged), or damage: keep what is whole.
      spdlog::warn("journal: {} ends with {} bytes that are not a whole record (cut at byte {}){}", path.string(),
                   size - offset, offset, first == firsts.back() ? "" : "; records after them in this file are lost");
      if (::ftruncate(fd, static_cast<off_t>(offset)) != 0)
        spdlog::error("journal: cannot cut {}: {}", path.string(), errno_text());
    }
    ::close(fd);
    segment.bytes = offset;
    if (segment.last_id < segment.first_id && first != firsts.back()) {
      std::filesystem::remove(path, error);  // an empty segment that is not the newest says nothing
      continue;
    }
    records += segment.last_id + 1 - segment.first_id;
    points += segment.points;
    bytes_ += segment.bytes;
    next_id_ = std::max(next_id_, segment.last_id + 1);
    segments_.push_back(segment);
  }
  if (records > 0)
    spdlog::info("journal {}: {} records ({} points, {} bytes) from the last run; outputs resume from their "
                 "positions", directory_.string(), records, points, bytes_.load());
}

void Journal::start_segment() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  // An empty segment is reused; it names the next id, which survives a restart with it.
  if (segments_.empty() || segments_.back().last_id >= segments_.back().first_id ||
      segments_.back().first_id != next_id_) {
    std::lock_guard lock(mutex_);
    if (!segments_.empty() && segments_.back().last_id < segments_.back().first_id) {
      std::error_code ignored;
      std::filesystem::remove(segment_path(segments_.back().first_id), ignored);
      segments_.pop_back();
    }
    segments_.push_back(Segment{next_id_, next_id_ - 1, 0, 0});
  }
  auto path = segment_path(segments_.back().first_id);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
  if (fd_ < 0) throw JournalError(fmt::format("cannot create journal segment {}: {}", path.string(), errno_text()));
  committed_size_ = segments_.back().bytes;
  committed_points_ = segments_.back().points;
}

std::uint64_t Journal::append(const SequenceMarks& marks, const std::vector<Sample>& samples) {
  if (fd_ < 0) start_segment();
  std::string record(sizeof(Header), '\0');
  put_u32(record, static_cast<std::uint32_t>(marks.size()));
  for (const auto& [key, sequence] : marks) {
    put_text(record, key.first);
    put_u64(record, key.second);
    put_u64(record, sequence);
  }
  record += encode_samples(samples);
  Header header;
  header.magic = kMagic;
  if (record.size() - sizeof header > kMaxPayloadBytes) throw JournalError("a record larger than 1 GiB");
  header.payload_bytes = static_cast<std::uint32_t>(record.size() - sizeof header);
  header.crc = crc32(record.data() + sizeof header, header.payload_bytes);
  header.id = next_id_;
  for (const auto& sample : samples) header.points += sample.metrics.size();
  std::memcpy(record.data(), &header, sizeof header);

  Segment& tail = segments_.back();
  if (::pwrite(fd_, record.data(), record.size(), static_cast<off_t>(tail.bytes)) !=
      static_cast<ssize_t>(record.size())) {
    std::string why = errno_text();
    if (::ftruncate(fd_, static_cast<off_t>(tail.bytes)) != 0) {
    }
    throw JournalError(fmt::format("cannot append to {}: {}", segment_path(tail.first_id).string(), why));
  }
  {
    std::lock_guard lock(mutex_);
    tail.bytes += record.size();
    tail.points += header.points;
    tail.last_id = header.id;
  }
  bytes_ += record.size();
  raise_marks(pending_marks_, marks);
  return next_id_++;
}

void Journal::commit() {
  Segment& tail = segments_.back();
  if (tail.bytes == committed_size_) return;
  if (::fdatasync(fd_) != 0) {
    std::string why = errno_text();
    // What cannot be made durable is not acknowledged: cut it, so that resends are accepted.
    {
      std::lock_guard lock(mutex_);
      bytes_ -= tail.bytes - committed_size_;
      tail.bytes = committed_size_;
      tail.points = committed_points_;
      tail.last_id = committed_id_;
      next_id_ = committed_id_ + 1;
    }
    pending_marks_.clear();
    if (::ftruncate(fd_, static_cast<off_t>(committed_size_)) != 0) {
    }
    throw JournalError(fmt::format("cannot make {} durable: {}", segment_path(tail.first_id).string(), why));
  }
  committed_size_ = tail.bytes;
  committed_points_ = tail.points;
  raise_marks(marks_, pending_marks_);
  pending_marks_.clear();
  committed_id_ = tail.last_id;
  if (tail.bytes >= segment_bytes_) start_segment();
  enforce_budget();
}

void Journal::delete_front_segment(bool over_budget) {
  Segment front;
  {
    std::lock_guard lock(mutex_);
    front = segments_.front();
    segments_.pop_front();
    if (over_budget) {
      deleted_.push_back(front);
      if (deleted_.size() > 4096) deleted_.pop_front();
    }
  }
  bytes_ -= front.bytes;
  std::error_code error;
  std::filesystem::remove(segment_path(front.first_id), error);
  if (error) spdlog::error("journal: cannot delete {}: {}", segment_path(front.first_id).string(), error.message());
  if (over_budget)
    spdlog::warn("journal {} is over [lmaster] journal_max_bytes ({} bytes): deleted records {}..{} ({} points) "
                 "before every output had them; each output that misses them counts them in <output>.dropped",
                 directory_.string(), max_bytes_, front.first_id, front.last_id, front.points);
}

void Journal::enforce_budget() {
  if (bytes_ <= max_bytes_ || segments_.size() < 2) return;
  try {
    save_sessions();
  } catch (const JournalError& error) {
    spdlog::error("journal: {}: the journal stays over its budget", error.what());
    return;
  }
  while (bytes_ > max_bytes_ && segments_.size() > 1) delete_front_segment(true);
}

void Journal::trim(std::uint64_t delivered_by_all) {
  if (segments_.size() < 2 || segments_.front().last_id > delivered_by_all) return;
  try {
    save_sessions();  // the marks of the deleted records live on there
  } catch (const JournalError& error) {
    spdlog::error("journal: {}: delivered segments are kept until it can be written", error.what());
    return;
  }
  while (segments_.size() > 1 && segments_.front().last_id <= delivered_by_all) delete_front_segment(false);
}

std::uint64_t Journal::saved_position(const std::string& output) const {
  auto found = positions_at_open_.find(output);
  return found == positions_at_open_.end() ? committed() : std::min(found->second, committed());
}

void Journal::save_position(const std::string& output, std::uint64_t id) {
  write_file_durably(position_path(output), std::to_string(id) + "\n");
}

void Journal::forget_other_positions(const std::vector<std::string>& outputs) {
  for (const auto& [output, id] : positions_at_open_) {
    if (std::find(outputs.begin(), outputs.end(), output) != outputs.end()) continue;
    std::error_code ignored;
    std::filesystem::remove(position_path(output), ignored);
    if (id < committed())
      spdlog::warn("journal: output {} is no longer configured: records {}..{} it had not delivered are left to the "
                   "others", output, id + 1, committed());
  }
}

std::uint64_t Journal::deleted_points_between(std::uint64_t from, std::uint64_t to) const {
  std::uint64_t points = 0;
  for (const auto& segment : deleted_)
    if (segment.last_id >= from && segment.first_id <= to) points += segment.points;
  return points;
}

Journal::Reader::Reader(const Journal& journal, std::string output) : journal_(journal), output_(std::move(output)) {}

Journal::Reader::~Reader() { close_segment(); }

void Journal::Reader::close_segment() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool Journal::Reader::open_segment_with(std::uint64_t id, std::uint64_t& dropped_points) {
  close_segment();
  Segment found;
  {
    std::lock_guard lock(journal_.mutex_);
    auto& segments = journal_.segments_;
    auto it = std::find_if(segments.begin(), segments.end(), [&](const Segment& s) { return s.last_id >= id; });
    if (it == segments.end()) return false;
    if (it->first_id > id) {
      std::uint64_t lost = journal_.deleted_points_between(id, it->first_id - 1);
      dropped_points += lost;
      spdlog::error("output {}: journal records {}..{} ({} points) were deleted before it read them", output_, id,
                    it->first_id - 1, lost);
    }
    found = *it;
  }
  auto path = journal_.segment_path(found.first_id);
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    spdlog::error("output {}: cannot read journal segment {}: {} ({} points lost to it)", output_, path.string(),
                  errno_text(), found.points);
    dropped_points += found.points;
    return false;
  }
  segment_first_ = found.first_id;
  offset_ = 0;
  next_id_ = found.first_id;
  return true;
}

std::optional<JournalRecord> Journal::Reader::read(std::uint64_t id, std::uint64_t& dropped_points) {
  for (int attempts = 0; attempts < 4096; ++attempts) {
    if (id > journal_.committed()) return std::nullopt;
    if (fd_ < 0 || id < next_id_) {
      if (!open_segment_with(id, dropped_points)) {
        if (fd_ < 0 && id <= journal_.committed()) {
          // The segment could not be opened: go on after it.
          std::lock_guard lock(journal_.mutex_);
          auto& segments = journal_.segments_;
          auto it = std::find_if(segments.begin(), segments.end(), [&](const Segment& s) { return s.last_id >= id; });
          if (it == segments.end()) return std::nullopt;
          id = std::max(id, it->last_id + 1);
        }
        continue;
      }
    }
    if (next_id_ > journal_.committed()) return std::nullopt;  // at the end: keep the place
    auto record = read_record(fd_, offset_);
    if (!record) {
      // The end of this segment (it is full, or the journal moved on): the next one.
      std::uint64_t first = segment_first_;
      close_segment();
      std::lock_guard lock(journal_.mutex_);
      auto& segments = journal_.segments_;
      auto it = std::find_if(segments.begin(), segments.end(), [&](const Segment& s) { return s.first_id == first; });
      if (it != segments.end() && it->last_id >= next_id_ && next_id_ <= journal_.committed()) {
        // Records it says it has but cannot be read: damage (never a torn append, those are
        // past `committed`).
        std::uint64_t lost_from = next_id_, lost_to = std::min(it->last_id, journal_.committed());
        spdlog::error("output {}: journal segment {} is unreadable at byte {}: records {}..{} are lost to it",
                      output_, journal_.segment_path(first).string(), offset_, lost_from, lost_to);
        dropped_points += it->points;  // an upper bound: the segment's damage is rare enough
        id = std::max(id, lost_to + 1);
      } else {
        id = std::max(id, next_id_);
      }
      continue;
    }
    offset_ += sizeof(Header) + record->payload.size();
    next_id_ = record->header.id + 1;
    if (record->header.id < id) continue;  // finding `id` in a segment opened at its start
    JournalRecord result;
    result.id = record->header.id;
    result.points = record->header.points;
    try {
      std::string_view samples;
      decode_marks(record->payload, &samples);
      result.samples = decode_samples(samples);
    } catch (const std::exception& error) {
      spdlog::error("output {}: journal record {} is malformed ({}): its {} points are dropped", output_,
                    result.id, error.what(), result.points);
      dropped_points += result.points;
      id = result.id + 1;
      continue;
    }
    return result;
  }
  return std::nullopt;
}

std::uint64_t Journal::Reader::points_from(std::uint64_t id) const {
  std::lock_guard lock(journal_.mutex_);
  std::uint64_t points = 0;
  for (const auto& segment : journal_.segments_)
    if (segment.last_id >= id) points += segment.points;  // whole segments: a bound good enough for a gauge
  return points;
}

}  // namespace fructosa::master
