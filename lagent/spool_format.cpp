// The spool's on-disk format (spool_format.h): records of self-contained samples and the small
// state files.
#include "spool_format.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>

#include "crc32.h"

namespace fructosa::agent {

std::uint32_t BatchNames::id(std::string_view name) {
  auto found = known_.find(name);
  if (found == known_.end()) found = known_.emplace(std::string(name), Entry{}).first;
  Entry& entry = found->second;
  if (entry.batch != batch_) {
    entry = {static_cast<std::uint32_t>(in_batch_.size()), batch_};
    in_batch_.push_back(found->first);
  }
  return entry.id;
}

void BatchNames::start_batch() {
  in_batch_.clear();
  ++batch_;
  // Names come and go with jobs (involved_jobs labels): forget them all now and then.
  if (known_.size() > kMaxKnown) known_.clear();
}

namespace spool_format {
namespace {

// Reads a record body; every access is bounds-checked (a CRC match does not make a bug-free
// writer, and a spool may come from another build).
class BodyReader {
 public:
  BodyReader(std::string_view body, const std::string& where) : body_(body), where_(where) {}
  template <class T>
  T next() {
    need(sizeof(T));
    T value = get<T>(body_.data() + pos_);
    pos_ += sizeof(T);
    return value;
  }
  std::string_view bytes(std::size_t n) {
    need(n);
    std::string_view out = body_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  bool done() const { return pos_ == body_.size(); }
  // A u32 count of items of at least `min_bytes` each, refused when the rest cannot hold them.
  std::uint32_t count(std::size_t min_bytes) {
    auto n = next<std::uint32_t>();
    if (static_cast<std::uint64_t>(n) * min_bytes > body_.size() - pos_)
      throw SpoolError(fmt::format("{}: a count of {} cannot fit in the record", where_, n));
    return n;
  }

 private:
  void need(std::size_t n) const {
    if (body_.size() - pos_ < n) throw SpoolError(fmt::format("{}: record ends early", where_));
  }
  std::string_view body_;
  std::size_t pos_ = 0;
  const std::string& where_;
};

}  // namespace

// payload: [u32 strings]([u32 length][bytes])*[u32 samples]
//          ([u32 sensor][i64 time_ns][u64 job][u32 metrics]([u32 key][f64 value])*
//           [u32 labels]([u32 key][u32 value])*)*      -- u32 names index the string table
void encode_payload(const std::vector<Sample>& samples, BatchNames& names, std::string& samples_part,
                    std::string& payload) {
  names.start_batch();
  samples_part.clear();
  put<std::uint32_t>(samples_part, static_cast<std::uint32_t>(samples.size()));
  for (const auto& sample : samples) {
    put<std::uint32_t>(samples_part, names.id(sample.sensor));
    put<std::int64_t>(samples_part, sample.time_ns);
    put<std::uint64_t>(samples_part, sample.job);
    put<std::uint32_t>(samples_part, static_cast<std::uint32_t>(sample.metrics.size()));
    for (const auto& metric : sample.metrics) {
      put<std::uint32_t>(samples_part, names.id(metric.key));
      put<double>(samples_part, metric.value);
    }
    put<std::uint32_t>(samples_part, static_cast<std::uint32_t>(sample.labels.size()));
    for (const auto& label : sample.labels) {
      put<std::uint32_t>(samples_part, names.id(label.key));
      put<std::uint32_t>(samples_part, names.id(label.value));
    }
  }
  payload.clear();
  put<std::uint32_t>(payload, static_cast<std::uint32_t>(names.in_batch().size()));
  for (auto name : names.in_batch()) {
    put<std::uint32_t>(payload, static_cast<std::uint32_t>(name.size()));
    payload.append(name);
  }
  payload += samples_part;
}

std::vector<Sample> decode_payload(std::string_view body, const std::string& where) {
  BodyReader in(body, where);
  // Counts are checked against what the payload can hold before anything is allocated for them
  // (each string takes at least its 4-byte length, each sample at least 28 bytes).
  std::vector<std::string> strings(in.count(4));
  for (auto& s : strings) s = std::string(in.bytes(in.next<std::uint32_t>()));
  auto string_at = [&](std::uint32_t index) -> const std::string& {
    if (index >= strings.size()) throw SpoolError(fmt::format("{}: name index {} out of range", where, index));
    return strings[index];
  };
  std::vector<Sample> samples(in.count(28));
  for (auto& sample : samples) {
    sample.sensor = string_at(in.next<std::uint32_t>());
    sample.time_ns = in.next<std::int64_t>();
    sample.job = in.next<std::uint64_t>();
    sample.metrics.resize(in.count(12));
    for (auto& metric : sample.metrics) {
      metric.key = string_at(in.next<std::uint32_t>());
      metric.value = in.next<double>();
    }
    sample.labels.resize(in.count(8));
    for (auto& label : sample.labels) {
      label.key = string_at(in.next<std::uint32_t>());
      label.value = string_at(in.next<std::uint32_t>());
    }
  }
  if (!in.done()) throw SpoolError(fmt::format("{}: trailing bytes", where));
  return samples;
}

// A small state file: [u64 value][u32 magic][u32 CRC of the value].
std::string encode_state(std::uint64_t value) {
  std::string out;
  put<std::uint64_t>(out, value);
  put<std::uint32_t>(out, kStateMagic);
  put<std::uint32_t>(out, crc32(&value, sizeof value));
  return out;
}

bool read_state(const std::filesystem::path& path, std::uint64_t& value) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[16];
  ssize_t n = ::pread(fd, buffer, sizeof buffer, 0);
  ::close(fd);
  if (n != 16 || get<std::uint32_t>(buffer + 8) != kStateMagic) return false;
  value = get<std::uint64_t>(buffer);
  return get<std::uint32_t>(buffer + 12) == crc32(&value, sizeof value);
}

}  // namespace spool_format
}  // namespace fructosa::agent
