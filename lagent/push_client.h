// `lagent push`: the command a batch script runs to push a metric into its job's data
// (docs/push.md). Parses its own arguments (a gauge's value may be negative, which
// program_options would take for an option).
#pragma once

#include <iosfwd>

namespace fructosa::agent {

// argv[0] is "lagent", argv[1] "push". Returns the exit code: 0 when every line was taken,
// 65 (EX_DATAERR) when some were refused or dropped, 69 (EX_UNAVAILABLE) when no lagent
// listens, 77 (EX_NOPERM) when lagent refused the connection (no job), 2 on a usage error.
// Without NAME VALUE, the lines are read from `in_fd` as they come.
int push_command(int argc, char** argv, int in_fd, std::ostream& err);

// Its usage text (`lagent push --help`, and lagent's own --help).
extern const char* const kPushUsage;

}  // namespace fructosa::agent
