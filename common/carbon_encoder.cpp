#include "carbon_encoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "graphite_name.h"

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

void CarbonEncoder::path_prefix(const Sample& sample, std::string& out) const {
  out.assign(prefix_);
  if (sample.job != 0) fmt::format_to(std::back_inserter(out), "jobs.{}.", sample.job);
  append_graphite_host(out, sample.host);
  out += '.';
  append_graphite_component(out, sample.sensor);
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

void CarbonEncoder::begin_frame(CarbonFrame& frame) const {
  frame.bytes.clear();
  frame.points = 0;
  if (protocol_ == CarbonProtocol::pickle) {
    frame.bytes.append(kLengthPrefix, '\0');  // filled in by end_frame
    frame.bytes += kProto;
    frame.bytes += '\x02';
    frame.bytes += kEmptyList;
    frame.bytes += kMark;
  }
}

void CarbonEncoder::end_frame(CarbonFrame& frame) const {
  if (protocol_ != CarbonProtocol::pickle) return;
  frame.bytes += kAppends;
  frame.bytes += kStop;
  auto length = static_cast<std::uint32_t>(frame.bytes.size() - kLengthPrefix);
  for (int i = 3; i >= 0; --i, length >>= 8) frame.bytes[i] = static_cast<char>(length & 0xff);
}

void CarbonEncoder::append_point(CarbonFrame& frame, std::string_view path, double timestamp,
                                 double value, std::int64_t time_ns) {
  std::string& out = frame.bytes;
  if (protocol_ == CarbonProtocol::pickle) {
    // (path, (timestamp, value)): BINUNICODE, BINFLOAT, BINFLOAT, TUPLE2, TUPLE2. Written through
    // a pointer into room made once: this runs for every point sent.
    const std::size_t at = out.size();
    out.resize(at + 1 + 4 + path.size() + 2 * 9 + 2);
    char* p = out.data() + at;
    *p++ = kBinUnicode;
    auto length = static_cast<std::uint32_t>(path.size());
    for (int i = 0; i < 4; ++i, length >>= 8) *p++ = static_cast<char>(length & 0xff);
    std::memcpy(p, path.data(), path.size());
    p += path.size();
    for (double number : {timestamp, value}) {
      *p++ = kBinFloat;
      auto bits = std::bit_cast<std::uint64_t>(number);
      for (int i = 7; i >= 0; --i) p[i] = static_cast<char>((bits >> (8 * (7 - i))) & 0xff);
      p += 8;
    }
    *p++ = kTuple2;
    *p = kTuple2;
  } else {
    // "{}" is fmt's shortest form that reads back as the same double.
    out.append(path);
    out += ' ';
    fmt::format_to(std::back_inserter(out), "{}", value);
    if (time_ns % 1000000000 == 0)
      fmt::format_to(std::back_inserter(out), " {}\n", time_ns / 1000000000);
    else
      fmt::format_to(std::back_inserter(out), " {}\n", timestamp);
  }
  ++frame.points;
}

std::size_t CarbonEncoder::encode(std::span<const Sample> samples,
                                  std::vector<CarbonFrame>& frames) {
  std::size_t used = 0;
  CarbonFrame* open = nullptr;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const Sample& sample = samples[i];
    path_prefix(sample, path_);  // once per sample; each point only appends its key
    const std::size_t prefix_size = path_.size();
    // Whole seconds and the fraction apart: an int64 of ns has more digits than a double.
    const std::lldiv_t seconds = std::lldiv(sample.time_ns, 1000000000);
    const double timestamp =
        static_cast<double>(seconds.quot) + static_cast<double>(seconds.rem) / 1e9;
    for (const auto& metric : sample.metrics) {
      if (std::isnan(metric.value)) continue;  // whisper has no NaN; carbon would drop it anyway
      if (!open) {
        if (frames.size() <= used) frames.emplace_back();
        open = &frames[used++];
        begin_frame(*open);
        open->samples_done = i;
      }
      path_.resize(prefix_size);
      if (!metric.key.empty()) {
        path_ += '.';
        append_graphite_dotted(path_, metric.key);
      }
      append_point(*open, path_, timestamp, metric.value, sample.time_ns);
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
