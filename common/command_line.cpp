#include "command_line.h"

#include <iostream>

namespace fructosa {

namespace po = boost::program_options;

std::optional<int> parse_command_line(int argc, char** argv, const std::string& program,
                                      po::options_description& options, CommandLine& line) {
  options.add_options()
      ("help,h", "show this help")
      ("version", "print the version")
      ("config,c", po::value<std::string>()->default_value("/etc/fructosa/" + program + ".conf"), "configuration file")
      ("pidfile,p", po::value<std::string>()->default_value("/run/" + program + ".pid"), "pidfile");
  po::options_description hidden;
  hidden.add_options()("words", po::value<std::vector<std::string>>(&line.words));
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("words", -1);
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), line.args);
    po::notify(line.args);
  } catch (const po::error& error) {
    std::cerr << program << ": " << error.what() << "\n" << options;
    return 2;
  }
  if (line.args.count("help")) {
    std::cout << options;
    return 0;
  }
  if (line.args.count("version")) {
    std::cout << program << " (fructosa) " << FRUCTOSA_VERSION << "\n";
    return 0;
  }
  if (line.words.empty()) {
    std::cerr << options;
    return 2;
  }
  return std::nullopt;
}

}  // namespace fructosa
