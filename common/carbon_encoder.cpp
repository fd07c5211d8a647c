#include "carbon_encoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "graphite_name.h"
#include "short_text.h"

namespace fructosa::graphite {
namespace {

// Pickle opcodes (Python's Lib/pickle.py), all that a list of (str, (float, float)) needs.
constexpr char kProto = '\x80';
constexpr char kEmptyList = ']';
constexpr char kMark = '(';
constexpr char kBinUnicode = 'X';  // 4-byte little-endian length, UTF-8 bytes
constexpr char kBinFloat = 'G';    // 8-byte big-endian IEEE 754 double
constexpr char kTuple2 = '\x86';
constexpr char kAppends = 'e';
constexpr char kStop = '.';
constexpr std::size_t kLengthPrefix = 4;  // carbon's Int32StringReceiver: big-endian frame length

}  // namespace

// ---------------------------------------------------------------------------------------------
// Encoding

CarbonEncoder::CarbonEncoder(CarbonProtocol protocol, std::string_view prefix,
                             std::size_t batch_size)
    : protocol_(protocol),
      prefix_(graphite_prefix(prefix)),
      batch_size_(std::max<std::size_t>(batch_size, 1)) {}

void CarbonEncoder::write_host_part(const Sample& sample, std::string& out) const {
  out.assign(prefix_);
  if (sample.job != 0) fmt::format_to(std::back_inserter(out), "jobs.{}.", sample.job);
  append_graphite_host(out, sample.host);
  out += '.';
}

void CarbonEncoder::path_prefix(const Sample& sample, std::string& out) const {
  write_host_part(sample, out);
  append_graphite_component(out, sample.sensor);
}

void CarbonEncoder::sample_path_prefix(const Sample& sample) {
  // A round's samples come host by host: the part before the sensor is the last sample's, most
  // of the time.
  if (host_part_ == 0 || sample.job != last_job_ || !same_text(sample.host, last_host_)) {
    write_host_part(sample, path_);
    host_part_ = path_.size();
    last_host_ = sample.host;
    last_job_ = sample.job;
  }
  path_.resize(host_part_);
  append_graphite_component(path_, sample.sensor);
}

std::string CarbonEncoder::path(const Sample& sample, std::string_view key) const {
  std::string result;
  path_prefix(sample, result);
  if (!key.empty()) {
    result += '.';
    append_graphite_dotted(result, key);
  }
  return result;
}

namespace {

void put_u32_little_endian(char* p, std::uint32_t value) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &value, sizeof value);
  } else {
    for (int i = 0; i < 4; ++i, value >>= 8) p[i] = static_cast<char>(value & 0xff);
  }
}

void put_f64_big_endian(char* p, double number) {
  auto bits = std::bit_cast<std::uint64_t>(number);
  if constexpr (std::endian::native == std::endian::little) bits = __builtin_bswap64(bits);
  std::memcpy(p, &bits, sizeof bits);
}

// The longest text fmt's "{}" gives for a double (shortest round trip, e.g.
// "-2.2250738585072014e-308") or an int64, with room to spare.
constexpr std::size_t kMaxNumberText = 32;

}  // namespace

// Out of line, so that room(), called for every point, is small enough to be inlined.
[[gnu::noinline]] void CarbonEncoder::grow(CarbonFrame& frame, std::size_t bytes) {
  frame.bytes.resize(std::max(frame.bytes.size() * 2, used_ + bytes));
}

inline char* CarbonEncoder::room(CarbonFrame& frame, std::size_t bytes) {
  if (frame.bytes.size() - used_ < bytes) [[unlikely]]
    grow(frame, bytes);
  return frame.bytes.data() + used_;
}

void CarbonEncoder::begin_frame(CarbonFrame& frame) {
  // The bytes of the buffer's last frame are the room for this one (written over, never zeroed
  // again); room() grows it when this frame is longer.
  if (frame.bytes.size() < 4096) frame.bytes.resize(4096);
  frame.points = 0;
  used_ = 0;
  if (protocol_ == CarbonProtocol::pickle) {
    char* p = room(frame, kLengthPrefix + 4);
    std::memset(p, 0, kLengthPrefix);  // filled in by end_frame
    p[kLengthPrefix] = kProto;
    p[kLengthPrefix + 1] = '\x02';
    p[kLengthPrefix + 2] = kEmptyList;
    p[kLengthPrefix + 3] = kMark;
    used_ += kLengthPrefix + 4;
  }
}

void CarbonEncoder::end_frame(CarbonFrame& frame) {
  if (protocol_ == CarbonProtocol::pickle) {
    char* p = room(frame, 2);
    p[0] = kAppends;
    p[1] = kStop;
    used_ += 2;
    auto length = static_cast<std::uint32_t>(used_ - kLengthPrefix);
    for (int i = 3; i >= 0; --i, length >>= 8) frame.bytes[i] = static_cast<char>(length & 0xff);
  }
  frame.bytes.resize(used_);
}

void CarbonEncoder::append_point(CarbonFrame& frame, std::string_view path_prefix, std::string_view key,
                                 double timestamp, double value, std::int64_t time_ns) {
  const std::size_t path_size = path_prefix.size() + (key.empty() ? 0 : 1 + key.size());
  char* p;
  char* start;
  if (protocol_ == CarbonProtocol::pickle) {
    // (path, (timestamp, value)): BINUNICODE, BINFLOAT, BINFLOAT, TUPLE2, TUPLE2.
    p = start = room(frame, 1 + 4 + path_size + 2 * 9 + 2);
    *p++ = kBinUnicode;
    put_u32_little_endian(p, static_cast<std::uint32_t>(path_size));
    p += 4;
  } else {
    p = start = room(frame, path_size + 2 * (1 + kMaxNumberText) + 1);
  }
  p = copy_text(p, path_prefix.data(), path_prefix.size());
  if (!key.empty()) {
    *p++ = '.';
    p = copy_text(p, key.data(), key.size());
  }
  if (protocol_ == CarbonProtocol::pickle) {
    for (double number : {timestamp, value}) {
      *p++ = kBinFloat;
      put_f64_big_endian(p, number);
      p += 8;
    }
    *p++ = kTuple2;
    *p++ = kTuple2;
  } else {
    // "{}" is fmt's shortest form that reads back as the same double.
    *p++ = ' ';
    p = fmt::format_to(p, "{}", value);
    if (time_ns % 1000000000 == 0)
      p = fmt::format_to(p, " {}\n", time_ns / 1000000000);
    else
      p = fmt::format_to(p, " {}\n", timestamp);
  }
  used_ += static_cast<std::size_t>(p - start);
  ++frame.points;
}

std::size_t CarbonEncoder::encode(std::span<const Sample> samples,
                                  std::vector<CarbonFrame>& frames) {
  std::size_t used = 0;
  CarbonFrame* open = nullptr;
  const std::string* known_sensor = nullptr;
  std::vector<std::string>* known = nullptr;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const Sample& sample = samples[i];
    sample_path_prefix(sample);  // once per sample; each point only adds its key
    if (!known_sensor || !same_text(*known_sensor, sample.sensor)) {
      known = &keys_as_is(sample.sensor);
      known_sensor = &sample.sensor;
    }
    // Whole seconds and the fraction apart: an int64 of ns has more digits than a double.
    const std::lldiv_t seconds = std::lldiv(sample.time_ns, 1000000000);
    const double timestamp =
        static_cast<double>(seconds.quot) + static_cast<double>(seconds.rem) / 1e9;
    for (std::size_t m = 0; m < sample.metrics.size(); ++m) {
      const MetricValue& metric = sample.metrics[m];
      if (std::isnan(metric.value)) continue;  // whisper has no NaN; carbon would drop it anyway
      if (!open) {
        if (frames.size() <= used) frames.emplace_back();
        open = &frames[used++];
        begin_frame(*open);
        open->samples_done = i;
      }
      std::string_view key = metric.key;
      if (!key.empty() && !(m < known->size() && same_text((*known)[m], key))) {
        if (graphite_dotted_as_is(key)) {
          if (known->size() <= m) known->resize(m + 1);
          (*known)[m] = key;
        } else {
          key_.clear();
          append_graphite_dotted(key_, key);
          key = key_;
        }
      }
      append_point(*open, path_, key, timestamp, metric.value, sample.time_ns);
      if (open->points == batch_size_) {
        end_frame(*open);
        open = nullptr;
      }
    }
    if (used > 0) frames[used - 1].samples_done = i + 1;
  }
  if (open) end_frame(*open);
  return used;
}

std::vector<std::string>& CarbonEncoder::keys_as_is(const std::string& sensor) {
  auto found = keys_as_is_.find(sensor);
  if (found != keys_as_is_.end()) return found->second;
  if (keys_as_is_.size() >= kMaxSensorsKept) keys_as_is_.clear();
  return keys_as_is_[sensor];
}

// ---------------------------------------------------------------------------------------------
// Options

const OptionTable& graphite_options() {
  static const OptionTable table{
      {.name = "host",
       .type = OptionType::text,
       .default_value = "localhost",
       .help = "carbon-cache (or carbon-relay) host name or address"},
      {.name = "carbon receiver pickle port",
       .type = OptionType::integer,
       .default_value = "2004",
       .help = "carbon's PICKLE_RECEIVER_PORT (protocol = pickle)",
       .min = 1,
       .max = 65535},
      {.name = "carbon receiver port",
       .type = OptionType::integer,
       .default_value = "2003",
       .help = "carbon's LINE_RECEIVER_PORT (protocol = plaintext)",
       .min = 1,
       .max = 65535},
      {.name = "protocol",
       .type = OptionType::text,
       .default_value = "pickle",
       .help = "pickle (binary, exact values) or plaintext (one \"path value timestamp\" line per "
               "point)",
       .choices = {"pickle", "plaintext"}},
      {.name = "prefix",
       .type = OptionType::text,
       .default_value = "",
       .help = "dotted path put before every metric path (e.g. cluster1); empty: none"},
      {.name = "batch_size",
       .type = OptionType::integer,
       .default_value = "500",
       .help = "points per pickle frame (carbon takes at most 500) or per plaintext block",
       .min = 1,
       .max = 500},
      {.name = "timeout",
       .type = OptionType::real,
       .default_value = "3",
       .help = "seconds to wait for a connection, or for one send to make progress",
       .min = 0.1,
       .max = 60},
      {.name = "replay_window",
       .type = OptionType::real,
       .default_value = "5",
       .help = "after a lost connection, seconds of the data sent just before it that are sent "
               "again (at most 16 MiB; carbon overwrites equal points); 0: none",
       .min = 0,
       .max = 60},
  };
  return table;
}

CarbonSettings carbon_settings(const Options& graphite) {
  CarbonSettings settings;
  settings.host = graphite.get_text("host");
  settings.protocol = graphite.get_text("protocol") == "plaintext" ? CarbonProtocol::plaintext
                                                                   : CarbonProtocol::pickle;
  settings.port = static_cast<int>(graphite.get_int(settings.protocol == CarbonProtocol::pickle
                                                        ? "carbon receiver pickle port"
                                                        : "carbon receiver port"));
  settings.prefix = graphite.get_text("prefix");
  settings.batch_size = static_cast<std::size_t>(graphite.get_int("batch_size"));
  settings.timeout = graphite.get_real("timeout");
  settings.replay_window = graphite.get_real("replay_window");
  return settings;
}

}  // namespace fructosa::graphite
