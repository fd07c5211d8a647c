// Sending to carbon (Graphite), shared by lmaster's [Graphite] output and an lagent whose
// lagent.conf has [Graphite] and no [lmaster] (FrUCToSA 0.3's agents sent to carbon directly):
// the [Graphite] option table, FrUCToSA's metric paths and the pickle / plaintext encodings.
//
// Paths (DESIGN.md, "Naming in Graphite"; the mapping of each component is graphite_name.h):
//   [prefix.]<short host>.<Sensor>[.<key>]                 the node itself (job 0)
//   [prefix.]jobs.<job id>.<short host>.<Sensor>[.<key>]   per-job samples
// A scalar sensor's empty key adds nothing. Labels are not sent; NaN values are skipped
// (whisper cannot store them).
//
// Part of the small fructosa_carbon library: lagent links it, so it stays free of lmaster's
// outputs, HDF5, curl and ZeroMQ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config.h"
#include "metric.h"

namespace fructosa::graphite {

// [Graphite]: host, ports, protocol, prefix, batch_size, timeout, replay_window.
const OptionTable& graphite_options();

enum class CarbonProtocol { pickle, plaintext };

// A [Graphite] section parsed with graphite_options(), as the sending side uses it.
struct CarbonSettings {
  std::string host;
  int port = 2004;  // the pickle or the line receiver port, as `protocol` says
  CarbonProtocol protocol = CarbonProtocol::pickle;
  std::string prefix;
  std::size_t batch_size = 500;
  double timeout = 3;
  double replay_window = 5;
};
CarbonSettings carbon_settings(const Options& graphite);

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
  // "[prefix.][jobs.<id>.]<short host>." into `out`.
  void write_host_part(const Sample& sample, std::string& out) const;
  // path_prefix() of `sample` into path_, reusing the host part of the sample before it.
  void sample_path_prefix(const Sample& sample);
  // One point whose path is `path_prefix` and, unless empty, '.' and `key` (already mapped).
  void append_point(CarbonFrame& frame, std::string_view path_prefix, std::string_view key, double timestamp,
                    double value, std::int64_t time_ns);
  void begin_frame(CarbonFrame& frame);
  void end_frame(CarbonFrame& frame);
  // The open frame is written through a pointer into room made ahead (the buffer's last frame,
  // doubled when too short) rather than grown for every point: `used_` bytes of frame.bytes hold
  // the frame so far, and end_frame() trims it to them. Returns room for `bytes` more.
  char* room(CarbonFrame& frame, std::size_t bytes);
  void grow(CarbonFrame& frame, std::size_t bytes);

  CarbonProtocol protocol_;
  std::string prefix_;  // graphite_prefix(): mapped, with its trailing '.' (empty when no prefix)
  std::size_t batch_size_;
  std::string path_;  // scratch: the path prefix of the sample being written
  // The host and job whose host part path_ begins with (its first host_part_ bytes; 0: none).
  std::string last_host_;
  std::uint64_t last_job_ = 0;
  std::size_t host_part_ = 0;
  std::string key_;   // scratch: a key that is not sent as it is, mapped
  std::size_t used_ = 0;
  // Keys found to be sent as they are (graphite_dotted_as_is), by sensor, each at its place in
  // the sensor's sample where it was found: samples of a sensor repeat its keys in their order,
  // so a key is compared with the one at its place instead of looked at byte by byte (a tenth
  // of lmaster's Graphite output). A place whose key is mapped keeps what it had.
  std::vector<std::string>& keys_as_is(const std::string& sensor);
  std::unordered_map<std::string, std::vector<std::string>> keys_as_is_;
  static constexpr std::size_t kMaxSensorsKept = 4096;  // past that they start over
};

}  // namespace fructosa::graphite
