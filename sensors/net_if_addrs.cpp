// NetIFAddrs: psutil.net_if_addrs() on Linux: the addresses of each NIC, from getifaddrs(3)
// as psutil reads it (no procfs/sysfs equivalent gives the same list, so this sensor ignores
// the configured roots). Per NIC and family, the number of addresses is a metric and the
// addresses themselves are labels, numbered within the family in psutil's list order:
//   eth0.AF_INET = 1, label eth0.AF_INET.0.address = 192.0.2.2, eth0.AF_INET.0.netmask = ...
// As psutil: entries whose address cannot be written (an unknown family, a link layer address
// of length 0) are left out; netmask, broadcast and ptp labels only appear when psutil has a
// value for them; MAC addresses shorter than 6 bytes are padded with ":00".
//
// Addresses rarely change, and getifaddrs asks the kernel for every link (with all its
// statistics) and every address. So the sensor listens to the kernel's rtnetlink
// notifications of link and address changes (RTMGRP_LINK, RTMGRP_IPV4_IFADDR,
// RTMGRP_IPV6_IFADDR: names, flags, MAC and IP addresses, everything read here) and asks
// getifaddrs again only after one came, after a lost notification (ENOBUFS) or when it cannot
// listen; otherwise it reports the previous list again.
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "sensor.h"

namespace fructosa::sensors::net_if_addrs_file {
namespace {

const OptionTable kOptions{};

const Catalog kCatalog{
    {"*.AF_INET", Unit::count, Kind::gauge,
     "IPv4 addresses of the NIC; labels NIC.AF_INET.N.{address,netmask,broadcast,ptp}"},
    {"*.AF_INET6", Unit::count, Kind::gauge,
     "IPv6 addresses of the NIC; labels NIC.AF_INET6.N.{address,netmask,broadcast,ptp}"},
    {"*.AF_PACKET", Unit::count, Kind::gauge,
     "link layer (MAC) addresses of the NIC (psutil.AF_LINK); labels "
     "NIC.AF_PACKET.N.{address,broadcast,ptp}"},
};

// Families in psutil's order (it sorts by family number: AF_INET 2, AF_INET6 10, AF_PACKET 17).
constexpr std::array<int, 3> kFamilies{AF_INET, AF_INET6, AF_PACKET};
constexpr std::array<std::string_view, 3> kFamilyNames{"AF_INET", "AF_INET6", "AF_PACKET"};

// psutil_convert_ipaddr(): numeric host for IP families, hex bytes for AF_PACKET; nullopt for None.
std::optional<std::string> convert(const sockaddr* address, int family) {
  if (!address) return std::nullopt;
  if (family == AF_INET || family == AF_INET6) {
    char host[NI_MAXHOST];
    socklen_t length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (::getnameinfo(address, length, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
      return std::nullopt;
    return std::string(host);
  }
  if (family == AF_PACKET) {
    // glibc stores up to 24 address bytes (InfiniBand has 20) in a larger sockaddr_ll.
    const auto* link = reinterpret_cast<const sockaddr_ll*>(address);
    std::size_t length = std::min<std::size_t>(link->sll_halen, 24);
    if (length == 0) return std::nullopt;
    const auto* bytes =
        reinterpret_cast<const unsigned char*>(address) + offsetof(sockaddr_ll, sll_addr);
    std::string text;
    char byte[4];
    for (std::size_t i = 0; i < length; ++i) {
      std::snprintf(byte, sizeof byte, i ? ":%02x" : "%02x", bytes[i]);
      text += byte;
    }
    return text;
  }
  return std::nullopt;
}

struct Entry {
  std::string nic;
  int family_index;
  std::string address;
  std::optional<std::string> netmask, broadcast, ptp;
};

// A NETLINK_ROUTE socket subscribed to link and address changes: says whether anything may
// have changed since it was last asked.
class ChangeListener {
 public:
  ChangeListener() {
    fd_ = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    if (fd_ < 0) return;
    sockaddr_nl local{};
    local.nl_family = AF_NETLINK;
    local.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~ChangeListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  ChangeListener(const ChangeListener&) = delete;
  ChangeListener& operator=(const ChangeListener&) = delete;

  // True when a notification came (or may have been lost) since the last call, or when the
  // kernel cannot be listened to. Drains what came.
  bool changed() {
    if (fd_ < 0) return true;
    bool any = false;
    for (;;) {
      ssize_t got = ::recv(fd_, buffer_.data(), buffer_.size(), MSG_DONTWAIT);
      if (got > 0) {
        any = true;
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return any;
      return true;  // ENOBUFS (notifications lost) or another error: read everything again
    }
  }

 private:
  int fd_ = -1;
  std::array<char, 8192> buffer_{};
};

class NetIFAddrsSensor final : public Sensor {
 public:
  explicit NetIFAddrsSensor(const SensorContext&) {}

  bool sample(SampleWriter& out) override {
    // Listening starts before the first getifaddrs, so no change after it goes unnoticed.
    if (listener_.changed() || !have_list_) read_list();
    write(out);
    return true;
  }

 private:
  void read_list() {
    have_list_ = false;
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0)
      throw SensorUnavailable(std::string("getifaddrs: ") + std::strerror(errno));
    entries_.clear();
    for (const ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
      if (!ifa->ifa_addr) continue;
      int family = ifa->ifa_addr->sa_family;
      auto address = convert(ifa->ifa_addr, family);
      if (!address) continue;
      auto index = std::find(kFamilies.begin(), kFamilies.end(), family) - kFamilies.begin();
      Entry entry{ifa->ifa_name,       static_cast<int>(index),
                  std::move(*address), convert(ifa->ifa_netmask, family),
                  std::nullopt,        std::nullopt};
      if (ifa->ifa_flags & IFF_BROADCAST)
        entry.broadcast = convert(ifa->ifa_broadaddr, family);
      else if (ifa->ifa_flags & IFF_POINTOPOINT)
        entry.ptp = convert(ifa->ifa_dstaddr, family);
      if (family == AF_PACKET)
        while (std::count(entry.address.begin(), entry.address.end(), ':') < 5)
          entry.address += ":00";
      entries_.push_back(std::move(entry));
    }
    ::freeifaddrs(list);
    if (entries_.empty()) throw SensorUnavailable("getifaddrs lists no address");

    // NICs in order of first appearance; per NIC and family, addresses in getifaddrs order
    // (psutil's sort by family is stable).
    nics_.clear();
    for (const auto& entry : entries_)
      if (std::find(nics_.begin(), nics_.end(), entry.nic) == nics_.end())
        nics_.push_back(entry.nic);
    have_list_ = true;
  }

  void write(SampleWriter& out) const {
    for (const auto& nic : nics_) {
      std::string prefix = key_component(nic) + ".";
      for (std::size_t f = 0; f < kFamilies.size(); ++f) {
        std::string family_key = prefix + std::string(kFamilyNames[f]);
        int n = 0;
        for (const auto& entry : entries_) {
          if (entry.nic != nic || entry.family_index != static_cast<int>(f)) continue;
          std::string base = family_key + "." + std::to_string(n++) + ".";
          out.label(base + "address", entry.address);
          if (entry.netmask) out.label(base + "netmask", *entry.netmask);
          if (entry.broadcast) out.label(base + "broadcast", *entry.broadcast);
          if (entry.ptp) out.label(base + "ptp", *entry.ptp);
        }
        out.set(family_key, n);
      }
    }
  }

  ChangeListener listener_;  // before the first read_list()
  bool have_list_ = false;
  std::vector<Entry> entries_;
  std::vector<std::string> nics_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("NetIFAddrs",
                         "Addresses of each NIC: counts per family, addresses as labels "
                         "(psutil.net_if_addrs)",
                         kOptions, kCatalog, NetIFAddrsSensor, .row = DashboardRow::network);

}  // namespace fructosa::sensors::net_if_addrs_file
