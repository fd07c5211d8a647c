// RAPL, Temperature, InfiniBand and Lustre (colmet's hardware backends) on node_exporter's
// capture (tests/fixtures/node-exporter/sys: class/powercap, class/infiniband, class/thermal;
// expected figures from its e2e-output.txt) and on synthesized trees (tests/fixtures/
// thermal-zones, omnipath, lustre; README in each), plus scratch copies for wrap-around,
// permissions, vanishing entries and a fake perfquery.
#include <grp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "sensor.h"
#include "sysfs_tree.h"
#include "sensor_probe.h"
#include "test_support.h"

using namespace fructosa;
using namespace fructosa::sensors;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = FRUCTOSA_FIXTURES;
const std::string kCapture = kFixtures + "/node-exporter/sys";

using Probe = test::SensorProbe;

Probe make(const std::string& name, const std::string& proc_root, const std::string& sys_root,
           std::vector<std::string> pairs = {}) {
  return test::make_probe(name, Roots{proc_root, sys_root}, pairs);
}

Probe make_sys(const std::string& name, const std::string& sys_root, std::vector<std::string> pairs = {}) {
  return make(name, "/nonexistent-proc", sys_root, std::move(pairs));
}

using Values = std::map<std::string, double>;

Values read(Probe& probe) {
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "test", 1);
  EXPECT_TRUE(probe.sensor->sample(out));
  Values values;
  for (const auto& sample : samples)
    for (const auto& metric : sample.metrics) {
      EXPECT_EQ(values.count(metric.key), 0u) << "duplicate key " << metric.key;
      values[metric.key] = metric.value;
    }
  return values;
}

std::string unavailable(Probe& probe) {
  std::vector<Sample> samples;
  SampleWriter out(samples, "node", "test", 1);
  try {
    probe.sensor->sample(out);
  } catch (const SensorUnavailable& why) {
    return why.what();
  }
  return "";
}

// Every key has a catalog entry with a unit or an explicit unitless state.
void expect_catalogued(const std::string& sensor, const Values& values) {
  const SensorDefinition* definition = find_sensor(sensor);
  ASSERT_NE(definition, nullptr);
  for (const auto& [key, value] : values)
    EXPECT_NE(definition->catalog->find(key), nullptr) << sensor << ": no catalog entry for " << key;
}

// Rewrites a file in place (O_TRUNC keeps the inode a sensor holds open).
void rewrite(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text << "\n";
}

std::string slurp(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A copy of a fixture directory in a scratch directory that other users can traverse.
std::string copy_tree(const test::TempDir& temp, const std::string& from, const std::string& to) {
  fs::path target = fs::path(temp.path()) / to;
  fs::create_directories(target.parent_path());
  fs::copy(from, target, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  return target.string();
}

// Runs `body(dir)` as an unprivileged user (nobody) in a child process when the tests run as
// root, so that a file's 0400 mode denies it as it does to a non-root lagent; returns what `body`
// returned. The child enters `dir` before it drops root; where nobody may not traverse dir's
// parents (a chroot whose / is 0700), it runs body(".") instead: the same tree, from there.
// Without root, runs body(dir) in this process.
std::string as_unprivileged(const std::string& dir,
                            const std::function<std::string(const std::string&)>& body) {
  if (::geteuid() != 0) return body(dir);
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string result;
    if (::chdir(dir.c_str()) != 0 || ::setgroups(0, nullptr) != 0 ||
        ::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0)
      result = "cannot enter " + dir + " or drop privileges";
    else
      try {
        result = body(::access(dir.c_str(), X_OK) == 0 ? dir : std::string("."));
      } catch (const std::exception& error) {
        result = std::string("exception: ") + error.what();
      }
    (void)!::write(fds[1], result.data(), result.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string result;
  char chunk[1024];
  ssize_t got;
  while ((got = ::read(fds[0], chunk, sizeof chunk)) > 0) result.append(chunk, static_cast<std::size_t>(got));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return result;
}

void make_traversable(const std::string& root) {
  fs::permissions(root, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// sysfs_tree.h

TEST(HwBackendHelpers, NaturalOrderAndUniqueNames) {
  EXPECT_TRUE(sysfs::natural_less("thermal_zone2", "thermal_zone10"));
  EXPECT_FALSE(sysfs::natural_less("thermal_zone10", "thermal_zone2"));
  EXPECT_TRUE(sysfs::natural_less("intel-rapl:0", "intel-rapl:0:0"));
  EXPECT_TRUE(sysfs::natural_less("intel-rapl:0:1", "intel-rapl:0:10"));
  EXPECT_TRUE(sysfs::natural_less("intel-rapl:1", "intel-rapl-mmio:0") !=
              sysfs::natural_less("intel-rapl-mmio:0", "intel-rapl:1"));
  sysfs::UniqueNames names;
  EXPECT_EQ(names.add("acpitz"), "acpitz");
  EXPECT_EQ(names.add("x86_pkg_temp"), "x86_pkg_temp");
  EXPECT_EQ(names.add("acpitz"), "acpitz#1");
  EXPECT_EQ(names.add("acpitz"), "acpitz#2");
  EXPECT_EQ(names.add("cpu.thermal"), "cpu_thermal");
  EXPECT_EQ(sysfs::leading_int("4: ACTIVE\n"), 4);
  EXPECT_EQ(sysfs::parse_u64("240422366267\n"), 240422366267u);
  EXPECT_FALSE(sysfs::parse_u64("N/A (no PMA)\n"));
}

// ---------------------------------------------------------------------------------------------
// RAPL

TEST(HwBackendRapl, NodeExporterCaptureMatchesE2eOutput) {
  auto probe = make_sys("RAPL", kCapture);
  auto values = read(probe);
  // node_rapl_package_joules_total{index="0"} 240422.366267, node_rapl_core_joules_total 118821.284256
  ASSERT_EQ(values.size(), 2u);
  EXPECT_DOUBLE_EQ(values.at("package-0.energy"), 240422.366267);
  EXPECT_DOUBLE_EQ(values.at("package-0.core.energy"), 118821.284256);
  expect_catalogued("RAPL", values);
  EXPECT_EQ(metric_info("RAPL", "package-0.energy").unit, "joules");
  EXPECT_EQ(metric_info("RAPL", "package-0.core.energy").kind, Kind::counter);
}

TEST(HwBackendRapl, CorrectsWrapAroundWithMaxEnergyRange) {
  test::TempDir temp;
  std::string sys = copy_tree(temp, kCapture + "/class/powercap", "sys/class/powercap");
  std::string package = sys + "/intel-rapl:0/energy_uj";
  auto probe = make_sys("RAPL", temp.path() + "/sys", {"rescan_interval=0"});
  EXPECT_DOUBLE_EQ(read(probe).at("package-0.energy"), 240422.366267);
  // max_energy_range_uj is 262143328850: the counter passed it and restarted from 0.
  rewrite(package, "1000000");
  auto values = read(probe);
  EXPECT_DOUBLE_EQ(values.at("package-0.energy"), (262143328850.0 + 1000000.0) / 1e6);
  EXPECT_DOUBLE_EQ(values.at("package-0.core.energy"), 118821.284256);  // untouched
  rewrite(package, "2000000");
  EXPECT_DOUBLE_EQ(read(probe).at("package-0.energy"), (262143328850.0 + 2000000.0) / 1e6);
  rewrite(package, "500");  // a second wrap
  EXPECT_DOUBLE_EQ(read(probe).at("package-0.energy"), (2 * 262143328850.0 + 500.0) / 1e6);
  // Without a readable max_energy_range_uj the previous reading is what was lost.
  fs::remove(sys + "/intel-rapl:0:0/max_energy_range_uj");
  auto fresh = make_sys("RAPL", temp.path() + "/sys");
  EXPECT_DOUBLE_EQ(read(fresh).at("package-0.core.energy"), 118821.284256);
  rewrite(sys + "/intel-rapl:0:0/energy_uj", "1000");
  EXPECT_DOUBLE_EQ(read(fresh).at("package-0.core.energy"), (118821284256.0 + 1000.0) / 1e6);
}

TEST(HwBackendRapl, ZoneNamesInKeysForSubzonesPsysAndMmio) {
  test::TempDir temp;
  auto zone = [&](const std::string& entry, const std::string& name, const std::string& uj) {
    std::string dir = temp.path() + "/sys/class/powercap/" + entry;
    fs::create_directories(dir);
    rewrite(dir + "/name", name);
    rewrite(dir + "/energy_uj", uj);
    rewrite(dir + "/max_energy_range_uj", "262143328850");
  };
  fs::create_directories(temp.path() + "/sys/class/powercap/intel-rapl");
  rewrite(temp.path() + "/sys/class/powercap/intel-rapl/enabled", "1");
  fs::create_directories(temp.path() + "/sys/class/powercap/intel-rapl-mmio");
  zone("intel-rapl:0", "package-0", "1000000");
  zone("intel-rapl:0:0", "core", "2000000");
  zone("intel-rapl:0:1", "uncore", "3000000");
  zone("intel-rapl:0:2", "dram", "4000000");
  zone("intel-rapl:1", "package-1", "5000000");
  zone("intel-rapl:1:0", "core", "6000000");
  zone("intel-rapl:1:1", "dram", "7000000");
  zone("intel-rapl:2", "psys", "8000000");
  zone("intel-rapl-mmio:0", "package-0", "9000000");
  auto probe = make_sys("RAPL", temp.path() + "/sys");
  auto values = read(probe);
  EXPECT_EQ(values, (Values{{"package-0.energy", 1},
                            {"package-0.core.energy", 2},
                            {"package-0.uncore.energy", 3},
                            {"package-0.dram.energy", 4},
                            {"package-1.energy", 5},
                            {"package-1.core.energy", 6},
                            {"package-1.dram.energy", 7},
                            {"psys.energy", 8},
                            {"mmio-package-0.energy", 9}}));
  expect_catalogued("RAPL", values);
}

TEST(HwBackendRapl, RootOnlyEnergyIsUnavailableWithTheReason) {
  test::TempDir temp;
  make_traversable(temp.path());
  std::string sys = copy_tree(temp, kCapture + "/class/powercap", "sys/class/powercap");
  for (const char* zone : {"intel-rapl:0", "intel-rapl:0:0"})
    fs::permissions(sys + "/" + zone + "/energy_uj",
                    ::geteuid() == 0 ? fs::perms::owner_read : fs::perms::none);
  std::string reason = as_unprivileged(temp.path(), [&](const std::string& root) {
    auto probe = make_sys("RAPL", root + "/sys");
    return unavailable(probe);
  });
  EXPECT_NE(reason.find("readable by root only"), std::string::npos) << reason;
  EXPECT_NE(reason.find("CAP_DAC_READ_SEARCH"), std::string::npos) << reason;
  EXPECT_NE(reason.find("energy_uj"), std::string::npos) << reason;

  // One zone readable, the other not: the readable one is reported (and the other logged).
  fs::permissions(sys + "/intel-rapl:0/energy_uj", fs::perms::owner_read | fs::perms::group_read |
                                                       fs::perms::others_read);
  std::string partial = as_unprivileged(temp.path(), [&](const std::string& root) {
    auto probe = make_sys("RAPL", root + "/sys");
    std::vector<Sample> samples;
    SampleWriter out(samples, "node", "test", 1);
    if (!probe.sensor->sample(out)) return std::string("no sample");
    std::string keys;
    for (const auto& sample : samples)
      for (const auto& metric : sample.metrics) keys += metric.key + "=" + std::to_string(metric.value) + ";";
    return keys;
  });
  EXPECT_EQ(partial, "package-0.energy=240422.366267;");
}

TEST(HwBackendRapl, UnavailableWithoutPowercap) {
  test::TempDir temp;
  auto probe = make_sys("RAPL", temp.path());
  std::string reason = unavailable(probe);
  EXPECT_NE(reason.find(temp.path() + "/class/powercap"), std::string::npos) << reason;
  fs::create_directories(temp.path() + "/class/powercap/intel-rapl");  // driver, no zones
  auto empty = make_sys("RAPL", temp.path());
  EXPECT_NE(unavailable(empty).find("no intel-rapl zone"), std::string::npos) << unavailable(empty);
}

// ---------------------------------------------------------------------------------------------
// Temperature

TEST(HwBackendTemperature, NodeExporterThermalZone) {
  auto probe = make_sys("Temperature", kCapture);
  // e2e-output.txt: node_thermal_zone_temp{type="cpu-thermal",zone="0"} 12.376
  auto values = read(probe);
  EXPECT_EQ(values, (Values{{"cpu-thermal", 12.376}}));
  EXPECT_EQ(metric_info("Temperature", "cpu-thermal").unit, "celsius");
}

TEST(HwBackendTemperature, EveryZoneKeyedByTypeWithRepeatsNumbered) {
  auto probe = make_sys("Temperature", kFixtures + "/thermal-zones/sys");
  auto values = read(probe);
  EXPECT_EQ(values, (Values{{"x86_pkg_temp", 45},
                            {"acpitz", 27.8},
                            {"acpitz#1", 29.8},  // thermal_zone2
                            {"acpitz#2", 16.8},  // thermal_zone10, after zone 2
                            {"sensor-ambient", -5.25},
                            {"cpu_thermal", 52.125}}));
  expect_catalogued("Temperature", values);
  auto only_acpi = make_sys("Temperature", kFixtures + "/thermal-zones/sys", {"include=acpi*"});
  EXPECT_EQ(read(only_acpi).size(), 3u);
  auto none = make_sys("Temperature", kFixtures + "/thermal-zones/sys", {"exclude=*"});
  EXPECT_NE(unavailable(none).find("include/exclude"), std::string::npos);
}

TEST(HwBackendTemperature, RereadsAndSkipsUnreadableZones) {
  test::TempDir temp;
  std::string thermal = copy_tree(temp, kFixtures + "/thermal-zones/sys/class/thermal", "sys/class/thermal");
  auto probe = make_sys("Temperature", temp.path() + "/sys");
  EXPECT_EQ(read(probe).at("x86_pkg_temp"), 45);
  rewrite(thermal + "/thermal_zone0/temp", "61500");
  rewrite(thermal + "/thermal_zone1/temp", "");  // not a number this round (device asleep)
  auto values = read(probe);
  EXPECT_EQ(values.at("x86_pkg_temp"), 61.5);
  EXPECT_EQ(values.count("acpitz"), 0u);
  EXPECT_EQ(values.at("acpitz#1"), 29.8);  // keys do not shift
}

TEST(HwBackendTemperature, UnavailableWithoutZones) {
  test::TempDir temp;
  auto probe = make_sys("Temperature", temp.path());
  EXPECT_NE(unavailable(probe).find(temp.path() + "/class/thermal"), std::string::npos) << unavailable(probe);
}

// ---------------------------------------------------------------------------------------------
// InfiniBand

TEST(HwBackendInfiniBand, NodeExporterCaptureMatchesE2eOutput) {
  auto probe = make_sys("InfiniBand", kCapture);
  auto values = read(probe);
  expect_catalogued("InfiniBand", values);
  // node_infiniband_port_data_{received,transmitted}_bytes_total: 4-byte words x4.
  EXPECT_EQ(values.at("mlx4_0.1.port_rcv_data"), 1.8527668e+07);
  EXPECT_EQ(values.at("mlx4_0.1.port_xmit_data"), 1.493376e+07);
  EXPECT_EQ(values.at("mlx4_0.2.port_rcv_data"), 0);
  EXPECT_EQ(values.at("mlx4_0.2.port_xmit_data"), 0);
  EXPECT_EQ(values.at("mlx4_0.1.port_rcv_packets"), 6.825908347e+09);
  EXPECT_EQ(values.at("mlx4_0.1.port_xmit_packets"), 6.235865e+06);
  EXPECT_EQ(values.at("mlx4_0.1.unicast_rcv_packets"), 61148);
  EXPECT_EQ(values.at("mlx4_0.1.unicast_xmit_packets"), 61239);
  EXPECT_EQ(values.at("mlx4_0.1.multicast_rcv_packets"), 93);
  EXPECT_EQ(values.at("mlx4_0.1.multicast_xmit_packets"), 16);
  EXPECT_EQ(values.at("mlx4_0.2.unicast_rcv_packets"), 0);
  EXPECT_EQ(values.at("mlx4_0.1.port_xmit_discards"), 5);
  EXPECT_EQ(values.at("mlx4_0.1.port_rcv_errors"), 0);
  EXPECT_EQ(values.at("mlx4_0.1.port_xmit_wait"), 4.294967295e+09);
  EXPECT_EQ(values.at("mlx4_0.1.link_downed"), 0);
  EXPECT_EQ(values.at("mlx4_0.2.link_error_recovery"), 0);
  // counters/ of port 2 has no port_rcv_packets: counters_ext/port_rcv_packets_64 fills in.
  EXPECT_EQ(values.at("mlx4_0.2.port_rcv_packets"), 0);
  // node_infiniband_state_id, _physical_state_id, _rate_bytes_per_second (5e9 B/s = 40 Gb/s).
  for (const char* port : {"i40iw0.1", "mlx4_0.1", "mlx4_0.2"}) {
    EXPECT_EQ(values.at(std::string(port) + ".state"), 4) << port;
    EXPECT_EQ(values.at(std::string(port) + ".phys_state"), 5) << port;
  }
  EXPECT_EQ(values.at("mlx4_0.1.rate"), 40000);
  EXPECT_EQ(values.at("i40iw0.1.rate"), 10000);  // 1.25e9 B/s
  // i40iw0's counters read "N/A (no PMA)": only its state and rate.
  int i40iw = 0;
  for (const auto& [key, value] : values) i40iw += key.rfind("i40iw0.", 0) == 0;
  EXPECT_EQ(i40iw, 3);
  EXPECT_EQ(metric_info("InfiniBand", "mlx4_0.1.port_rcv_data").unit, "bytes");
  EXPECT_EQ(metric_info("InfiniBand", "mlx4_0.1.rate").unit, "Mbit/s");
  EXPECT_EQ(metric_info("InfiniBand", "mlx4_0.1.symbol_error").kind, Kind::counter);
  EXPECT_EQ(metric_info("InfiniBand", "mlx4_0.1.state").kind, Kind::gauge);
}

TEST(HwBackendInfiniBand, LegacyCountersExtFillInForUnreadableCounters) {
  test::TempDir temp;
  std::string ib = copy_tree(temp, kCapture + "/class/infiniband", "sys/class/infiniband");
  rewrite(ib + "/mlx4_0/ports/1/counters/port_rcv_data", "N/A (no PMA)");
  auto probe = make_sys("InfiniBand", temp.path() + "/sys", {"include=mlx4_*"});
  auto values = read(probe);
  EXPECT_EQ(values.at("mlx4_0.1.port_rcv_data"), 4631917.0 * 4);  // port_rcv_data_64
  EXPECT_EQ(values.count("i40iw0.1.state"), 0u);  // include
  rewrite(ib + "/mlx4_0/ports/1/counters/port_rcv_data", "5000000");
  EXPECT_EQ(read(probe).at("mlx4_0.1.port_rcv_data"), 20000000);
}

TEST(HwBackendInfiniBand, OmniPathHfi1) {
  auto probe = make_sys("InfiniBand", kFixtures + "/omnipath/sys");
  auto values = read(probe);
  expect_catalogued("InfiniBand", values);
  EXPECT_EQ(values.at("hfi1_0.1.port_xmit_data"), 2345678901234.0 * 4);
  EXPECT_EQ(values.at("hfi1_0.1.port_rcv_data"), 1234567890123.0 * 4);
  EXPECT_EQ(values.at("hfi1_0.1.port_rcv_packets"), 9876543210);
  EXPECT_EQ(values.at("hfi1_0.1.link_error_recovery"), 3);
  EXPECT_EQ(values.at("hfi1_0.1.port_xmit_discards"), 7);
  EXPECT_EQ(values.at("hfi1_0.1.state"), 4);
  EXPECT_EQ(values.at("hfi1_0.1.phys_state"), 5);
  EXPECT_EQ(values.at("hfi1_0.1.rate"), 100000);
  EXPECT_EQ(values.size(), 21u + 3u);  // the 21 counters, state, phys_state, rate
  auto hw = make_sys("InfiniBand", kFixtures + "/omnipath/sys", {"hw_counters=true"});
  auto with_hw = read(hw);
  EXPECT_EQ(with_hw.at("hfi1_0.1.hw.TxFlits"), 1172839450617);
  EXPECT_EQ(with_hw.at("hfi1_0.1.hw.RxPkt"), 9876543210);
  EXPECT_EQ(with_hw.count("hfi1_0.1.hw.lifespan"), 0u);
  EXPECT_EQ(with_hw.size(), values.size() + 4);
  expect_catalogued("InfiniBand", with_hw);
}

TEST(HwBackendInfiniBand, PerfqueryOptionWithAFakePerfqueryOnPath) {
  test::TempDir temp;
  fs::create_directories(temp.path() + "/bin");
  std::string script = temp.path() + "/bin/perfquery";
  std::string log = temp.path() + "/calls.log";
  rewrite(script,
          "#!/bin/sh\n"
          "echo \"$@\" >> " + log + "\n"
          "echo '# Port extended counters: Lid 3 port 1 (CapMask: 0x5A00)'\n"
          "echo 'PortSelect:......................1'\n"
          "echo 'CounterSelect:...................0x0000'\n"
          "echo 'PortXmitData:....................1000'\n"
          "echo 'PortRcvData:.....................2000'\n"
          "echo 'PortXmitPkts:....................30'\n"
          "echo 'PortRcvPkts:.....................40'\n"
          "echo 'PortUnicastXmitPkts:.............25'\n"
          "echo 'PortUnicastRcvPkts:..............35'\n"
          "echo 'PortMulticastXmitPkts:...........5'\n"
          "echo 'PortMulticastRcvPkts:............5'\n");
  fs::permissions(script, fs::perms::owner_all);
  const char* old_path = ::getenv("PATH");
  std::string saved = old_path ? old_path : "";
  ::setenv("PATH", (temp.path() + "/bin:" + saved).c_str(), 1);
  auto probe = make_sys("InfiniBand", kCapture, {"perfquery=true", "include=mlx4_0"});
  auto values = read(probe);
  ::setenv("PATH", saved.c_str(), 1);
  EXPECT_EQ(values.at("mlx4_0.1.port_xmit_data"), 4000);
  EXPECT_EQ(values.at("mlx4_0.1.port_rcv_data"), 8000);
  EXPECT_EQ(values.at("mlx4_0.2.port_xmit_packets"), 30);
  EXPECT_EQ(values.at("mlx4_0.2.port_rcv_packets"), 40);
  EXPECT_EQ(values.at("mlx4_0.1.unicast_rcv_packets"), 35);
  EXPECT_EQ(values.at("mlx4_0.1.port_xmit_discards"), 5);  // not in -x output: sysfs
  EXPECT_EQ(values.at("mlx4_0.1.state"), 4);
  std::string calls = slurp(log);
  EXPECT_NE(calls.find("-x -C mlx4_0 -P 1\n"), std::string::npos) << calls;
  EXPECT_NE(calls.find("-x -C mlx4_0 -P 2\n"), std::string::npos) << calls;
}

TEST(HwBackendInfiniBand, HungOrFailingPerfqueryFallsBackToSysfs) {
  test::TempDir temp;
  std::string hung = temp.path() + "/hung-perfquery";
  // A grandchild holding the pipe too: the whole process group goes at the deadline.
  rewrite(hung, "#!/bin/sh\necho 'PortXmitData:....1'\nsleep 600 &\nexec sleep 601\n");
  fs::permissions(hung, fs::perms::owner_all);
  std::string failing = temp.path() + "/failing-perfquery";
  rewrite(failing, "#!/bin/sh\necho \"ibwarn: [1234] mad_rpc_open_port: can't open UMAD port\" >&2\nexit 1\n");
  fs::permissions(failing, fs::perms::owner_all);
  for (const auto& command : {hung, failing, temp.path() + "/missing-perfquery"}) {
    auto probe = make_sys("InfiniBand", kCapture,
                          {"perfquery=true", "perfquery_command=" + command, "perfquery_timeout=0.3"});
    for (int round = 0; round < 2; ++round) {
      auto values = read(probe);  // returns: the hung one is killed at the deadline
      EXPECT_EQ(values.at("mlx4_0.1.port_xmit_data"), 1.493376e+07) << command;
      EXPECT_EQ(values.at("mlx4_0.1.port_rcv_data"), 1.8527668e+07) << command;
    }
  }
}

TEST(HwBackendInfiniBand, UnavailableWithoutDevices) {
  test::TempDir temp;
  auto probe = make_sys("InfiniBand", temp.path());
  EXPECT_NE(unavailable(probe).find(temp.path() + "/class/infiniband"), std::string::npos)
      << unavailable(probe);
  fs::create_directories(temp.path() + "/class/infiniband");
  auto empty = make_sys("InfiniBand", temp.path());
  EXPECT_NE(unavailable(empty).find("no InfiniBand/RDMA device"), std::string::npos) << unavailable(empty);
}

// ---------------------------------------------------------------------------------------------
// Lustre

TEST(HwBackendLustre, ProcfsStatsOfALustre25Client) {
  std::string root = kFixtures + "/lustre/v2.5";
  auto probe = make("Lustre", root + "/proc", root + "/sys");
  auto values = read(probe);
  expect_catalogued("Lustre", values);
  EXPECT_EQ(values.at("scratch.read_bytes.count"), 17);
  EXPECT_EQ(values.at("scratch.read_bytes.bytes"), 30511233);
  EXPECT_EQ(values.at("scratch.write_bytes.count"), 11);
  EXPECT_EQ(values.at("scratch.write_bytes.bytes"), 16252700);
  EXPECT_EQ(values.at("scratch.osc_read.bytes"), 30511233);
  EXPECT_EQ(values.at("scratch.open.count"), 8);
  EXPECT_EQ(values.at("scratch.close.count"), 8);
  EXPECT_EQ(values.at("scratch.getattr.count"), 26);
  EXPECT_EQ(values.at("scratch.statfs.count"), 1);
  EXPECT_EQ(values.at("scratch.inode_permission.count"), 41);
  EXPECT_EQ(values.count("scratch.snapshot_time.count"), 0u);
  EXPECT_EQ(values.size(), 20u + 4u);  // 20 counter lines, 4 of them [bytes]
  EXPECT_EQ(metric_info("Lustre", "scratch.read_bytes.bytes").unit, "bytes");
  EXPECT_EQ(metric_info("Lustre", "scratch.open.count").unit, "count");
}

TEST(HwBackendLustre, DebugfsStatsOfALustre215ClientWithTwoMountsOfOneFileSystem) {
  std::string root = kFixtures + "/lustre/v2.15";
  auto probe = make("Lustre", root + "/proc", root + "/sys");
  auto values = read(probe);
  expect_catalogued("Lustre", values);
  EXPECT_EQ(values.at("scratch.read_bytes.count"), 1234);
  EXPECT_EQ(values.at("scratch.read_bytes.bytes"), 987654321);
  EXPECT_EQ(values.at("scratch.write_bytes.bytes"), 456789012);
  EXPECT_DOUBLE_EQ(values.at("scratch.open.time"), 0.045678);
  EXPECT_EQ(values.at("scratch.open.count"), 345);
  EXPECT_EQ(values.at("scratch.ioctl.count"), 12);
  EXPECT_EQ(values.at("scratch.opencount.count"), 345);
  EXPECT_EQ(values.count("scratch.opencount.bytes") + values.count("scratch.opencount.time"), 0u);
  EXPECT_EQ(values.at("scratch#1.read_bytes.bytes"), 73728);
  EXPECT_EQ(values.at("scratch#1.getattr.count"), 4);
  EXPECT_EQ(values.at("home.write_bytes.bytes"), 204800);
  EXPECT_EQ(values.at("home.statfs.count"), 1);
  EXPECT_DOUBLE_EQ(values.at("home.statfs.time"), 70e-6);
  for (const char* line : {"snapshot_time", "start_time", "elapsed_time"})
    EXPECT_EQ(values.count(std::string("scratch.") + line + ".count"), 0u) << line;
  EXPECT_EQ(metric_info("Lustre", "scratch.open.time").unit, "seconds");
  EXPECT_EQ(metric_info("Lustre", "scratch#1.read_bytes.count").kind, Kind::counter);
}

TEST(HwBackendLustre, UnmountedFileSystemIsDroppedAndNoneIsUnavailable) {
  test::TempDir temp;
  std::string llite = copy_tree(temp, kFixtures + "/lustre/v2.15/sys/kernel/debug/lustre/llite",
                                "sys/kernel/debug/lustre/llite");
  auto probe = make("Lustre", temp.path() + "/proc", temp.path() + "/sys");
  EXPECT_EQ(read(probe).count("home.open.count"), 1u);
  fs::remove_all(llite + "/home-ffff9a1c07a1d000");
  auto values = read(probe);
  EXPECT_EQ(values.count("home.open.count"), 0u);
  EXPECT_EQ(values.at("scratch.open.count"), 345);
  fs::remove_all(llite);
  EXPECT_NE(unavailable(probe).find("no Lustre client mount"), std::string::npos) << unavailable(probe);
}

// ---------------------------------------------------------------------------------------------
// Steady rounds on the fixtures (where these sensors have something to read, unlike on a
// build machine) keep the descriptor count: files stay open, perfquery pipes are closed.

TEST(HwBackendRounds, RepeatedRoundsOnFixturesKeepDescriptors) {
  auto descriptors = [] {
    std::size_t count = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++count;
    return count;
  };
  test::TempDir temp;
  std::string script = temp.path() + "/perfquery";
  rewrite(script, "#!/bin/sh\necho 'PortXmitData:....................1000'\n");
  fs::permissions(script, fs::perms::owner_all);
  std::string lustre = kFixtures + "/lustre/v2.15";
  std::vector<Probe> probes;
  probes.push_back(make_sys("RAPL", kCapture, {"rescan_interval=0"}));
  probes.push_back(make_sys("Temperature", kFixtures + "/thermal-zones/sys"));
  probes.push_back(make_sys("InfiniBand", kFixtures + "/omnipath/sys", {"hw_counters=true"}));
  probes.push_back(make_sys("InfiniBand", kCapture, {"perfquery=true", "perfquery_command=" + script}));
  probes.push_back(make("Lustre", lustre + "/proc", lustre + "/sys", {"rescan_interval=0"}));
  for (auto& probe : probes) read(probe);
  const std::size_t before = descriptors();
  for (int round = 0; round < 50; ++round)
    for (auto& probe : probes) read(probe);
  EXPECT_EQ(descriptors(), before);
}
