// "localhost" and the names under it are this machine's loopback whatever the resolver says
// (RFC 6761, 6.3). A minimal system (a debootstrap chroot, some containers) has no /etc/hosts,
// and there glibc cannot resolve them; FrUCToSA's files write `localhost` for carbon and lmaster.
#pragma once

#include <netdb.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace fructosa {

// The address to ask the resolver for instead of `name` when it does not know a localhost name.
inline constexpr const char* kLocalhostFallback = "127.0.0.1";

inline bool is_localhost_name(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);  // the root's dot
  constexpr std::string_view kLocalhost = "localhost";
  if (name.size() < kLocalhost.size()) return false;
  std::string_view tail = name.substr(name.size() - kLocalhost.size());
  bool same = std::equal(tail.begin(), tail.end(), kLocalhost.begin(),
                         [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
  return same && (name.size() == kLocalhost.size() || name[name.size() - kLocalhost.size() - 1] == '.');
}

// getaddrinfo(3), but a localhost name the resolver does not know resolves as the loopback.
inline int getaddrinfo_localhost_aware(const char* host, const char* service, const addrinfo* hints,
                                       addrinfo** found) {
  int status = ::getaddrinfo(host, service, hints, found);
  if (status != 0 && is_localhost_name(host)) status = ::getaddrinfo(kLocalhostFallback, service, hints, found);
  return status;
}

// `host` for a library that resolves names itself (ZeroMQ's connect): a localhost name the
// resolver does not know becomes the loopback address; every other host stays as it is.
inline std::string with_localhost_fallback(const std::string& host) {
  if (!is_localhost_name(host)) return host;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return kLocalhostFallback;
  ::freeaddrinfo(found);
  return host;
}

}  // namespace fructosa
