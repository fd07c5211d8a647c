// lmaster.conf: [lmaster], [logging], and one section per enabled output.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "outputs/output.h"

namespace fructosa::master {

struct OutputConfig {
  std::string section;  // "stdout", "hdf5"
  Options options;
};

struct MasterConfig {
  std::string path;
  std::string bind_host = "127.0.0.1";
  int port = 7888;  // 0: any free port (logged at start; for tests)
  Options logging;
  std::vector<OutputConfig> outputs;
};

const OptionTable& master_options();  // [lmaster]

// Throws ConfigError naming file, line, section and key.
MasterConfig load_master_config(const std::string& path);

// Creates the output a section describes; throws std::runtime_error (e.g. unwritable file).
std::unique_ptr<Output> make_output(const OutputConfig& config, const MetricInfoStore& infos);

}  // namespace fructosa::master
