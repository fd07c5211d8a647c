// libFuzzer target: configuration text as lagent reads it.
//
// The input is written to an in-memory file and loaded with load_agent_config(), the real
// loader: IniFile parsing, every [sensor:Name] section against its sensor's option table,
// [lmaster], [lagent], [logging] and [jobs] (whose regex is compiled). The only acceptable
// failure is ConfigError (the daemon's exit 78); any other exception escapes to libFuzzer,
// which reports it as a crash. The same text is also parsed with IniFile::parse and each of its
// lines is tried as a `-o key=value` pair against a sensor's table, as `lagent probe` does.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "agent_config.h"
#include "config.h"
#include "logging.h"
#include "sensor.h"

using namespace fructosa;

namespace {

// One memfd for the whole run: no disk traffic, and a real path for the loader to open.
struct MemoryFile {
  int fd = -1;
  std::string path;
  MemoryFile() {
    fd = memfd_create("fuzz.conf", 0);
    if (fd < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  void write(const std::uint8_t* data, std::size_t size) {
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
      std::perror("memfd write");
      std::abort();
    }
  }
};

void parse_lines_as_pairs(const std::string& text) {
  const auto* sensor = sensors::find_sensor("DiskUsage");
  if (!sensor) sensor = sensors::find_sensor("lagent");
  if (!sensor) return;
  std::vector<std::string> pairs;
  std::size_t start = 0;
  while (start <= text.size() && pairs.size() < 64) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    pairs.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  try {
    parse_pairs(sensors::section_options(*sensor), pairs, "-o");
  } catch (const ConfigError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static MemoryFile file;
  file.write(data, size);
  try {
    agent::AgentConfig config = agent::load_agent_config(file.path);
    // Everything the agent reads from the result later must be there.
    for (const auto& sensor : config.sensors) {
      if (!sensor.definition || !(sensor.interval > 0)) std::abort();
      (void)describe_options(*sensor.definition->options);
    }
  } catch (const ConfigError&) {
  }

  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    IniFile ini = IniFile::parse(text, "fuzz.conf");
    for (const auto& section : ini.sections()) {
      (void)ini.where(section);
      for (const auto& entry : section.entries) (void)ini.where(section, &entry);
    }
    (void)parse_section(logging_options(), ini, ini.find("logging"));
  } catch (const ConfigError&) {
  }
  parse_lines_as_pairs(text);
  return 0;
}
