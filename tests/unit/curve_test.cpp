// CURVE keys (common/curve.h), their configuration keys, and lmaster's ZAP handler with real
// ZeroMQ sockets on loopback.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "agent_config.h"
#include "curve.h"
#include "log_capture.h"
#include "master_config.h"
#include "test_support.h"
#include "zap_handler.h"

using namespace fructosa;
using fructosa::test::TempDir;

namespace {

mode_t mode_of(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return 0;
  return info.st_mode & 07777;
}

using test::write_text;

using test::error_of;

// Sets the process umask for one test.
struct Umask {
  explicit Umask(mode_t mask) : old(::umask(mask)) {}
  ~Umask() { ::umask(old); }
  mode_t old;
};

using test::LogCapture;

template <typename Condition>
bool wait_until(Condition condition, std::chrono::seconds timeout = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace

TEST(Curve, TheLinkedLibzmqHasCurve) {
  // Debian's libzmq5 is built with CURVE; everything below relies on it.
  EXPECT_TRUE(curve::available());
  EXPECT_NO_THROW(curve::require("test"));
}

TEST(Curve, GeneratedKeysAreZ85AndBelongTogether) {
  auto pair = curve::generate();
  EXPECT_EQ(pair.public_key.size(), curve::kZ85KeyLength);
  EXPECT_TRUE(curve::is_key(pair.public_key));
  EXPECT_TRUE(curve::is_key(pair.secret_key));
  EXPECT_EQ(curve::public_key_of(pair.secret_key), pair.public_key);
  EXPECT_NE(curve::generate().secret_key, pair.secret_key);
}

TEST(Curve, RecognisesZ85Keys) {
  EXPECT_TRUE(curve::is_key("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"));  // RFC 32's example public key
  EXPECT_FALSE(curve::is_key("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf"));  // 39 characters
  EXPECT_FALSE(curve::is_key("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7x"));
  EXPECT_FALSE(curve::is_key("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]y\"7"));  // '"' is no Z85 digit
  EXPECT_FALSE(curve::is_key("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]y 7"));
  EXPECT_FALSE(curve::is_key("#####rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"));  // 85^5-1 > 2^32-1
  EXPECT_THROW(curve::public_key_of("not a key"), std::invalid_argument);
}

TEST(Curve, KeyFilesRoundTripWithTheirModesWhateverTheUmask) {
  for (mode_t mask : {mode_t{022}, mode_t{077}, mode_t{0}}) {
    Umask umask(mask);
    TempDir dir;
    auto pair = curve::generate();
    auto files = curve::write_key_pair(dir.file("keys"), "node01", pair, false);  // makes the directory
    EXPECT_EQ(files.secret_path, dir.file("keys/node01.key"));
    EXPECT_EQ(files.public_path, dir.file("keys/node01.pub"));
    EXPECT_EQ(mode_of(files.secret_path), 0600u) << "umask " << mask;
    EXPECT_EQ(mode_of(files.public_path), 0644u) << "umask " << mask;
    auto read = curve::read_key_pair(files.secret_path);
    EXPECT_EQ(read.public_key, pair.public_key);
    EXPECT_EQ(read.secret_key, pair.secret_key);
    EXPECT_EQ(curve::read_public_key(files.public_path), pair.public_key);
    EXPECT_EQ(curve::read_public_key(files.secret_path), pair.public_key);
    auto public_file = curve::read_key_file(files.public_path);
    EXPECT_EQ(public_file.public_key, pair.public_key);
    EXPECT_TRUE(public_file.secret_key.empty());
  }
}

TEST(Curve, KeygenRefusesToOverwriteUnlessForced) {
  TempDir dir;
  auto first = curve::generate();
  curve::write_key_pair(dir.path(), "lmaster", first, false);
  auto message = error_of([&] { curve::write_key_pair(dir.path(), "lmaster", curve::generate(), false); });
  EXPECT_NE(message.find(dir.file("lmaster.key") + " exists already"), std::string::npos) << message;
  EXPECT_EQ(curve::read_key_pair(dir.file("lmaster.key")).secret_key, first.secret_key);
  // Only the .pub exists: still refused, and the .key is not written either.
  std::filesystem::remove(dir.file("lmaster.key"));
  message = error_of([&] { curve::write_key_pair(dir.path(), "lmaster", curve::generate(), false); });
  EXPECT_NE(message.find("lmaster.pub exists already"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(dir.file("lmaster.key")));

  write_text(dir.file("lmaster.key"), "old\n");
  ::chmod(dir.file("lmaster.key").c_str(), 0644);
  auto second = curve::generate();
  curve::write_key_pair(dir.path(), "lmaster", second, true);
  EXPECT_EQ(curve::read_key_pair(dir.file("lmaster.key")).secret_key, second.secret_key);
  EXPECT_EQ(mode_of(dir.file("lmaster.key")), 0600u);
  EXPECT_EQ(curve::read_public_key(dir.file("lmaster.pub")), second.public_key);

  EXPECT_NE(error_of([&] { curve::write_key_pair(dir.path(), "../x", second, false); }).find("not usable"),
            std::string::npos);
  EXPECT_NE(error_of([&] { curve::write_key_pair(dir.path(), ".hidden", second, false); }).find("not usable"),
            std::string::npos);
}

TEST(Curve, BadKeyFilesAreErrorsNamingFileAndLine) {
  TempDir dir;
  auto pair = curve::generate();
  auto other = curve::generate();
  auto error_for = [&](const std::string& text, bool want_pair = false) {
    write_text(dir.file("k"), text);
    return error_of([&] {
      if (want_pair) curve::read_key_pair(dir.file("k"));
      else curve::read_key_file(dir.file("k"));
    });
  };
  const std::string k = dir.file("k");
  EXPECT_EQ(error_of([&] { curve::read_key_file(dir.file("missing")); }),
            dir.file("missing") + ": cannot read: No such file or directory");
  EXPECT_EQ(error_for("# nothing\n"),
            k + ": holds no key (expected lines `public-key = ...` and/or `secret-key = ...`)");
  EXPECT_EQ(error_for("\npublic-key = abc\n"),
            k + ":2: public-key is not a CURVE key (40 Z85 characters; `lmaster keygen` writes them)");
  EXPECT_EQ(error_for("public-key = " + pair.public_key + "\npublic-key = " + pair.public_key + "\n"),
            k + ":2: public-key given again (first on line 1)");
  EXPECT_EQ(error_for("public-key = " + other.public_key + "\nsecret-key = " + pair.secret_key + "\n"),
            k + ":1: public-key does not belong to the secret-key on line 2");
  EXPECT_NE(error_for("public-key = " + pair.public_key + "\n", true).find(k + ": holds no secret-key"),
            std::string::npos);
  // A secret key alone is enough: the public one is derived.
  write_text(k, "secret-key = " + pair.secret_key + "\n");
  EXPECT_EQ(curve::read_key_pair(k).public_key, pair.public_key);
}

TEST(Curve, ReadsCzmqCertificates) {
  TempDir dir;
  auto pair = curve::generate();
  write_text(dir.file("cert_secret"),
             "#   ****  Generated by CZMQ  ****\n#   ZeroMQ CURVE **Secret** Certificate\n\nmetadata\n"
             "    name = \"node01\"\ncurve\n    public-key = \"" +
                 pair.public_key + "\"\n    secret-key = \"" + pair.secret_key + "\"\n");
  auto read = curve::read_key_pair(dir.file("cert_secret"));
  EXPECT_EQ(read.public_key, pair.public_key);
  EXPECT_EQ(read.secret_key, pair.secret_key);
}

TEST(CurveConfig, TheMasterReadsItsKeyPairAndChecksTheAllowList) {
  TempDir dir;
  auto pair = curve::generate();
  curve::write_key_pair(dir.path(), "lmaster", pair, false);
  std::filesystem::create_directory(dir.file("agents"));
  const std::string conf = dir.file("lmaster.conf");
  // Relative paths are relative to the configuration file.
  write_text(conf, "[lmaster]\ncurve = true\ncurve_secret_key_file = lmaster.key\ncurve_allowed_keys_dir = agents\n");
  auto config = master::load_master_config(conf);
  EXPECT_TRUE(config.curve);
  EXPECT_EQ(config.curve_public_key, pair.public_key);
  EXPECT_EQ(config.curve_secret_key, pair.secret_key);
  EXPECT_EQ(config.curve_allowed_keys_dir, dir.file("agents"));

  write_text(conf, "[lmaster]\n");
  EXPECT_FALSE(master::load_master_config(conf).curve) << "CURVE is off by default";

  write_text(conf, "[lmaster]\ncurve = true\ncurve_secret_key_file = lmaster.pub\ncurve_allowed_keys_dir = agents\n");
  auto message = error_of([&] { master::load_master_config(conf); });
  EXPECT_NE(message.find(conf + ":3: [lmaster] curve_secret_key_file: " +
                         dir.file("lmaster.pub") + ": holds no secret-key"),
            std::string::npos)
      << message;
  write_text(conf, "[lmaster]\ncurve = true\ncurve_secret_key_file = lmaster.key\ncurve_allowed_keys_dir = nowhere\n");
  message = error_of([&] { master::load_master_config(conf); });
  EXPECT_NE(message.find(conf + ":4: [lmaster] curve_allowed_keys_dir: " +
                         dir.file("nowhere") + " is not a directory"),
            std::string::npos)
      << message;
  // Off: the key files are not looked at.
  write_text(conf, "[lmaster]\ncurve = false\ncurve_secret_key_file = missing.key\n");
  EXPECT_NO_THROW(master::load_master_config(conf));
}

TEST(CurveConfig, TheAgentReadsTheMastersPublicKeyAndItsOwnPair) {
  TempDir dir;
  auto master_pair = curve::generate();
  auto agent_pair = curve::generate();
  curve::write_key_pair(dir.path(), "lmaster", master_pair, false);
  curve::write_key_pair(dir.path(), "node01", agent_pair, false);
  const std::string conf = dir.file("lagent.conf");
  auto load = [&](const std::string& lmaster_section) {
    write_text(conf, "[lmaster]\n" + lmaster_section);
    return agent::load_agent_config(conf);
  };
  auto config = load("curve_server_public_key_file = lmaster.pub\ncurve_secret_key_file = node01.key\n");
  EXPECT_EQ(config.curve_server_key, master_pair.public_key);
  EXPECT_EQ(config.curve_public_key, agent_pair.public_key);
  EXPECT_EQ(config.curve_secret_key, agent_pair.secret_key);
  config = load("curve_server_key = " + master_pair.public_key + "\ncurve_secret_key_file = node01.key\n");
  EXPECT_EQ(config.curve_server_key, master_pair.public_key);
  EXPECT_TRUE(load("").curve_server_key.empty()) << "CURVE is off by default";

  auto error_for = [&](const std::string& section) { return error_of([&] { load(section); }); };
  EXPECT_EQ(error_for("curve_server_public_key_file = lmaster.pub\n"),
            conf + ":1: [lmaster] curve_secret_key_file: missing: CURVE needs this agent's key pair too "
                   "(`lmaster keygen --name NODE` writes one)");
  EXPECT_EQ(error_for("curve_server_key = nope\ncurve_secret_key_file = node01.key\n"),
            conf + ":2: [lmaster] curve_server_key: not a CURVE public key (40 Z85 characters)");
  EXPECT_EQ(error_for("curve_secret_key_file = node01.key\n"),
            conf + ":2: [lmaster] curve_secret_key_file: given without the lmaster's public key "
                   "(curve_server_public_key_file or curve_server_key)");
  EXPECT_NE(error_for("curve_server_key = " + master_pair.public_key +
                      "\ncurve_server_public_key_file = lmaster.pub\ncurve_secret_key_file = node01.key\n")
                .find("not both"),
            std::string::npos);
  EXPECT_EQ(error_for("curve_server_public_key_file = missing.pub\ncurve_secret_key_file = node01.key\n"),
            conf + ":2: [lmaster] curve_server_public_key_file: " +
                dir.file("missing.pub") + ": cannot read: No such file or directory");
  EXPECT_NE(error_for("curve_server_public_key_file = lmaster.pub\ncurve_secret_key_file = node01.pub\n")
                .find(conf + ":3: [lmaster] curve_secret_key_file: " + dir.file("node01.pub") +
                      ": holds no secret-key"),
            std::string::npos);
}

namespace {

// A CURVE (or plain) DEALER that says "hello" to `endpoint`.
struct Client {
  Client(zmq::context_t& context, const std::string& endpoint, const std::string& server_key,
         const curve::KeyPair* pair)
      : socket(context, zmq::socket_type::dealer) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::reconnect_ivl, 50);
    if (pair) {
      socket.set(zmq::sockopt::curve_serverkey, server_key);
      socket.set(zmq::sockopt::curve_publickey, pair->public_key);
      socket.set(zmq::sockopt::curve_secretkey, pair->secret_key);
    }
    socket.connect(endpoint);
    socket.send(zmq::str_buffer("hello"), zmq::send_flags::dontwait);
  }
  zmq::socket_t socket;
};

// What the ROUTER received (routing id frame dropped) within `timeout_ms`.
std::vector<std::string> receive(zmq::socket_t& router, int timeout_ms) {
  std::vector<std::string> payloads;
  zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
  while (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) > 0) {
    zmq::message_t identity, payload;
    (void)router.recv(identity);
    (void)router.recv(payload);
    payloads.push_back(payload.to_string());
    timeout_ms = 0;
  }
  return payloads;
}

}  // namespace

TEST(ZapHandler, LetsInOnlyAllowedKeysAndLogsTheOthersWithTheirAddress) {
  TempDir dir;
  LogCapture log;
  auto server = curve::generate();
  auto allowed = curve::generate();
  auto stranger = curve::generate();
  auto wrong_server = curve::generate();
  std::filesystem::create_directory(dir.file("agents"));
  curve::write_key_pair(dir.file("agents"), "allowed", allowed, false);
  std::filesystem::remove(dir.file("agents/allowed.key"));  // agents' secrets stay on the agents
  write_text(dir.file("agents/broken.pub"), "public-key = nonsense\n");

  zmq::context_t context(1);
  auto handler = std::make_unique<master::ZapHandler>(context, dir.file("agents"), server.public_key, server.secret_key);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  handler->secure(router);
  router.bind("tcp://127.0.0.1:*");
  std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  EXPECT_NE(log.text().find(dir.file("agents/broken.pub") + ":1: public-key is not a CURVE key"), std::string::npos)
      << log.text();

  {
    Client good(context, endpoint, server.public_key, &allowed);
    EXPECT_EQ(receive(router, 20000), std::vector<std::string>{"hello"});
  }
  EXPECT_EQ(handler->counters().accepted, 1u);
  EXPECT_NE(log.text().find("CURVE: agent at 127.0.0.1 let in (key " + allowed.public_key + " from allowed.pub)"),
            std::string::npos)
      << log.text();

  {
    Client bad(context, endpoint, server.public_key, &stranger);
    ASSERT_TRUE(wait_until([&] { return handler->counters().rejected >= 1; }));
    EXPECT_TRUE(receive(router, 0).empty());
  }
  EXPECT_NE(log.text().find("CURVE: refused an agent at 127.0.0.1: its public key " + stranger.public_key +
                            " is not in the allow-list " + dir.file("agents")),
            std::string::npos)
      << log.text();

  {
    Client plain(context, endpoint, "", nullptr);
    ASSERT_TRUE(wait_until([&] { return handler->counters().failed_handshakes >= 1; }));
    ASSERT_TRUE(wait_until([&] { return log.text().find("it does not use CURVE") != std::string::npos; }));
    EXPECT_TRUE(receive(router, 0).empty());
  }
  // The peer's address may be unknown when the connection closed before the monitor could read
  // it (seen under the sanitizers), as test_curve.py also allows.
  EXPECT_NE(log.text().find("CURVE: refused a peer at "), std::string::npos) << log.text();

  {
    Client confused(context, endpoint, wrong_server.public_key, &allowed);
    ASSERT_TRUE(wait_until([&] { return handler->counters().failed_handshakes >= 2; }));
    ASSERT_TRUE(wait_until([&] { return log.text().find("does not decrypt") != std::string::npos; }));
    EXPECT_TRUE(receive(router, 0).empty());
  }

  // A key added to the directory counts from the next look at it (at most a second later),
  // without a restart. (Fresh clients: libzmq 4.3 does not always retry after a refusal.)
  write_text(dir.file("agents/stranger.pub"), "public-key = " + stranger.public_key + "\n");
  std::vector<std::string> received;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       received.empty() && std::chrono::steady_clock::now() < deadline;) {
    Client late(context, endpoint, server.public_key, &stranger);
    received = receive(router, 500);
  }
  EXPECT_EQ(received, std::vector<std::string>{"hello"});
  EXPECT_NE(log.text().find("CURVE allow-list " + dir.file("agents") + ": 2 agent key(s) (1 file(s) ignored)"),
            std::string::npos)
      << log.text();
  auto counters = handler->counters();
  EXPECT_EQ(counters.accepted, 2u);
  EXPECT_GE(counters.rejected, 1u);
  // One line for the stranger's refusals, however many there were in that minute.
  auto text = log.text();
  std::size_t lines = 0;
  for (auto at = text.find("its public key " + stranger.public_key); at != std::string::npos;
       at = text.find("its public key " + stranger.public_key, at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << text;

  // The handler stops before the context ends; the ROUTER was made after it and goes first.
  router.close();
  handler.reset();
}

namespace {

// The routing id frame, then the payload and the name of the key its connection was let in with.
std::pair<std::string, std::string> receive_with_key(zmq::socket_t& router, int timeout_ms) {
  zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) <= 0) return {};
  zmq::message_t identity, payload;
  (void)router.recv(identity);
  (void)router.recv(payload);
  return {payload.to_string(), std::string(master::key_name_of(payload))};
}

}  // namespace

TEST(ZapHandler, NamesTheKeyOfEveryMessageAndWhatItSpeaksFor) {
  TempDir dir;
  LogCapture log;
  auto server = curve::generate();
  auto node = curve::generate();
  auto group = curve::generate();
  std::filesystem::create_directory(dir.file("agents"));
  write_text(dir.file("agents/node01.pub"), "public-key = " + node.public_key + "\n");
  write_text(dir.file("agents/rack1.pub"), "public-key = " + group.public_key + "\nhosts = node0*, gpu[12]\n");
  write_text(dir.file("agents/bad.pub"), "public-key = " + curve::generate().public_key + "\nhosts = a b\n");

  zmq::context_t context(1);
  auto handler =
      std::make_unique<master::ZapHandler>(context, dir.file("agents"), server.public_key, server.secret_key);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  handler->secure(router);
  router.bind("tcp://127.0.0.1:*");
  std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  // A .pub file with a bad `hosts =` line is skipped like one with a bad key.
  EXPECT_NE(log.text().find("CURVE allow-list: ignoring " + dir.file("agents/bad.pub") +
                            ":2: hosts: 'a b' is not one host pattern"),
            std::string::npos)
      << log.text();
  EXPECT_NE(log.text().find("2 agent key(s) (1 file(s) ignored)"), std::string::npos) << log.text();

  {
    Client first(context, endpoint, server.public_key, &node);
    EXPECT_EQ(receive_with_key(router, 20000), (std::pair<std::string, std::string>{"hello", "node01"}));
  }
  {
    Client second(context, endpoint, server.public_key, &group);
    EXPECT_EQ(receive_with_key(router, 20000), (std::pair<std::string, std::string>{"hello", "rack1"}));
  }
  auto node_hosts = handler->key_hosts("node01");
  ASSERT_TRUE(node_hosts);
  EXPECT_EQ(node_hosts->name, "node01");
  EXPECT_TRUE(node_hosts->patterns.empty());
  auto group_hosts = handler->key_hosts("rack1");
  ASSERT_TRUE(group_hosts);
  EXPECT_EQ(group_hosts->patterns, (std::vector<std::string>{"node0*", "gpu[12]"}));
  EXPECT_FALSE(handler->key_hosts("bad"));
  EXPECT_FALSE(handler->key_hosts("nobody"));

  // Without CURVE a message names no key.
  zmq::socket_t plain_router(context, zmq::socket_type::router);
  plain_router.set(zmq::sockopt::linger, 0);
  plain_router.bind("tcp://127.0.0.1:*");
  {
    Client plain(context, plain_router.get(zmq::sockopt::last_endpoint), "", nullptr);
    EXPECT_EQ(receive_with_key(plain_router, 20000), (std::pair<std::string, std::string>{"hello", ""}));
  }
  plain_router.close();
  router.close();
  handler.reset();
}

TEST(ZapHandler, UnknownKeysListTheAllowListDirectoryAtMostOnceASecond) {
  TempDir dir;
  LogCapture log;
  auto server = curve::generate();
  std::filesystem::create_directory(dir.file("agents"));
  zmq::context_t context(1);
  auto handler =
      std::make_unique<master::ZapHandler>(context, dir.file("agents"), server.public_key, server.secret_key);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  handler->secure(router);
  router.bind("tcp://127.0.0.1:*");
  std::string endpoint = router.get(zmq::sockopt::last_endpoint);

  const std::uint64_t strangers = 30;
  auto scans_before = handler->counters().allow_list_scans;
  auto start = std::chrono::steady_clock::now();
  {
    std::vector<curve::KeyPair> keys;
    std::vector<std::unique_ptr<Client>> clients;
    for (std::uint64_t i = 0; i < strangers; ++i) keys.push_back(curve::generate());
    for (const auto& key : keys)
      clients.push_back(std::make_unique<Client>(context, endpoint, server.public_key, &key));
    ASSERT_TRUE(wait_until([&] { return handler->counters().rejected >= strangers; }));
  }
  auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto scans = handler->counters().allow_list_scans - scans_before;
  // Once a second at most (each unknown key listed the directory again before).
  EXPECT_LE(scans, static_cast<std::uint64_t>(elapsed) + 1) << elapsed << " s";
  EXPECT_TRUE(receive(router, 0).empty());
  // And one log line for all of them: they came from one address.
  auto text = log.text();
  std::size_t lines = 0;
  for (auto at = text.find("CURVE: refused an agent at 127.0.0.1"); at != std::string::npos;
       at = text.find("CURVE: refused an agent at 127.0.0.1", at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << text;
  router.close();
  handler.reset();
}
