// A load generator for lmaster that speaks the real protocol as N agents, or the same points as
// Graphite plaintext for a carbon relay (the peer lmaster is compared with).
//
//   master_load --endpoint tcp://127.0.0.1:PORT [--agents N] [--metrics M] [--seconds S]
//               [--warmup S] [--drain S] [--interval S | --window W | --rate P] [--aligned]
//               [--threads T] [--io-threads T] [--client libzmq|zmtp] [--host-prefix NAME]
//   master_load --plaintext HOST:PORT [the same options]
//
// Every agent has its own ZeroMQ DEALER connection (--client libzmq, the default: a libzmq
// socket, as lagent; --client zmtp: ZMTP spoken on its own TCP socket, zmtp_dealer.h, which
// costs the generator less of the machine it shares with lmaster; --io-threads is libzmq's):
// Hello, then batches encoded with the real
// AgentDictionary (the dictionary goes first), sequences from 1, and a Resync from lmaster is
// answered as lagent does (Hello, the whole dictionary, every unacknowledged batch again).
// Pacing: one batch per agent every --interval seconds (default 1; agents spread evenly over the
// interval, or all at the start of it with --aligned, as lagent's aligned timers do); --rate P
// sets the interval to agents * metrics / P; --interval 0, or --window W without --interval,
// sends as fast as acknowledgements allow. In every mode an agent has at most --window (default
// 8) unacknowledged batches, like lagent's spool window; a batch due while the window is full is
// sent once it opens (counted as deferred).
// --plaintext: one TCP connection per agent (as every node's own collector would open one),
// "<host>.<Sensor>[.<key>] <value> <timestamp>\n" lines with millisecond timestamps; nothing is
// acknowledged, so "acknowledged" figures are absent and the sink's count is the only check.
//
// Each agent reports the same shape of data as lagent's system sensors: CPUPercent and CPUTimes
// per CPU, CPUTimesPercent, CPUStats, CPUFreq, CPUCount, VirtualMemory, SwapMemory,
// DiskIOCounters per disk, DiskUsage, DiskPartitions, NetIOCounters and NetIFStats per NIC,
// NetConnections, Users, BootTime, with the catalogs' keys; the number of CPUs is chosen so that
// an agent reports exactly --metrics values. Counters grow by random plausible amounts, gauges
// walk, percentages have one decimal; the sample time is the wall clock when the batch is built.
//
// Prints one JSON object: what was sent and acknowledged (total and in the measurement window,
// which starts after --warmup and lasts --seconds), points/s, and payload bytes (Hello and
// dictionary apart from batches). Points are metric values; bytes are ZeroMQ message payloads
// (ZMTP adds a few bytes of framing per message).
//
// This file is the command (options, threads, the summary); the agents are load_agents.*, how
// they send load_zmq.cpp and load_plaintext.cpp, the shape of their data node_model.*.

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "load_agents.h"

using namespace fructosa;
using namespace fructosa::bench;

namespace {

[[noreturn]] void usage_error(const std::string& why) {
  std::cerr << "master_load: " << why
            << "\nusage: master_load (--endpoint tcp://HOST:PORT | --plaintext HOST:PORT) [--agents N] "
               "[--metrics M] [--seconds S] [--warmup S] [--drain S] [--interval S | --window W | --rate P] "
               "[--aligned] [--threads T] [--io-threads T] [--client libzmq|zmtp] [--host-prefix NAME]\n";
  std::exit(64);
}

Settings parse_arguments(int argc, char** argv) {
  Settings settings;
  bool interval_given = false, window_given = false;
  for (int i = 0; i < argc; ++i) settings.command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    std::string option = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(option + " needs a value");
      return argv[++i];
    };
    auto number = [&](double low, double high) {
      std::string text = value();
      char* end = nullptr;
      double parsed = std::strtod(text.c_str(), &end);
      if (text.empty() || *end || !(parsed >= low && parsed <= high))
        usage_error(option + ": " + text + " is not a number in [" + std::to_string(low) + ", " +
                    std::to_string(high) + "]");
      return parsed;
    };
    if (option == "--endpoint") settings.endpoint = value();
    else if (option == "--plaintext") settings.plaintext = value();
    else if (option == "--agents") settings.agents = static_cast<int>(number(1, 100000));
    else if (option == "--metrics") settings.metrics = static_cast<int>(number(1, 100000));
    else if (option == "--seconds") settings.seconds = number(0.1, 1e6);
    else if (option == "--warmup") settings.warmup = number(0, 1e6);
    else if (option == "--drain") settings.drain = number(0, 1e6);
    else if (option == "--interval") settings.interval = number(0, 1e6), interval_given = true;
    else if (option == "--window") settings.window = static_cast<int>(number(1, 1e6)), window_given = true;
    else if (option == "--rate") settings.rate = number(1, 1e12);
    else if (option == "--aligned") settings.aligned = true;
    else if (option == "--threads") settings.threads = static_cast<int>(number(1, 256));
    else if (option == "--io-threads") settings.io_threads = static_cast<int>(number(1, 64));
    else if (option == "--client") settings.client = value();
    else if (option == "--host-prefix") settings.host_prefix = value();
    else usage_error("unknown option " + option);
  }
  if (settings.client != "libzmq" && settings.client != "zmtp")
    usage_error("--client is libzmq or zmtp, not " + settings.client);
  if (settings.endpoint.empty() == settings.plaintext.empty())
    usage_error("give exactly one of --endpoint and --plaintext");
  if (!settings.plaintext.empty() && settings.plaintext.find(':') == std::string::npos)
    usage_error("--plaintext wants HOST:PORT, not " + settings.plaintext);
  if (settings.rate > 0) settings.interval = static_cast<double>(settings.agents) * settings.metrics / settings.rate;
  else if (window_given && !interval_given) settings.interval = 0;
  settings.threads = std::min(settings.threads, settings.agents);
  return settings;
}

double unix_seconds(Clock::time_point t) {
  auto offset = std::chrono::system_clock::now().time_since_epoch() - Clock::now().time_since_epoch();
  return std::chrono::duration<double>(t.time_since_epoch() + offset).count();
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings = parse_arguments(argc, argv);
  // Each agent holds a socket (and ZeroMQ a mailbox per socket): raise the descriptor limit.
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  std::uint64_t needed = 3ull * static_cast<std::uint64_t>(settings.agents) + 64;
  if (files.rlim_cur < needed)
    std::cerr << "master_load: warning: RLIMIT_NOFILE is " << files.rlim_cur << ", " << settings.agents
              << " agents need about " << needed << "\n";

  const auto model = model_with(settings.metrics);
  std::vector<Agent> agents(static_cast<std::size_t>(settings.agents));
  for (int i = 0; i < settings.agents; ++i) fill_agent(agents[i], i, settings, model);

  // Each thread owns a contiguous share of the agents (so each thread's phases are sorted).
  std::vector<std::vector<Agent>> shares(static_cast<std::size_t>(settings.threads));
  for (int i = 0; i < settings.agents; ++i)
    shares[static_cast<std::size_t>(i) * settings.threads / settings.agents].push_back(std::move(agents[i]));
  agents.clear();

  zmq::context_t context;
  context.set(zmq::ctxopt::io_threads, settings.io_threads);
  context.set(zmq::ctxopt::max_sockets, settings.agents + 64);

  Timeline timeline;
  timeline.start = Clock::now();
  auto after = [&](double seconds) {
    return timeline.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  timeline.window_start = after(settings.warmup);
  timeline.window_end = after(settings.warmup + settings.seconds);
  timeline.drain_end = after(settings.warmup + settings.seconds + settings.drain);

  std::vector<Counters> results(shares.size());
  std::vector<std::string> errors(shares.size());
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < shares.size(); ++t)
    threads.emplace_back([&, t] {
      try {
        if (settings.plaintext.empty())
          results[t] = run_zmq_agents(settings, timeline, model, context, shares[t]);
        else
          results[t] = run_plaintext_agents(settings, timeline, model, shares[t]);
      } catch (const std::exception& error) {
        errors[t] = error.what();
      }
    });
  for (auto& thread : threads) thread.join();
  auto finished = Clock::now();
  for (const auto& error : errors)
    if (!error.empty()) {
      std::cerr << "master_load: " << error << "\n";
      return 1;
    }
  Counters total;
  for (const auto& result : results) total.add(result);

  const bool plaintext = !settings.plaintext.empty();
  nlohmann::json summary;
  summary["mode"] = plaintext ? "plaintext" : "zmq";
  summary["peer"] = plaintext ? settings.plaintext : settings.endpoint;
  summary["connections"] = plaintext                      ? "one TCP connection per agent"
                           : settings.client == "zmtp" ? "one ZMTP (DEALER) connection per agent, no libzmq"
                                                       : "one libzmq DEALER socket per agent";
  if (!plaintext) summary["client"] = settings.client;
  summary["agents"] = settings.agents;
  summary["metrics_per_agent"] = value_count(model);
  summary["samples_per_batch"] = model.size();
  summary["interval_s"] = settings.interval;  // 0: as fast as the window allows
  summary["window"] = settings.window;
  summary["offered_points_per_s"] =
      settings.interval > 0 ? nlohmann::json(settings.agents * static_cast<double>(value_count(model)) / settings.interval)
                            : nlohmann::json(nullptr);
  summary["aligned"] = settings.aligned;
  summary["threads"] = settings.threads;
  summary["warmup_s"] = settings.warmup;
  summary["seconds"] = settings.seconds;
  summary["window_start_unix"] = unix_seconds(timeline.window_start);
  summary["window_end_unix"] = unix_seconds(timeline.window_end);
  summary["finished_unix"] = unix_seconds(finished);
  summary["batches_sent"] = total.batches_sent;
  summary["points_sent"] = total.points_sent;
  summary["window_points_sent"] = total.window_points_sent;
  summary["points_per_s_sent"] = static_cast<double>(total.window_points_sent) / settings.seconds;
  summary["late_batches"] = total.deferred;  // due while the window was full (plaintext: sent > 1 interval late)
  summary["bytes"] = {{"hello_and_dictionary", total.hello_dictionary_bytes},
                      {"batches", total.batch_bytes},
                      {"resent", total.resent_bytes}};
  summary["batch_bytes_per_point"] =
      total.points_sent ? static_cast<double>(total.batch_bytes) / static_cast<double>(total.points_sent) : 0.0;
  if (!plaintext) {
    summary["batches_acked"] = total.batches_acked;
    summary["points_acked"] = total.points_acked;
    summary["window_points_acked"] = total.window_points_acked;
    summary["points_per_s_acked"] = static_cast<double>(total.window_points_acked) / settings.seconds;
    summary["batches_resent"] = total.batches_resent;
    summary["resyncs"] = total.resyncs;
    summary["unacked_at_end"] = total.unacked_at_end;
    summary["send_failures"] = total.send_failures;
    summary["bad_messages"] = total.bad_messages;
  }
  // The generator's own cost (every thread, ZeroMQ's included), for the share of the cores it took.
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  double cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  summary["cpu_seconds"] = cpu_seconds;
  summary["cpu_ns_per_point_sent"] =
      total.points_sent ? 1e9 * cpu_seconds / static_cast<double>(total.points_sent) : 0.0;
  summary["command"] = settings.command;
  std::cout << summary.dump() << std::endl;
  return 0;
}
