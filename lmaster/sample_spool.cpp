#include "sample_spool.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>

namespace fructosa::master {
namespace {
constexpr std::uint32_t kMagic = 0x31505346;  // "FSP1" little-endian
}  // namespace

struct SampleSpool::RecordHeader {
  std::uint32_t magic = kMagic;
  std::uint32_t payload_bytes = 0;
  std::uint64_t samples = 0;
  std::uint64_t points = 0;
};
static_assert(sizeof(SampleSpool::RecordHeader) == 24);
using RecordHeader = SampleSpool::RecordHeader;

namespace {

constexpr std::uint64_t kSegmentBytes = 8 << 20;
// Sequences start high so that batches can be put before the oldest segment (at stop).
constexpr std::uint64_t kFirstSequence = std::uint64_t{1} << 32;


void put_u32(std::string& out, std::uint32_t value) { out.append(reinterpret_cast<const char*>(&value), 4); }
void put_u64(std::string& out, std::uint64_t value) { out.append(reinterpret_cast<const char*>(&value), 8); }
void put_text(std::string& out, std::string_view text) {
  put_u32(out, static_cast<std::uint32_t>(text.size()));
  out.append(text);
}

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
  bool done() const { return at_ == data_.size(); }

 private:
  void need(std::size_t bytes) const {
    if (data_.size() - at_ < bytes) throw std::runtime_error("record ends early");
  }
  std::string_view data_;
  std::size_t at_ = 0;
};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

bool DiskBudget::try_take(std::uint64_t bytes) {
  std::uint64_t used = used_.load();
  do {
    if (used + bytes > max_bytes_) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes));
  return true;
}

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

SampleSpool::SampleSpool(std::filesystem::path directory, DiskBudget& budget, std::string output_name)
    : directory_(std::move(directory)), budget_(budget), output_name_(std::move(output_name)) {
  scan();
}

SampleSpool::~SampleSpool() {
  if (segments_.empty()) return;
  // Where the next start resumes reading in each partly read segment (none: from the start).
  segments_.front().start_offset = read_offset_;
  std::ofstream position(directory_ / "position", std::ios::trunc);
  for (const auto& segment : segments_)
    if (segment.start_offset > 0) position << segment.sequence << ' ' << segment.start_offset << '\n';
}

std::filesystem::path SampleSpool::segment_path(std::uint64_t sequence) const {
  return directory_ / fmt::format("{:020}.spool", sequence);
}

void SampleSpool::scan() {
  std::error_code error;
  if (!std::filesystem::is_directory(directory_, error)) return;
  std::vector<std::uint64_t> sequences;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    auto name = entry.path().filename().string();
    if (name.size() == 26 && name.ends_with(".spool") && name.find_first_not_of("0123456789") == 20)
      sequences.push_back(std::stoull(name.substr(0, 20)));
  }
  std::sort(sequences.begin(), sequences.end());
  std::map<std::uint64_t, std::uint64_t> resume_offsets;  // sequence -> where reading resumes
  {
    std::ifstream position(directory_ / "position");
    std::uint64_t sequence = 0, offset = 0;
    while (position >> sequence >> offset) resume_offsets[sequence] = offset;
  }
  for (auto sequence : sequences) {
    Segment segment{sequence};
    int fd = ::open(segment_path(sequence).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      spdlog::error("output {}: cannot read spool file {}: {}", output_name_, segment_path(sequence).string(),
                    errno_text());
      continue;
    }
    std::uint64_t offset = 0;
    auto resume = resume_offsets.find(sequence);
    std::uint64_t skip_before = resume == resume_offsets.end() ? 0 : resume->second;
    RecordHeader header;
    while (::pread(fd, &header, sizeof header, static_cast<off_t>(offset)) == sizeof header &&
           header.magic == kMagic) {
      if (offset >= skip_before) segment.points += header.points;
      offset += sizeof header + header.payload_bytes;
    }
    ::close(fd);
    segment.bytes = std::filesystem::file_size(segment_path(sequence), error);
    if (segment.points == 0) {
      remove_segment_file(segment);
      continue;
    }
    segment.start_offset = std::min(skip_before, offset);
    if (!budget_.try_take(segment.bytes))
      spdlog::warn("output {}: the spool left by the last run ({}) is over [lmaster] spool_max_bytes", output_name_,
                   directory_.string());
    points_ += segment.points;
    bytes_ += segment.bytes;
    segments_.push_back(segment);
  }
  std::filesystem::remove(directory_ / "position", error);  // stale once read
  if (!segments_.empty()) read_offset_ = segments_.front().start_offset;
  if (!segments_.empty())
    spdlog::info("output {}: {} points spooled by an earlier run in {}, sent first", output_name_, points_,
                 directory_.string());
}

void SampleSpool::remove_segment_file(const Segment& segment) {
  std::error_code error;
  std::filesystem::remove(segment_path(segment.sequence), error);
  if (error)
    spdlog::error("output {}: cannot remove {}: {}", output_name_, segment_path(segment.sequence).string(),
                  error.message());
}

void SampleSpool::pop_front_segment() {
  const Segment& head = segments_.front();
  remove_segment_file(head);
  budget_.give_back(head.bytes);
  bytes_ -= head.bytes;
  points_ -= std::min(points_, head.points);
  segments_.pop_front();
  if (segments_.empty()) tail_open_ = false;
  read_offset_ = segments_.empty() ? 0 : segments_.front().start_offset;
}

void SampleSpool::drop_oldest(std::uint64_t& dropped_points) {
  Segment oldest = segments_.front();
  dropped_points += oldest.points;
  pop_front_segment();
  spdlog::warn("output {}: spool over [lmaster] spool_max_bytes: dropped its oldest {} points", output_name_,
               oldest.points);
}

void SampleSpool::seal() { tail_open_ = false; }

bool SampleSpool::append(const std::vector<Sample>& samples, std::uint64_t& dropped_points) {
  std::string payload = encode_samples(samples);
  RecordHeader header;
  header.payload_bytes = static_cast<std::uint32_t>(payload.size());
  header.samples = samples.size();
  for (const auto& sample : samples) header.points += sample.metrics.size();
  std::uint64_t record_bytes = sizeof header + payload.size();
  if (payload.size() > UINT32_MAX) return false;

  while (!budget_.try_take(record_bytes)) {
    // Make room from this output's own oldest data; another output's is not ours to drop. The
    // segment being appended to only goes when it is the last one left.
    if (segments_.empty()) return false;
    drop_oldest(dropped_points);
  }
  if (!tail_open_ || segments_.back().bytes + record_bytes > kSegmentBytes) {
    std::error_code error;
    std::filesystem::create_directories(directory_, error);
    segments_.push_back(Segment{segments_.empty() ? kFirstSequence : segments_.back().sequence + 1});
    tail_open_ = true;
  }
  return write_record(segments_.back(), header, payload);
}

bool SampleSpool::prepend(const std::vector<std::vector<Sample>>& batches) {
  if (batches.empty()) return true;
  if (segments_.empty()) {
    std::uint64_t ignored = 0;
    for (const auto& batch : batches)
      if (!append(batch, ignored)) return false;
    return true;
  }
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  segments_.front().start_offset = read_offset_;  // resume there once the new batches are read
  segments_.push_front(Segment{segments_.front().sequence - 1});
  read_offset_ = 0;
  for (const auto& batch : batches) {
    std::string payload = encode_samples(batch);
    RecordHeader header;
    header.payload_bytes = static_cast<std::uint32_t>(payload.size());
    header.samples = batch.size();
    for (const auto& sample : batch) header.points += sample.metrics.size();
    if (!budget_.try_take(sizeof header + payload.size()) || !write_record(segments_.front(), header, payload))
      return false;
  }
  return true;
}

bool SampleSpool::write_record(Segment& tail, const RecordHeader& header, const std::string& payload) {
  std::uint64_t record_bytes = sizeof header + payload.size();
  auto path = segment_path(tail.sequence);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  bool written = false;
  if (fd >= 0) {
    std::string record(reinterpret_cast<const char*>(&header), sizeof header);
    record += payload;
    written = ::write(fd, record.data(), record.size()) == static_cast<ssize_t>(record.size());
    if (!written) {
      int saved = errno;
      // Cut a partial record so that the file stays readable up to its last whole record.
      if (::ftruncate(fd, static_cast<off_t>(tail.bytes)) != 0) {
      }
      errno = saved;
    }
    ::close(fd);
  }
  if (!written) {
    spdlog::error("output {}: cannot append to spool file {}: {}", output_name_, path.string(), errno_text());
    budget_.give_back(record_bytes);
    if (tail.bytes == 0) {
      std::error_code ignored;
      std::filesystem::remove(path, ignored);
      if (&tail == &segments_.back()) {
        segments_.pop_back();
        tail_open_ = false;
      } else {
        segments_.pop_front();
        read_offset_ = segments_.front().start_offset;
      }
    }
    return false;
  }
  tail.bytes += record_bytes;
  tail.points += header.points;
  bytes_ += record_bytes;
  points_ += header.points;
  return true;
}

std::optional<std::vector<Sample>> SampleSpool::pop(std::uint64_t& dropped_points) {
  while (!segments_.empty()) {
    Segment& head = segments_.front();
    auto path = segment_path(head.sequence);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    RecordHeader header;
    std::string payload;
    bool have_record = false;
    if (fd >= 0) {
      if (::pread(fd, &header, sizeof header, static_cast<off_t>(read_offset_)) == sizeof header &&
          header.magic == kMagic) {
        payload.resize(header.payload_bytes);
        have_record = ::pread(fd, payload.data(), payload.size(), static_cast<off_t>(read_offset_ + sizeof header)) ==
                      static_cast<ssize_t>(payload.size());
      }
      ::close(fd);
    }
    if (have_record) {
      read_offset_ += sizeof header + header.payload_bytes;
      head.points -= std::min(head.points, header.points);
      points_ -= std::min(points_, header.points);
      try {
        auto samples = decode_samples(payload);
        // Consumed: delete it (unless it is still being appended to).
        if (head.points == 0 && !(tail_open_ && segments_.size() == 1)) pop_front_segment();
        return samples;
      } catch (const std::exception& error) {
        spdlog::error("output {}: spool file {}: corrupt record at byte {}: {}; its {} points are dropped",
                      output_name_, path.string(), read_offset_ - sizeof header - header.payload_bytes,
                      error.what(), header.points);
        dropped_points += header.points;
        continue;
      }
    }
    // No further whole record in the head segment: what it still counts is lost.
    if (head.points != 0) {
      spdlog::error("output {}: spool file {} is unreadable past byte {}; {} points are dropped", output_name_,
                    path.string(), read_offset_, head.points);
      dropped_points += head.points;
    }
    pop_front_segment();
  }
  return std::nullopt;
}

}  // namespace fructosa::master
