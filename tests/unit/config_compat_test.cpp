// What a site migrating from FrUCToSA meets in its configuration files: hints for keys and
// sections that are probably misspelt, warnings (not errors) for FrUCToSA's sections that
// fructosa has no use for, and lmaster listening on a host name.
#include <gtest/gtest.h>
#include <netdb.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent.h"
#include "agent_config.h"
#include "config.h"
#include "localhost_name.h"
#include "master_config.h"

using namespace fructosa;

namespace {

// A configuration file in a fresh temporary directory, removed with the object.
struct TempFile {
  std::filesystem::path dir;
  std::string path;
  TempFile(const std::string& name, const std::string& text) {
    char pattern[] = "/tmp/fructosa-compat-XXXXXX";
    dir = ::mkdtemp(pattern);
    path = (dir / name).string();
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove_all(dir); }
  // `message` with this file's path written as its bare name.
  std::string relative(std::string message) const {
    auto at = message.find(path);
    if (at != std::string::npos) message.replace(at, path.size(), std::filesystem::path(path).filename().string());
    return message;
  }
};

std::string lagent_conf_error_of(const std::string& text) {
  TempFile file("lagent.conf", text);
  try {
    agent::check_agent_config(file.path);
  } catch (const ConfigError& error) {
    return file.relative(error.what());
  }
  return "no error";
}

std::string master_error_of(const std::string& text) {
  TempFile file("lmaster.conf", text);
  try {
    master::load_master_config(file.path);
  } catch (const ConfigError& error) {
    return file.relative(error.what());
  }
  return "no error";
}

}  // namespace

TEST(ClosestName, TyposAndWordsOfLongerNames) {
  std::vector<std::string> keys{"host", "incoming data port", "data_dir", "journal_max_bytes"};
  EXPECT_EQ(closest_name("port", keys), "incoming data port");  // FrUCToSA's docker files
  EXPECT_EQ(closest_name("hots", keys), "host");                 // a swap
  EXPECT_EQ(closest_name("HOST", keys), "host");                 // case does not count
  EXPECT_EQ(closest_name("datadir", keys), "data_dir");
  EXPECT_EQ(closest_name("journal_max_byte", keys), "journal_max_bytes");
  EXPECT_EQ(closest_name("colour", keys), "");  // nothing close: no hint at all
  EXPECT_EQ(closest_name("", keys), "");
  EXPECT_EQ(did_you_mean("hots", keys), ", did you mean 'host'?");
  EXPECT_EQ(did_you_mean("zebra", keys), "");
}

TEST(CompatConfig, UnknownKeysStayErrorsWithAHint) {
  auto starts = [](const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; };
  std::string error = master_error_of("[lmaster]\nhost = 127.0.0.1\nport = 7888\n");
  EXPECT_TRUE(starts(error, "lmaster.conf:3: [lmaster] port: unknown key, did you mean 'incoming data port'? (known keys: "))
      << error;
  error = lagent_conf_error_of("[lmaster]\nport = 7888\n");
  EXPECT_TRUE(starts(error, "lagent.conf:2: [lmaster] port: unknown key, did you mean 'incoming data port'? (known keys: "))
      << error;
  error = lagent_conf_error_of("[sensor:CPUPercent]\ntime_intervall = 1\n");
  EXPECT_TRUE(starts(error, "lagent.conf:2: [sensor:CPUPercent] time_intervall: unknown key, did you mean 'time_interval'?"))
      << error;
  EXPECT_EQ(master_error_of("[Grafite]\nhost = localhost\n"),
            "lmaster.conf:1: [Grafite]: unknown section, did you mean 'Graphite'? (known: [lmaster], [logging], "
            "[stdout], [hdf5], [Graphite], [elasticsearch], [prometheus], [report])");
}

TEST(CompatConfig, FrUCToSAsSlurmSensorNamesItsReplacement) {
  std::string error = lagent_conf_error_of("[sensor:SlurmJobs]\ntime_interval = 10\n");
  EXPECT_EQ(error.rfind("lagent.conf:1: [sensor:SlurmJobs]: FrUCToSA's SlurmJobs sensor is replaced by", 0), 0u) << error;
  EXPECT_NE(error.find("[jobs] scheduler = slurm"), std::string::npos) << error;
  EXPECT_NE(error.find("[sensor:JobCgroup]"), std::string::npos) << error;
}

TEST(CompatConfig, NonsenseSectionsStayErrors) {
  // FrUCToSA's own test file of nonsense (tests/functional/data/lagent-test.2.conf).
  EXPECT_EQ(lagent_conf_error_of("[logging]\nlevel = DEBUG\n[wacalamo:con_tomatre]\ntime_interval = 3\n"),
            "lagent.conf:3: [wacalamo:con_tomatre]: unknown section (known: [lmaster], [lagent], [logging], [jobs], "
            "[sensor:Name])");
}

TEST(CompatConfig, SectionsFrUCToSAKnewAreIgnoredWithAWarning) {
  // FrUCToSA's examples/etc/fructosa/lmaster.conf, and a Redis store fructosa does not have.
  TempFile master_file("lmaster.conf",
                       "[qmaster]\nhost = localhost\nincoming data port = 7888\n"
                       "[logging]\nfilename = qmaster.log\nmaxBytes = 1048576\nbackupCount = 10\n"
                       "[Redis]\nhost = localhost\nport = 6379\n[stdout]\n");
  auto master = master::load_master_config(master_file.path);
  ASSERT_EQ(master.warnings.size(), 2u);
  EXPECT_EQ(master_file.relative(master.warnings[0]).rfind("lmaster.conf:1: [qmaster]: ignored: QULo's name for [lmaster]", 0), 0u)
      << master.warnings[0];
  EXPECT_EQ(master_file.relative(master.warnings[1]).rfind("lmaster.conf:8: [Redis]: ignored: ", 0), 0u) << master.warnings[1];
  ASSERT_EQ(master.outputs.size(), 1u);

  TempFile agent_file("lagent.conf", "[qmaster]\nhost = localhost\nincoming data port = 7888\n"
                                     "[sensor:CPUPercent]\ntime_interval = 60\n");
  auto agent = agent::load_agent_config(agent_file.path);
  ASSERT_EQ(agent.warnings.size(), 1u);
  EXPECT_EQ(agent_file.relative(agent.warnings[0]).rfind("lagent.conf:1: [qmaster]: ignored: ", 0), 0u) << agent.warnings[0];
  EXPECT_EQ(agent.sensors.front().definition->name, "CPUPercent");
}

TEST(ListenAddresses, NamesResolveAddressesAndInterfacesStay) {
  EXPECT_EQ(master::listen_addresses("*"), std::vector<std::string>{"*"});
  EXPECT_EQ(master::listen_addresses("10.1.2.3"), std::vector<std::string>{"10.1.2.3"});
  EXPECT_EQ(master::listen_addresses("::1"), std::vector<std::string>{"[::1]"});
  EXPECT_EQ(master::listen_addresses("[::1]"), std::vector<std::string>{"[::1]"});
  EXPECT_EQ(master::listen_addresses("lo"), std::vector<std::string>{"lo"});  // ZeroMQ's interface name
  // localhost resolves (glibc answers it without DNS) to the loopback addresses only.
  auto local = master::listen_addresses("localhost");
  ASSERT_FALSE(local.empty());
  for (const auto& address : local) EXPECT_TRUE(address == "127.0.0.1" || address == "[::1]") << address;
  EXPECT_THROW(master::listen_addresses("no-such-host.invalid"), std::runtime_error);
}

TEST(ListenAddresses, LocalhostNamesAreTheLoopbackWithoutAResolverEntry) {
  EXPECT_TRUE(is_localhost_name("localhost"));
  EXPECT_TRUE(is_localhost_name("LocalHost."));
  EXPECT_TRUE(is_localhost_name("node07.localhost"));
  EXPECT_FALSE(is_localhost_name("notlocalhost"));
  EXPECT_FALSE(is_localhost_name("localhost.example.org"));
  EXPECT_FALSE(is_localhost_name("host"));
  // No /etc/hosts names node07.localhost (a debootstrap chroot has no /etc/hosts at all, where
  // even "localhost" reaches this path): the loopback all the same.
  for (const auto& address : master::listen_addresses("node07.localhost"))
    EXPECT_TRUE(address == "127.0.0.1" || address == "[::1]") << address;
  EXPECT_FALSE(master::listen_addresses("node07.localhost").empty());
  // lagent's ZeroMQ connect resolves names itself: it gets the loopback's address instead.
  addrinfo* found = nullptr;
  bool known = ::getaddrinfo("node07.localhost", nullptr, nullptr, &found) == 0;  // systemd's nss-myhostname
  if (found) ::freeaddrinfo(found);
  EXPECT_EQ(with_localhost_fallback("node07.localhost"), known ? "node07.localhost" : "127.0.0.1");
  EXPECT_EQ(with_localhost_fallback("master2.invalid"), "master2.invalid");
  EXPECT_EQ(with_localhost_fallback("10.1.2.3"), "10.1.2.3");
}

TEST(ListenAddresses, AnUnresolvableHostIsAConfigErrorNamingTheKey) {
  std::string error = master_error_of("[lmaster]\nhost = no-such-host.invalid\n[stdout]\n");
  EXPECT_EQ(error.rfind("lmaster.conf:2: [lmaster] host: cannot resolve 'no-such-host.invalid': ", 0), 0u) << error;
}
