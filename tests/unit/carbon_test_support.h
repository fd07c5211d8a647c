// What the Graphite unit tests share: sample and time helpers, and a decoder of what was sent
// that is independent of the encoder (Python, with carbon's own unpickler).
#pragma once

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "carbon_encoder.h"
#include "test_support.h"

namespace fructosa::test::carbon {

using graphite::CarbonFrame;
using graphite::CarbonProtocol;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr std::int64_t kSecond = 1000000000;
inline constexpr std::int64_t kT0 = 1700000000 * kSecond;

// A sample with `points` metrics k0..k<points-1> valued base + i.
inline Sample numbered(std::int64_t time_ns, int points, double base = 0) {
  std::vector<MetricValue> metrics;
  for (int i = 0; i < points; ++i) metrics.push_back({"k" + std::to_string(i), base + i});
  return make_sample("node01.cluster", "Test", time_ns, 0, std::move(metrics));
}

inline std::string bits(double value) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx",
                static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(value)));
  return text;
}

// The line the decoder below prints for one point.
inline std::string point_line(const std::string& path, double timestamp, double value) {
  return path + " " + bits(timestamp) + " " + bits(value) + "\n";
}

// Decodes what was sent with Python, independently of the encoder: pickle frames with carbon's
// own unpickler (the code carbon-cache runs) and Python's, checking that each frame is exactly
// one pickle; plaintext lines with carbon's split() and float(). Prints "frame N" per pickle
// frame and "path timestamp-bits value-bits" per point.
inline constexpr const char* kDecoder = R"(
import io, pickle, struct, sys
from carbon.util import get_unpickler
data = open(sys.argv[1], 'rb').read()
if sys.argv[2] == 'pickle':
    position = 0
    while position < len(data):
        (length,) = struct.unpack('!L', data[position:position + 4])
        frame = data[position + 4:position + 4 + length]
        assert len(frame) == length, 'truncated frame'
        stream = io.BytesIO(frame)
        points = pickle.Unpickler(stream).load()
        assert stream.tell() == length, 'bytes after the pickle'
        assert get_unpickler(insecure=False).loads(frame) == points
        assert type(points) is list
        print('frame', len(points))
        for point in points:
            path, (timestamp, value) = point
            assert type(path) is str and type(timestamp) is float and type(value) is float, point
            print(path, struct.pack('>d', timestamp).hex(), struct.pack('>d', value).hex())
        position += 4 + length
else:
    assert data.endswith(b'\n')
    for line in data.decode('ascii').split('\n')[:-1]:
        path, value, timestamp = line.strip().split()
        assert line == ' '.join((path, value, timestamp)), line
        timestamp, value = float(timestamp), float(value)
        print(path, struct.pack('>d', timestamp).hex(), struct.pack('>d', value).hex())
)";

inline std::string decode_with_python(const std::string& bytes, CarbonProtocol protocol) {
  TempDir dir;
  std::ofstream(dir.file("sent"), std::ios::binary) << bytes;
  std::ofstream(dir.file("decode.py")) << kDecoder;
  std::string command = "/usr/bin/python3 " + dir.file("decode.py") + " " + dir.file("sent") + " " +
                        (protocol == CarbonProtocol::pickle ? "pickle" : "plaintext") + " > " +
                        dir.file("decoded") + " 2> " + dir.file("errors");
  int status = std::system(command.c_str());
  std::stringstream decoded, errors;
  decoded << std::ifstream(dir.file("decoded")).rdbuf();
  errors << std::ifstream(dir.file("errors")).rdbuf();
  EXPECT_EQ(status, 0) << errors.str();
  return decoded.str();
}

inline std::string joined(const std::vector<CarbonFrame>& frames, std::size_t used) {
  std::string bytes;
  for (std::size_t i = 0; i < used; ++i) bytes += frames[i].bytes;
  return bytes;
}

}  // namespace fructosa::test::carbon
