#include "master_config.h"

#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "daemon.h"
#include "logging.h"
#include "outputs/hdf5_output.h"
#include "outputs/stdout_output.h"

namespace fructosa::master {
namespace {

const OptionTable kStdoutOptions{};

struct OutputKind {
  std::string_view section;
  const OptionTable& (*options)();
};

const OutputKind kOutputKinds[] = {
    {"stdout", []() -> const OptionTable& { return kStdoutOptions; }},
    {"hdf5", &Hdf5Output::hdf5_options},
};

}  // namespace

const OptionTable& master_options() {
  static const OptionTable table{
      {.name = "host", .type = OptionType::text, .default_value = "127.0.0.1",
       .help = "address to listen on for agents (* for every interface)"},
      {.name = "incoming data port", .type = OptionType::integer, .default_value = "7888",
       .help = "port to listen on for agents; 0 picks a free one and logs it", .min = 0, .max = 65535},
  };
  return table;
}

MasterConfig load_master_config(const std::string& path) {
  IniFile file = IniFile::load(path);
  MasterConfig config;
  config.path = path;
  for (const auto& section : file.sections()) {
    if (section.name == "lmaster" || section.name == "logging") continue;
    const OutputKind* kind = nullptr;
    for (const auto& candidate : kOutputKinds)
      if (candidate.section == section.name) kind = &candidate;
    if (!kind)
      throw ConfigError(fmt::format("{}: unknown section (known: [lmaster], [logging], [stdout], [hdf5])",
                                    file.where(section)));
    OutputConfig output{section.name, parse_section(kind->options(), file, &section)};
    if (section.name == "hdf5") output.options.set("path", resolve_config_path(path, output.options.get_text("path")), true);
    config.outputs.push_back(std::move(output));
  }
  Options master = parse_section(master_options(), file, file.find("lmaster"));
  config.bind_host = master.get_text("host");
  config.port = static_cast<int>(master.get_int("incoming data port"));
  config.logging = parse_section(logging_options(), file, file.find("logging"));
  if (!config.logging.get_text("filename").empty())
    config.logging.set("filename", resolve_config_path(path, config.logging.get_text("filename")), true);
  return config;
}

std::unique_ptr<Output> make_output(const OutputConfig& config, const MetricInfoStore& infos) {
  if (config.section == "stdout") return std::make_unique<StdoutOutput>(std::cout, infos);
  if (config.section == "hdf5") {
    // A fresh install has no data directory yet: make it, as systemd's StateDirectory would.
    auto directory = std::filesystem::path(config.options.get_text("path")).parent_path();
    std::error_code error;
    if (!directory.empty() && !std::filesystem::create_directories(directory, error) && error)
      throw std::runtime_error(fmt::format("cannot create {}: {}", directory.string(), error.message()));
    return std::make_unique<Hdf5Output>(config.options, infos);
  }
  throw std::logic_error("no output for section " + config.section);
}

}  // namespace fructosa::master
