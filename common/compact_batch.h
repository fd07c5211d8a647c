// The compact batch encoding of protocol version 2: what a batch's compactSamples hold, each
// sample written as what changed since the connection's last sample of its (sensor, job)
// (ConnectionMemory, codec.h). AgentDictionary writes it, MasterDictionary reads it.
//
// The layout:
//   varint count, then per sample:
//   byte flags (1: job != 0, 2: same series as the last sample of this (sensor, job), 4: has
//        labels, 8: same labels as that last sample)
//   varint sensor; zigzag varint time_ns - the connection's previous sample time;
//   [varint job]; [unless same series: varint n, varint first series, then per further series
//   zigzag varint (series - previous series - 1)]
//   ceil(n / 4) bytes of 2-bit value tags (value i in bits 2(i%4)), then each value's payload:
//     0 same as the last value of this series (nothing)
//     1 integer: zigzag varint (value - last value if that was an integer below 2^53, else 0)
//     2 decimal with s = 1..6 digits: varint (zigzag(m - round(last * 10^s)) << 3 | s), value =
//       m / 10^s
//     3 raw: 8 bytes, IEEE 754 little-endian
//   [labels, unless same: varint count, then (varint length, bytes) for each key and value]
// An encoding is chosen only if decoding it gives back the same bits (-0.0, NaN and the like
// go raw). Both ends forget everything at the start of a batch once they remember more than
// kMaxRemembered (sensor, job) pairs, so ended jobs do not pile up.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "codec.h"

namespace fructosa {

// round(x) of the decimal payload: std::llround's rounding (halves away from zero) for |x| < 2^53,
// without a call into libm (it ran for every decimal value both ends encode or decode). There x
// minus its truncation is exact, so the comparison with one half decides as llround does; both
// ends must round alike, and tests/unit/codec_compact_test.cpp checks it against llround.
inline std::int64_t round_half_away(double x) {
  auto truncated = static_cast<std::int64_t>(x);
  double fraction = x - static_cast<double>(truncated);
  return truncated + (fraction >= 0.5) - (fraction <= -0.5);
}

// Writes one batch: `samples` is how many add() will be called with.
class CompactBatchWriter {
 public:
  CompactBatchWriter(ConnectionMemory& memory, std::size_t samples);
  // `sensor` and `series` are the sample's dictionary indices, one series per metric.
  void add(const Sample& sample, std::uint32_t sensor, const std::vector<std::uint32_t>& series);
  const std::string& bytes() const { return bytes_; }

 private:
  ConnectionMemory& memory_;
  std::string bytes_;
};

// Reads one batch, in the order it was written. Throws ProtocolError on malformed bytes (every
// read is checked against the end); the connection must then start over.
std::vector<WireSample> decode_compact_batch(std::string_view bytes, ConnectionMemory& memory);
// The same, each sample handed to `each` as it is read, in one WireSample reused from sample to
// sample (lmaster's receiving path: no vectors allocated per sample), with its labels as the
// connection's memory keeps them (the WireSample's own are left empty; both are valid until the
// next sample). What `each` throws propagates; the samples before it were handed over, the
// memory moved on.
void decode_compact_batch(std::string_view bytes, ConnectionMemory& memory,
                          const std::function<void(const WireSample&, const std::vector<Label>&)>& each);

}  // namespace fructosa
