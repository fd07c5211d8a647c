// [Graphite]: carbon's pickle protocol (or plaintext) over TCP, FrUCToSA's metric paths.
//
// Paths (DESIGN.md, "Naming in Graphite"):
//   [prefix.]<short host>.<Sensor>[.<key>]                 the node itself (job 0)
//   [prefix.]jobs.<job id>.<short host>.<Sensor>[.<key>]   per-job samples
// A scalar sensor's empty key adds nothing. The short host is the host up to its first dot (an
// IPv4 address keeps all of it, dots made '_'). Inside every component, bytes carbon cannot take
// (space, '/', ';', anything outside printable ASCII) become '_', and an empty component becomes
// "_". Labels are not sent; NaN values are skipped (whisper cannot store them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "output.h"

namespace fructosa::master {

const OptionTable& graphite_options();
std::unique_ptr<Output> make_graphite_output(const Options& options, const MetricInfoStore& infos);

enum class CarbonProtocol { pickle, plaintext };

// One unit of sending: a pickle frame (4-byte big-endian length + a pickle protocol 2 list of
// (path, (timestamp, value))), or a block of plaintext lines "path value timestamp\n".
struct CarbonFrame {
  std::string bytes;
  std::size_t points = 0;
  // Samples [0, samples_done) of the encoded span are complete once this frame and every frame
  // before it are delivered.
  std::size_t samples_done = 0;
};

// Turns samples into frames of at most `batch_size` points. Keeps its scratch buffers, and
// reuses the buffers of the frames it is given, so steady encoding allocates nothing.
class CarbonEncoder {
 public:
  CarbonEncoder(CarbonProtocol protocol, std::string_view prefix, std::size_t batch_size);

  // Fills frames[0..n) (reusing their buffers, growing the vector when needed) and returns n.
  std::size_t encode(std::span<const Sample> samples, std::vector<CarbonFrame>& frames);

  // The path prefix of a sample: "[prefix.]<short host>.<Sensor>" or with "jobs.<id>." ahead.
  void path_prefix(const Sample& sample, std::string& out) const;
  // The whole path of one metric of a sample (for tests and log lines; encode() does not use it).
  std::string path(const Sample& sample, std::string_view key) const;

 private:
  void append_point(CarbonFrame& frame, std::string_view path, double timestamp, double value,
                    std::int64_t time_ns);
  void begin_frame(CarbonFrame& frame) const;
  void end_frame(CarbonFrame& frame) const;

  CarbonProtocol protocol_;
  std::string prefix_;  // sanitised, with its trailing '.' (empty when no prefix)
  std::size_t batch_size_;
  std::string path_;  // scratch: the path being written
};

}  // namespace fructosa::master
