#include "master.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <unordered_set>
#include <zmq.hpp>

#include "agent_identity.h"
#include "agent_registry.h"
#include "codec.h"
#include "control_socket.h"
#include "durable_file.h"
#include "logging.h"
#include "master_catalog.h"
#include "own_metrics.h"
#include "master_config.h"
#include "memory_guard.h"
#include "router_bind.h"
#include "sample_recycler.h"
#include "output_runner.h"
#include "peer_table.h"
#include "service_notify.h"
#include "stop_keepalive.h"
#include "wall_clock.h"
#include "journal.h"
#include "zap_handler.h"

namespace fructosa::master {

namespace {

using Clock = std::chrono::steady_clock;

// A master asks an unknown peer for a resync at most this often, so that a burst of queued
// batches from a reconnecting agent does not start a burst of resyncs.
constexpr auto kResyncEvery = std::chrono::seconds(2);
// Accepted samples are handed to the outputs in blocks of up to this many (fewer when the socket
// has nothing more waiting), so that a busy master gives its outputs large batches.
constexpr std::size_t kHandOverSamples = 4096;
// While stopping, systemd is asked every 10 s for 30 s more as long as the outputs progressed:
// a stop that does nothing for 30 s past TimeoutStopSec is killed as before.
constexpr auto kStopKeepAlivePeriod = std::chrono::seconds(10);
constexpr auto kStopKeepAliveExtension = std::chrono::seconds(30);

// The host name the master's own samples carry (short, like the agents').
std::string short_hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string host(name);
  return host.substr(0, host.find('.'));
}

class Master {
 public:
  Master(std::string config_path, MasterConfig config, bool foreground)
      : config_path_(std::move(config_path)), config_(std::move(config)), foreground_(foreground) {}

  int run(const std::function<void()>& ready) {
    int signal_fd = block_signals();
    open_outputs();
    zmq::context_t context(1);
    // [lmaster] curve: the ZAP handler is made first so that it outlives the ROUTER it guards.
    auto curve = start_curve(context, config_);
    zmq::socket_t router(context, zmq::socket_type::router);
    if (curve) curve->secure(router);
    curve_ = curve.get();
    if (curve_) admission_.check_keys_with([this](const std::string& name) { return curve_->key_hosts(name); });
    router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
    router.set(zmq::sockopt::linger, 1000);  // let the last acks leave
    std::string endpoints = bind_router(router, config_);
    ControlSocket control(context, control_endpoint(config_));
    try {
      own_stats_ = std::make_unique<OwnStats>(own_host_, config_.stats_interval, config_.metrics_listen);
    } catch (const std::runtime_error& error) {
      throw std::runtime_error(fmt::format("{}: [lmaster] {}", config_path_, error.what()));
    }
    own_stats_->publish(own_metric_sources());
    if (!config_.metrics_listen.empty()) spdlog::info("serving lmaster's metrics on {}", own_stats_->metrics_url());
    spdlog::info("lmaster {} listening on {}; outputs: {}", FRUCTOSA_VERSION, endpoints, output_names());
    ready();
    serve(router, control, signal_fd);
    stop(router);
    ::close(signal_fd);
    spdlog::info("lmaster stopped");
    return 0;
  }

 private:
  // Signals arrive through a signalfd polled with the sockets. They are blocked before the
  // ZeroMQ context starts its threads, which inherit the mask.
  static int block_signals() {
    sigset_t signals;
    sigemptyset(&signals);
    for (int signal : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, signal);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    int signal_fd = ::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signal_fd < 0) throw std::runtime_error("signalfd failed");
    return signal_fd;
  }

  // Receives, commits and keeps house until SIGTERM or SIGINT.
  void serve(zmq::socket_t& router, ControlSocket& control, int signal_fd) {
    auto next_housekeeping = Clock::now() + std::chrono::seconds(1);
    bool running = true;
    while (running) {
      auto next_stats = own_stats_->next();
      auto wake = std::min(next_housekeeping, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                                  next_stats - std::chrono::system_clock::now()));
      auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()) +
                     std::chrono::milliseconds(1);
      zmq::pollitem_t items[] = {{router.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, signal_fd, ZMQ_POLLIN, 0},
                                 {control.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 3, std::max(timeout, std::chrono::milliseconds(0)));
      if (items[2].revents & ZMQ_POLLIN)
        control.serve(peers_.connected(),
                      [&](const std::string& identity, const Bytes& message) { send(router, identity, message); });
      if (items[1].revents & ZMQ_POLLIN) running = handle_signals(signal_fd);
      memory_.check(Clock::now());
      if (memory_.take_released()) ask_turned_away_to_resend(router);
      // Drain what is queued (bounded, so signals and timers still get their turn).
      for (int i = 0; i < 10000 && receive(router); ++i) {
        if (pending_.size() >= kHandOverSamples) commit(router);
      }
      if (std::chrono::system_clock::now() >= next_stats) pending_.push_back(own_stats_->take(own_metric_sources()));
      commit(router);
      if (Clock::now() >= next_housekeeping) {
        keep_house();
        next_housekeeping = Clock::now() + std::chrono::seconds(1);
      }
    }
  }

  // SIGHUP reopens the outputs; false once SIGTERM or SIGINT came.
  bool handle_signals(int signal_fd) {
    bool running = true;
    signalfd_siginfo info{};
    while (::read(signal_fd, &info, sizeof info) == sizeof info) {
      if (info.ssi_signo == SIGHUP) {
        notify_reloading("reopening outputs");
        reopen();
        notify_ready("running");
      } else {
        notify_stopping("flushing outputs");
        spdlog::info("received {}, stopping", info.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
        running = false;
      }
    }
    return running;
  }

  void keep_house() {
    trim_journal();
    peers_.forget_silent();
    admission_.flush_log();
    registry_->check(wall_clock_ns());
    registry_->save(wall_clock_ns());
  }

  void stop(zmq::socket_t& router) {
    commit(router);
    // Outputs finishing (the HDF5 file's compression, minutes at a thousand hosts) may take
    // longer than the unit's TimeoutStopSec: more time is asked for while they make progress.
    StopKeepAlive keepalive(kStopKeepAlivePeriod, kStopKeepAliveExtension);
    // Every output gets its grace period at the same time; what one still holds stays in the journal.
    for (auto& runner : runners_) runner->begin_stop();
    for (auto& runner : runners_) runner->stop();
    trim_journal();
    runners_.clear();  // closes the outputs
  }

  void open_outputs() {
    create_directories_durably(config_.data_dir);
    registry_ = std::make_unique<AgentRegistry>((std::filesystem::path(config_.data_dir) / "agents.json").string(),
                                                config_.agent_timeout);
    registry_->load();
    for (const auto& [host, record] : registry_->agents()) describe_agent(host);
    if (config_.journal_max_bytes > 0) {
      journal_ = std::make_unique<Journal>(std::filesystem::path(config_.data_dir) / "journal", config_.journal_max_bytes);
      last_sequence_ = journal_->marks();
    } else {
      spdlog::warn("{}: journal_max_bytes = 0: batches are acknowledged from memory and lost if lmaster dies",
                   config_path_);
    }
    std::vector<std::string> names;
    for (const auto& output : config_.outputs) {
      auto made = make_output(output, infos_);
      RunnerSettings settings;
      settings.queue_max_points = static_cast<std::size_t>(output.options.get_int("queue_max_points"));
      if (!output.options.is_set("queue_max_points") && made->preferred_queue_max_points() > 0)
        settings.queue_max_points = made->preferred_queue_max_points();
      settings.retry_max_interval = output.options.get_real("retry_max_interval");
      settings.retry_min_interval = std::min(settings.retry_min_interval, settings.retry_max_interval);
      settings.journal = journal_.get();
      runners_.push_back(std::make_unique<OutputRunner>(std::move(made), settings));
      names.push_back(runners_.back()->name());
    }
    if (journal_) journal_->forget_other_positions(names);
    if (runners_.empty()) spdlog::warn("{} enables no output section: samples are acknowledged and discarded", config_path_);
    describe_own_metrics();
  }

  std::string output_names() const {
    std::string names;
    for (const auto& runner : runners_) names += (names.empty() ? "" : ", ") + runner->name();
    return names.empty() ? "none" : names;
  }

  // Makes what was accepted since the last commit durable (one journal record, one fdatasync),
  // then acknowledges it to the agents and gives it to every output (one shared copy for all).
  // When the journal cannot take it, nothing of it is acknowledged and the agents are asked to
  // resend (they keep every unacknowledged batch).
  void commit(zmq::socket_t& router) {
    if (pending_.empty() && round_marks_.empty() && pending_acks_.empty()) return;
    std::uint64_t id = 0;
    if (journal_ && (!pending_.empty() || !round_marks_.empty())) {
      try {
        id = journal_->append(round_marks_, pending_);
        journal_->commit();
      } catch (const JournalError& error) {
        return refuse_round(router, error.what());
      }
    }
    for (const auto& [key, sequence] : round_marks_) last_sequence_[key] = std::max(last_sequence_[key], sequence);
    round_marks_.clear();
    for (const auto& ack : pending_acks_)
      if (ack.batch) registry_->accepted(ack.host, ack.sequence, ack.samples);
    // One ack per agent and round, its last: an ack covers every batch up to its sequence, and
    // an agent's batches sent together (batch_interval) then cost it one wake-up, not one each.
    acked_this_round_.clear();
    for (auto ack = pending_acks_.rbegin(); ack != pending_acks_.rend(); ++ack)
      if (acked_this_round_.insert(ack->identity).second) send(router, ack->identity, encode_ack(ack->sequence));
    pending_acks_.clear();
    if (pending_.empty()) return;
    auto samples = recycler_.share(std::move(pending_));
    pending_ = recycler_.next_round();
    for (auto& runner : runners_) runner->submit(id, samples);
  }

  void refuse_round(zmq::socket_t& router, const std::string& why) {
    auto now = Clock::now();
    if (now - last_journal_error_log_ > std::chrono::seconds(30)) {
      last_journal_error_log_ = now;
      spdlog::error("journal: {}: {} batches not acknowledged; their agents keep them and are asked to resend", why,
                    pending_acks_.size());
    }
    for (const auto& sample : pending_) received_points_ -= std::min<std::uint64_t>(received_points_, sample.metrics.size());
    pending_.clear();
    round_marks_.clear();
    for (const auto& ack : pending_acks_) {
      Peer* peer = peers_.find(ack.identity);
      if (!peer) continue;
      peer->dictionary.clear();
      peer->resync_sent = false;
      ask_resync(router, ack.identity, *peer, "lmaster could not keep the last batches: " + why);
    }
    pending_acks_.clear();
  }

  // Segments every output has delivered go.
  void trim_journal() {
    if (!journal_) return;
    std::uint64_t delivered = journal_->committed();
    for (const auto& runner : runners_) delivered = std::min(delivered, runner->delivered());
    journal_->trim(delivered);
  }

  // The last sequence accepted from an agent session, this round's included.
  std::uint64_t last_accepted(const SessionKey& key) const {
    if (auto found = round_marks_.find(key); found != round_marks_.end()) return found->second;
    auto found = last_sequence_.find(key);
    return found == last_sequence_.end() ? 0 : found->second;
  }

  // The `lmaster` sensor: the master's own counters, reported like any agent's sensor.
  void describe_own_metrics() {
    std::vector<std::string> outputs;
    for (const auto& runner : runners_) outputs.push_back(runner->name());
    describe_master_metrics(infos_, outputs);
  }

  // What the `lmaster` sensor reads now.
  MasterMetricSources own_metric_sources() const {
    auto since = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(config_.stats_interval));
    MasterMetricSources from;
    from.agents = peers_.heard_since(since);
    from.received_points = received_points_;
    from.received_batches = received_batches_;
    from.turned_away_batches = turned_away_batches_;
    from.registry = registry_.get();
    from.curve = curve_;
    from.runners = &runners_;
    from.journal = journal_.get();
    from.memory = &memory_;
    return from;
  }

  void reopen() {
    spdlog::info("SIGHUP: reopening outputs, re-reading logging and memory_max");
    MasterConfig fresh;
    try {
      fresh = load_master_config(config_path_);
      setup_logging(fresh.logging, foreground_, "lmaster");
      memory_.set_max_bytes(fresh.memory_max);
      for (const auto& warning : fresh.warnings) spdlog::warn("{}", warning);
    } catch (const ConfigError& error) {
      spdlog::error("SIGHUP: keeping the running logging configuration: {}", error.what());
    }
    for (auto& runner : runners_) runner->request_reopen();
  }

  void describe_agent(const std::string& host) { AgentRegistry::describe(infos_, kMasterSensorName, host); }

  static void send(zmq::socket_t& router, const std::string& identity, const Bytes& payload) {
    router.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  }

  void ask_turned_away_to_resend(zmq::socket_t& router) {
    for (auto& [identity, peer] : peers_) {
      if (!peer.turned_away) continue;
      peer.turned_away = false;
      peer.dictionary.clear();
      peer.resync_sent = false;
      ask_resync(router, identity, peer, "lmaster turned batches away while over memory_max");
    }
  }

  void ask_resync(zmq::socket_t& router, const std::string& identity, Peer& peer, const std::string& reason) {
    auto now = Clock::now();
    if (peer.resync_sent && now - peer.last_resync < kResyncEvery) return;
    spdlog::info("asking agent {} for a resync: {}", peer.host.empty() ? peer.address : peer.host, reason);
    send(router, identity, encode_resync(reason));
    peer.resync_sent = true;
    peer.last_resync = now;
  }

  // What an agent says of a key's unit, kind and description (MetricInfoStore::learn): a
  // difference from another agent's is logged once per key, a full store once.
  void learn_description(const std::string& host, const std::string& sensor, const SeriesDescription& series) {
    std::string owner;
    auto learned = infos_.learn(host, sensor, series.key, series.info, &owner);
    if (learned == MetricInfoStore::Learned::kept_other && differing_descriptions_logged_.size() < 4096 &&
        differing_descriptions_logged_.insert(sensor + '\n' + series.key).second)
      spdlog::warn("agent {} describes {} {} as [{}, {}] unlike agent {}: kept {}'s (logged once per key)", host,
                   sensor, series.key, series.info.unit, to_string(series.info.kind), owner, owner);
    if (learned == MetricInfoStore::Learned::full && !description_store_full_logged_)
      spdlog::error("the store of key descriptions is full ({} keys): new keys from agent {} and others go "
                    "undescribed (logged once)", MetricInfoStore::kMaxKeys, host);
    description_store_full_logged_ = description_store_full_logged_ || learned == MetricInfoStore::Learned::full;
  }

  // A resync with the reason, which the agent logs and answers by sending everything again.
  void tell_refused(zmq::socket_t& router, const std::string& identity, Peer& peer) {
    if (peer.refusal.tell_now()) send(router, identity, encode_resync(peer.refusal.reason));
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
    Peer* known = peers_.find_or_add(identity);
    if (!known) {
      admission_.refuse_peer_over_limit(peer_address_of(payload));
      return true;
    }
    Peer& peer = *known;
    // A routing id seen again with another CURVE key is another connection (a client may choose
    // its routing id): nothing of the one before carries over.
    if (std::string_view key = key_name_of(payload); peer.address.empty() || key != peer.key) {
      peer = Peer{};
      peer.address = peer_address_of(payload);
      peer.key = key;
      peer.first_seen = Clock::now();
    }
    peer.last_seen = Clock::now();
    Message message;
    try {
      message = decode(payload.data(), payload.size());
    } catch (const ProtocolError& error) {
      spdlog::warn("dropped a message from {}{}: {}", peer.address, peer.host.empty() ? "" : " (" + peer.host + ")",
                   error.what());
      // Batches are encoded as changes from the ones before: after a lost one the agent must
      // start over.
      if (!peer.host.empty()) {
        peer.dictionary.clear();
        ask_resync(router, identity, peer, error.what());
      }
      return true;
    }
    try {
      handle(router, identity, peer, message);
      if (!peer.host.empty()) {
        if (!registry_->agents().count(peer.host)) describe_agent(peer.host);
        registry_->seen(peer.host, peer.address, peer.session, wall_clock_ns());
      }
    } catch (const ProtocolError& error) {
      // Once a resync is asked, whatever the agent sent before it heard is expected to fail
      // (thousands of agents would flood the log after a refused round).
      if (peer.resync_sent)
        spdlog::debug("dropped a {} message from {} ({}) while waiting for its resync: {}", to_string(message.type),
                      peer.host, peer.address, error.what());
      else
        spdlog::warn("dropped a {} message from {} ({}): {}", to_string(message.type), peer.host, peer.address,
                     error.what());
      peer.dictionary.clear();
      ask_resync(router, identity, peer, error.what());
    }
    return true;
  }

  void handle(zmq::socket_t& router, const std::string& identity, Peer& peer, Message& message) {
    if (peer.refusal && message.type != MessageType::hello) return tell_refused(router, identity, peer);
    switch (message.type) {
      case MessageType::hello:
        if (auto refusal = admission_.refuse_hello(peer.key, message.host, peer.address)) {
          peer.host.clear();
          peer.dictionary.clear();
          peer.refusal.reason = std::move(*refusal);
          return tell_refused(router, identity, peer);
        }
        peer.refusal.reason.clear();
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
          learn_description(peer.host, peer.dictionary.sensors()[series.sensor].name, series);
        return;
      case MessageType::batch:
        if (peer.host.empty()) return ask_resync(router, identity, peer, "unknown agent");
        if (peer.turned_away || (memory_.holding() && message.sequence > last_accepted({peer.host, peer.session}))) {
          // Over memory_max (memory_guard.h): neither kept nor acknowledged, and not unpacked, so
          // the agent resends from a resync once the hold is over.
          peer.turned_away = true;
          ++turned_away_batches_;
          return;
        }
        return accept_batch(router, identity, peer, message);
      case MessageType::heartbeat:
        if (peer.host.empty()) return ask_resync(router, identity, peer, "unknown agent");
        registry_->heartbeat(peer.host, message.sequence);
        // Answered with the last accepted batch, so an agent hears from its master even when it
        // has nothing to send (it fails over to another master after a silence).
        pending_acks_.push_back({identity, peer.host, last_accepted({peer.host, peer.session}), 0, false});
        return;
      case MessageType::ack:
      case MessageType::resync:
      case MessageType::control:
        spdlog::warn("dropped a {} message from agent {} ({}): only lmaster sends those", to_string(message.type),
                     peer.host, peer.address);
        return;
    }
  }

  void accept_batch(zmq::socket_t&, const std::string& identity, Peer& peer, Message& message) {
    SessionKey key{peer.host, peer.session};
    std::uint64_t last = last_accepted(key);
    if (message.sequence <= last) {
      // A resend of what was already accepted: acknowledge again (once that is durable), keep it
      // once. Decoded all the same: every batch moves the connection's memory on.
      peer.dictionary.unpack(message);
      pending_acks_.push_back({identity, peer.host, last, 0, false});
      return;
    }
    // Resolve everything first: a bad index rejects the whole batch, never half of it.
    std::size_t first = pending_.size();
    try {
      peer.dictionary.resolve_batch(message, peer.host, pending_, &recycler_.reusable());
    } catch (...) {
      pending_.resize(first);
      throw;
    }
    for (std::size_t i = first; i < pending_.size(); ++i) received_points_ += pending_[i].metrics.size();
    ++received_batches_;
    if (last != 0 && message.sequence != last + 1)
      spdlog::warn("agent {}: batches {}..{} never arrived (dropped by the agent, or numbers it skipped after "
                   "an unclean stop: its log says which)",
                   peer.host, last + 1, message.sequence - 1);
    round_marks_[key] = message.sequence;
    // Acknowledged at the end of the round, once the journal has it on disk.
    pending_acks_.push_back({identity, peer.host, message.sequence, pending_.size() - first, true});
  }

  std::string config_path_;
  MasterConfig config_;
  bool foreground_;
  std::string own_host_ = short_hostname();
  MetricInfoStore infos_;
  std::set<std::string> differing_descriptions_logged_;
  bool description_store_full_logged_ = false;
  std::unique_ptr<Journal> journal_;  // null with journal_max_bytes = 0
  std::vector<std::unique_ptr<OutputRunner>> runners_;
  SampleRecycler recycler_;      // the outputs' rounds back, to be filled again
  std::vector<Sample> pending_;  // accepted this round, not yet committed
  struct PendingAck {
    std::string identity;
    std::string host;
    std::uint64_t sequence = 0;
    std::size_t samples = 0;
    bool batch = false;  // a new batch (not a resend or a heartbeat)
  };
  std::vector<PendingAck> pending_acks_;  // sent once this round is committed
  std::unordered_set<std::string_view> acked_this_round_;  // identities of pending_acks_ (commit())
  SequenceMarks round_marks_;              // sequences accepted this round, not yet committed
  Clock::time_point last_journal_error_log_;
  std::uint64_t received_points_ = 0;
  std::uint64_t received_batches_ = 0;
  MemoryGuard memory_{config_.memory_max};  // [lmaster] memory_max
  std::uint64_t turned_away_batches_ = 0;
  PeerTable peers_;
  std::unique_ptr<AgentRegistry> registry_;  // every agent ever heard, up or down
  ZapHandler* curve_ = nullptr;               // null unless [lmaster] curve = true
  AgentAdmission admission_;                  // which hellos and new connections are let in
  std::unique_ptr<OwnStats> own_stats_;      // the `lmaster` sensor (and metrics_listen)
  SequenceMarks last_sequence_;  // committed; rebuilt from the journal at start
};

}  // namespace

int run_master(const std::string& config_path, bool foreground, const std::function<void()>& ready) {
  MasterConfig config = load_master_config(config_path);
  setup_logging(config.logging, foreground, "lmaster");
  for (const auto& warning : config.warnings) spdlog::warn("{}", warning);
  Master master(config_path, std::move(config), foreground);
  return master.run(ready);
}

}  // namespace fructosa::master
