#include "carbon_connection.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using fructosa::graphite::CarbonConnection;

namespace {

// A listening TCP socket on an ephemeral 127.0.0.1 port, closed with the object.
struct Listener {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port = 0;
  Listener() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 && ::listen(fd, 4) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
      port = ntohs(address.sin_port);
  }
  ~Listener() { ::close(fd); }
};

}  // namespace

// FrUCToSA's [Graphite] host = localhost must reach carbon on a machine whose resolver does not
// know the name (no /etc/hosts in a debootstrap chroot): a localhost name is the loopback.
TEST(CarbonConnection, ALocalhostNameReachesTheLoopbackWithoutAResolverEntry) {
  Listener carbon;
  ASSERT_GT(carbon.port, 0);
  CarbonConnection connection("carbon.localhost", carbon.port, 3);
  ASSERT_NO_THROW(connection.open());
  EXPECT_TRUE(connection.is_open());
  EXPECT_FALSE(connection.send("a.b 1 1\n").has_value());
}

TEST(CarbonConnection, AnUnresolvableHostSaysSo) {
  CarbonConnection connection("carbon.invalid", 2004, 3);
  try {
    connection.open();
    FAIL() << "connected to carbon.invalid";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("cannot resolve carbon.invalid"), std::string::npos) << error.what();
  }
}
