// The application a job ran, named from its processes' command names: JobProc's label
// `commands` (sensors/job_proc.cpp), the distinct `comm` of the job's processes, most CPU
// first. ClusterCockpit guesses the application from the job script's text; lagent sees the
// processes themselves.
//
// A pattern table maps command names to applications: each entry is an application's name and
// shell-style globs (fnmatch(3), case-sensitive) on a command name. The entries named "-"
// (MPI launchers, shells, wrappers) are skipped: the application is that of the first command
// of the list that is not skipped, the first entry whose glob matches it naming it; a command
// no entry matches is its own name. The built-in table is in applications.cpp, docs/report.md
// lists it; a site adds entries from a file (load_app_patterns), which come first. comm is cut
// to 15 bytes by the kernel: a glob for a longer program name matches its first 15 bytes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fructosa::report {

struct AppPattern {
  std::string name;                // the application ("gromacs"); "-": commands to skip
  std::vector<std::string> globs;  // fnmatch(3) patterns on a command name ("gmx_*")
};

// The built-in entries, in the order they are tried.
const std::vector<AppPattern>& builtin_app_patterns();

// A site's entries: one a line, "name glob [glob...]" separated by blanks; '#' starts a comment
// (at a line's start or after a blank), blank lines are ignored. Throws std::runtime_error
// naming the file (and the line: "path:3: ...") when it cannot be read or a line has a name
// without a glob.
std::vector<AppPattern> load_app_patterns(const std::string& path);

// The application of a job whose commands are `commands` (in the label's order, most CPU
// first): the name of the first entry, `site`'s before the built-in ones, matching the first
// command that is not skipped; that command itself when no entry names it; "" when every
// command is skipped or there is none.
std::string application_of(const std::vector<std::string>& commands, const std::vector<AppPattern>& site = {});

// JobProc's label `commands` ("gmx_mpi,python3,bash") as a list; "" gives none.
std::vector<std::string> split_commands(std::string_view label);

}  // namespace fructosa::report
