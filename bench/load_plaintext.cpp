// master_load's agents as Graphite plaintext senders: one TCP connection each, as every node's
// own collector would open one; nothing is acknowledged.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "load_agents.h"

namespace fructosa::bench {
namespace {

int connect_tcp(const std::string& host_port) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("--plaintext wants HOST:PORT, not " + host_port);
  std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int error = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); error != 0)
    throw std::runtime_error("cannot resolve " + host_port + ": " + gai_strerror(error));
  std::string failure = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    failure = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  throw std::runtime_error("cannot connect to " + host_port + ": " + failure);
}

class PlaintextWorker {
 public:
  PlaintextWorker(const Settings& settings, const Timeline& timeline, const std::vector<SensorModel>& model,
                  std::vector<Agent>& agents)
      : settings_(settings), timeline_(timeline), model_(model), agents_(agents) {}

  Counters run() {
    for (auto& agent : agents_) agent.fd = connect_tcp(settings_.plaintext);
    std::size_t cursor = 0;
    std::uint64_t round = 0;
    for (;;) {
      auto now = Clock::now();
      if (now >= timeline_.window_end) break;
      if (settings_.interval > 0) {
        auto due = timeline_.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                         agents_[cursor].phase + static_cast<double>(round) * settings_.interval));
        if (due > now) {
          std::this_thread::sleep_for(std::min<Clock::duration>(due - now, std::chrono::milliseconds(50)));
          continue;
        }
        if (now - due > std::chrono::duration<double>(settings_.interval)) ++counters_.deferred;  // behind
      }
      send_batch(agents_[cursor]);
      if (++cursor == agents_.size()) cursor = 0, ++round;
    }
    for (auto& agent : agents_) {
      ::shutdown(agent.fd, SHUT_WR);
      ::close(agent.fd);
    }
    return counters_;
  }

 private:
  void send_batch(Agent& agent) {
    std::size_t points = advance(agent, model_);
    buffer_.clear();
    std::size_t path = 0;
    for (const Sample& sample : agent.samples) {
      // " <seconds>.<milliseconds>\n", once per sample
      char stamp[40];
      std::int64_t ms = sample.time_ns / 1000000;
      int stamp_size = std::snprintf(stamp, sizeof stamp, " %lld.%03lld\n", static_cast<long long>(ms / 1000),
                                     static_cast<long long>(ms % 1000));
      for (const auto& metric : sample.metrics) {
        buffer_ += agent.paths[path++];
        char number[32];
        auto result = std::to_chars(number, number + sizeof number, metric.value);
        buffer_.append(number, result.ptr);
        buffer_.append(stamp, stamp_size);
      }
    }
    const char* data = buffer_.data();
    std::size_t left = buffer_.size();
    while (left > 0) {
      ssize_t n = ::send(agent.fd, data, left, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error("sending to " + settings_.plaintext + " for " + agent.host + ": " + std::strerror(errno));
      }
      data += n;
      left -= static_cast<std::size_t>(n);
    }
    ++counters_.batches_sent;
    counters_.points_sent += points;
    counters_.batch_bytes += buffer_.size();
    if (timeline_.in_window(Clock::now())) counters_.window_points_sent += points;
  }

  const Settings& settings_;
  const Timeline& timeline_;
  const std::vector<SensorModel>& model_;
  std::vector<Agent>& agents_;
  Counters counters_;
  std::string buffer_;
};

}  // namespace

Counters run_plaintext_agents(const Settings& settings, const Timeline& timeline,
                              const std::vector<SensorModel>& model, std::vector<Agent>& agents) {
  return PlaintextWorker(settings, timeline, model, agents).run();
}

}  // namespace fructosa::bench
