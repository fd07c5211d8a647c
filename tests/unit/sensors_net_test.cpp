// Network sensors (NetIOCounters, NetConnections, NetIFStats, NetIFAddrs) on fixtures:
// tests/fixtures/net (synthesized /proc/net/dev, captured /proc/net/tcp* udp* unix, synthesized
// sysfs NICs, see its README) and node_exporter's sys/class/net. Expected values come from
// psutil 5.9.4 pointed at the same files (psutil.PROCFS_PATH) where psutil reads files, and
// are worked out by hand, with node_exporter's e2e-output.txt, where psutil uses ioctls.
#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "glob_match.h"
#include "sensor.h"
#include "test_support.h"

using namespace fructosa;
using namespace fructosa::sensors;

namespace {

const std::string kFixtures = FRUCTOSA_FIXTURES;
const std::string kNetProc = kFixtures + "/net/proc";
const std::string kNetSys = kFixtures + "/net/sys";
const std::string kNodeExporterSys = kFixtures + "/node-exporter/sys";

struct Reading {
  std::map<std::string, double> metrics;
  std::map<std::string, std::string> labels;
};

class Probe {
 public:
  Probe(const std::string& name, const std::string& proc, const std::string& sys,
        const std::vector<std::string>& options = {})
      : definition_(find_sensor(name)) {
    if (!definition_) throw std::runtime_error("no sensor " + name);
    options_ = parse_pairs(*definition_->options, options, "test");
    sensor_ = definition_->make(SensorContext{Roots{proc, sys}, options_});
  }

  Reading read() {
    std::vector<Sample> samples;
    SampleWriter out(samples, "node", definition_->name, 1);
    EXPECT_TRUE(sensor_->sample(out));
    Reading reading;
    for (const auto& sample : samples) {
      for (const auto& metric : sample.metrics) {
        EXPECT_TRUE(reading.metrics.emplace(metric.key, metric.value).second)
            << "duplicate key " << metric.key;
        EXPECT_NE(definition_->catalog->find(metric.key), nullptr)
            << metric.key << " is not in the catalog";
      }
      for (const auto& label : sample.labels) reading.labels[label.key] = label.value;
    }
    return reading;
  }

  // The reason SensorUnavailable gives, or "" when sample() succeeds.
  std::string unavailable() {
    std::vector<Sample> samples;
    SampleWriter out(samples, "node", definition_->name, 1);
    try {
      sensor_->sample(out);
    } catch (const SensorUnavailable& why) {
      return why.what();
    }
    return "";
  }

 private:
  const SensorDefinition* definition_;
  Options options_;
  std::unique_ptr<Sensor> sensor_;
};

// A scratch procfs root whose net/dev the test rewrites in place between readings (the sensor
// keeps the file open, as on a real /proc).
class ScratchProc {
 public:
  ScratchProc() {
    char pattern[] = "/tmp/fructosa-net-XXXXXX";
    root_ = ::mkdtemp(pattern);
    std::filesystem::create_directories(root_ / "net");
  }
  ~ScratchProc() { std::filesystem::remove_all(root_); }
  void install(const std::string& fixture, const std::string& name) {
    std::ifstream in(fixture);
    std::ofstream(root_ / "net" / name, std::ios::trunc) << in.rdbuf();
  }
  std::string path() const { return root_.string(); }

 private:
  std::filesystem::path root_;
};

std::map<std::string, double> snetio(double bytes_sent, double bytes_recv, double packets_sent,
                                     double packets_recv, double errin, double errout,
                                     double dropin, double dropout,
                                     const std::string& prefix = "") {
  return {{prefix + "bytes_sent", bytes_sent},
          {prefix + "bytes_recv", bytes_recv},
          {prefix + "packets_sent", packets_sent},
          {prefix + "packets_recv", packets_recv},
          {prefix + "errin", errin},
          {prefix + "errout", errout},
          {prefix + "dropin", dropin},
          {prefix + "dropout", dropout}};
}

std::map<std::string, double> merged(std::initializer_list<std::map<std::string, double>> parts) {
  std::map<std::string, double> all;
  for (const auto& part : parts) all.insert(part.begin(), part.end());
  return all;
}

// One /proc/net/tcp line, padded to 149 characters as the kernel pads them; every other one
// is ESTABLISHED (01), the rest TIME_WAIT (06).
std::string fmt_line(int i) {
  char line[160];
  std::snprintf(line, sizeof line,
                "%4d: 0100007F:%04X 0100007F:88B5 %s 00000000:00000000 00:00000000 00000000     0  "
                "      0 %d 1 "
                "0000000000000000 20 0 0 10 -1",
                i, 30000 + i, i % 2 ? "06" : "01", 70000 + i);
  std::string text = line;
  text.resize(149, ' ');
  return text;
}

}  // namespace

TEST(GlobMatch, FollowsPythonFnmatchcase) {
  // Each line agrees with Python's fnmatch.fnmatchcase(name, pattern).
  EXPECT_TRUE(glob_match("eth*", "eth0"));
  EXPECT_TRUE(glob_match("eth*", "eth0.100"));  // '*' crosses dots
  EXPECT_TRUE(glob_match("*.100", "eth0.100"));
  EXPECT_FALSE(glob_match("eth*", "veth0"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_FALSE(glob_match("?", ""));
  EXPECT_TRUE(glob_match("ib?", "ib0"));
  EXPECT_FALSE(glob_match("ib?", "ib10"));
  EXPECT_TRUE(glob_match("ib[0-9]", "ib7"));
  EXPECT_FALSE(glob_match("ib[0-9]", "ibx"));
  EXPECT_TRUE(glob_match("[!l]*", "eth0"));
  EXPECT_FALSE(glob_match("[!l]*", "lo"));
  EXPECT_TRUE(glob_match("[]]", "]"));
  EXPECT_TRUE(glob_match("[a-]", "-"));
  EXPECT_TRUE(glob_match("a[", "a["));  // no closing bracket: literal
  EXPECT_FALSE(glob_match("a[", "ab"));
  EXPECT_TRUE(glob_match("*a*b*c", "xxaxbxxbc"));
  EXPECT_FALSE(glob_match("*a*b*c", "xxaxbxxbcx"));
  EXPECT_FALSE(glob_match("ETH*", "eth0"));  // case-sensitive

  NameFilter everything;
  EXPECT_TRUE(everything.accepts("lo"));
  NameFilter filter({"eth*", "ib*"}, {"eth0.*"});
  EXPECT_TRUE(filter.accepts("eth0"));
  EXPECT_TRUE(filter.accepts("ib0"));
  EXPECT_FALSE(filter.accepts("eth0.100"));  // exclude wins
  EXPECT_FALSE(filter.accepts("lo"));
  EXPECT_FALSE(NameFilter({}, {"lo"}).accepts("lo"));
  EXPECT_TRUE(NameFilter({}, {"lo"}).accepts("eth0"));
}

TEST(NetIOCounters, TotalsMatchPsutil) {
  Probe sensor("NetIOCounters", kNetProc, kNetSys);
  // psutil.net_io_counters():
  EXPECT_EQ(sensor.read().metrics,
            snetio(79920370341, 157980537285, 58909625, 118076802, 3, 1, 34, 6));
}

TEST(NetIOCounters, PerNicMatchesPsutilWithDotsInNamesReplaced) {
  Probe sensor("NetIOCounters", kNetProc, kNetSys, {"pernic=true"});
  auto metrics = sensor.read().metrics;
  EXPECT_EQ(metrics.size(), 9u * 8u);
  // psutil.net_io_counters(pernic=True)['eth0'], ['eth0.100'], ['wlan0']:
  auto expected =
      merged({snetio(12345678901, 98123456789, 23456789, 70512345, 3, 1, 17, 4, "eth0."),
              snetio(900000000, 4294967000, 2100000, 3100000, 0, 0, 0, 0, "eth0_100."),
              snetio(201345, 734512, 1502, 4012, 0, 0, 12, 0, "wlan0.")});
  for (const auto& [key, value] : expected) EXPECT_EQ(metrics[key], value) << key;
  EXPECT_EQ(metrics.count("docker0.bytes_sent"), 1u);
  EXPECT_EQ(metrics.count("eth0.100.bytes_sent"), 0u);
}

TEST(NetIOCounters, IncludeAndExcludeApplyToTotals) {
  // eth* and ib0 without the VLAN: eth0 + ib0.
  Probe sensor("NetIOCounters", kNetProc, kNetSys, {"include=eth*, ib[0-9]", "exclude=*.*"});
  EXPECT_EQ(sensor.read().metrics,
            snetio(12345678901.0 + 66666666666, 98123456789.0 + 55555555555, 23456789 + 33333333,
                   70512345 + 44444444, 3, 1, 17 + 5, 4 + 2));
  Probe pernic("NetIOCounters", kNetProc, kNetSys,
               {"pernic=true", "exclude=lo,docker*,veth*,bond0,dmz,int"});
  auto metrics = pernic.read().metrics;
  std::set<std::string> nics;
  for (const auto& [key, value] : metrics) nics.insert(key.substr(0, key.rfind('.')));
  EXPECT_EQ(nics, (std::set<std::string>{"eth0", "eth0_100", "ib0", "wlan0"}));

  Probe nothing("NetIOCounters", kNetProc, kNetSys, {"include=nosuchnic*"});
  EXPECT_NE(nothing.unavailable().find("include/exclude"), std::string::npos);
}

TEST(NetIOCounters, WrappedAndResetCountersKeepGrowingAsPsutilNowrap) {
  ScratchProc proc;
  proc.install(kNetProc + "/net/dev", "dev");
  Probe totals("NetIOCounters", proc.path(), kNetSys);
  Probe pernic("NetIOCounters", proc.path(), kNetSys, {"pernic=true"});
  totals.read();
  pernic.read();
  // eth0.100's bytes_recv went from 4294967000 to 1000 (a 32-bit wrap), every wlan0 counter
  // restarted, docker0 left and veth9f3a came. psutil.net_io_counters() on the same two files:
  proc.install(kFixtures + "/net/wrap/dev", "dev");
  auto expected_totals = snetio(79920574165, 157980743127, 58909862, 118077059, 3, 1, 34, 6);
  EXPECT_EQ(totals.read().metrics, expected_totals);
  auto metrics = pernic.read().metrics;
  auto expected = merged({snetio(900001000, 4294968000, 2100010, 3100010, 0, 0, 0, 0, "eth0_100."),
                          snetio(201645, 735012, 1504, 4016, 0, 0, 12, 0, "wlan0."),
                          snetio(2424, 4242, 24, 42, 0, 0, 0, 0, "veth9f3a.")});
  for (const auto& [key, value] : expected) EXPECT_EQ(metrics[key], value) << key;
  EXPECT_EQ(metrics.count("docker0.bytes_sent"), 0u);
  // The reminders stay: the same file again gives the same values.
  EXPECT_EQ(totals.read().metrics, expected_totals);
}

TEST(NetIOCounters, UnavailableWithoutProcNetDev) {
  Probe sensor("NetIOCounters", "/nonexistent-proc", kNetSys);
  EXPECT_NE(sensor.unavailable().find("/nonexistent-proc/net/dev"), std::string::npos);
}

TEST(NetConnections, CountsPerKindProtocolAndStateMatchPsutil) {
  // psutil.net_connections(kind) on the captured files: lengths and TCP statuses.
  const std::map<std::string, double> inet4{{"count", 13}, {"tcp4.count", 10}, {"udp4.count", 3}};
  Probe sensor("NetConnections", kNetProc, kNetSys);  // kind=inet
  auto metrics = sensor.read().metrics;
  const std::map<std::string, double> expected{
      {"count", 17},         {"tcp4.count", 10},     {"tcp6.count", 3},    {"udp4.count", 3},
      {"udp6.count", 1},     {"tcp.ESTABLISHED", 6}, {"tcp.SYN_SENT", 0},  {"tcp.SYN_RECV", 0},
      {"tcp.FIN_WAIT1", 0},  {"tcp.FIN_WAIT2", 1},   {"tcp.TIME_WAIT", 1}, {"tcp.CLOSE", 0},
      {"tcp.CLOSE_WAIT", 1}, {"tcp.LAST_ACK", 0},    {"tcp.LISTEN", 4},    {"tcp.CLOSING", 0}};
  EXPECT_EQ(metrics, expected);

  auto tcp4 = Probe("NetConnections", kNetProc, kNetSys, {"kind=tcp4"}).read().metrics;
  EXPECT_EQ(tcp4["count"], 10);
  EXPECT_EQ(tcp4["tcp.ESTABLISHED"], 4);
  EXPECT_EQ(tcp4["tcp.LISTEN"], 3);
  EXPECT_EQ(tcp4.count("tcp6.count"), 0u);

  auto inet6 = Probe("NetConnections", kNetProc, kNetSys, {"kind=inet6"}).read().metrics;
  EXPECT_EQ(inet6, (std::map<std::string, double>{{"count", 4},
                                                  {"tcp6.count", 3},
                                                  {"udp6.count", 1},
                                                  {"tcp.ESTABLISHED", 2},
                                                  {"tcp.SYN_SENT", 0},
                                                  {"tcp.SYN_RECV", 0},
                                                  {"tcp.FIN_WAIT1", 0},
                                                  {"tcp.FIN_WAIT2", 0},
                                                  {"tcp.TIME_WAIT", 0},
                                                  {"tcp.CLOSE", 0},
                                                  {"tcp.CLOSE_WAIT", 0},
                                                  {"tcp.LAST_ACK", 0},
                                                  {"tcp.LISTEN", 1},
                                                  {"tcp.CLOSING", 0}}));

  auto udp = Probe("NetConnections", kNetProc, kNetSys, {"kind=udp"}).read().metrics;
  EXPECT_EQ(udp,
            (std::map<std::string, double>{{"count", 4}, {"udp4.count", 3}, {"udp6.count", 1}}));
  EXPECT_EQ(Probe("NetConnections", kNetProc, kNetSys, {"kind=inet4"}).read().metrics.at("count"),
            inet4.at("count"));

  // UNIX: 6 sockets listed. psutil on these files says 3: without /proc/PID/fd to tell the
  // owners apart it merges the four unnamed stream sockets (same type, no path) into one entry.
  auto unix_ = Probe("NetConnections", kNetProc, kNetSys, {"kind=unix"}).read().metrics;
  EXPECT_EQ(unix_, (std::map<std::string, double>{{"count", 6}, {"unix.count", 6}}));
  auto all = Probe("NetConnections", kNetProc, kNetSys, {"kind=all"}).read().metrics;
  EXPECT_EQ(all["count"], 17 + 6);
  EXPECT_EQ(all["tcp.LISTEN"], 4);
}

TEST(NetConnections, MissingIpv6FilesMeanNoIpv6ButMissingIpv4IsUnavailable) {
  ScratchProc proc;
  proc.install(kNetProc + "/net/tcp", "tcp");
  proc.install(kNetProc + "/net/udp", "udp");
  auto metrics = Probe("NetConnections", proc.path(), kNetSys).read().metrics;  // inet
  EXPECT_EQ(metrics["count"], 13);
  EXPECT_EQ(metrics["tcp6.count"], 0);
  Probe unix_("NetConnections", proc.path(), kNetSys, {"kind=unix"});
  EXPECT_NE(unix_.unavailable().find(proc.path() + "/net/unix"), std::string::npos);
}

TEST(NetConnections, ReadsTablesLongerThanOneKernelPage) {
  // /proc/net/tcp comes in page-sized reads; a fixture longer than that must be read whole.
  ScratchProc proc;
  std::ofstream tcp(proc.path() + "/net/tcp");
  tcp << "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
         "timeout inode\n";
  for (int i = 0; i < 500; ++i)  // 500 lines of 150 bytes, as the kernel pads them: 75 kB
    tcp << fmt_line(i) << "\n";
  tcp.close();
  std::ofstream(proc.path() + "/net/udp") << "  sl  local_address rem_address   st\n";
  auto metrics = Probe("NetConnections", proc.path(), kNetSys).read().metrics;
  EXPECT_EQ(metrics["count"], 500);
  EXPECT_EQ(metrics["tcp.ESTABLISHED"], 250);
  EXPECT_EQ(metrics["tcp.TIME_WAIT"], 250);
}

namespace {

// Sockets of every kind NetConnections counts, held open by a live test: per family (IPv6 when
// this kernel has it), a TCP listener, 2 connections (4 ESTABLISHED sockets), one connection
// closed by the client only (client FIN_WAIT2, kept by the kernel as a timewait socket with
// that substate; server CLOSE_WAIT), one closed by both (client TIME_WAIT), a TCP socket bound
// but neither listening nor connected (listed nowhere in /proc/net/tcp), a bound UDP socket and
// a connected one; UNIX stream and datagram pairs and a listening UNIX socket.
class LiveSockets {
 public:
  LiveSockets() {
    inet(AF_INET);
    ipv6_ = inet(AF_INET6);
    int pair[2];
    for (int type : {SOCK_STREAM, SOCK_DGRAM}) {
      if (::socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, pair) != 0) fail("socketpair");
      keep(pair[0]);
      keep(pair[1]);
    }
    int listener = keep(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    auto name = "fructosa-test-" + std::to_string(::getpid());  // abstract: no file to remove
    std::memcpy(address.sun_path + 1, name.data(), name.size());
    if (::bind(listener, reinterpret_cast<sockaddr*>(&address),
               static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())) != 0 ||
        ::listen(listener, 4) != 0)
      fail("unix listener");
  }
  ~LiveSockets() {
    for (int fd : fds_) ::close(fd);
  }
  LiveSockets(const LiveSockets&) = delete;
  LiveSockets& operator=(const LiveSockets&) = delete;
  bool ipv6() const { return ipv6_; }

 private:
  [[noreturn]] static void fail(const std::string& what) {
    throw std::runtime_error(what + ": " + std::strerror(errno));
  }
  int keep(int fd) {
    if (fd < 0) fail("socket");
    fds_.push_back(fd);
    return fd;
  }
  static sockaddr_storage loopback(int family) {
    sockaddr_storage address{};
    if (family == AF_INET) {
      auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
      v4->sin_family = AF_INET;
      v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else {
      auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
      v6->sin6_family = AF_INET6;
      v6->sin6_addr = in6addr_loopback;
    }
    return address;
  }
  // A socket of `type` bound to the loopback address, port chosen by the kernel; -1 when the
  // family is not there (IPv6).
  int bound(int family, int type, sockaddr_storage& address) {
    address = loopback(family);
    socklen_t length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    int fd = ::socket(family, type | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      if (family == AF_INET6) return -1;
      fail("socket");
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ::close(fd);
      if (family == AF_INET6) return -1;
      fail("bind");
    }
    return keep(fd);
  }
  bool inet(int family) {
    sockaddr_storage address;
    int listener = bound(family, SOCK_STREAM, address);
    if (listener < 0) return false;
    if (::listen(listener, 16) != 0) fail("listen");
    socklen_t length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    auto connect = [&](int& client, int& server) {
      client = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (client < 0 || ::connect(client, reinterpret_cast<sockaddr*>(&address), length) != 0)
        fail("connect");
      server = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (server < 0) fail("accept");
    };
    int client, server;
    for (int i = 0; i < 2; ++i) {
      connect(client, server);
      keep(client);
      keep(server);
    }
    connect(client, server);  // closed by the client: FIN_WAIT2 and CLOSE_WAIT
    ::close(client);
    keep(server);
    connect(client, server);  // closed by both, client first: TIME_WAIT
    ::close(client);
    ::close(server);
    sockaddr_storage unused;
    bound(family, SOCK_STREAM, unused);  // bound only
    int udp = bound(family, SOCK_DGRAM, address);
    int connected = keep(::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (::connect(connected, reinterpret_cast<sockaddr*>(&address), length) != 0)
      fail("connect udp");
    (void)udp;
    return true;
  }

  std::vector<int> fds_;
  bool ipv6_ = false;
};

// How many descriptors of this process are open on /proc/net socket tables.
int open_socket_tables() {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    auto target = std::filesystem::read_symlink(entry.path(), error).string();
    for (std::string_view table : {"/net/tcp", "/net/tcp6", "/net/udp", "/net/udp6", "/net/unix"})
      if (!error && target.size() >= table.size() &&
          target.compare(target.size() - table.size(), table.size(), table) == 0)
        ++count;
  }
  return count;
}

}  // namespace

TEST(NetConnections, NetlinkCountsAreTheProcNetCountsOnThisMachine) {
  // On the live /proc the sensor asks the kernel over NETLINK_SOCK_DIAG; through a symlink to
  // /proc it reads the /proc/net files as on fixtures. Both must count the same sockets, the
  // bound-only TCP sockets of LiveSockets left out as /proc/net/tcp leaves them out.
  int probe = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (probe < 0) GTEST_SKIP() << "no NETLINK_SOCK_DIAG here: " << std::strerror(errno);
  ::close(probe);
  LiveSockets sockets;
  ScratchProc scratch;
  const std::string linked = scratch.path() + "/proc";
  std::filesystem::create_directory_symlink("/proc", linked);
  const int tables_before = open_socket_tables();
  for (std::string kind : {"all", "inet", "inet6", "tcp4", "tcp6", "udp4", "unix"}) {
    SCOPED_TRACE("kind=" + kind);
    Probe netlink("NetConnections", "/proc", "/sys", {"kind=" + kind});
    netlink.read();
    EXPECT_EQ(open_socket_tables(), tables_before)
        << "the sensor on /proc read /proc/net files (netlink refused?)";
    Probe files("NetConnections", linked, "/sys", {"kind=" + kind});
    // Other processes may open and close sockets meanwhile (this machine runs other tests):
    // read files, netlink, files until the three agree, as they do at once on a quiet machine.
    // When the two file reads agree but netlink differs twice, netlink counts otherwise. Only
    // if the file reads hardly ever agree (sockets changing all the time) may the netlink
    // count lie anywhere between them, widened by 2 for sockets that came and went between
    // the reads.
    std::map<std::string, double> before, counted, after;
    bool agreed = false;
    int quiet_mismatches = 0;
    for (int attempt = 0; attempt < 10 && !agreed; ++attempt) {
      before = files.read().metrics;
      counted = netlink.read().metrics;
      after = files.read().metrics;
      agreed = before == after && counted == after;
      quiet_mismatches += before == after && !agreed;
    }
    if (!agreed) {
      EXPECT_LT(quiet_mismatches, 2) << "/proc/net stood still but netlink counted otherwise";
      ASSERT_EQ(counted.size(), after.size());
      for (const auto& [key, value] : after) {
        ASSERT_EQ(counted.count(key), 1u) << key;
        double low = std::min(before.at(key), value) - 2,
               high = std::max(before.at(key), value) + 2;
        EXPECT_TRUE(low <= counted[key] && counted[key] <= high)
            << key << ": netlink " << counted[key] << ", /proc/net " << before.at(key) << " then "
            << value;
      }
    }
    if (kind == "all") {  // LiveSockets' own sockets are there
      const double families = sockets.ipv6() ? 2 : 1;
      EXPECT_GE(counted["tcp.LISTEN"], families);
      EXPECT_GE(counted["tcp.ESTABLISHED"], 4 * families);
      EXPECT_GE(counted["tcp.CLOSE_WAIT"], families);
      EXPECT_GE(counted["tcp.FIN_WAIT2"] + counted["tcp.TIME_WAIT"], 2 * families);
      EXPECT_GE(counted["udp4.count"], 2);
      EXPECT_GE(counted["unix.count"], 5);
    }
  }
}

TEST(NetIFStats, NodeExporterNicsAsPsutilWouldReportThem) {
  // The NICs of proc/net/dev that node_exporter's sysfs has (lo and the others are skipped,
  // as psutil skips ENODEV). All are up with operstate "up", so IFF_RUNNING: isup.
  // flags 0x1303 = up broadcast promisc allmulti multicast (e2e: node_network_flags 4867),
  // mtu 1500 (e2e: node_network_mtu_bytes), duplex "full", speed: eth0 1000 Mbit/s (e2e:
  // node_network_speed_bytes 1.25e+08), bond0 -1 (SPEED_UNKNOWN: psutil says 0).
  Probe sensor("NetIFStats", kNetProc, kNodeExporterSys);
  auto reading = sensor.read();
  std::map<std::string, double> expected;
  for (const auto& [nic, speed] :
       std::map<std::string, double>{{"eth0", 1000}, {"bond0", 0}, {"dmz", 1000}, {"int", 1000}}) {
    expected[nic + ".isup"] = 1;
    expected[nic + ".duplex"] = 2;
    expected[nic + ".speed"] = speed;
    expected[nic + ".mtu"] = 1500;
    EXPECT_EQ(reading.labels[nic + ".flags"], "up,broadcast,running,promisc,allmulti,multicast")
        << nic;
  }
  EXPECT_EQ(reading.metrics, expected);
}

TEST(NetIFStats, SynthesizedNics) {
  Probe sensor("NetIFStats", kNetProc, kNetSys);
  auto reading = sensor.read();
  const std::map<std::string, double> expected{
      // lo: up, operstate unknown counts as running; no ethtool: duplex unknown, speed 0.
      {"lo.isup", 1},
      {"lo.duplex", 0},
      {"lo.speed", 0},
      {"lo.mtu", 65536},
      {"eth0_100.isup", 1},
      {"eth0_100.duplex", 2},
      {"eth0_100.speed", 10000},
      {"eth0_100.mtu", 1500},
      {"ib0.isup", 1},
      {"ib0.duplex", 2},
      {"ib0.speed", 100000},
      {"ib0.mtu", 2044},
      // up but dormant: not running, so psutil's isup is False.
      {"wlan0.isup", 0},
      {"wlan0.duplex", 1},
      {"wlan0.speed", 54},
      {"wlan0.mtu", 1500},
      // down: the kernel gives no duplex/speed (EINVAL), so unknown and 0.
      {"docker0.isup", 0},
      {"docker0.duplex", 0},
      {"docker0.speed", 0},
      {"docker0.mtu", 1500}};
  EXPECT_EQ(reading.metrics, expected);
  const std::map<std::string, std::string> flags{
      {"lo.flags", "up,loopback,running"},
      {"eth0_100.flags", "up,broadcast,running,multicast"},
      {"ib0.flags", "up,broadcast,running,multicast"},
      {"wlan0.flags", "up,broadcast,multicast"},
      {"docker0.flags", "broadcast,multicast"}};
  EXPECT_EQ(reading.labels, flags);
}

// A NIC that is up and refuses duplex and speed (lo, tun: EINVAL; here the files are missing)
// is not asked again until its flags change.
TEST(NetIFStats, LinkSettingsRefusedAreAskedAgainWhenTheFlagsChange) {
  test::TempDir dir;
  const std::string nic = dir.path() + "/sys/class/net/tun0";
  std::filesystem::create_directories(nic);
  std::filesystem::create_directories(dir.path() + "/proc/net");
  std::ofstream(dir.path() + "/proc/net/dev") << "Inter-|   Receive\n face |bytes\n  tun0: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\n";
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(nic + "/" + name) << text; };
  write("flags", "0x1091\n");  // up, pointopoint, noarp, multicast
  write("operstate", "unknown\n");
  write("mtu", "1500\n");
  Probe sensor("NetIFStats", dir.path() + "/proc", dir.path() + "/sys");
  EXPECT_EQ(sensor.read().metrics["tun0.speed"], 0);

  write("speed", "100\n");
  write("duplex", "full\n");
  EXPECT_EQ(sensor.read().metrics["tun0.speed"], 0);  // the same flags: not asked
  write("flags", "0x1191\n");  // promiscuous now
  auto reading = sensor.read();
  EXPECT_EQ(reading.metrics["tun0.speed"], 100);
  EXPECT_EQ(reading.metrics["tun0.duplex"], 2);
}

TEST(NetIFStats, UnavailableWhenNoNicHasSysfs) {
  Probe sensor("NetIFStats", kNetProc, "/nonexistent-sys");
  EXPECT_NE(sensor.unavailable().find("/nonexistent-sys/class/net"), std::string::npos);
}

TEST(NetIFAddrs, CountsMatchTheAddressLabelsAndLoopbackHasItsMac) {
  // getifaddrs cannot be pointed at a fixture: this reads the machine's own NICs.
  Probe sensor("NetIFAddrs", "/nonexistent-proc", "/nonexistent-sys");
  auto reading = sensor.read();
  ASSERT_FALSE(reading.metrics.empty());
  for (const auto& [key, count] : reading.metrics) {
    for (int i = 0; i < count; ++i)
      EXPECT_EQ(reading.labels.count(key + "." + std::to_string(i) + ".address"), 1u)
          << key << " " << i;
    EXPECT_EQ(
        reading.labels.count(key + "." + std::to_string(static_cast<int>(count)) + ".address"), 0u);
  }
  for (const auto& [key, value] : reading.labels) EXPECT_FALSE(value.empty()) << key;
  // Every network namespace has lo, and its link layer address is six zero bytes.
  EXPECT_EQ(reading.metrics["lo.AF_PACKET"], 1);
  EXPECT_EQ(reading.labels["lo.AF_PACKET.0.address"], "00:00:00:00:00:00");
  EXPECT_EQ(reading.labels.count("lo.AF_PACKET.0.netmask"), 0u);
}
