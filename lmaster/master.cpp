#include "master.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <zmq.hpp>

#include "codec.h"
#include "logging.h"
#include "master_config.h"

namespace fructosa::master {
namespace {

using Clock = std::chrono::steady_clock;

// A master asks an unknown peer for a resync at most this often, so that a burst of queued
// batches from a reconnecting agent does not start a burst of resyncs.
constexpr auto kResyncEvery = std::chrono::seconds(2);
// Peers silent for this long are forgotten (their dictionary with them).
constexpr auto kForgetPeerAfter = std::chrono::minutes(30);

struct Peer {
  std::string address;  // tcp peer address, for log lines
  std::string host;     // from Hello; empty until then
  std::uint64_t session = 0;
  MasterDictionary dictionary;
  Clock::time_point last_seen;
  Clock::time_point last_resync;
  bool resync_sent = false;
};

class Master {
 public:
  Master(std::string config_path, MasterConfig config, bool foreground)
      : config_path_(std::move(config_path)), config_(std::move(config)), foreground_(foreground) {}

  int run(const std::function<void()>& ready) {
    // Signals arrive through a signalfd polled with the socket. They are blocked before the
    // ZeroMQ context starts its threads, which inherit the mask.
    sigset_t signals;
    sigemptyset(&signals);
    for (int signal : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, signal);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    int signal_fd = ::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signal_fd < 0) throw std::runtime_error("signalfd failed");

    open_outputs();
    zmq::context_t context(1);
    zmq::socket_t router(context, zmq::socket_type::router);
    router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
    router.set(zmq::sockopt::linger, 1000);  // let the last acks leave
    std::string endpoint = fmt::format("tcp://{}:{}", config_.bind_host, config_.port ? std::to_string(config_.port) : "*");
    try {
      router.bind(endpoint);
    } catch (const zmq::error_t& error) {
      throw std::runtime_error(fmt::format("cannot listen on {}: {}", endpoint, error.what()));
    }
    spdlog::info("lmaster {} listening on {}; outputs: {}", FRUCTOSA_VERSION, router.get(zmq::sockopt::last_endpoint),
                 output_names());
    ready();

    auto next_flush = Clock::now() + flush_period();
    bool running = true;
    while (running) {
      auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(next_flush - Clock::now());
      zmq::pollitem_t items[] = {{router.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, signal_fd, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, std::max(timeout, std::chrono::milliseconds(0)));
      if (items[1].revents & ZMQ_POLLIN) {
        signalfd_siginfo info{};
        while (::read(signal_fd, &info, sizeof info) == sizeof info) {
          if (info.ssi_signo == SIGHUP) {
            reopen();
          } else {
            spdlog::info("received {}, stopping", info.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
            running = false;
          }
        }
      }
      // Drain what is queued (bounded, so signals and flushes still get their turn).
      for (int i = 0; i < 10000 && receive(router); ++i) {
      }
      if (Clock::now() >= next_flush) {
        flush_outputs();
        forget_silent_peers();
        next_flush = Clock::now() + flush_period();
      }
    }
    flush_outputs();
    outputs_.clear();
    ::close(signal_fd);
    spdlog::info("lmaster stopped");
    return 0;
  }

 private:
  void open_outputs() {
    for (const auto& output : config_.outputs) outputs_.push_back(make_output(output, infos_));
    if (outputs_.empty()) spdlog::warn("{} enables no output section: samples are acknowledged and discarded", config_path_);
  }

  std::string output_names() const {
    std::string names;
    for (const auto& output : outputs_) names += (names.empty() ? "" : ", ") + output->name();
    return names.empty() ? "none" : names;
  }

  Clock::duration flush_period() const {
    double seconds = 1.0;
    for (const auto& output : outputs_) seconds = std::min(seconds, output->flush_period());
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }

  // Runs `action` on every output; one output's failure is logged and never stops the others.
  void for_each_output(std::string_view what, const std::function<void(Output&)>& action) {
    for (auto& output : outputs_) {
      try {
        action(*output);
      } catch (const std::exception& error) {
        spdlog::error("output {}: {} failed: {}", output->name(), what, error.what());
      }
    }
  }

  void flush_outputs() {
    for_each_output("flush", [](Output& output) { output.flush(); });
  }

  void reopen() {
    spdlog::info("SIGHUP: reopening outputs");
    MasterConfig fresh;
    try {
      fresh = load_master_config(config_path_);
      setup_logging(fresh.logging, foreground_, "lmaster");
    } catch (const ConfigError& error) {
      spdlog::error("SIGHUP: keeping the running logging configuration: {}", error.what());
    }
    for_each_output("reopen", [](Output& output) { output.reopen(); });
  }

  void forget_silent_peers() {
    auto now = Clock::now();
    for (auto it = peers_.begin(); it != peers_.end();) {
      if (now - it->second.last_seen > kForgetPeerAfter) {
        spdlog::info("forgetting agent {} ({}): silent for {} minutes", it->second.host, it->second.address,
                     std::chrono::duration_cast<std::chrono::minutes>(kForgetPeerAfter).count());
        it = peers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  static void send(zmq::socket_t& router, const std::string& identity, const Bytes& payload) {
    router.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  }

  void ask_resync(zmq::socket_t& router, const std::string& identity, Peer& peer, const std::string& reason) {
    auto now = Clock::now();
    if (peer.resync_sent && now - peer.last_resync < kResyncEvery) return;
    spdlog::info("asking agent {} for a resync: {}", peer.host.empty() ? peer.address : peer.host, reason);
    send(router, identity, encode_resync(reason));
    peer.resync_sent = true;
    peer.last_resync = now;
  }

  // Receives one [identity, payload] message; false when nothing was waiting.
  bool receive(zmq::socket_t& router) {
    zmq::message_t identity_frame, payload;
    if (!router.recv(identity_frame, zmq::recv_flags::dontwait)) return false;
    if (!identity_frame.more()) return true;  // cannot happen with a ROUTER; ignore
    if (!router.recv(payload, zmq::recv_flags::none)) return true;
    while (payload.more()) {  // agents send one frame per message: extra frames are garbage
      zmq::message_t extra;
      if (!router.recv(extra, zmq::recv_flags::none)) break;
      payload.swap(extra);
    }
    std::string identity(static_cast<const char*>(identity_frame.data()), identity_frame.size());
    Peer& peer = peers_[identity];
    peer.last_seen = Clock::now();
    if (peer.address.empty()) {
      const char* address = nullptr;
      try {
        address = payload.gets("Peer-Address");
      } catch (const zmq::error_t&) {
      }
      peer.address = address ? address : "unknown peer";
    }
    Message message;
    try {
      message = decode(payload.data(), payload.size());
    } catch (const ProtocolError& error) {
      spdlog::warn("dropped a message from {}{}: {}", peer.address, peer.host.empty() ? "" : " (" + peer.host + ")",
                   error.what());
      return true;
    }
    try {
      handle(router, identity, peer, message);
    } catch (const ProtocolError& error) {
      spdlog::warn("dropped a {} message from {} ({}): {}", to_string(message.type), peer.host, peer.address,
                   error.what());
      peer.dictionary.clear();
      ask_resync(router, identity, peer, error.what());
    }
    return true;
  }

  void handle(zmq::socket_t& router, const std::string& identity, Peer& peer, const Message& message) {
    switch (message.type) {
      case MessageType::hello:
        if (peer.host.empty() || peer.host != message.host || peer.session != message.session)
          spdlog::info("agent {} (session {:016x}, lagent {}) connected from {}", message.host, message.session,
                       message.agent_version, peer.address);
        peer.host = message.host;
        peer.session = message.session;
        peer.dictionary.clear();
        peer.resync_sent = false;
        return;
      case MessageType::dictionary:
        if (peer.host.empty()) return ask_resync(router, identity, peer, "dictionary before hello");
        peer.dictionary.apply(message.dictionary);
        for (const auto& series : message.dictionary.series)
          infos_.remember(peer.dictionary.sensors()[series.sensor].name, series.key, series.info);
        return;
      case MessageType::batch:
        if (peer.host.empty()) return ask_resync(router, identity, peer, "unknown agent");
        return accept_batch(router, identity, peer, message);
      case MessageType::heartbeat:
        if (peer.host.empty()) return ask_resync(router, identity, peer, "unknown agent");
        return;
      case MessageType::ack:
      case MessageType::resync:
        spdlog::warn("dropped a {} message from agent {} ({}): only lmaster sends those", to_string(message.type),
                     peer.host, peer.address);
        return;
    }
  }

  void accept_batch(zmq::socket_t& router, const std::string& identity, Peer& peer, const Message& message) {
    std::uint64_t& last = last_sequence_[{peer.host, peer.session}];
    if (message.sequence <= last) {
      // A resend of what was already accepted: acknowledge again, keep it once.
      send(router, identity, encode_ack(last));
      return;
    }
    std::vector<Sample> samples;
    samples.reserve(message.samples.size());
    for (const auto& wire : message.samples) samples.push_back(peer.dictionary.resolve(wire, peer.host));
    if (last != 0 && message.sequence != last + 1)
      spdlog::warn("agent {}: batches {}..{} never arrived (dropped by the agent?)", peer.host, last + 1,
                   message.sequence - 1);
    for_each_output("write", [&](Output& output) { output.write(samples); });
    last = message.sequence;
    send(router, identity, encode_ack(last));
  }

  std::string config_path_;
  MasterConfig config_;
  bool foreground_;
  MetricInfoStore infos_;
  std::vector<std::unique_ptr<Output>> outputs_;
  std::map<std::string, Peer> peers_;
  std::map<std::pair<std::string, std::uint64_t>, std::uint64_t> last_sequence_;
};

}  // namespace

void check_master_config(const std::string& config_path) { load_master_config(config_path); }

int run_master(const std::string& config_path, bool foreground, const std::function<void()>& ready) {
  MasterConfig config = load_master_config(config_path);
  setup_logging(config.logging, foreground, "lmaster");
  Master master(config_path, std::move(config), foreground);
  return master.run(ready);
}

}  // namespace fructosa::master
