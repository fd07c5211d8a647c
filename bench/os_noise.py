#!/usr/bin/python3
"""OS noise of the monitoring agents, by fixed work quanta (FWQ, issue 27).

Usage:
  /usr/bin/python3 bench/os_noise.py [--seconds 60] [--warmup 5] [--quantum-us 100] [--cpus LIST]
                                     [--peer-cpus LIST] [--phases baseline,lagent,collectd,node_exporter]
                                     [--lagent PATH] [--lmaster PATH] [--os-noise PATH] [--keep]

bench/os_noise (build/bench/os_noise) runs one thread pinned to each CPU of --cpus (default: all,
the FWQ convention: the daemon has to take a CPU away from the application to run), repeating
the same quantum of integer work (calibrated once, before the first phase, to take --quantum-us
on an idle CPU; every phase then does exactly the same work) for --seconds, and reports the
distribution of the quanta's durations. A quantum longer than the CPU's minimum + 10 us (+ 100
us) is "delayed": something else ran on that CPU meanwhile.

Phases, one after the other, each after --warmup seconds of its programs running:
  - baseline: nothing but this script (waiting on os_noise) and whatever else the machine runs;
  - lagent: lagent with the 20 system sensors of etc/fructosa/lagent.conf all at 1 s, sending to
    an lmaster (HDF5 output). lagent needs a master to send to, so lmaster runs during this phase
    and its noise is counted in it;
  - collectd: collectd-core with the plugins and write_graphite sink of agent_overhead.py at
    Interval 1; the sink is a thread of this script, running during this phase;
  - node_exporter: prometheus-node-exporter with its defaults, scraped every second by a thread
    of this script (as Prometheus would), running during this phase.
--peer-cpus LIST puts what the daemons talk to on those CPUs (lmaster, this script with collectd's
sink and node_exporter's scraper), and the daemons and os_noise on the others: on a compute node
the master and the Prometheus server are other machines, and lmaster's receiving counts then in
no phase. Without it every program may run on every CPU.
The programs are started exactly as bench/agent_overhead.py starts them (its Bench class), on
127.0.0.1 with ephemeral ports, in a temporary directory per phase (removed unless --keep), and
stopped by PID at the end of their phase. collectd's and node_exporter's phases are skipped,
with the reason, when their programs are missing.

Added noise = a phase's delayed fraction minus the baseline's. Targets: lagent's added noise
<= 0.2 x collectd's and <= 0.1 x node_exporter's (at 10 us and at 100 us). Each comes with the
run's resolution, two binomial standard errors of the difference (a lower bound: quanta delayed
by one event are not independent); added noise within it is not told apart from none, and the
verdict says so. Each phase also gives the machine's CPU time over the window (/proc/stat, the
processes' /proc/<pid>/stat): os_noise's, the phase's processes', steal, interrupts and anything
else, so that a run disturbed by other users of the machine shows.

Wake-ups: voluntary + involuntary context switches of every thread of each process of the phase
(/proc/<pid>/task/*/status), the difference between the start and the end of os_noise's
window; per thread (name from comm). A thread that starts inside the window counts all its
switches; one that ends inside it is lost (the kernel keeps no per-thread figure once a thread
has gone), and the report says how many. Per sample: lagent's reading instants (whole seconds,
the target: <= 2 wake-ups per instant when all sensors share it), collectd's intervals,
node_exporter's scrapes. This script's own threads are listed too (the sink, the scraper).
"""
import argparse
import glob
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import agent_overhead
from benchlib import read_text

PHASES = ["baseline", "lagent", "collectd", "node_exporter"]
PEERS = {"collectd": 0.2, "node_exporter": 0.1}  # lagent's added noise <= target x the peer's
PROGRAMS = {"collectd": "/usr/sbin/collectd", "node_exporter": "/usr/bin/prometheus-node-exporter"}
WAKEUPS_PER_INSTANT = 2
STATS = ["quanta", "min_us", "p50_us", "p99_us", "p999_us", "max_us", "delayed10", "delayed100"]


def thread_switches(pid):
    """{tid: (name, voluntary, involuntary)} of the threads of `pid` alive now."""
    threads = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return threads
    for tid in tids:
        status = read_text(f"/proc/{pid}/task/{tid}/status")
        voluntary = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M)
        involuntary = re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.M)
        if voluntary and involuntary:  # else the thread ended while being read
            name = read_text(f"/proc/{pid}/task/{tid}/comm").strip()
            threads[tid] = (name, int(voluntary.group(1)), int(involuntary.group(1)))
    return threads


def switch_deltas(start, end):
    """Per thread (tid, name, voluntary, involuntary) over the window, and the threads that
    started and ended inside it (those that ended are missing from the sums)."""
    rows, started = [], 0
    for tid, (name, voluntary, involuntary) in sorted(end.items(), key=lambda item: int(item[0])):
        before = start.get(tid)
        if before is None:
            started += 1
            before = (name, 0, 0)
        rows.append((tid, name, voluntary - before[1], involuntary - before[2]))
    ended = sum(1 for tid in start if tid not in end)
    return rows, started, ended


def machine_ticks():
    """(busy, steal, irq) clock ticks of all CPUs from /proc/stat: busy counts the other two."""
    fields = [int(value) for value in read_text("/proc/stat").split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return user + nice + system + irq + softirq + steal, steal, irq + softirq


def cpu_snapshot(noise_pid, watched):
    """Clock ticks now: the machine's busy and steal, os_noise's, and the watched processes'."""
    busy, steal, irq = machine_ticks()
    programs = sum(agent_overhead.cpu_ticks(pid) for name, pid in watched.items())
    return {"busy": busy, "steal": steal, "irq": irq, "os_noise": agent_overhead.cpu_ticks(noise_pid), "programs": programs}


def machine():
    model = re.search(r"^model name\s*:\s*(.*)$", read_text("/proc/cpuinfo"), re.M)
    online = read_text("/sys/devices/system/cpu/online").strip()
    return (f"{model.group(1) if model else platform.machine()}, {os.cpu_count()} CPUs (online {online}), "
            f"Linux {platform.release()}")


def cpu_list(text):
    """{0, 2, 3} from "0,2-3"."""
    cpus = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def allowed_cpus(pid):
    """The CPUs any thread of `pid` may run on, as a list such as "0" or "0-1" (sched affinity)."""
    lists = set()
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        match = re.search(r"^Cpus_allowed_list:\s*(\S+)", read_text(status), re.M)
        if match:
            lists.add(match.group(1))
    return ",".join(sorted(lists)) or "?"


def load_average():
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


class OsNoise:
    """Runs os_noise once and samples the context switches of `watched` over its window."""

    def __init__(self, args, loops):
        self.args, self.loops = args, loops

    def argv(self):
        argv = [self.args.os_noise, "--seconds", f"{self.args.seconds:g}", "--quantum-us",
                f"{self.args.quantum_us:g}", "--loops", str(self.loops)]
        return argv + (["--cpus", self.args.cpus] if self.args.cpus else [])

    def run(self, watched):
        process = subprocess.Popen(self.argv(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, text=True)
        try:
            lines, start, end = [], None, None
            # Blocking reads: this script sleeps in the window, except at its two ends.
            for line in process.stdout:
                lines.append(line)
                if line.startswith("os_noise: measuring"):
                    start = {name: thread_switches(pid) for name, pid in watched.items()}
                    start_cpu = cpu_snapshot(process.pid, watched)
                    start_wall, start_mono = time.time(), time.monotonic()
                elif line.startswith("os_noise: done"):
                    end_wall, end_mono = time.time(), time.monotonic()
                    end_cpu = cpu_snapshot(process.pid, watched)
                    end = {name: thread_switches(pid) for name, pid in watched.items()}
                    break
            lines += process.stdout.readlines()
            error = process.stderr.read()
            if process.wait() != 0 or start is None or end is None:
                raise RuntimeError(f"os_noise failed ({process.returncode}):\n{''.join(lines)}{error}")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        stats = {}
        for line in lines:
            match = re.match(r"os_noise: cpu=(\S+) (.*)", line)
            if match:
                values = dict(pair.split("=", 1) for pair in match.group(2).split())
                stats[match.group(1)] = {key: float(values[key]) for key in STATS}
        wakeups = {name: switch_deltas(start[name], end[name]) for name in watched}
        return {"stats": stats, "wakeups": wakeups, "window": end_mono - start_mono,
                "instants": int(end_wall) - int(start_wall), "start_mono": start_mono, "end_mono": end_mono,
                "stderr": error.strip(),
                "cpu": {key: (end_cpu[key] - start_cpu[key]) / agent_overhead.CLK_TCK for key in end_cpu}}


def bench_args(args):
    """The options agent_overhead.Bench reads: its plain configuration (20 system sensors at 1 s)."""
    return SimpleNamespace(lagent=args.lagent, lmaster=args.lmaster, jobs=0, cgroup2=False,
                           sample_intervals=False, compare=None, reads_only="", keep=args.keep,
                           batch_interval=args.batch_interval)


def run_phase(args, phase, noise):
    """Starts the phase's programs as agent_overhead.py does, waits --warmup s, runs os_noise."""
    bench = agent_overhead.Bench(bench_args(args))
    if args.peer_cpus:
        # The daemon on the measured CPUs only, its peers (lmaster; this script's sink and
        # scraper threads, pinned in main()) on the others: as on a compute node whose master
        # and Prometheus server are other machines.
        bench.affinity = {"lmaster": args.peer_set, "lagent": args.measured_set, "collectd": args.measured_set,
                          "node_exporter": args.measured_set}
    sink = scraper = None
    watched = {}
    try:
        if phase == "lagent":
            lmaster, port = bench.start_lmaster()
            lagent = bench.start_lagent(port)
            watched = {"lagent": lagent.pid, "lmaster": lmaster.pid}
        elif phase == "collectd":
            sink = agent_overhead.GraphiteSink()
            sink.start()
            watched = {"collectd": bench.start_collectd(sink.port).pid}
        elif phase == "node_exporter":
            exporter, port = bench.start_node_exporter()
            scraper = agent_overhead.Scraper(port)
            scraper.start()
            watched = {"node_exporter": exporter.pid}
        watched["os_noise.py"] = os.getpid()
        if phase != "baseline":
            time.sleep(args.warmup)
        bench.check_running()
        load = load_average()
        allowed = {name: allowed_cpus(pid) for name, pid in watched.items()}
        result = noise.run(watched)
        result["allowed"] = allowed
        bench.check_running()
        result["load"] = load
    finally:
        if scraper:
            scraper.stop()
        bench.stop()
        if sink:
            sink.stop()
        bench.cleanup()
    # Samples each process took in the window: lagent reads (and lmaster receives) on whole
    # seconds, collectd reads every 1 s interval, node_exporter answers the scrapes.
    samples = {"lagent": result["instants"], "lmaster": result["instants"], "collectd": result["window"]}
    if scraper:
        samples["node_exporter"] = sum(result["start_mono"] < t <= result["end_mono"] for t in scraper.done)
    result["samples"] = samples
    if phase == "lagent":
        unavailable, errors = bench.lagent_notes()
        result["notes"] = ["lagent sensors unavailable here: " + "; ".join(f"{n}: {why}" for n, why in unavailable)
                           ] if unavailable else []
        result["notes"] += [f"lagent logged: {line}" for line in errors[:5]]
    return result


def fraction(value):
    return f"{value:.6f}"


def print_phase(phase, result, baseline):
    print(f"\n== phase {phase}: {result['window']:.1f} s window, load average before {result['load']}")
    print(f"{'cpu':<5} {'quanta':>9} {'min_us':>8} {'p50_us':>8} {'p99_us':>8} {'p99.9_us':>9} {'max_us':>10} "
          f"{'delayed>10us':>12} {'delayed>100us':>13} {'added>10us':>11} {'added>100us':>11}")
    for cpu, s in result["stats"].items():
        base = baseline["stats"].get(cpu) if baseline else None
        added = ([f"{s['delayed10'] - base['delayed10']:+.6f}", f"{s['delayed100'] - base['delayed100']:+.6f}"]
                 if base else ["-", "-"])
        print(f"{cpu:<5} {s['quanta']:>9.0f} {s['min_us']:>8.2f} {s['p50_us']:>8.2f} {s['p99_us']:>8.2f} "
              f"{s['p999_us']:>9.2f} {s['max_us']:>10.2f} {fraction(s['delayed10']):>12} "
              f"{fraction(s['delayed100']):>13} {added[0]:>11} {added[1]:>11}")
    cpu = result["cpu"]
    others = cpu["busy"] - cpu["steal"] - cpu["irq"] - cpu["os_noise"] - cpu["programs"]
    print(f"CPU time in the window (s, 10 ms ticks): os_noise {cpu['os_noise']:.2f}, this phase's processes "
          f"(with this script) {cpu['programs']:.2f}, hypervisor steal {cpu['steal']:.2f}, interrupts {cpu['irq']:.2f}, anything else on the machine {others:.2f} "
          f"(of {result['window'] * os.cpu_count():.2f} CPU-s)")
    print("CPUs allowed (all threads): " + ", ".join(f"{name} {cpus}" for name, cpus in result["allowed"].items()))
    print("wake-ups (voluntary + involuntary context switches, all threads, over the window):")
    print(f"  {'process':<14} {'thread':<18} {'tid':>8} {'voluntary':>9} {'involuntary':>11} {'per s':>8} "
          f"{'per sample':>10}")
    for name, (rows, started, ended) in result["wakeups"].items():
        samples = result["samples"].get(name)
        voluntary = sum(row[2] for row in rows)
        involuntary = sum(row[3] for row in rows)

        def rates(count):
            per_sample = f"{count / samples:.2f}" if samples else "-"
            return f"{count / result['window']:>8.2f} {per_sample:>10}"
        threads = f"(all {len(rows)} threads)"
        print(f"  {name:<14} {threads:<18} {'':>8} {voluntary:>9} {involuntary:>11} {rates(voluntary + involuntary)}")
        if started or ended:
            print(f"  {'':<14} threads started in the window: {started} (counted whole), ended in it: {ended} "
                  "(their switches are missing)")
        by_name = {}
        for tid, thread, vol, invol in rows:
            if name in ("lagent", "lmaster"):  # few threads, each its own role: one row each
                by_name[(thread, tid)] = [vol, invol, 1]
            else:  # pools of same-named threads (collectd's readers, Go's M's): one row per name
                entry = by_name.setdefault((thread, ""), [0, 0, 0])
                entry[0] += vol
                entry[1] += invol
                entry[2] += 1
        for (thread, tid), (vol, invol, count) in sorted(by_name.items(), key=lambda item: -sum(item[1][:2])):
            label = thread if count == 1 else f"{thread} x{count}"
            print(f"  {'':<14} {label:<18} {tid:>8} {vol:>9} {invol:>11} {rates(vol + invol)}")
    samples = ", ".join(f"{name} {count:.0f}" for name, count in result["samples"].items() if name in result["wakeups"])
    if samples:
        print(f"  samples in the window: {samples} (lagent, lmaster: reading instants; collectd: intervals; "
              "node_exporter: scrapes)")
    for note in result.get("notes", []):
        print(note)
    if result["stderr"]:
        print(f"os_noise said: {result['stderr']}")


def total_wakeups(result, name):
    rows, _, _ = result["wakeups"][name]
    return sum(row[2] + row[3] for row in rows)


def resolution(base, phase, key):
    """Two standard errors of a phase's delayed fraction minus the baseline's (binomial)."""
    variance = sum(s[key] * (1 - s[key]) / max(s["quanta"], 1) for s in (base, phase))
    return 2 * math.sqrt(variance)


def verdict(lagent_seen, peer_seen, within_target):
    if not lagent_seen:
        return "met: lagent's is within the noise" if peer_seen else "not resolved: neither is above the noise"
    if not peer_seen:
        return "not met: only lagent's is above the noise"
    return "met" if within_target else "not met"


def print_summary(results, skipped):
    print("\n== summary (all CPUs)")
    print(f"{'phase':<14} {'quanta':>9} {'min_us':>8} {'p50_us':>8} {'p99_us':>8} {'p99.9_us':>9} {'max_us':>10} "
          f"{'delayed>10us':>12} {'delayed>100us':>13} {'added>10us':>11} {'added>100us':>11} {'wake-ups/s':>10}")
    baseline = results.get("baseline")
    added = {}
    for phase, result in results.items():
        s = result["stats"]["all"]
        if baseline:
            base = baseline["stats"]["all"]
            added[phase] = (s["delayed10"] - base["delayed10"], s["delayed100"] - base["delayed100"])
        text = [f"{value:+.6f}" for value in added[phase]] if phase in added else ["-", "-"]
        rate = f"{total_wakeups(result, phase) / result['window']:.2f}" if phase in result["wakeups"] else "-"
        print(f"{phase:<14} {s['quanta']:>9.0f} {s['min_us']:>8.2f} {s['p50_us']:>8.2f} {s['p99_us']:>8.2f} "
              f"{s['p999_us']:>9.2f} {s['max_us']:>10.2f} {fraction(s['delayed10']):>12} "
              f"{fraction(s['delayed100']):>13} {text[0]:>11} {text[1]:>11} {rate:>10}")
    for phase, why in skipped.items():
        print(f"{phase:<14} skipped: {why}")
    print("(added = the phase's delayed fraction minus the baseline's; wake-ups/s: the phase's agent, all threads; "
          "the lagent phase also runs lmaster, the collectd phase this script's Graphite sink, the node_exporter "
          "phase this script's scraper: see each phase's wake-ups)")
    if "lagent" in added:
        print("targets (issue 27), lagent's added noise against each peer's; +- = the run's resolution: two "
              "standard errors of the difference (binomial; quanta delayed by one event are not independent, so it "
              "is a lower bound). Added noise within it is not told apart from none:")
        base = baseline["stats"]["all"]
        for peer, target in PEERS.items():
            if peer not in added:
                print(f"  lagent/{peer}: not measured ({skipped.get(peer, 'phase not run')})")
                continue
            parts = []
            for index, (label, key) in enumerate([(">10us", "delayed10"), (">100us", "delayed100")]):
                a, b = added["lagent"][index], added[peer][index]
                ra = resolution(base, results["lagent"]["stats"]["all"], key)
                rb = resolution(base, results[peer]["stats"]["all"], key)
                ratio = f"{max(a, 0.0) / b:.3f}" if b > 0 else "-"
                parts.append(f"{label} {a:+.6f} (+-{ra:.6f}) / {b:+.6f} (+-{rb:.6f}) = {ratio} "
                             f"({verdict(a > ra, b > rb, a <= target * b)})")
            print(f"  lagent/{peer} <= {target:g}: " + "; ".join(parts))
    if "lagent" in results:
        result = results["lagent"]
        count, instants = total_wakeups(result, "lagent"), result["instants"]
        per_instant = count / instants if instants else float("inf")
        met = "met" if per_instant <= WAKEUPS_PER_INSTANT else "not met"
        print(f"  lagent wake-ups: {count} in {result['window']:.1f} s = {count / result['window']:.2f} per second, "
              f"{per_instant:.2f} per sampling instant ({instants} instants, all 20 sensors at 1 s share each; "
              f"target <= {WAKEUPS_PER_INSTANT}: {met})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60, help="os_noise's window per phase (default 60)")
    parser.add_argument("--warmup", type=float, default=5, help="seconds the programs run before it (default 5)")
    parser.add_argument("--quantum-us", type=float, default=100, help="the work quantum on an idle CPU (default 100)")
    parser.add_argument("--cpus", default="", help="CPUs for os_noise, e.g. 0,1 or 0-3 (default: all)")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"a subset of {','.join(PHASES)} (default: all)")
    parser.add_argument("--lagent", default=os.environ.get("LAGENT", agent_overhead.default_program("lagent")))
    parser.add_argument("--lmaster", default=os.environ.get("LMASTER", agent_overhead.default_program("lmaster")))
    parser.add_argument("--os-noise", default=os.environ.get("OS_NOISE"),
                        help="the os_noise program (default: bench/os_noise of lagent's build directory)")
    parser.add_argument("--batch-interval", type=float, default=0, metavar="S",
                        help="lagent's [lagent] batch_interval (default 0: a batch per round)")
    parser.add_argument("--peer-cpus", default="", metavar="LIST",
                        help="CPUs for what a daemon talks to (lmaster, this script with its Graphite sink and "
                             "scraper), e.g. 0; the daemon itself and os_noise (unless --cpus) get the others")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories (logs, configs)")
    args = parser.parse_args()
    args.peer_set = args.measured_set = None
    if args.peer_cpus:
        try:
            args.peer_set = cpu_list(args.peer_cpus)
        except ValueError:
            parser.error(f"--peer-cpus {args.peer_cpus}: a list such as 0 or 0,2 or 0-1")
        online = os.sched_getaffinity(0)
        args.measured_set = cpu_list(args.cpus) if args.cpus else online - args.peer_set
        if not args.peer_set <= online or not args.measured_set or args.measured_set & args.peer_set:
            parser.error(f"--peer-cpus {args.peer_cpus}: CPUs of this machine ({sorted(online)}), leaving some "
                         "for os_noise and the daemon, and none shared with --cpus")
        if not args.cpus:
            args.cpus = ",".join(str(cpu) for cpu in sorted(args.measured_set))
        os.sched_setaffinity(0, args.peer_set)  # this script and the threads it starts
    phases = [phase.strip() for phase in args.phases.split(",") if phase.strip()]
    if not phases or any(phase not in PHASES for phase in phases):
        parser.error(f"--phases: a subset of {','.join(PHASES)}")
    if args.seconds <= 0 or args.warmup < 0 or args.quantum_us < 1:
        parser.error("--seconds > 0, --warmup >= 0, --quantum-us >= 1")
    if args.os_noise is None:
        lagent = os.path.abspath(shutil.which(args.lagent) or args.lagent)
        beside = os.path.join(os.path.dirname(os.path.dirname(lagent)), "bench", "os_noise")
        args.os_noise = beside if os.access(beside, os.X_OK) else os.path.join(agent_overhead.ROOT, "build", "bench",
                                                                             "os_noise")
    if not os.access(args.os_noise, os.X_OK):
        parser.error(f"{args.os_noise}: not an executable (cmake --build build --target os_noise)")

    command = ["/usr/bin/python3", os.path.relpath(os.path.abspath(__file__), os.getcwd()),
               "--seconds", f"{args.seconds:g}", "--warmup", f"{args.warmup:g}", "--quantum-us", f"{args.quantum_us:g}"]
    command += (["--cpus", args.cpus] if args.cpus else []) + ["--phases", ",".join(phases)]
    command += ["--lagent", args.lagent, "--lmaster", args.lmaster, "--os-noise", args.os_noise]
    command += ["--batch-interval", f"{args.batch_interval:g}"] if args.batch_interval else []
    command += ["--peer-cpus", args.peer_cpus] if args.peer_cpus else []
    print("command: " + shlex.join(command))
    print(f"machine: {machine()}; load average at start {load_average()}")

    # One calibration for every phase, before any daemon starts: the same work in each.
    calibration = subprocess.run([args.os_noise, "--calibrate-only", "--quantum-us", f"{args.quantum_us:g}"] +
                                 (["--cpus", args.cpus] if args.cpus else []),
                                 capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)
    loops = int(re.search(r"loops=(\d+)", calibration.stdout).group(1))
    print(f"os_noise: one thread pinned to each CPU of {args.cpus or 'all'}, quantum {args.quantum_us:g} us = "
          f"{loops} loops (calibrated once, idle); {args.seconds:g} s per phase after {args.warmup:g} s warm-up")
    print("delayed>X = fraction of quanta longer than that CPU's minimum + X us; all = the CPUs pooled, each quantum "
          "against its own CPU's minimum")

    noise = OsNoise(args, loops)
    results, skipped = {}, {}
    for phase in phases:
        program = PROGRAMS.get(phase)
        if program and not os.access(program, os.X_OK):
            skipped[phase] = f"{program} is missing (apt-get install collectd-core prometheus-node-exporter)"
            print(f"\n== phase {phase}: skipped, {skipped[phase]}")
            continue
        results[phase] = run_phase(args, phase, noise)
        print_phase(phase, results[phase], results.get("baseline") if phase != "baseline" else None)
        sys.stdout.flush()
    print_summary(results, skipped)
    print(f"load average at end {load_average()}")


if __name__ == "__main__":
    main()
