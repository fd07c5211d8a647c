#include "journal.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "durable_file.h"
#include "short_text.h"

namespace fructosa::master {

namespace {

constexpr std::uint32_t kMagic = 0x31524A46;  // "FJR1" in a little-endian file (SegmentLog's header)
constexpr std::uint64_t kMaxSegmentBytes = 16 << 20;
constexpr std::uint64_t kMinSegmentBytes = 64 << 10;
constexpr std::uint32_t kMaxPayloadBytes = 1u << 30;
constexpr const char* kSuffix = ".journal";
constexpr const char* kPositionSuffix = ".position";

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

}  // namespace

// The samples of a record. Version 1 (up to issue 26): u32 count, then per sample text host,
// text sensor, u64 time, u64 job, u32 metrics, each (text key, f64 value), u32 labels, each
// (text key, text value). Version 2 (the count's top bit set; no version-1 record has 2^31
// samples): after the metric count, u32 keys_from: 0 when the keys follow (text each), k + 1 when
// they are those of sample k of the record; then the values (f64 each). Every host's sample of a
// sensor has the same keys: a point costs its 8 bytes instead of about 22 that the journal wrote,
// checksummed and synced for every point lmaster accepts.
constexpr std::uint32_t kKeysByReference = 0x80000000u;

namespace {

bool same_keys(const Sample& a, const Sample& b) {
  if (a.metrics.size() != b.metrics.size()) return false;
  for (std::size_t i = 0; i < a.metrics.size(); ++i)
    if (!same_text(a.metrics[i].key, b.metrics[i].key)) return false;
  return true;
}

// Writes a record's fields through a pointer into room sized beforehand: a record holds every
// point lmaster accepts, and appending to a string field by field cost more than the fields.
// The bytes are those put_u32, put_u64 and put_text write.
class RecordWriter {
 public:
  explicit RecordWriter(char* at) : at_(at) {}
  void u32(std::uint32_t value) { put(&value, sizeof value); }
  void u64(std::uint64_t value) { put(&value, sizeof value); }
  void text(std::string_view text) {
    u32(static_cast<std::uint32_t>(text.size()));
    at_ = copy_text(at_, text.data(), text.size());
  }
  void put(const void* bytes, std::size_t size) {
    std::memcpy(at_, bytes, size);
    at_ += size;
  }
  const char* end() const { return at_; }

 private:
  char* at_;
};

}  // namespace

std::string_view SamplesEncoder::encode(std::string_view head, const std::vector<Sample>& samples) {
  // First each sample's keys_from, which sets the record's size; then the bytes, in one go.
  keys_from_.assign(samples.size(), 0);
  std::unordered_map<std::string_view, std::uint32_t> last_of_sensor;  // -> index of its last sample
  std::size_t size = head.size() + 4;
  for (std::uint32_t i = 0; i < samples.size(); ++i) {
    const Sample& sample = samples[i];
    auto [last, fresh] = last_of_sensor.try_emplace(sample.sensor, i);
    if (!fresh) {
      if (!sample.metrics.empty() && same_keys(samples[last->second], sample)) keys_from_[i] = last->second + 1;
      last->second = i;
    }
    size += 4 + sample.host.size() + 4 + sample.sensor.size() + 8 + 8 + 4 + 4 +
            sample.metrics.size() * sizeof(double) + 4;
    if (keys_from_[i] == 0)
      for (const auto& metric : sample.metrics) size += 4 + metric.key.size();
    for (const auto& label : sample.labels) size += 8 + label.key.size() + label.value.size();
  }
  if (size > capacity_) {
    capacity_ = std::max(size, capacity_ * 2);
    bytes_ = std::make_unique_for_overwrite<char[]>(capacity_);
  }
  RecordWriter record(bytes_.get());
  if (!head.empty()) record.put(head.data(), head.size());  // an empty view's data() may be null
  record.u32(static_cast<std::uint32_t>(samples.size()) | kKeysByReference);
  for (std::uint32_t i = 0; i < samples.size(); ++i) {
    const Sample& sample = samples[i];
    record.text(sample.host);
    record.text(sample.sensor);
    record.u64(static_cast<std::uint64_t>(sample.time_ns));
    record.u64(sample.job);
    record.u32(static_cast<std::uint32_t>(sample.metrics.size()));
    record.u32(keys_from_[i]);
    if (keys_from_[i] == 0)
      for (const auto& metric : sample.metrics) record.text(metric.key);
    for (const auto& metric : sample.metrics) record.put(&metric.value, sizeof metric.value);
    record.u32(static_cast<std::uint32_t>(sample.labels.size()));
    for (const auto& label : sample.labels) {
      record.text(label.key);
      record.text(label.value);
    }
  }
  if (record.end() != bytes_.get() + size)  // the two passes disagree: a bug, never data
    throw std::logic_error(fmt::format("journal record: {} bytes written into {}", record.end() - bytes_.get(), size));
  return {bytes_.get(), size};
}

std::string encode_samples(const std::vector<Sample>& samples) {
  SamplesEncoder encoder;
  return std::string(encoder.encode({}, samples));
}

std::vector<Sample> decode_samples(std::string_view payload) {
  PayloadReader in(payload);
  std::uint32_t head = in.number<std::uint32_t>();
  const bool by_reference = head & kKeysByReference;
  std::uint32_t count = head & ~kKeysByReference;
  if (static_cast<std::uint64_t>(count) * 32 > payload.size()) throw std::runtime_error("count larger than the record");
  std::vector<Sample> samples(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    Sample& sample = samples[i];
    sample.host = in.text();
    sample.sensor = in.text();
    sample.time_ns = static_cast<std::int64_t>(in.number<std::uint64_t>());
    sample.job = in.number<std::uint64_t>();
    if (!by_reference) {
      sample.metrics.resize(in.count(12));
      for (auto& metric : sample.metrics) {
        metric.key = in.text();
        metric.value = in.number<double>();
      }
    } else {
      sample.metrics.resize(in.count(8));
      auto keys_from = in.number<std::uint32_t>();
      if (keys_from == 0) {
        for (auto& metric : sample.metrics) metric.key = in.text();
      } else {
        if (keys_from > i || samples[keys_from - 1].metrics.size() != sample.metrics.size())
          throw std::runtime_error("keys taken from a sample that is not an earlier one of the same size");
        const auto& from = samples[keys_from - 1].metrics;
        for (std::size_t m = 0; m < from.size(); ++m) sample.metrics[m].key = from[m].key;
      }
      for (auto& metric : sample.metrics) metric.value = in.number<double>();
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
    : directory_(std::move(directory)), max_bytes_(max_bytes) {
  try {
    create_directories_durably(directory_);
  } catch (const DurabilityError& failure) {
    throw JournalError(fmt::format("the journal directory: {}", failure.what()));
  }
  load_sessions();
  try {
    log_ = std::make_unique<SegmentLog>(
        directory_, SegmentLogFormat{kMagic, kSuffix, "journal", kMaxPayloadBytes, 0640},
        std::clamp(max_bytes / 8, kMinSegmentBytes, kMaxSegmentBytes));
  } catch (const SegmentLogError& failure) {
    throw JournalError(failure.what());
  }
  recover_marks();
  next_id_ = std::max({next_id_, log_->next_id(), std::uint64_t{1}});
  committed_id_ = next_id_ - 1;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    auto name = entry.path().filename().string();
    if (!name.ends_with(kPositionSuffix)) continue;
    std::ifstream in(entry.path());
    std::uint64_t id = 0;
    if (in >> id) positions_at_open_[name.substr(0, name.size() - std::strlen(kPositionSuffix))] = id;
  }
}

Journal::~Journal() = default;

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
  try {
    write_file_durably(directory_ / "sessions.json",
                       state.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } catch (const DurabilityError& error) {
    throw JournalError(error.what());
  }
}

// The marks of every record kept, over those sessions.json had (the marks of deleted records).
void Journal::recover_marks() {
  std::uint64_t records = 0, points = 0;
  for (auto place = log_->find(0); place; place = log_->find(place->id + 1)) {
    try {
      raise_marks(marks_, decode_marks(log_->read(*place), nullptr));
      ++records;
      points += place->count;
    } catch (const std::exception& error) {
      spdlog::error("journal {}: record {} is unreadable ({}): the agents' batches in it may be accepted again",
                    directory_.string(), place->id, error.what());
    }
  }
  if (records > 0)
    spdlog::info("journal {}: {} records ({} points, {} bytes) from the last run; outputs resume from their "
                 "positions", directory_.string(), records, points, log_->bytes());
}

std::uint64_t Journal::append(const SequenceMarks& marks, const std::vector<Sample>& samples) {
  marks_bytes_.clear();
  put_u32(marks_bytes_, static_cast<std::uint32_t>(marks.size()));
  for (const auto& [key, sequence] : marks) {
    put_text(marks_bytes_, key.first);
    put_u64(marks_bytes_, key.second);
    put_u64(marks_bytes_, sequence);
  }
  std::string_view payload = samples_encoder_.encode(marks_bytes_, samples);
  std::uint64_t points = 0;
  for (const auto& sample : samples) points += sample.metrics.size();
  try {
    log_->append(next_id_, points, payload);
  } catch (const SegmentLogError& error) {
    throw JournalError(error.what());
  }
  raise_marks(pending_marks_, marks);
  return next_id_++;
}

void Journal::commit() {
  if (next_id_ - 1 == committed_id_) return;
  try {
    log_->sync();
  } catch (const SegmentLogError& error) {
    // What cannot be made durable is not acknowledged: cut it, so that resends are accepted.
    log_->discard_after(committed_id_);
    next_id_ = committed_id_ + 1;
    pending_marks_.clear();
    throw JournalError(fmt::format("cannot make the journal durable: {}", error.what()));
  }
  // Durable from here on: nothing after this may undo it.
  raise_marks(marks_, pending_marks_);
  pending_marks_.clear();
  committed_id_ = next_id_ - 1;
  enforce_budget();
}

void Journal::delete_front_segment(bool over_budget) {
  auto front = log_->remove_front();
  if (!over_budget) return;
  {
    std::lock_guard lock(mutex_);
    deleted_.push_back(front);
    if (deleted_.size() > 4096) deleted_.pop_front();
  }
  spdlog::warn("journal {} is over [lmaster] journal_max_bytes ({} bytes): deleted records {}..{} ({} points) "
               "before every output had them; each output that misses them counts them in <output>.dropped",
               directory_.string(), max_bytes_, front.first_id, front.last_id, front.count);
}

void Journal::enforce_budget() {
  if (log_->bytes() <= max_bytes_ || log_->segment_count() < 2) return;
  try {
    save_sessions();  // the marks of the deleted records live on there
  } catch (const JournalError& error) {
    spdlog::error("journal: {}: the journal stays over its budget", error.what());
    return;
  }
  while (log_->bytes() > max_bytes_ && log_->segment_count() > 1) delete_front_segment(true);
}

void Journal::trim(std::uint64_t delivered_by_all) {
  auto segments = log_->segments();
  if (segments.size() < 2 || segments.front().last_id > delivered_by_all) return;
  try {
    save_sessions();  // the marks of the deleted records live on there
  } catch (const JournalError& error) {
    spdlog::error("journal: {}: delivered segments are kept until it can be written", error.what());
    return;
  }
  for (std::size_t i = 0; i + 1 < segments.size() && segments[i].last_id <= delivered_by_all; ++i)
    delete_front_segment(false);
}

std::uint64_t Journal::saved_position(const std::string& output) const {
  auto found = positions_at_open_.find(output);
  return found == positions_at_open_.end() ? committed() : std::min(found->second, committed());
}

void Journal::save_position(const std::string& output, std::uint64_t id) {
  try {
    write_file_durably(position_path(output), std::to_string(id) + "\n");
  } catch (const DurabilityError& error) {
    throw JournalError(error.what());
  }
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
  std::lock_guard lock(mutex_);
  std::uint64_t points = 0;
  for (const auto& segment : deleted_)
    if (segment.last_id >= from && segment.first_id <= to) points += segment.count;
  return points;
}

Journal::Reader::Reader(const Journal& journal, std::string output) : journal_(journal), output_(std::move(output)) {}

std::optional<JournalRecord> Journal::Reader::read(std::uint64_t id, std::uint64_t& dropped_points) {
  for (int attempts = 0; attempts < 4096; ++attempts) {
    const std::uint64_t committed = journal_.committed();
    if (id > committed) return std::nullopt;
    auto place = journal_.log_->find(id);
    if (place && place->id > id && id >= missing_counted_below_) {
      // Records deleted over the budget before this output read them (or lost to damage).
      std::uint64_t last_missing = std::min(place->id - 1, committed);
      std::uint64_t lost = journal_.deleted_points_between(id, last_missing);
      dropped_points += lost;
      missing_counted_below_ = last_missing + 1;
      spdlog::error("output {}: journal records {}..{} ({} points) were deleted before it read them", output_, id,
                    last_missing, lost);
    }
    if (!place || place->id > committed) return std::nullopt;
    JournalRecord result;
    result.id = place->id;
    result.points = place->count;
    try {
      std::string_view samples;
      std::string payload = journal_.log_->read(*place);
      decode_marks(payload, &samples);
      result.samples = decode_samples(samples);
    } catch (const std::exception& error) {
      spdlog::error("output {}: journal record {} is unreadable ({}): its {} points are dropped", output_,
                    result.id, error.what(), result.points);
      dropped_points += result.points;
      id = result.id + 1;
      continue;
    }
    return result;
  }
  return std::nullopt;
}

std::uint64_t Journal::Reader::points_from(std::uint64_t id) const { return journal_.log_->count_from(id); }

}  // namespace fructosa::master
