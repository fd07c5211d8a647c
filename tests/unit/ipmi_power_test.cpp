// IPMIPower against fake FreeIPMI tools written into a temporary directory (one printing a
// captured ipmi-dcmi output, one that hangs, one printing garbage, ...). Waiting is always
// polling a condition with a deadline; the only sleeps are inside the fake tools.
#include "sensor_round_support.h"

#include <fcntl.h>
#include <unistd.h>

using namespace fructosa;
using namespace fructosa::sensors;
using namespace fructosa::test::sensor_rounds;
using fructosa::test::TempDir;

namespace {

// `ipmi-dcmi --get-system-power-statistics` as FreeIPMI prints it (the layout of its
// ipmi-dcmi.c format strings; values from a Dell PowerEdge as quoted in public bug reports).
const char* kDcmiOutput =
    "Current Power                        : 332 Watts\n"
    "Minimum Power over sampling duration : 68 watts\n"
    "Maximum Power over sampling duration : 504 watts\n"
    "Average Power over sampling duration : 348 watts\n"
    "Time Stamp                           : 11/03/2023 - 08:36:29\n"
    "Statistics reporting time period     : 2685198000 milliseconds\n"
    "Power Measurement                    : Active\n";

// `ipmi-sensors --sensor-types=...` default table.
const char* kSensorsOutput =
    "ID  | Name            | Type                     | Reading    | Units | Event\n"
    "3   | Avg Power       | Current                  | 100.00     | W     | 'OK'\n"
    "58  | PS1 Input Power | Power Supply             | 120.00     | W     | 'OK'\n"
    "59  | PS2 Input Power | Power Supply             | 110.50     | W     | 'OK'\n"
    "60  | PS1 Current     | Current                  | 0.60       | A     | 'OK'\n"
    "61  | PS3 Input Power | Power Supply             | N/A        | W     | N/A\n"
    "62  | PS Redundancy   | Power Supply             | N/A        | N/A   | 'Fully Redundant'\n";

class IPMIPower : public ::testing::Test {
 protected:
  // An executable shell script in the temporary directory, written through a descriptor closed
  // on exec: a probe forking its next run meanwhile must not keep it open for writing in its
  // child, which would make the script unexecutable (ETXTBSY) for as long as that child runs.
  std::string tool(const std::string& name, const std::string& body) {
    std::string path = dir_.file(name);
    std::string text = "#!/bin/sh\n" + body;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    EXPECT_GE(fd, 0) << path;
    EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size())) << path;
    ::close(fd);
    return path;
  }
  // A script that prints `text` and records its arguments in <name>.args (replaced at once:
  // a probe that reported has its next run going already).
  std::string printing(const std::string& name, const std::string& text) {
    write_file(dir_.file(name + ".txt"), text);
    std::string args = dir_.file(name + ".args");
    return tool(name, "printf '%s\\n' \"$@\" > '" + args + ".$$'; mv '" + args + ".$$' '" + args + "'\ncat '" +
                          dir_.file(name + ".txt") + "'\n");
  }
  Probe dcmi(const std::string& path, std::vector<std::string> pairs = {}) {
    pairs.push_back("ipmi_dcmi=" + path);
    return make("IPMIPower", pairs);
  }
  TempDir dir_;
};

TEST_F(IPMIPower, DcmiReportsCurrentMinMaxAverageOfTheBmc) {
  auto probe = dcmi(printing("ipmi-dcmi", kDcmiOutput));
  auto first = round(probe);  // the run only starts now
  EXPECT_FALSE(first.reported);
  EXPECT_EQ(first.unavailable, "");
  auto result = settled(probe);
  ASSERT_TRUE(result.reported) << result.unavailable;
  auto& values = result.values[0];
  EXPECT_EQ(values["power"], 332);
  EXPECT_EQ(values["power_min"], 68);
  EXPECT_EQ(values["power_max"], 504);
  EXPECT_EQ(values["power_average"], 348);
  EXPECT_EQ(values["sampling_period"], 2685198);
  EXPECT_GE(values["age"], 0);
  EXPECT_GE(values["duration"], 0);
  EXPECT_EQ(values.size(), 7u);
  EXPECT_EQ(read_text(dir_.file("ipmi-dcmi.args")), "--get-system-power-statistics\n");
}

TEST_F(IPMIPower, ReportsTheLastResultWhileARunIsInFlightAndKillsAHungTool) {
  // The first run answers; every later one hangs (writing its pid first).
  write_file(dir_.file("dcmi.txt"), kDcmiOutput);
  std::string hung = dir_.file("hung.pid");
  auto path = tool("ipmi-dcmi", "if [ -e '" + dir_.file("answered") + "' ]; then echo $$ > '" + hung +
                                    ".tmp'; mv '" + hung + ".tmp' '" + hung + "'; exec sleep 1000; fi\n" +
                                    "touch '" + dir_.file("answered") + "'\ncat '" + dir_.file("dcmi.txt") + "'\n");
  auto probe = dcmi(path, {"timeout=2"});
  auto result = settled(probe);  // this round also started the second run
  ASSERT_TRUE(result.reported) << result.unavailable;
  EXPECT_EQ(result.values[0]["power"], 332);

  ASSERT_TRUE(eventually([&] { return fs::exists(hung); }));
  pid_t pid = pid_in(hung);
  ASSERT_GT(pid, 0);
  // While it hangs, a round returns at once with the last completed result.
  result = round(probe);
  ASSERT_TRUE(result.reported) << result.unavailable;
  EXPECT_EQ(result.values[0]["power"], 332);
  EXPECT_EQ(::kill(pid, 0), 0) << "the hung tool should still be running";

  // Past the timeout it is killed, reaped, and reported.
  bool late = eventually([&] {
    result = round(probe);
    return !result.unavailable.empty();
  });
  ASSERT_TRUE(late);
  EXPECT_NE(result.unavailable.find("did not finish within 2 s: killed (pid " + std::to_string(pid) + ")"),
            std::string::npos)
      << result.unavailable;
  EXPECT_TRUE(gone(pid));
  EXPECT_EQ(::kill(pid, 0), -1) << "reaped, not a zombie";
}

TEST_F(IPMIPower, KillsWhatAHungToolStartedAndWhatIsInFlightWhenTheSensorGoes) {
  // The tool's child hangs (not exec'd): the whole process group goes at the timeout.
  std::string grandchild = dir_.file("grandchild.pid");
  auto probe = dcmi(tool("ipmi-dcmi", "sleep 1000 &\necho $! > '" + grandchild + ".tmp'; mv '" + grandchild +
                                          ".tmp' '" + grandchild + "'\nwait\n"),
                    {"timeout=1.5"});
  EXPECT_FALSE(round(probe).reported);
  ASSERT_TRUE(eventually([&] { return fs::exists(grandchild); }));
  pid_t pid = pid_in(grandchild);
  auto result = settled(probe);
  EXPECT_NE(result.unavailable.find("did not finish within 1.5 s: killed"), std::string::npos) << result.unavailable;
  EXPECT_TRUE(eventually([&] { return gone(pid); }));

  // A sensor destroyed mid-run takes its run with it.
  std::string pidfile = dir_.file("tool.pid");
  auto doomed = dcmi(tool("ipmi-dcmi-2", "echo $$ > '" + pidfile + ".tmp'; mv '" + pidfile + ".tmp' '" + pidfile +
                                             "'\nexec sleep 1000\n"),
                     {"timeout=600"});
  EXPECT_FALSE(round(doomed).reported);
  ASSERT_TRUE(eventually([&] { return fs::exists(pidfile); }));
  pid = pid_in(pidfile);
  EXPECT_EQ(::kill(pid, 0), 0);
  doomed.sensor.reset();
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(IPMIPower, GarbageFailuresAndMissingToolsAreClearErrors) {
  auto garbage = dcmi(tool("ipmi-dcmi", "echo 'hello'\necho 'world'\n"));
  EXPECT_EQ(settled(garbage).unavailable,
            "ipmi-dcmi printed no 'Current Power : N Watts' line (output starts with 'hello')");

  auto failing = dcmi(tool("ipmi-dcmi-fails",
                           "echo 'ipmi_cmd_dcmi_get_power_reading: could not find inband device' >&2\nexit 1\n"));
  EXPECT_EQ(settled(failing).unavailable, dir_.file("ipmi-dcmi-fails") +
                                              " exited with status 1: ipmi_cmd_dcmi_get_power_reading: could "
                                              "not find inband device");

  std::string inactive = kDcmiOutput;
  inactive.replace(inactive.find(": Active"), 8, ": Not Available");
  auto off = dcmi(printing("ipmi-dcmi-off", inactive));
  EXPECT_NE(settled(off).unavailable.find("'Power Measurement : Not Available'"), std::string::npos);

  auto missing = dcmi(dir_.file("no-such-ipmi-dcmi"));
  EXPECT_EQ(round(missing).unavailable, dir_.file("no-such-ipmi-dcmi") + " not found: install freeipmi-tools");
  if (find_program("ipmi-dcmi").empty()) {
    auto by_name = make("IPMIPower", {});
    EXPECT_EQ(round(by_name).unavailable, "ipmi-dcmi not found: install freeipmi-tools");
    auto sensors = make("IPMIPower", {"method=sensors"});
    EXPECT_EQ(round(sensors).unavailable, "ipmi-sensors not found: install freeipmi-tools");
  }

  // A configuration mistake, found when the agent starts (exit 78), not at the first reading.
  EXPECT_THROW(make("IPMIPower", {"method=command"}), ConfigError);
}

TEST_F(IPMIPower, SensorsMethodReportsEveryWattSensorAndAddsUpTheSelectedOnes) {
  auto path = printing("ipmi-sensors", kSensorsOutput);
  // Written before any probe runs: a script written while a probe forks its next run can be
  // inherited open for writing by that child, and then cannot be executed (ETXTBSY).
  auto all_path = printing("ipmi-sensors-all", kSensorsOutput);
  auto probe = make("IPMIPower", {"method=sensors", "ipmi_sensors=" + path, "sensors_include=PS* Input Power",
                                  "arguments=-D LAN_2_0 -h bmc07 -p 'two words'"});
  auto result = settled(probe);
  ASSERT_TRUE(result.reported) << result.unavailable;
  auto& values = result.values[0];
  EXPECT_EQ(values["power"], 230.5);
  EXPECT_EQ(values["sensors.Avg Power"], 100);
  EXPECT_EQ(values["sensors.PS1 Input Power"], 120);
  EXPECT_EQ(values["sensors.PS2 Input Power"], 110.5);
  EXPECT_FALSE(values.count("sensors.PS1 Current"));     // amperes
  EXPECT_FALSE(values.count("sensors.PS3 Input Power"));  // N/A
  EXPECT_EQ(read_text(dir_.file("ipmi-sensors.args")),
            "--sensor-types=Current,Power_Supply,Power_Unit,Other_Units_Based_Sensor\n"
            "--ignore-not-available-sensors\n-D\nLAN_2_0\n-h\nbmc07\n-p\ntwo words\n");

  // (Each probe its own script: a probe that reported has started its next run already.)
  auto all = make("IPMIPower",
                  {"method=sensors", "ipmi_sensors=" + all_path, "sensor_types="});
  result = settled(all);
  EXPECT_EQ(result.values[0]["power"], 330.5);
  EXPECT_EQ(read_text(dir_.file("ipmi-sensors-all.args")), "--ignore-not-available-sensors\n");

  auto none = make("IPMIPower", {"method=sensors", "ipmi_sensors=" + path, "sensors_include=Nothing*"});
  EXPECT_EQ(settled(none).unavailable, "none of the 3 watt sensors of ipmi-sensors matches sensors_include");
}

TEST_F(IPMIPower, CommandMethodFindsTheWattsByItsDocumentedRule) {
  auto power_of = [&](const std::string& command, std::vector<std::string> pairs = {}) {
    pairs.push_back("method=command");
    pairs.push_back("command=" + command);
    auto probe = make("IPMIPower", pairs);
    auto result = settled(probe);
    return result.reported ? std::to_string(result.values[0]["power"]) : result.unavailable;
  };
  // ipmi-oem dell power-monitoring-over-interval style, through the shell.
  std::string oem = printing("ipmi-oem", "Interval      : 10 s\nSystem Power  : 216 W\n");
  EXPECT_EQ(power_of(oem + " dell power-monitoring-over-interval 10 systempower"), std::to_string(216.0));
  EXPECT_EQ(read_text(dir_.file("ipmi-oem.args")), "dell\npower-monitoring-over-interval\n10\nsystempower\n");
  EXPECT_EQ(power_of("echo 'Cpu 2: 40 watts; board 5W' | cat"), std::to_string(40.0));
  EXPECT_EQ(power_of("echo ' 187.5 '"), std::to_string(187.5));
  EXPECT_EQ(power_of("printf 'PSU1 : 90 Watts\\nTotal : 180 Watts\\n'", {"match=Total"}), std::to_string(180.0));
  EXPECT_EQ(power_of("echo 'the 5th Wonder'"),
            "the command printed no power ('<number> W' or 'Watts', or one number; output starts with 'the 5th "
            "Wonder')");
  EXPECT_EQ(power_of("echo oops >&2; exit 3"), "the command exited with status 3: oops");
}

}  // namespace
