// CURVE for lmaster's ROUTER (docs/security.md): the socket becomes a CURVE server, and a ZAP
// handler (ZeroMQ RFC 27, on inproc://zeromq.zap.01 of the master's context) lets in only
// agents whose public key is in the allow-list directory: every *.pub file there (as `lmaster
// keygen` writes it). Its reply names the key (the .pub file's stem) as the connection's
// User-Id, which lmaster reads on every message to check what the agent claims to be
// (agent_identity.h). The directory is looked at again when a client asks to be let in or a
// hello is checked, at most once a second whatever comes (unknown keys cost no more than known
// ones), so adding or removing a .pub file needs no restart (connections already let in stay
// up until they reconnect).
//
// A socket monitor on the ROUTER reports the handshakes that fail before ZAP is asked: a peer
// without CURVE (mechanism mismatch) or with a wrong server key (cryptographic error). Every
// refusal is logged with the peer's address, at most once a minute per address and reason (an
// unknown key is one reason, whichever key: then with the number of refusals in between), so
// that a misconfigured agent retrying every few seconds, or a peer trying many keys, does not
// flood the log (refusal_log.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "agent_identity.h"

namespace fructosa::master {

struct MasterConfig;

struct CurveCounters {
  std::uint64_t accepted = 0;           // ZAP said yes (key in the allow-list)
  std::uint64_t rejected = 0;           // ZAP said no (unknown key, or a mechanism other than CURVE)
  std::uint64_t failed_handshakes = 0;  // refused before ZAP: no CURVE, wrong server key, bad protocol
  std::uint64_t allow_list_scans = 0;   // listings of the allow-list directory (at most one a second)
};

class ZapHandler {
 public:
  // Binds the ZAP endpoint in `context` (throws std::runtime_error when another handler has it).
  // It must outlive every socket of `context` that uses CURVE: without a handler bound,
  // libzmq 4.3 lets every CURVE client in. The keys are the master's own pair (Z85).
  ZapHandler(zmq::context_t& context, std::string allowed_keys_dir, std::string public_key, std::string secret_key);
  ~ZapHandler();  // stops and joins the thread
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // Makes `server` (not bound yet) a CURVE server with the master's key pair, starts monitoring
  // its handshakes and starts the handler thread. Call once, from the thread that owns `server`.
  void secure(zmq::socket_t& server);

  CurveCounters counters() const;

  // What the allowed key named `name` (a connection's User-Id) may send as; nothing when no key
  // of that name is in the allow-list now. Thread-safe.
  std::optional<KeyHosts> key_hosts(const std::string& name);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// [lmaster] curve = true: a ZapHandler for `context`, to be declared before the ROUTER (so that
// it outlives it) and given the ROUTER with secure(). nullptr when CURVE is off.
std::unique_ptr<ZapHandler> start_curve(zmq::context_t& context, const MasterConfig& config);

}  // namespace fructosa::master
