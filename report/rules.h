// The verdict's thresholds from a [report] section (docs/report.md): lmaster.conf's (which
// lmaster ignores) or a file of fructosa-report's --rules. One key per member of Rules, its
// default Rules{}'s.
#pragma once

#include <string>

#include "analysis.h"
#include "config.h"

namespace fructosa::report {

// The [report] keys: name, default, range, what it sets.
const OptionTable& report_options();

// `file`'s [report] section on the defaults (none: the defaults, unless `required`). Throws
// ConfigError naming the file, the line and the key of an unknown key or a bad value.
Rules rules_from(const IniFile& file, bool required);
// The same of a file (IniFile::load's errors: unreadable, bad syntax).
Rules load_rules(const std::string& path, bool required);

}  // namespace fructosa::report
