#include "agent.h"

#include <fmt/ranges.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstring>
#include <mutex>

#include "agent_config.h"
#include "agent_stats.h"
#include "carbon_link.h"
#include "lmaster_link.h"
#include "localhost_name.h"
#include "logging.h"
#include "push_server.h"
#include "round_runner.h"
#include "sender.h"
#include "service_notify.h"
#include "startup_pages.h"

namespace fructosa::agent {
namespace {

namespace asio = boost::asio;

// Makes every sensor `config` activates; a sensor's ConfigError (options it cannot work with,
// found when it is made) is rethrown naming the file and section.
std::unique_ptr<sensors::Sensor> make_sensor(const AgentConfig& config, const SensorConfig& sensor_config,
                                             sensors::JobDirectory* jobs) {
  sensors::SensorContext context{config.roots, sensor_config.options, jobs};
  try {
    return sensor_config.definition->make(context);
  } catch (const ConfigError& error) {
    throw ConfigError(fmt::format("{}: {}", sensor_config.where, error.what()));
  }
}

template <class Use>
void for_each_new_sensor(const AgentConfig& config, sensors::JobDirectory* jobs, Use use) {
  for (const auto& sensor_config : config.sensors) use(sensor_config, make_sensor(config, sensor_config, jobs));
}

bool same_reading(const SensorConfig& a, const SensorConfig& b) {
  return a.definition == b.definition && a.options == b.options && a.interval == b.interval;
}

// How long a stopping agent waits for lmaster to acknowledge what it sent last.
constexpr double kStopLingerSeconds = 3.0;
double thread_cpu_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

// Every lmaster of [lmaster] host, as tcp:// endpoints in failover order.
std::vector<std::string> endpoints_of(const AgentConfig& config) {
  std::vector<std::string> endpoints;
  for (const auto& master : config.masters)
    endpoints.push_back(fmt::format("tcp://{}:{}", with_localhost_fallback(master.host), master.port));
  return endpoints;
}

std::string endpoint_of(const AgentConfig& config) { return fmt::format("{}", fmt::join(endpoints_of(config), ", ")); }

// Where the readings go: "lmaster at tcp://a:7888, tcp://b:7888" or "carbon at host:2004 (pickle)".
std::string destination_of(const AgentConfig& config) {
  if (config.graphite) return carbon_destination(graphite::carbon_settings(*config.graphite));
  return "lmaster at " + endpoint_of(config);
}

// Where readings go; swapped when a reload points the agent at another master.
class SenderSlot {
 public:
  void replace(std::shared_ptr<Sender> sender) {
    std::lock_guard lock(mutex_);
    sender_ = std::move(sender);
  }
  std::shared_ptr<Sender> get() const {
    std::lock_guard lock(mutex_);
    return sender_;
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<Sender> sender_;
};

// Node samples name the jobs running on the node when they were taken, as colmet's do.
void label_involved_jobs(sensors::JobDirectory& jobs, std::vector<Sample>& samples) {
  if (samples.empty()) return;
  auto snapshot = jobs.snapshot();
  if (snapshot->involved_jobs.empty()) return;
  for (auto& sample : samples)
    if (sample.job == 0) sample.labels.push_back({"involved_jobs", snapshot->involved_jobs});
}

// One active sensor: how to read it, and its state between readings. When it is read is the
// RoundRunner's (round_runner.h).
struct SensorTask final : RoundTask {
  SensorTask(asio::io_context& io, const SensorConfig& config, std::string host_in,
             std::shared_ptr<sensors::JobDirectory> jobs_in, std::unique_ptr<sensors::Sensor> sensor_in)
      : RoundTask(config.definition->name, config.interval),
        definition(config.definition),
        config(config),
        host(std::move(host_in)),
        jobs(std::move(jobs_in)),
        sensor(std::move(sensor_in)),
        revert_timer(io) {}

  void read(std::int64_t deadline, std::vector<Sample>& out) override {
    std::vector<Sample> samples;
    // A sample is stamped with its (aligned) reading time, so every node's readings line up
    // and gaps can be counted; the read itself starts within milliseconds of it.
    sensors::SampleWriter writer(samples, host, definition->name, deadline);
    const auto started = std::chrono::steady_clock::now();
    const double cpu_started = thread_cpu_seconds();
    bool success = false;
    try {
      if (!sensor->sample(writer)) samples.clear();
      success = true;
      label_involved_jobs(*jobs, samples);
      if (unavailable) {
        spdlog::info("sensor {} works again", definition->name);
        unavailable = false;
      }
      failures_in_a_row.store(0, std::memory_order_relaxed);
    } catch (const sensors::SensorUnavailable& why) {
      if (!unavailable) spdlog::warn("sensor {} unavailable: {}", definition->name, why.what());
      unavailable = true;
      failures_in_a_row.fetch_add(1, std::memory_order_relaxed);
      samples.clear();
    } catch (const std::exception& error) {
      if (!unavailable) spdlog::error("sensor {} failed: {}", definition->name, error.what());
      unavailable = true;
      failures_in_a_row.fetch_add(1, std::memory_order_relaxed);
      samples.clear();
    }
    sensors::AgentStats::instance().record_read(
        definition->name, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
        thread_cpu_seconds() - cpu_started, success);
    if (out.empty())
      out.swap(samples);
    else
      for (auto& sample : samples) out.push_back(std::move(sample));
  }

  std::string running_jobs() override { return jobs->snapshot()->involved_jobs; }

  const sensors::SensorDefinition* definition;
  const SensorConfig config;  // what it was made from: a reload keeps it running when unchanged
  const std::string host;
  // Before `sensor`, which may point into it: a reload replaces the agent's directory while a
  // reading of the old sensor may still be running.
  std::shared_ptr<sensors::JobDirectory> jobs;
  std::unique_ptr<sensors::Sensor> sensor;
  asio::steady_timer revert_timer;  // ends an interval lmaster set for a while (`lmaster ctl`)
  bool unavailable = false;         // reads never overlap
};

class Agent {
 public:
  Agent(std::string config_path, AgentConfig config, bool foreground)
      : foreground_(foreground),
        config_path_(std::move(config_path)),
        config_(std::move(config)),
        signals_(io_, SIGTERM, SIGINT, SIGHUP) {}

  int run(const std::function<void()>& ready) {
    slot_.replace(make_sender(config_));
    start_sensors(make_sensors(config_));
    update_push_socket();
    wait_for_signal();
    spdlog::info("lagent {} started as {} -> {} with {} sensor(s)", FRUCTOSA_VERSION, config_.host,
                 destination_of(config_), tasks_.size());
    // Ready: the sensors run and the spool is open, so every reading is kept whether or not
    // lmaster (or carbon) answers. Waiting for it here would hold a booting node's
    // multi-user.target (Type=notify) for as long as its master is down. STATUS= says whether
    // the destination has answered yet (connected()).
    ready();
    link_status_ = fmt::format("waiting for {}; readings are spooled", destination_of(config_));
    notify_status(link_status_);
    release_startup_pages();
    io_.run();
    push_.reset();
    stop_sensors();
    runner_.stop();  // after the readings running now
    std::size_t left = slot_.get()->stop(kStopLingerSeconds);
    if (left) spdlog::warn("stopping with {} batch(es) {} has not taken", left, destination_of(config_));
    spdlog::info("lagent stopped");
    return 0;
  }

 private:
  std::shared_ptr<Sender> make_sender(const AgentConfig& config) {
    SenderSettings settings;
    settings.on_connected = [this](const std::string& destination) {
      asio::post(io_, [this, destination] { connected(destination); });
    };
    settings.spool_dir = config.spool_dir;
    settings.spool_max_bytes = config.spool_max_bytes;
    settings.batch_interval = config.batch_interval;
    return std::make_shared<Sender>(settings, make_link(config));
  }

  std::unique_ptr<Link> make_link(const AgentConfig& config) {
    if (config.graphite) {
      CarbonLinkSettings carbon;
      carbon.carbon = graphite::carbon_settings(*config.graphite);
      carbon.host = config.host;
      carbon.retry_max_interval = config.graphite->get_real("retry_max_interval");
      return make_carbon_link(std::move(carbon));
    }
    LmasterLinkSettings link;
    link.endpoints = endpoints_of(config);
    link.on_control = [this](const std::string& sensor, double interval, double duration) {
      asio::post(io_, [this, sensor, interval, duration] { sample_faster(sensor, interval, duration); });
    };
    link.failover_after = std::max(2.0, 3 * config.heartbeat_interval);
    link.host = config.host;
    link.heartbeat_interval = config.heartbeat_interval;
    link.curve_server_key = config.curve_server_key;
    link.curve_public_key = config.curve_public_key;
    link.curve_secret_key = config.curve_secret_key;
    link.max_unacked_batches = config.max_unacked_batches;
    return make_lmaster_link(std::move(link));
  }

  // Everything the configuration activates, made but not armed yet: a sensor that refuses its
  // options (ConfigError) leaves whatever runs now untouched.
  struct SensorSet {
    std::shared_ptr<sensors::JobDirectory> jobs;
    std::vector<std::shared_ptr<SensorTask>> tasks;
  };

  SensorSet make_sensors(const AgentConfig& config) {
    SensorSet set;
    set.jobs = std::make_shared<sensors::JobDirectory>(config.jobs, config.roots);
    for_each_new_sensor(config, set.jobs.get(), [&](const SensorConfig& sensor_config, auto sensor) {
      set.tasks.push_back(std::make_shared<SensorTask>(io_, sensor_config, config.host, set.jobs, std::move(sensor)));
    });
    return set;
  }

  // For a reload: the running tasks whose section did not change are kept (their schedules run
  // on, so they lose no reading); the others are made anew. Changed roots, [jobs] or host remake all.
  SensorSet remake_sensors(const AgentConfig& fresh) {
    bool same_base = fresh.jobs == config_.jobs && fresh.roots.proc == config_.roots.proc &&
                     fresh.roots.sys == config_.roots.sys && fresh.host == config_.host;
    SensorSet set;
    set.jobs = same_base ? jobs_ : std::make_shared<sensors::JobDirectory>(fresh.jobs, fresh.roots);
    for (const auto& sensor_config : fresh.sensors) {
      auto kept = std::find_if(tasks_.begin(), tasks_.end(), [&](const auto& task) {
        return same_base && same_reading(task->config, sensor_config) &&
               std::find(set.tasks.begin(), set.tasks.end(), task) == set.tasks.end();
      });
      if (kept != tasks_.end()) {
        set.tasks.push_back(*kept);
      } else {
        set.tasks.push_back(std::make_shared<SensorTask>(io_, sensor_config, fresh.host, set.jobs,
                                                         make_sensor(fresh, sensor_config, set.jobs.get())));
      }
    }
    return set;
  }

  void start_sensors(SensorSet set) {
    if (config_.sensors.empty()) spdlog::warn("{} activates no [sensor:Name] section: only heartbeats will be sent", config_path_);
    jobs_ = std::move(set.jobs);
    auto running = jobs_->snapshot();
    spdlog::info("job discovery: {} job(s) running [{}]; cgroup hierarchies: {}", running->jobs.size(),
                 running->involved_jobs, jobs_->describe());
    tasks_ = std::move(set.tasks);
    runner_.set_tasks({tasks_.begin(), tasks_.end()});  // kept ones keep their next reading time
  }

  // Listens on [lagent] push_socket while a [sensor:User] section exists (docs/push.md); a
  // reload that changes neither the socket nor the job discovery keeps the connections open.
  void update_push_socket() { update_push_server(push_, config_, jobs_); }

  // `lmaster ctl interval`: `sensor` reads every `interval` s for `duration` s, then at its
  // configured interval again (kwollect's on-demand metrics). On the io thread.
  void sample_faster(const std::string& sensor, double interval, double duration) {
    if (!(interval >= 0.01 && interval <= 86400) || !(duration > 0 && duration <= 86400)) {
      spdlog::warn("lmaster asked for {} every {} s for {} s: out of range (0.01..86400 s), ignored", sensor, interval,
                   duration);
      return;
    }
    auto found = std::find_if(tasks_.begin(), tasks_.end(), [&](const auto& task) { return task->definition->name == sensor; });
    if (found == tasks_.end()) {
      spdlog::warn("lmaster asked for {} every {} s: no such sensor is active here", sensor, interval);
      return;
    }
    auto task = *found;
    runner_.set_interval(task, interval);
    spdlog::info("reading {} every {} s for {} s (lmaster's request), then every {} s again", sensor, interval, duration,
                 task->config.interval);
    task->revert_timer.expires_after(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(duration)));
    task->revert_timer.async_wait([this, task](const boost::system::error_code& error) {
      if (error || task->stopped) return;
      runner_.set_interval(task, task->config.interval);
      spdlog::info("reading {} every {} s again", task->definition->name, task->config.interval);
    });
  }

  void stop_sensors() {
    for (auto& task : tasks_) {
      task->stopped = true;
      task->revert_timer.cancel();
    }
    tasks_.clear();
    runner_.set_tasks({});
  }

  // On the io thread: an lmaster answered (the first one, or another after a failover or
  // reload), or carbon accepted the connection: `destination` says which (Link::destination()).
  void connected(const std::string& destination) {
    link_status_ = fmt::format("sending to {}", destination);
    notify_status(link_status_);
  }

  void wait_for_signal() {
    signals_.async_wait([this](const boost::system::error_code& error, int signal) {
      if (error) return;
      if (signal == SIGHUP) {
        // systemd holds `systemctl reload` until READY=1 follows RELOADING=1.
        notify_reloading("re-reading the configuration");
        reload();
        notify_ready(link_status_);
        wait_for_signal();
        return;
      }
      notify_stopping("stopping: sending what is left");
      spdlog::info("received {}, stopping", signal == SIGTERM ? "SIGTERM" : "SIGINT");
      stop_sensors();
      io_.stop();
    });
  }

  void reload() {
    AgentConfig fresh;
    try {
      fresh = load_agent_config(config_path_);
    } catch (const ConfigError& error) {
      spdlog::error("SIGHUP: keeping the running configuration: {}", error.what());
      return;
    }
    SensorSet fresh_sensors;
    try {
      fresh_sensors = remake_sensors(fresh);
    } catch (const ConfigError& error) {
      spdlog::error("SIGHUP: keeping the running configuration: {}", error.what());
      return;
    }
    setup_logging(fresh.logging, foreground_, "lagent");
    for (const auto& warning : fresh.warnings) spdlog::warn("{}", warning);
    if (destination_of(fresh) != destination_of(config_) || fresh.graphite != config_.graphite ||
        fresh.host != config_.host ||
        fresh.heartbeat_interval != config_.heartbeat_interval ||
        fresh.max_unacked_batches != config_.max_unacked_batches || fresh.batch_interval != config_.batch_interval ||
        fresh.spool_dir != config_.spool_dir ||
        fresh.spool_max_bytes != config_.spool_max_bytes || fresh.curve_server_key != config_.curve_server_key ||
        fresh.curve_public_key != config_.curve_public_key || fresh.curve_secret_key != config_.curve_secret_key) {
      auto old = slot_.get();
      slot_.replace(make_sender(fresh));
      // The new sender has not heard from its destination yet (connected() says when it has).
      link_status_ = fmt::format("waiting for {}; readings are spooled", destination_of(fresh));
      if (std::size_t left = old->stop(kStopLingerSeconds))
        spdlog::warn("SIGHUP: {} batch(es) were not taken by the previous {}; they stay in its spool", left,
                     destination_of(config_));
    }
    // Stop what the new configuration no longer has (or has changed).
    std::size_t kept = 0;
    for (auto& task : tasks_) {
      if (std::find(fresh_sensors.tasks.begin(), fresh_sensors.tasks.end(), task) != fresh_sensors.tasks.end()) {
        ++kept;
        continue;
      }
      task->stopped = true;
      task->revert_timer.cancel();
      sensors::AgentStats::instance().forget_sensor(task->definition->name);
    }
    config_ = std::move(fresh);
    start_sensors(std::move(fresh_sensors));
    update_push_socket();
    spdlog::info("SIGHUP: configuration re-read from {}: {} sensor(s) kept running, {} started or re-armed",
                 config_path_, kept, tasks_.size() - kept);
    release_startup_pages();
  }

  // Start (or a reload) is over: the code that parsed the configuration, linked the libraries
  // and set them up runs no more, but stays mapped (2.4 MiB of lagent's 7.7 MiB RSS, measured).
  // The code a round runs comes back at its first use.
  static void release_startup_pages() {
    auto released = release_clean_file_pages();
    spdlog::debug("released {} KiB of program and library pages mapped at start ({} mappings)", released.bytes / 1024,
                  released.mappings);
  }

  const bool foreground_;
  std::string link_status_;  // STATUS=: waiting for the destination or sending to it; io thread only
  std::string config_path_;
  AgentConfig config_;
  asio::io_context io_;
  asio::signal_set signals_;
  SenderSlot slot_;
  // Reads the sensors and hands each round to the sender, on its own threads (round_runner.h).
  RoundRunner runner_{[this](std::vector<Sample>&& samples, std::chrono::steady_clock::time_point next_round) {
    slot_.get()->deliver(std::move(samples), next_round);
  }};
  std::shared_ptr<sensors::JobDirectory> jobs_;  // shared by every sensor
  std::vector<std::shared_ptr<SensorTask>> tasks_;
  std::unique_ptr<PushServer> push_;  // with [sensor:User]
};

}  // namespace

std::vector<std::string> check_agent_config(const std::string& config_path) {
  AgentConfig config = load_agent_config(config_path);
  sensors::JobDirectory jobs(config.jobs, config.roots);
  for_each_new_sensor(config, &jobs, [](const SensorConfig&, auto) {});
  return config.warnings;
}

namespace {

// The soft limit on open files up to the hard one (systemd starts services with 1024, hard
// 524288): per-job sensors keep each job's and process's files open (a quarter of the soft
// limit at most, sensors::FdBudget), PerfHW a counter per job, event and CPU. lagent uses
// poll and epoll, never select, so descriptors above 1023 are fine.
void raise_open_files_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0)
    spdlog::warn("cannot raise the open files limit from {} to {}: {}", before, limit.rlim_max, std::strerror(errno));
}

}  // namespace

int run_agent(const std::string& config_path, bool foreground, const std::function<void()>& ready) {
  // One malloc arena for every thread (before any starts): glibc would give each reader and the
  // sender its own, and with per-job sensors each kept a few hundred KiB of its own free memory
  // (measured: 3.3 MiB anonymous RSS with 5 arenas, 50 jobs). The threads allocate a little per
  // round, so they hardly contend for it.
  ::mallopt(M_ARENA_MAX, 1);
  // A fixed mmap threshold, glibc's initial one (setting it turns glibc's adjustment off): a large
  // buffer freed once, as the spool's segments read whole at start, raised it, and the heap then
  // kept that much free memory for good (0.5 MiB more resident after a restart on a 275 KB segment).
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  AgentConfig config = load_agent_config(config_path);
  setup_logging(config.logging, foreground, "lagent");
  for (const auto& warning : config.warnings) spdlog::warn("{}", warning);
  raise_open_files_limit();
  Agent agent(config_path, std::move(config), foreground);
  return agent.run(ready);
}

}  // namespace fructosa::agent
