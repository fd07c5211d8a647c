// [stdout]: one human-readable line per sample, for debugging.
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

// "2026-11-21T13:00:00.200Z node07 VirtualMemory job=0 total=25165824000B percent=12.3% ..."
std::string format_sample(const Sample& sample, const MetricInfoStore& infos);

}  // namespace fructosa::master
