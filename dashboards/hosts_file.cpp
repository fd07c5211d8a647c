// FrUCToSA's HOSTS files and the host component of Graphite paths (--host, HOSTS_FILE).
#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "dashboard.h"
#include "graphite_name.h"

namespace fructosa::dashboards {

std::string short_host(std::string_view host) { return graphite_host(host); }

std::vector<std::string> read_hosts_file(const std::string& path) {
  // Boost's INI parser needs `key = value`; FrUCToSA's HOSTS files list bare keys, as Python's
  // configparser(allow_no_value=True) reads them: so this small reader.
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the hosts file", path));
  std::vector<std::string> hosts;
  std::string section;
  bool seen_section = false;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    auto last = line.find_last_not_of(" \t\r");
    std::string text = line.substr(first, last - first + 1);
    if (text.front() == '#' || text.front() == ';') continue;
    if (text.front() == '[') {
      if (text.back() != ']') throw ConfigError(fmt::format("{}:{}: malformed section header", path, number));
      section = text.substr(1, text.size() - 2);
      seen_section = seen_section || section == "hosts";
      continue;
    }
    if (section != "hosts") continue;
    std::string host = text.substr(0, text.find_first_of("=:"));
    host.erase(host.find_last_not_of(" \t") + 1);
    if (host.empty()) throw ConfigError(fmt::format("{}:{}: [hosts] empty host name", path, number));
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  if (!seen_section) throw ConfigError(fmt::format("{}: no [hosts] section", path));
  if (hosts.empty()) throw ConfigError(fmt::format("{}: [hosts] lists no host", path));
  return hosts;
}

}  // namespace fructosa::dashboards
