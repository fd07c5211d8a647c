#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <algorithm>

#include "agent.h"
#include "agent_config.h"
#include "master_config.h"
#include "config.h"
#include "logging.h"
#include "sensor.h"

using namespace fructosa;

namespace {

const OptionTable kTable{
    {.name = "time_interval", .type = OptionType::real, .default_value = "1", .help = "seconds", .min = 0.01},
    {.name = "percpu", .type = OptionType::boolean, .default_value = "true", .help = "per CPU"},
    {.name = "paths", .type = OptionType::list, .default_value = "/", .help = "mount points"},
    {.name = "mode", .type = OptionType::text, .default_value = "a", .help = "mode", .choices = {"a", "b"}},
    {.name = "count", .type = OptionType::integer, .default_value = "3", .help = "n", .min = 1, .max = 10},
};

std::string error_of(const std::string& text, const std::string& section_name = "s") {
  try {
    IniFile file = IniFile::parse(text, "test.conf");
    parse_section(kTable, file, file.find(section_name));
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "no error";
}

// A config file in a fresh temporary directory, removed with the object.
struct TempConfig {
  std::filesystem::path dir;
  std::string path;
  explicit TempConfig(const std::string& text) {
    char pattern[] = "/tmp/fructosa-config-XXXXXX";
    dir = ::mkdtemp(pattern);
    path = (dir / "lagent.conf").string();
    std::ofstream(path) << text;
  }
  ~TempConfig() { std::filesystem::remove_all(dir); }
};

// What `lagent start` says about `text` (it also makes every sensor, which may refuse options).
std::string agent_error_of(const std::string& text) {
  TempConfig config(text);
  try {
    agent::check_agent_config(config.path);
  } catch (const ConfigError& error) {
    std::string message = error.what();
    auto at = message.find(config.path);
    if (at != std::string::npos) message.replace(at, config.path.size(), "lagent.conf");
    return message;
  }
  return "no error";
}

}  // namespace

TEST(Config, ParsesTypedValuesAndDefaults) {
  IniFile file = IniFile::parse("[s]\ntime_interval = 0.2\npercpu = no\npaths = /, /home , /scratch\n", "test.conf");
  Options options = parse_section(kTable, file, file.find("s"));
  EXPECT_DOUBLE_EQ(options.get_real("time_interval"), 0.2);
  EXPECT_FALSE(options.get_bool("percpu"));
  EXPECT_EQ(options.get_list("paths"), (std::vector<std::string>{"/", "/home", "/scratch"}));
  EXPECT_EQ(options.get_text("mode"), "a");
  EXPECT_EQ(options.get_int("count"), 3);
  EXPECT_TRUE(options.is_set("percpu"));
  EXPECT_FALSE(options.is_set("mode"));
}

TEST(Config, AbsentSectionGivesDefaults) {
  IniFile file = IniFile::parse("[other]\n", "test.conf");
  Options options = parse_section(kTable, file, nullptr);
  EXPECT_TRUE(options.get_bool("percpu"));
  EXPECT_EQ(options.get_list("paths"), std::vector<std::string>{"/"});
}

TEST(Config, EmptySectionsAreKeptInFileOrder) {
  // Boost's INI parser drops sections without keys; [stdout] has none and must still count.
  IniFile file = IniFile::parse("[lmaster]\nhost = a\n\n[stdout]\n\n[hdf5]\npath = x.h5\n", "test.conf");
  ASSERT_EQ(file.sections().size(), 3u);
  EXPECT_EQ(file.sections()[1].name, "stdout");
  EXPECT_EQ(file.sections()[1].line, 4);
  EXPECT_TRUE(file.sections()[1].entries.empty());
  EXPECT_EQ(file.sections()[2].entries.at(0).line, 7);
}

TEST(Config, KeysMatchCaseInsensitivelyAsConfigparser) {
  IniFile file = IniFile::parse("[s]\nPerCPU = off\n", "test.conf");
  EXPECT_FALSE(parse_section(kTable, file, file.find("s")).get_bool("percpu"));
}

TEST(Config, UnknownKeyNamesFileLineSectionAndKey) {
  EXPECT_EQ(error_of("# comment\n[s]\ntime_interval = 1\nintervall = 2\n"),
            "test.conf:4: [s] intervall: unknown key (known keys: time_interval, percpu, paths, mode, count)");
}

TEST(Config, BadValuesAreExplained) {
  EXPECT_EQ(error_of("[s]\ntime_interval = fast\n"), "test.conf:2: [s] time_interval: bad value 'fast': expected a number");
  EXPECT_EQ(error_of("[s]\n\ntime_interval = 0\n"),
            "test.conf:3: [s] time_interval: bad value '0': must be at least 0.01");
  EXPECT_EQ(error_of("[s]\npercpu = maybe\n"),
            "test.conf:2: [s] percpu: bad value 'maybe': expected a boolean (true/false, yes/no, on/off, 1/0)");
  EXPECT_EQ(error_of("[s]\nmode = c\n"), "test.conf:2: [s] mode: bad value 'c': expected one of: a, b");
  EXPECT_EQ(error_of("[s]\ncount = 11\n"), "test.conf:2: [s] count: bad value '11': must be between 1 and 10");
  EXPECT_EQ(error_of("[s]\ncount = 2.5\n"), "test.conf:2: [s] count: bad value '2.5': expected an integer");
}

TEST(Config, SyntaxErrorsAndDuplicatesNameTheLine) {
  EXPECT_EQ(error_of("[s]\ntime_interval = 1\ntime_interval = 2\n"), "test.conf:3: duplicate key name");
  EXPECT_EQ(error_of("[s]\nx = 1\n[s]\n"), "test.conf:3: duplicate section [s]");
  EXPECT_EQ(error_of("[s]\nthis line has no equals sign\n"), "test.conf:2: '=' character not found in line");
  EXPECT_EQ(error_of("top = 1\n[s]\n"), "test.conf:1: key 'top' is outside any [section]");
}

TEST(Config, CommandLinePairs) {
  Options options = parse_pairs(kTable, {"percpu=false", "count=5"}, "-o");
  EXPECT_FALSE(options.get_bool("percpu"));
  EXPECT_EQ(options.get_int("count"), 5);
  EXPECT_THROW(parse_pairs(kTable, {"nope=1"}, "-o"), ConfigError);
  EXPECT_THROW(parse_pairs(kTable, {"count"}, "-o"), ConfigError);
}

TEST(AgentConfig, FrUCToSAKeysAndSensorSections) {
  TempConfig config(
      "[lmaster]\nhost = master01\nincoming data port = 7999\n"
      "[logging]\nfilename = lagent.log\nlevel = DEBUG\nmaxBytes = 1000000\nbackupCount = 3\n"
      "[sensor:CPUPercent]\ntime_interval = 0.5\n[sensor:VirtualMemory]\ntime_interval = 2\n");
  auto agent = agent::load_agent_config(config.path);
  EXPECT_EQ(agent.master_host, "master01");
  EXPECT_EQ(agent.master_port, 7999);
  ASSERT_EQ(agent.sensors.size(), 3u);
  EXPECT_EQ(agent.sensors[0].definition->name, "CPUPercent");
  EXPECT_DOUBLE_EQ(agent.sensors[0].interval, 0.5);
  // lagent's own health comes along every 10 s without a section of its own.
  EXPECT_EQ(agent.sensors[2].definition->name, "lagent");
  EXPECT_DOUBLE_EQ(agent.sensors[2].interval, 10.0);
  // Relative paths are relative to the configuration file's directory.
  EXPECT_EQ(agent.logging.get_text("filename"), (config.dir / "lagent.log").string());
  EXPECT_EQ(agent.logging.get_int("maxBytes"), 1000000);
}

TEST(AgentConfig, UnknownSensorAndSectionAreErrors) {
  EXPECT_EQ(agent_error_of("[lmaster]\nhost = a\n\n[sensor:CPUPrecent]\ntime_interval = 1\n"),
            "lagent.conf:4: [sensor:CPUPrecent]: unknown sensor 'CPUPrecent', did you mean 'CPUPercent'? "
            "(`lagent sensors` lists them)");
  EXPECT_EQ(agent_error_of("[lmaster]\nhost = a\n\n[sensor:IPMIPower]\nmethod = command\n"),
            "lagent.conf:4: [sensor:IPMIPower]: method = command needs the `command` option (the program line to run)");
  EXPECT_EQ(agent_error_of("[sensor:PerfHW]\nevents = cpu_cycles, cycles_of_doom\n").rfind("lagent.conf:1: [sensor:PerfHW]: ", 0), 0u);
  EXPECT_EQ(agent_error_of("[lmastre]\nhost = a\n"),
            "lagent.conf:1: [lmastre]: unknown section, did you mean 'lmaster'? (known: [lmaster], [lagent], [logging], "
            "[jobs], [sensor:Name])");
  EXPECT_EQ(agent_error_of("[sensor:CPUTimes]\ntime_interval = -1\n"),
            "lagent.conf:2: [sensor:CPUTimes] time_interval: bad value '-1': must be between 0.01 and 86400");
  EXPECT_EQ(agent_error_of("[lmaster]\nincoming data port = 70000\n"),
            "lagent.conf:2: [lmaster] incoming data port: bad value '70000': must be between 1 and 65535");
}

TEST(AgentConfig, MissingFileIsAConfigError) {
  EXPECT_THROW(agent::load_agent_config("/nonexistent/lagent.conf"), ConfigError);
}

TEST(SampleConfigs, TheShippedSamplesLoad) {
  auto agent = agent::load_agent_config(FRUCTOSA_SOURCE_DIR "/etc/fructosa/lagent.conf");
  EXPECT_EQ(agent.master_port, 7888);
  EXPECT_EQ(agent.sensors.size(), 21u);  // the 20 psutil sensors and lagent's own
  auto master = master::load_master_config(FRUCTOSA_SOURCE_DIR "/etc/fructosa/lmaster.conf");
  EXPECT_EQ(master.port, 7888);
  ASSERT_EQ(master.outputs.size(), 1u);
  EXPECT_EQ(master.outputs[0].options.get_text("path"), "/var/lib/fructosa/fructosa.h5");
}

// "Every config key is in etc/fructosa/lmaster.conf with a comment": each key of [lmaster],
// [logging] and every output appears in its section (set, or commented out as `#key = default`).
TEST(SampleConfigs, TheMasterSampleDocumentsEveryKey) {
  std::ifstream file(FRUCTOSA_SOURCE_DIR "/etc/fructosa/lmaster.conf");
  std::stringstream text;
  text << file.rdbuf();
  std::map<std::string, std::string> sections;  // name -> its lines
  std::string current;
  std::string line;
  while (std::getline(text, line)) {
    auto open = line.find('[');
    if (open != std::string::npos && line.find_first_not_of("# ") == open && line.find(']') != std::string::npos) {
      current = line.substr(open + 1, line.find(']') - open - 1);
      continue;
    }
    sections[current] += line + "\n";
  }
  auto documents = [&](const std::string& section, const std::string& key) {
    std::istringstream lines(sections[section]);
    std::string entry;
    while (std::getline(lines, entry)) {
      auto start = entry.find_first_not_of("# ");
      if (start == std::string::npos || entry.compare(start, key.size(), key) != 0) continue;
      auto rest = entry.find_first_not_of(' ', start + key.size());
      if (rest != std::string::npos && entry[rest] == '=') return true;
    }
    return false;
  };
  for (const auto& spec : master::master_options()) EXPECT_TRUE(documents("lmaster", spec.name)) << spec.name;
  for (const auto& spec : logging_options()) EXPECT_TRUE(documents("logging", spec.name)) << spec.name;
  const auto& common = master::output_common_options();
  for (const char* section : {"stdout", "hdf5", "Graphite", "elasticsearch", "prometheus"}) {
    ASSERT_TRUE(sections.count(section)) << "no [" << section << "] in lmaster.conf";
    for (const auto& spec : master::output_options(section)) {
      bool is_common = std::any_of(common.begin(), common.end(), [&](const auto& c) { return c.name == spec.name; });
      if (!is_common) {
        EXPECT_TRUE(documents(section, spec.name)) << "[" << section << "] " << spec.name;
      }
    }
  }
  // The keys every output takes are shown once, in the first output section.
  for (const auto& spec : common) EXPECT_TRUE(documents("stdout", spec.name)) << spec.name;
}

// Every option declared relative_to_file is resolved by parse_section, whatever section it is in.
TEST(MasterConfig, PathsAreRelativeToTheFileInEverySection) {
  std::string ca = std::filesystem::temp_directory_path() / "ca.pem";  // absolute: kept
  TempConfig config("[lmaster]\ndata_dir = state\n[logging]\nfilename = log/lmaster.log\n"
                    "[hdf5]\npath = ../h5/data.h5\n[elasticsearch]\ncredentials_file = es.cred\n"
                    "ca_file = " + ca + "\n");
  auto master = master::load_master_config(config.path);
  EXPECT_EQ(master.data_dir, (config.dir / "state").string());
  EXPECT_EQ(master.logging.get_text("filename"), (config.dir / "log/lmaster.log").string());
  ASSERT_EQ(master.outputs.size(), 2u);
  EXPECT_EQ(master.outputs[0].options.get_text("path"), (config.dir.parent_path() / "h5/data.h5").string());
  EXPECT_EQ(master.outputs[1].options.get_text("credentials_file"), (config.dir / "es.cred").string());
  EXPECT_EQ(master.outputs[1].options.get_text("ca_file"), ca);
  EXPECT_TRUE(master.outputs[1].options.is_set("ca_file"));
  EXPECT_EQ(master.outputs[1].options.get_text("api_key"), "");  // other texts are untouched
}

namespace {

// lagent.conf shows every sensor: active as [sensor:Name], or as a commented-out block
// "#[sensor:Name]" whose "#key = value" lines are that sensor's options. Uncommenting every
// block gives a configuration that `lagent start` accepts.
TEST(SampleConfigs, TheAgentSampleShowsEverySensorAndItsBlocksWorkUncommented) {
  std::ifstream file(FRUCTOSA_SOURCE_DIR "/etc/fructosa/lagent.conf");
  std::string uncommented, line, block;
  std::set<std::string> shown;
  while (std::getline(file, line)) {
    if (line.rfind("[sensor:", 0) == 0 || line.rfind("#[sensor:", 0) == 0) {
      auto open = line.find('[');
      std::string name = line.substr(open + 8, line.find(']') - open - 8);
      shown.insert(name);
      block = line[0] == '#' ? name : "";
      if (!block.empty()) line.erase(0, 1);
    } else if (line.empty() || line[0] == '[') {
      block.clear();
    } else if (!block.empty() && line.size() > 1 && line[0] == '#' && line[1] != ' ') {
      std::string key = line.substr(1, line.find('=') - 1);
      key.erase(key.find_last_not_of(' ') + 1);
      const auto* sensor = sensors::find_sensor(block);
      ASSERT_NE(sensor, nullptr) << block;
      auto options = sensors::section_options(*sensor);
      EXPECT_TRUE(std::any_of(options.begin(), options.end(), [&](const auto& spec) { return spec.name == key; }))
          << "#[sensor:" << block << "] shows '" << key << "', which is not one of its options";
      line.erase(0, 1);
    }
    uncommented += line + "\n";
  }
  for (const auto* sensor : sensors::all_sensors()) {
    if (sensor->name != "lagent") {
      EXPECT_TRUE(shown.count(sensor->name)) << sensor->name << " is not in lagent.conf";
    }
  }
  TempConfig config(uncommented);
  EXPECT_NO_THROW(agent::check_agent_config(config.path));
  EXPECT_EQ(agent::load_agent_config(config.path).sensors.size(), sensors::all_sensors().size());
}

}  // namespace

namespace {

TEST(AgentConfig, SeveralMastersInFailoverOrder) {
  using Master = agent::AgentConfig::Master;
  EXPECT_EQ(agent::parse_masters("master01", 7888), (std::vector<Master>{{"master01", 7888}}));
  EXPECT_EQ(agent::parse_masters(" a , b:7999,[::1]:7000, [fe80::1] ", 7888),
            (std::vector<Master>{{"a", 7888}, {"b", 7999}, {"[::1]", 7000}, {"[fe80::1]", 7888}}));
  EXPECT_THROW(agent::parse_masters("a:http", 7888), ConfigError);
  EXPECT_THROW(agent::parse_masters("a:70000", 7888), ConfigError);
  EXPECT_EQ(agent_error_of("[lmaster]\nhost = a, b:0\n"), "lagent.conf:2: [lmaster] host: 'b:0' has a bad port '0'");
}

}  // namespace
