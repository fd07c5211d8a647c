// Logging through spdlog, configured by FrUCToSA's [logging] keys.
#pragma once

#include <string>

#include "config.h"

namespace fructosa {

// filename, level, maxBytes, backupCount (FrUCToSA / Python logging semantics).
const OptionTable& logging_options();

// Installs the default spdlog logger. In the foreground messages go to stderr (and to the
// file too when one is configured); a daemon writes to the file, or to syslog without one.
// Rotation follows Python's RotatingFileHandler: maxBytes = 0 means never rotate.
void setup_logging(const Options& logging, bool foreground, const std::string& program);

}  // namespace fructosa
