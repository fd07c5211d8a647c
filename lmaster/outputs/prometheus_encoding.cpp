// What the Prometheus output puts on the wire: the labels of a point's series, the WriteRequest
// (the protobuf bytes of prometheus_remote_write.proto's messages), its snappy block, and how
// a refusal reads.
#include <snappy.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "prometheus_output_impl.h"
#include "prometheus_name.h"

namespace fructosa::master {

namespace prometheus {

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    auto byte = static_cast<unsigned char>(text[i]);
    std::size_t length = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xe ? 3 : (byte >> 3) == 0x1e ? 4 : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; valid && k < length; ++k)
      valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (valid && length > 1) {
      // Overlong forms, surrogates and code points past U+10FFFF are invalid too.
      std::uint32_t code = byte & (0x7f >> length);
      for (std::size_t k = 1; k < length; ++k) code = code << 6 | (text[i + k] & 0x3f);
      valid = !(length == 2 && code < 0x80) && !(length == 3 && code < 0x800) &&
              !(length == 4 && code < 0x10000) && !(code >= 0xd800 && code <= 0xdfff) && code <= 0x10ffff;
    }
    if (valid) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\xef\xbf\xbd";
      ++i;
    }
  }
  return out;
}

}  // namespace prometheus

void prometheus_series_labels(const Sample& sample, std::string_view key,
                              const std::string& metric_name, std::vector<PrometheusLabel>& out) {
  out.clear();
  auto add = [&](std::string_view name, std::string_view value) {
    if (value.empty()) return;  // Prometheus reads an empty value as no label
    bool ascii = std::all_of(value.begin(), value.end(), [](char c) { return (c & 0x80) == 0; });
    out.push_back(PrometheusLabel{std::string(name), ascii ? std::string(value) : prometheus::valid_utf8(value)});
  };
  add("__name__", metric_name);
  add(kPrometheusHostLabel, sample.host);
  if (sample.job != 0) add(kPrometheusJobLabel, std::to_string(sample.job));
  std::size_t fixed = out.size();
  // Item labels: "<item>.<name>" where <item> is a dotted prefix of the key. The longest item
  // first, so that it wins a name a shorter one also gives (a MIG instance's uuid over its GPU's).
  const Label* matching[16];
  std::size_t found = 0;
  for (const auto& label : sample.labels) {
    auto dot = label.key.rfind('.');
    if (dot == std::string::npos || dot == 0 || key.size() <= dot || key[dot] != '.' ||
        key.compare(0, dot, label.key, 0, dot) != 0)
      continue;
    if (found < std::size(matching)) matching[found++] = &label;
  }
  std::stable_sort(matching, matching + found,
                   [](const Label* a, const Label* b) { return a->key.rfind('.') > b->key.rfind('.'); });
  for (std::size_t i = 0; i < found; ++i) {
    const std::string& label_key = matching[i]->key;
    std::string name = prometheus_label_name(std::string_view(label_key).substr(label_key.rfind('.') + 1));
    if (name.empty()) continue;
    if (std::any_of(out.begin() + fixed, out.end(), [&](const auto& l) { return l.name == name; })) continue;
    add(name, matching[i]->value);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
}

namespace {

// Protobuf wire format: a field's tag is (number << 3 | wire type); 0 varint, 1 64-bit,
// 2 length-delimited. Proto3 leaves out a field at its default (0, empty).
constexpr char kLengthDelimited1 = 0x0a, kLengthDelimited2 = 0x12, kFixed64_1 = 0x09, kVarint2 = 0x10;

std::size_t varint_size(std::uint64_t value) {
  std::size_t size = 1;
  for (; value >= 0x80; value >>= 7) ++size;
  return size;
}

char* put_varint(char* at, std::uint64_t value) {
  for (; value >= 0x80; value >>= 7) *at++ = static_cast<char>(value | 0x80);
  *at++ = static_cast<char>(value);
  return at;
}

void append_varint(std::string& out, std::uint64_t value) {
  char bytes[10];
  out.append(bytes, put_varint(bytes, value));
}

void append_field(std::string& out, char tag, std::string_view bytes) {
  if (bytes.empty()) return;
  out += tag;
  append_varint(out, bytes.size());
  out += bytes;
}

}  // namespace

void prometheus_encode_labels(const std::vector<PrometheusLabel>& labels, std::string& out) {
  for (const auto& label : labels) {
    auto field_size = [](std::size_t n) { return n ? 1 + varint_size(n) + n : 0; };
    out += kLengthDelimited1;  // TimeSeries.labels
    append_varint(out, field_size(label.name.size()) + field_size(label.value.size()));
    append_field(out, kLengthDelimited1, label.name);   // Label.name
    append_field(out, kLengthDelimited2, label.value);  // Label.value
  }
}

struct PrometheusRequest::Impl {
  std::string bytes;  // the WriteRequest: bytes[0, used)
  std::size_t used = 0;
  std::string labels;  // add()'s encoded labels
  std::string body;
};

PrometheusRequest::PrometheusRequest() : impl_(std::make_unique<Impl>()) {}
PrometheusRequest::~PrometheusRequest() = default;

void PrometheusRequest::clear() {
  impl_->used = 0;
  points_ = 0;
}

void PrometheusRequest::add(const std::vector<PrometheusLabel>& labels, std::int64_t time_ms, double value) {
  impl_->labels.clear();
  prometheus_encode_labels(labels, impl_->labels);
  add_encoded(impl_->labels, time_ms, value);
}

void PrometheusRequest::add_encoded(std::string_view labels, std::int64_t time_ms, double value) {
  // Prometheus reads one NaN bit pattern as its staleness marker: send every NaN as the plain one.
  if (value != value) value = std::numeric_limits<double>::quiet_NaN();
  std::uint64_t value_bits;
  std::memcpy(&value_bits, &value, sizeof value);
  auto time_bits = static_cast<std::uint64_t>(time_ms);
  std::size_t sample_size = (value_bits ? 9 : 0) + (time_bits ? 1 + varint_size(time_bits) : 0);
  std::size_t series_size = labels.size() + 2 + sample_size;  // a Sample is under 128 bytes
  std::string& bytes = impl_->bytes;
  if (bytes.size() < impl_->used + series_size + 11) bytes.resize(2 * (impl_->used + series_size + 11));
  char* at = bytes.data() + impl_->used;
  *at++ = kLengthDelimited1;  // WriteRequest.timeseries
  at = put_varint(at, series_size);
  std::memcpy(at, labels.data(), labels.size());
  at += labels.size();
  *at++ = kLengthDelimited2;  // TimeSeries.samples
  *at++ = static_cast<char>(sample_size);
  if (value_bits) {
    *at++ = kFixed64_1;  // Sample.value, little-endian
    for (int i = 0; i < 8; ++i) *at++ = static_cast<char>(value_bits >> (8 * i));
  }
  if (time_bits) {
    *at++ = kVarint2;  // Sample.timestamp
    at = put_varint(at, time_bits);
  }
  impl_->used = static_cast<std::size_t>(at - bytes.data());
  ++points_;
}

std::string PrometheusRequest::serialized() const { return impl_->bytes.substr(0, impl_->used); }

const std::string& PrometheusRequest::body() {
  std::string& body = impl_->body;
  body.resize(snappy::MaxCompressedLength(impl_->used));
  std::size_t size = 0;
  snappy::RawCompress(impl_->bytes.data(), impl_->used, body.data(), &size);
  body.resize(size);
  return body;
}

namespace {
constexpr std::size_t kMaxUncompressedBytes = 256u << 20;
}

std::string prometheus_snappy_compress(std::string_view data) {
  std::string out;
  snappy::Compress(data.data(), data.size(), &out);
  return out;
}

std::string prometheus_snappy_uncompress(std::string_view data) {
  // The length comes first and from the peer: checked before anything that size is allocated.
  std::size_t length = 0;
  if (!snappy::GetUncompressedLength(data.data(), data.size(), &length) || length > kMaxUncompressedBytes ||
      !snappy::IsValidCompressedBuffer(data.data(), data.size()))
    throw std::runtime_error("not a snappy block (or one over 256 MiB)");
  std::string out;
  if (!snappy::Uncompress(data.data(), data.size(), &out)) throw std::runtime_error("not a snappy block");
  return out;
}

bool prometheus_refuses_times(std::string_view body) {
  std::string lower(body.substr(0, 4096));
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view what : {"out of order", "out-of-order", "duplicate sample", "out of bounds", "too old"})
    if (lower.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace fructosa::master
