#include "agent_registry.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "master_catalog.h"
#include "output.h"
#include "utc_time.h"

namespace fructosa::master {
namespace {

constexpr double kNs = 1e9;

std::string utc(std::int64_t ns) { return ns <= 0 ? "never" : utc_iso8601(ns); }

}  // namespace

AgentRegistry::AgentRegistry(std::string status_path, double timeout_seconds)
    : status_path_(std::move(status_path)), timeout_ns_(static_cast<std::int64_t>(timeout_seconds * kNs)) {}

void AgentRegistry::load() {
  std::ifstream file(status_path_);
  if (!file) return;
  try {
    auto status = nlohmann::json::parse(file);
    for (const auto& [host, agent] : status.at("agents").items()) {
      AgentRecord& record = agents_[host];
      record.address = agent.value("address", "");
      record.last_seen_ns = agent.value("last_seen_ns", std::int64_t{0});
      record.up = false;  // until heard by this master
    }
    if (!agents_.empty())
      spdlog::info("{} agent(s) known from {}: reported down until they are heard again", agents_.size(), status_path_);
  } catch (const std::exception& error) {
    spdlog::warn("{}: not a readable agent table ({}); starting with no known agent", status_path_, error.what());
    agents_.clear();
  }
}

void AgentRegistry::seen(const std::string& host, const std::string& address, std::uint64_t session, std::int64_t now_ns) {
  AgentRecord& record = agents_[host];
  if (!record.up) {
    if (record.last_seen_ns > 0)
      spdlog::info("agent {} reports again, from {} (silent since {})", host, address, utc(record.last_seen_ns));
    record.up = true;
    record.mark_ns = now_ns;
    record.points_at_mark = record.points;
  }
  if (record.session != session) {
    record.accepted_sequence = 0;
    record.sent_sequence = 0;
  }
  record.address = address;
  record.session = session;
  record.last_seen_ns = now_ns;
}

void AgentRegistry::accepted(const std::string& host, std::uint64_t sequence, std::size_t points) {
  AgentRecord& record = agents_[host];
  record.points += points;
  ++record.batches;
  record.accepted_sequence = std::max(record.accepted_sequence, sequence);
}

void AgentRegistry::heartbeat(const std::string& host, std::uint64_t sent_sequence) {
  agents_[host].sent_sequence = sent_sequence;
}

void AgentRegistry::check(std::int64_t now_ns) {
  for (auto& [host, record] : agents_) {
    if (record.up && now_ns - record.last_seen_ns > timeout_ns_) {
      record.up = false;
      record.rate = 0;
      spdlog::warn("agent {} stopped reporting: nothing from {} for {:.0f} s (last seen {})", host, record.address,
                   static_cast<double>(now_ns - record.last_seen_ns) / kNs, utc(record.last_seen_ns));
    }
    // The rate over the last 10 s or so, refreshed as it passes.
    if (record.up && now_ns - record.mark_ns >= 10'000'000'000) {
      record.rate = static_cast<double>(record.points - record.points_at_mark) /
                    (static_cast<double>(now_ns - record.mark_ns) / kNs);
      record.points_at_mark = record.points;
      record.mark_ns = now_ns;
    }
  }
}

void AgentRegistry::add_metrics(Sample& sample) const {
  for (const auto& [host, record] : agents_) {
    // One component, so that agent.*.up matches a host with dots (a full name, an address) too.
    std::string prefix = "agent." + key_component(host);
    sample.metrics.push_back({prefix + ".up", record.up ? 1.0 : 0.0});
    sample.metrics.push_back({prefix + ".last_seen", static_cast<double>(record.last_seen_ns) / kNs});
    sample.metrics.push_back({prefix + ".rate", record.rate});
    sample.metrics.push_back({prefix + ".backlog", static_cast<double>(record.backlog())});
  }
}

void AgentRegistry::describe(MetricInfoStore& infos, const std::string& sensor, const std::string& host) {
  // The catalog's agent.*.<key> entries (master_catalog.h), for this host.
  const std::string pattern_prefix = "agent.*.";
  for (const auto& entry : master_catalog().entries())
    if (entry.pattern.starts_with(pattern_prefix))
      infos.remember(sensor, "agent." + key_component(host) + entry.pattern.substr(pattern_prefix.size() - 1),
                     MetricInfo{std::string(to_string(entry.unit)), entry.kind, entry.description});
}

void AgentRegistry::save(std::int64_t now_ns) const {
  nlohmann::ordered_json status{{"written_ns", now_ns}, {"timeout_s", static_cast<double>(timeout_ns_) / kNs}};
  nlohmann::ordered_json agents = nlohmann::ordered_json::object();
  for (const auto& [host, record] : agents_)
    agents[host] = {{"up", record.up},       {"address", record.address}, {"last_seen_ns", record.last_seen_ns},
                    {"rate", record.rate},   {"points", record.points},   {"batches", record.batches},
                    {"backlog", record.backlog()}, {"session", fmt::format("{:016x}", record.session)}};
  status["agents"] = std::move(agents);
  std::string temporary = status_path_ + ".new";
  {
    std::ofstream file(temporary, std::ios::trunc);
    // Host names come from the network: never let one that is not UTF-8 stop the table.
    file << status.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
    if (!file) {
      spdlog::warn("cannot write {}: `lmaster status` will show an older table", temporary);
      return;
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, status_path_, error);
  if (error) spdlog::warn("cannot replace {}: {}", status_path_, error.message());
}

bool print_agent_table(const std::string& path, std::ostream& out, std::int64_t now_ns) {
  std::ifstream file(path);
  if (!file) return false;
  nlohmann::json status;
  try {
    status = nlohmann::json::parse(file);
  } catch (const std::exception&) {
    return false;
  }
  auto written = status.value("written_ns", std::int64_t{0});
  out << fmt::format("agents (table of {}, written {:.0f} s ago):\n", path, static_cast<double>(now_ns - written) / kNs);
  out << fmt::format("{:<20} {:<5} {:<22} {:>10} {:>12} {:>8}  {}\n", "HOST", "UP", "LAST SEEN", "AGO (s)",
                     "POINTS/S", "BACKLOG", "ADDRESS");
  std::size_t down = 0;
  const nlohmann::json agents = status.value("agents", nlohmann::json::object());
  for (const auto& [host, agent] : agents.items()) {
    bool up = agent.value("up", false);
    down += !up;
    auto seen = agent.value("last_seen_ns", std::int64_t{0});
    out << fmt::format("{:<20} {:<5} {:<22} {:>10} {:>12.1f} {:>8}  {}\n", host, up ? "yes" : "NO", utc(seen),
                       seen > 0 ? fmt::format("{:.0f}", static_cast<double>(now_ns - seen) / kNs) : "-",
                       agent.value("rate", 0.0), agent.value("backlog", 0), agent.value("address", ""));
  }
  out << fmt::format("{} agent(s), {} down\n", agents.size(), down);
  return true;
}

}  // namespace fructosa::master
