// The command line both daemons share: options, positional words, --help and --version.
// Only the two main.cpp files include this (program_options is costly to compile).
#pragma once

#include <boost/program_options.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fructosa {

struct CommandLine {
  std::vector<std::string> words;  // the command and its arguments
  boost::program_options::variables_map args;
};

// Parses argv against `options` (to which -h/--help, --version, -c/--config and -p/--pidfile
// with the program's defaults are added). Returns the exit code when the program is done
// already (help, version, a usage error), otherwise nothing and fills `line`.
std::optional<int> parse_command_line(int argc, char** argv, const std::string& program,
                                      boost::program_options::options_description& options, CommandLine& line);

}  // namespace fructosa
