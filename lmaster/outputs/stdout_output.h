// [stdout]: one human-readable line per sample, for debugging.
//
//   <time> <host> <Sensor> job=<job> <key>=<value><unit> ... <label key>="<label value>" ...
//   2026-11-21T13:00:00.200Z node07 VirtualMemory job=0 total=25165824000B percent=12.3%
//
// Values are the shortest text that reads back as the same double (0.1, not
// 0.10000000000000001); a scalar sensor's empty key is written `value`. So that `key=value`
// splits one way only, a name (host, sensor, key, label key) that is empty or holds a space,
// '=', '"', '\' or a control byte is written in double quotes, inside which '"' and '\' are
// escaped by a '\' and control bytes written \xHH: key `/scratch a=b.total` is
// `"/scratch a=b.total"=12B`. Label values are always quoted that way.
#pragma once

#include <ostream>

#include "output.h"

namespace fructosa::master {

class StdoutOutput final : public Output {
 public:
  StdoutOutput(std::ostream& out, const MetricInfoStore& infos) : out_(out), infos_(infos) {}
  std::string name() const override { return "stdout"; }
  void write(std::span<const Sample> samples) override;
  void flush() override { out_.flush(); }

 private:
  std::ostream& out_;
  const MetricInfoStore& infos_;
};

// One line as above, without its '\n'.
std::string format_sample(const Sample& sample, const MetricInfoStore& infos);

}  // namespace fructosa::master
