#include "compact_batch.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "short_text.h"

namespace fructosa {

namespace {

constexpr std::uint8_t kJob = 1, kSameSeries = 2, kLabels = 4, kSameLabels = 8;
constexpr unsigned kSame = 0, kInteger = 1, kDecimal = 2, kRaw = 3;
constexpr std::size_t kMaxRemembered = 4096;
constexpr double kExact = 9007199254740992.0;  // 2^53: every integer below is a double
constexpr double kPowers[] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6};
constexpr int kMaxDigits = 6;

void start_batch(ConnectionMemory& memory) {
  if (memory.last.size() > kMaxRemembered) memory.last.clear();
}

void put_varint(std::string& out, std::uint64_t value) {
  char bytes[10];
  int n = 0;
  while (value >= 0x80) {
    bytes[n++] = static_cast<char>(value | 0x80);
    value >>= 7;
  }
  bytes[n++] = static_cast<char>(value);
  out.append(bytes, n);
}

std::uint64_t zigzag(std::int64_t value) {
  return (static_cast<std::uint64_t>(value) << 1) ^ static_cast<std::uint64_t>(value >> 63);
}
std::int64_t unzigzag(std::uint64_t value) {
  return static_cast<std::int64_t>(value >> 1) ^ -static_cast<std::int64_t>(value & 1);
}
// Wrapping arithmetic: hostile input must not overflow a signed integer.
std::int64_t add(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
// a - b modulo 2^64, the inverse of add() for every pair (-b overflows for INT64_MIN: found by
// decode_fuzz, issue 28).
std::int64_t subtract(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}

bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

std::int64_t integer_base(double last) {
  return std::fabs(last) < kExact && last == std::trunc(last) ? static_cast<std::int64_t>(last) : 0;
}
std::int64_t decimal_base(double last, int digits) {
  double scaled = last * kPowers[digits];
  return std::fabs(scaled) < kExact ? round_half_away(scaled) : 0;
}
double integer_value(double last, std::int64_t delta) { return static_cast<double>(add(integer_base(last), delta)); }
double decimal_value(double last, int digits, std::int64_t delta) {
  return static_cast<double>(add(decimal_base(last, digits), delta)) / kPowers[digits];
}

// Appends the payload of `value` (the last value of its series being `last`); returns its tag.
unsigned encode_value(double value, double last, std::string& out) {
  if (same_bits(value, last)) return kSame;
  if (std::fabs(value) < kExact) {
    if (value == std::trunc(value)) {
      auto delta = add(static_cast<std::int64_t>(value), -integer_base(last));
      if (same_bits(integer_value(last, delta), value)) {
        put_varint(out, zigzag(delta));
        return kInteger;
      }
    }
    for (int digits = 1; digits <= kMaxDigits; ++digits) {
      double scaled = value * kPowers[digits];
      if (!(std::fabs(scaled) < kExact / 16)) break;
      auto delta = add(round_half_away(scaled), -decimal_base(last, digits));
      if (same_bits(decimal_value(last, digits, delta), value)) {
        put_varint(out, zigzag(delta) << 3 | static_cast<unsigned>(digits));
        return kDecimal;
      }
    }
  }
  auto bits = std::bit_cast<std::uint64_t>(value);
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(bits >> (8 * i));
  out.append(bytes, 8);
  return kRaw;
}

// Element by element: samples have a handful of series, fewer than memcmp's call is worth.
bool same_indices(const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  const std::size_t n = a.size();
  if (n != b.size()) return false;
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

void put_text(std::string& out, const std::string& text) {
  put_varint(out, text.size());
  out += text;
}

void encode_sample(const Sample& in, std::uint32_t sensor, const std::vector<std::uint32_t>& series,
                   ConnectionMemory& memory, std::string& out) {
  auto& last = memory.last[{sensor, in.job}];
  const bool same_series = !last.series.empty() && same_indices(last.series, series);
  const bool same_labels = last.labels.size() == in.labels.size() &&
                           std::equal(in.labels.begin(), in.labels.end(), last.labels.begin(),
                                      [](const Label& a, const Label& b) { return same_text(a.key, b.key) && same_text(a.value, b.value); });
  std::uint8_t flags = (in.job ? kJob : 0) | (same_series ? kSameSeries : 0) |
                       (in.labels.empty() ? 0 : kLabels | (same_labels ? kSameLabels : 0));
  out.push_back(static_cast<char>(flags));
  put_varint(out, sensor);
  put_varint(out, zigzag(subtract(in.time_ns, memory.last_time_ns)));
  memory.last_time_ns = in.time_ns;
  if (in.job) put_varint(out, in.job);
  const std::size_t n = series.size();
  if (!same_series) {
    put_varint(out, n);
    for (std::size_t i = 0; i < n; ++i)
      put_varint(out, i == 0 ? series[0] : zigzag(static_cast<std::int64_t>(series[i]) - series[i - 1] - 1));
  }
  // The last value of each series: by position when the series are the same, else looked up.
  auto last_value = [&](std::size_t i) {
    if (same_series) return last.values[i];
    if (i < last.series.size() && last.series[i] == series[i]) return last.values[i];
    auto found = std::find(last.series.begin(), last.series.end(), series[i]);
    return found == last.series.end() ? 0.0 : last.values[found - last.series.begin()];
  };
  const std::size_t tags_at = out.size();
  out.append((n + 3) / 4, '\0');
  auto set_tag = [&](std::size_t i, unsigned tag) {
    out[tags_at + i / 4] = static_cast<char>(static_cast<unsigned char>(out[tags_at + i / 4]) | tag << (2 * (i % 4)));
  };
  if (same_series) {
    // The usual case: the values replace the last ones in place (no vector made per sample).
    for (std::size_t i = 0; i < n; ++i) {
      double value = in.metrics[i].value;
      set_tag(i, encode_value(value, last.values[i], out));
      last.values[i] = value;
    }
  } else {
    std::vector<double> values(n);
    for (std::size_t i = 0; i < n; ++i) {
      values[i] = in.metrics[i].value;
      set_tag(i, encode_value(values[i], last_value(i), out));
    }
    last.values = std::move(values);
  }
  if (!in.labels.empty() && !same_labels) {
    put_varint(out, in.labels.size());
    for (const auto& label : in.labels) {
      put_text(out, label.key);
      put_text(out, label.value);
    }
  }
  if (!same_series) last.series = series;
  if (!same_labels) last.labels = in.labels;
}

// Reads a compact batch; every read is checked against the end (ProtocolError).
class Reader {
 public:
  explicit Reader(std::string_view data)
      : at_(reinterpret_cast<const unsigned char*>(data.data())), end_(at_ + data.size()) {}
  bool done() const { return at_ == end_; }
  std::size_t left() const { return static_cast<std::size_t>(end_ - at_); }
  std::uint8_t byte() {
    if (at_ == end_) throw ended();
    return *at_++;
  }
  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      std::uint8_t next = byte();
      value |= static_cast<std::uint64_t>(next & 0x7f) << shift;
      if (!(next & 0x80)) return value;
    }
    throw ProtocolError("compact batch: varint longer than 10 bytes");
  }
  // A count of items that each take at least `min_bytes` of what is left.
  std::size_t count(std::size_t min_bytes, const char* what) {
    auto n = varint();
    if (n > left() / min_bytes) throw ProtocolError(fmt::format("compact batch: {} {} in {} bytes", n, what, left()));
    return static_cast<std::size_t>(n);
  }
  const unsigned char* take(std::size_t bytes) {
    if (bytes > left()) throw ended();
    auto* start = at_;
    at_ += bytes;
    return start;
  }
  std::string_view text(const char* what) {
    auto size = varint();
    if (size > left()) throw ended();
    auto* start = take(static_cast<std::size_t>(size));
    if (std::memchr(start, '\0', size)) throw ProtocolError(fmt::format("compact batch: {} contains a NUL byte", what));
    return {reinterpret_cast<const char*>(start), static_cast<std::size_t>(size)};
  }

 private:
  static ProtocolError ended() { return ProtocolError("compact batch ends inside a sample"); }
  const unsigned char* at_;
  const unsigned char* end_;
};

double decode_value(Reader& in, unsigned tag, double last) {
  switch (tag) {
    case kSame: return last;
    case kInteger: return integer_value(last, unzigzag(in.varint()));
    case kDecimal: {
      auto code = in.varint();
      int digits = static_cast<int>(code & 7);
      if (digits < 1 || digits > kMaxDigits) throw ProtocolError(fmt::format("compact batch: {} decimal digits", digits));
      return decimal_value(last, digits, unzigzag(code >> 3));
    }
    default: {
      auto* bytes = in.take(8);
      std::uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
      return std::bit_cast<double>(bits);
    }
  }
}

// Into `out`, whose vectors keep their capacity from the sample before; its labels are left as
// they were: the sample's are returned, as the connection's memory keeps them (valid until the
// next sample of the connection).
const std::vector<Label>& decode_sample(Reader& in, ConnectionMemory& memory, WireSample& out) {
  out.job = 0;
  std::uint8_t flags = in.byte();
  if (flags & ~(kJob | kSameSeries | kLabels | kSameLabels)) throw ProtocolError("compact batch: unknown sample flags");
  auto sensor = in.varint();
  if (sensor > UINT32_MAX) throw ProtocolError("compact batch: sensor index out of range");
  out.sensor = static_cast<std::uint32_t>(sensor);
  out.time_ns = add(memory.last_time_ns, unzigzag(in.varint()));
  memory.last_time_ns = out.time_ns;
  if (flags & kJob) {
    out.job = in.varint();
    if (out.job == 0) throw ProtocolError("compact batch: job flag with job 0");
  }
  if ((flags & kSameLabels) && !(flags & kLabels)) throw ProtocolError("compact batch: same labels without labels");
  auto found = memory.last.find({out.sensor, out.job});
  ConnectionMemory::Last* last = found == memory.last.end() ? nullptr : &found->second;
  if (flags & kSameSeries) {
    if (!last || last->series.empty()) throw ProtocolError("compact batch: same series as a sample never sent");
    out.series = last->series;
  } else {
    // Each series takes at least a byte, and so does every 4 values' tags.
    auto n = in.count(1, "series");
    out.series.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      auto value = i == 0 ? static_cast<std::int64_t>(in.varint())
                          : add(add(out.series[i - 1], 1), unzigzag(in.varint()));
      if (value < 0 || value > UINT32_MAX) throw ProtocolError("compact batch: series index out of range");
      out.series[i] = static_cast<std::uint32_t>(value);
    }
  }
  const std::size_t n = out.series.size();
  auto* tags = in.take((n + 3) / 4);
  out.values.resize(n);
  const bool same_series = flags & kSameSeries;
  for (std::size_t i = 0; i < n; ++i) {
    double previous = 0;
    if (last) {
      if (same_series || (i < last->series.size() && last->series[i] == out.series[i])) {
        previous = last->values[i];
      } else {
        auto at = std::find(last->series.begin(), last->series.end(), out.series[i]);
        if (at != last->series.end()) previous = last->values[at - last->series.begin()];
      }
    }
    out.values[i] = decode_value(in, (tags[i / 4] >> (2 * (i % 4))) & 3, previous);
  }
  if (!last) last = &memory.last[{out.sensor, out.job}];
  if (flags & kSameLabels) {  // as the memory has them
    if (last->labels.empty()) throw ProtocolError("compact batch: same labels as a sample never sent");
  } else if (flags & kLabels) {
    auto count = in.count(2, "labels");
    if (count == 0) throw ProtocolError("compact batch: labels flag with no label");
    // Read straight into the memory, in place: its strings keep their memory from the sensor's
    // sample before (copying labels into and out of the sample cost lmaster more than the rest
    // of resolving it).
    last->labels.resize(count);
    for (auto& label : last->labels) {
      label.key.assign(in.text("label key"));
      label.value.assign(in.text("label value"));
    }
  } else {
    last->labels.clear();
  }
  if (!same_series) last->series = out.series;  // else: they are the same already
  last->values = out.values;
  return last->labels;
}

}  // namespace

CompactBatchWriter::CompactBatchWriter(ConnectionMemory& memory, std::size_t samples) : memory_(memory) {
  start_batch(memory_);
  bytes_.reserve(64 + samples * 48);
  put_varint(bytes_, samples);
}

void CompactBatchWriter::add(const Sample& sample, std::uint32_t sensor, const std::vector<std::uint32_t>& series) {
  encode_sample(sample, sensor, series, memory_, bytes_);
}

void decode_compact_batch(std::string_view bytes, ConnectionMemory& memory,
                          const std::function<void(const WireSample&, const std::vector<Label>&)>& each) {
  start_batch(memory);
  Reader in(bytes);
  auto count = in.count(3, "samples");
  WireSample sample;
  for (std::size_t i = 0; i < count; ++i) each(sample, decode_sample(in, memory, sample));
  if (!in.done()) throw ProtocolError("compact batch: trailing bytes after the last sample");
}

std::vector<WireSample> decode_compact_batch(std::string_view bytes, ConnectionMemory& memory) {
  std::vector<WireSample> samples;
  decode_compact_batch(bytes, memory, [&](const WireSample& sample, const std::vector<Label>& labels) {
    samples.push_back(sample);
    samples.back().labels = labels;
  });
  return samples;
}

}  // namespace fructosa
