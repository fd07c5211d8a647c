// OS noise by the fixed-work-quantum method (FWQ, as Sandia and LLNL qualify HPC daemons): one
// thread pinned to each CPU repeats the same quantum of integer work for --seconds and records
// how long each quantum took. On a noiseless CPU every quantum takes the same time (the minimum);
// anything that takes the CPU away (a daemon waking, an interrupt, the hypervisor) shows as
// longer quanta. bench/os_noise.py runs it with nothing else, then beside each monitoring agent.
//
//   os_noise [--seconds S] [--quantum-us Q] [--cpus LIST] [--loops N] [--calibrate-only]
//
// --cpus: e.g. 0,1 or 0-3 (default: every CPU this process may run on). The quantum is a loop
// calibrated once, on the first CPU, to take Q us (default 100); --loops N skips the calibration
// and uses N iterations, so that several runs do exactly the same work. Prints a table per CPU
// and over all, then one machine-readable line per CPU and one for all:
//   os_noise: cpu=all quanta=.. min_us=.. p50_us=.. p99_us=.. p999_us=.. max_us=..
//             delayed10=.. delayed100=..
// "delayedX" is the fraction of quanta longer than the CPU's minimum + X us. The lines
// "os_noise: measuring" and "os_noise: done" (flushed) bracket the measurement, for a driver that
// samples other processes over the same window.
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

std::uint64_t now_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000u + now.tv_nsec;
}

// The work quantum: a chain of dependent multiply-adds (each step needs the previous result, so
// the CPU cannot overlap them and the time is steady). The empty asm makes the compiler keep
// every step rather than compute the result in closed form or drop the loop.
std::uint64_t work(std::uint64_t loops, std::uint64_t x) {
  for (std::uint64_t i = 0; i < loops; ++i) {
    x = x * 6364136223846793005u + 1442695040888963407u;
    asm volatile("" : "+r"(x));
  }
  return x;
}

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof set, &set) == 0;  // 0: the calling thread
}

// Loops for one quantum of `quantum_ns`, on the calling (pinned) thread. Each estimate takes the
// fastest of several repetitions: the fastest is the one nothing interrupted.
std::uint64_t calibrate(double quantum_ns) {
  std::uint64_t sink = 1;
  // Let the CPU leave its idle states and reach its working clock before timing anything.
  for (std::uint64_t until = now_ns() + 200'000'000; now_ns() < until;) sink = work(10'000, sink);
  std::uint64_t loops = 1000;
  for (int round = 0; round < 8; ++round) {
    std::uint64_t fastest = UINT64_MAX;
    for (int repeat = 0; repeat < 50; ++repeat) {
      std::uint64_t start = now_ns();
      sink = work(loops, sink);
      fastest = std::min(fastest, now_ns() - start);
    }
    double scale = quantum_ns / static_cast<double>(std::max<std::uint64_t>(fastest, 1));
    loops = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(loops * scale));
    if (std::fabs(scale - 1) < 0.005) break;
  }
  if (sink == 0) std::puts("");  // keeps `sink` alive; practically never true
  return loops;
}

struct Cpu {
  int cpu = 0;
  std::vector<std::uint64_t> durations;  // ns; sized before measuring, never grown
  std::size_t count = 0;
  bool pinned = false;
  bool full = false;  // the array filled before the time was up
};

struct Stats {
  std::size_t quanta = 0;
  double min_us = 0, p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0, delayed10 = 0,
         delayed100 = 0;
};

// Nearest rank: the smallest value with at least p of the quanta at or below it.
double percentile_us(const std::vector<std::uint64_t>& sorted, double p) {
  std::size_t rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return static_cast<double>(sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1]) / 1e3;
}

// `delayed` counts come from the caller: over all CPUs each quantum is judged against its own
// CPU's minimum (CPUs need not be equally fast), so they are not recomputed from the pooled list.
Stats summarize(std::vector<std::uint64_t>& sorted, std::size_t delayed10, std::size_t delayed100) {
  Stats stats;
  if (sorted.empty()) return stats;
  std::sort(sorted.begin(), sorted.end());
  stats.quanta = sorted.size();
  stats.min_us = static_cast<double>(sorted.front()) / 1e3;
  stats.p50_us = percentile_us(sorted, 0.50);
  stats.p99_us = percentile_us(sorted, 0.99);
  stats.p999_us = percentile_us(sorted, 0.999);
  stats.max_us = static_cast<double>(sorted.back()) / 1e3;
  stats.delayed10 = static_cast<double>(delayed10) / static_cast<double>(sorted.size());
  stats.delayed100 = static_cast<double>(delayed100) / static_cast<double>(sorted.size());
  return stats;
}

std::size_t count_above(const std::vector<std::uint64_t>& durations, std::size_t n,
                        std::uint64_t limit) {
  return static_cast<std::size_t>(
      std::count_if(durations.begin(), durations.begin() + static_cast<std::ptrdiff_t>(n),
                    [limit](std::uint64_t d) { return d > limit; }));
}

bool parse_cpus(std::string_view text, std::vector<int>& cpus) {
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::string item(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    char* end = nullptr;
    long first = std::strtol(item.c_str(), &end, 10);
    long last = first;
    if (end == item.c_str()) return false;
    if (*end == '-') {
      const char* from = end + 1;
      last = std::strtol(from, &end, 10);
      if (end == from) return false;
    }
    if (*end != '\0' || first < 0 || last < first || last >= CPU_SETSIZE) return false;
    for (long cpu = first; cpu <= last; ++cpu) cpus.push_back(static_cast<int>(cpu));
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return !cpus.empty();
}

void print_row(const char* name, const Stats& s) {
  std::printf("%-5s %9zu %9.2f %9.2f %9.2f %9.2f %10.2f %10.5f %10.5f\n", name, s.quanta, s.min_us,
              s.p50_us, s.p99_us, s.p999_us, s.max_us, s.delayed10, s.delayed100);
}

void print_line(const std::string& name, const Stats& s) {
  std::printf(
      "os_noise: cpu=%s quanta=%zu min_us=%.3f p50_us=%.3f p99_us=%.3f p999_us=%.3f max_us=%.3f "
      "delayed10=%.6f delayed100=%.6f\n",
      name.c_str(), s.quanta, s.min_us, s.p50_us, s.p99_us, s.p999_us, s.max_us, s.delayed10,
      s.delayed100);
}

int usage(const char* why) {
  std::fprintf(stderr,
               "os_noise: %s\nusage: os_noise [--seconds S] [--quantum-us Q] [--cpus LIST] "
               "[--loops N] [--calibrate-only]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 60, quantum_us = 100;
  std::uint64_t loops = 0;
  bool calibrate_only = false;
  std::vector<int> cpus;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    bool has_value = i + 1 < argc;
    if (arg == "--calibrate-only") {
      calibrate_only = true;
    } else if (arg == "--seconds" && has_value) {
      seconds = std::strtod(argv[++i], nullptr);
    } else if (arg == "--quantum-us" && has_value) {
      quantum_us = std::strtod(argv[++i], nullptr);
    } else if (arg == "--loops" && has_value) {
      loops = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--cpus" && has_value) {
      if (!parse_cpus(argv[++i], cpus)) return usage("--cpus: a list such as 0,1 or 0-3");
    } else {
      return usage(("unknown or incomplete argument " + std::string(arg)).c_str());
    }
  }
  if (!(seconds > 0) || !(quantum_us >= 1)) return usage("--seconds > 0, --quantum-us >= 1");

  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    std::perror("os_noise: sched_getaffinity");
    return 1;
  }
  if (cpus.empty()) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }

  // Calibrated once, on the first CPU: every thread then does exactly the same work.
  bool calibrated = loops == 0;
  if (calibrated) {
    if (!pin(cpus.front())) {
      std::fprintf(stderr, "os_noise: cannot run on CPU %d: %s\n", cpus.front(),
                   std::strerror(errno));
      return 1;
    }
    loops = calibrate(quantum_us * 1e3);
    ::sched_setaffinity(0, sizeof allowed, &allowed);  // the main thread only waits from here on
  }
  std::printf("os_noise: loops=%llu quantum_us=%g%s\n", static_cast<unsigned long long>(loops),
              quantum_us, calibrated ? " (calibrated)" : " (given)");
  if (calibrate_only) return 0;

  // Room for every quantum even if they run twice as fast as the target, allocated and written
  // now, so that measuring never allocates or takes a page fault.
  std::size_t capacity = static_cast<std::size_t>(seconds * 1e6 / quantum_us * 2) + 1024;
  std::vector<Cpu> threads(cpus.size());
  for (std::size_t i = 0; i < cpus.size(); ++i) {
    threads[i].cpu = cpus[i];
    threads[i].durations.assign(capacity, 0);
  }
  ::mlockall(MCL_CURRENT);  // best effort (needs the privilege): keeps the arrays resident

  // Everyone, main included, meets once all threads are pinned, so that the quanta start together.
  std::barrier start(static_cast<std::ptrdiff_t>(threads.size() + 1));
  std::vector<std::thread> workers;
  std::uint64_t window_ns = static_cast<std::uint64_t>(seconds * 1e9);
  for (Cpu& slot : threads) {
    workers.emplace_back([&slot, &start, loops, window_ns] {
      slot.pinned = pin(slot.cpu);
      start.arrive_and_wait();
      if (!slot.pinned) return;
      std::uint64_t x = static_cast<std::uint64_t>(slot.cpu) + 1;
      std::uint64_t* out = slot.durations.data();
      std::size_t n = 0, capacity = slot.durations.size();
      std::uint64_t begin = now_ns(), end = begin + window_ns, last = begin;
      // Back to back: a quantum's time includes the clock read and the store, which are part of
      // the minimum too, and no time between quanta goes unmeasured.
      while (true) {
        x = work(loops, x);
        std::uint64_t now = now_ns();
        out[n++] = now - last;
        last = now;
        if (now >= end) break;
        if (n == capacity) {
          slot.full = true;
          break;
        }
      }
      slot.count = n;
      if (x == 0) std::puts("");  // keeps the work alive; practically never true
    });
  }
  start.arrive_and_wait();
  std::printf("os_noise: measuring\n");
  std::fflush(stdout);
  for (std::thread& worker : workers) worker.join();
  std::printf("os_noise: done\n");
  std::fflush(stdout);

  std::printf("os_noise: %zu CPUs, quantum %g us (%llu loops), %g s\n", threads.size(), quantum_us,
              static_cast<unsigned long long>(loops), seconds);
  std::printf("%-5s %9s %9s %9s %9s %9s %10s %10s %10s\n", "cpu", "quanta", "min_us", "p50_us",
              "p99_us", "p99.9_us", "max_us", ">min+10us", ">min+100us");
  std::vector<std::uint64_t> pooled;
  std::size_t all10 = 0, all100 = 0;
  std::vector<std::pair<std::string, Stats>> lines;
  int failed = 0;
  for (Cpu& slot : threads) {
    if (!slot.pinned) {
      std::fprintf(stderr, "os_noise: cannot run on CPU %d (left out)\n", slot.cpu);
      ++failed;
      continue;
    }
    if (slot.full) std::fprintf(stderr, "os_noise: CPU %d filled its array early\n", slot.cpu);
    std::uint64_t fastest =
        *std::min_element(slot.durations.begin(), slot.durations.begin() + slot.count);
    std::size_t d10 = count_above(slot.durations, slot.count, fastest + 10'000);
    std::size_t d100 = count_above(slot.durations, slot.count, fastest + 100'000);
    all10 += d10;
    all100 += d100;
    pooled.insert(pooled.end(), slot.durations.begin(), slot.durations.begin() + slot.count);
    slot.durations.resize(slot.count);
    Stats stats = summarize(slot.durations, d10, d100);
    print_row(std::to_string(slot.cpu).c_str(), stats);
    lines.emplace_back(std::to_string(slot.cpu), stats);
  }
  if (pooled.empty()) return 1;
  Stats all = summarize(pooled, all10, all100);
  print_row("all", all);
  lines.emplace_back("all", all);
  for (const auto& [name, stats] : lines) print_line(name, stats);
  return failed ? 1 : 0;
}
