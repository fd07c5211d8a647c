#!/usr/bin/python3
"""Agent overhead, side by side: lagent against collectd and prometheus-node-exporter (issue 9).

Usage:
  /usr/bin/python3 bench/agent_overhead.py [--seconds 60] [--warmup 5] [--jobs N [--cgroup2]]
                                           [--sample-intervals] [--lagent PATH] [--lmaster PATH]
                                           [--compare LAGENT] [--reads-only PATH] [--keep]

Runs at the same time, on this machine, all on 127.0.0.1 with ephemeral ports and everything
written under one temporary directory (removed at the end unless --keep):
  - lmaster, with the HDF5 output only (the file is in the temporary directory);
  - lagent with the 20 system sensors of etc/fructosa/lagent.conf (FrUCToSA's sample set), every
    one at time_interval = 1 (with --sample-intervals: at the time_interval that file gives
    each, e.g. NetConnections 10 s, NetIFAddrs 60 s), sending to that lmaster (its spool in the
    temporary directory);
    with --jobs N also the per-job sensors JobCgroup, JobProc, Taskstats and PerfHW (scope job)
    at time_interval = 1, over N synthetic Slurm jobs (see below);
  - collectd (Debian collectd-core, `collectd -f -C CONF`) with the plugins cpu, memory, disk,
    interface, load, df, swap, processes at Interval 1 and write_graphite sending the plaintext
    protocol over TCP to a sink this script runs (it reads and counts the lines, like a carbon
    relay would receive them); everything else is collectd's default (ReadThreads 5,
    WriteThreads 5, per-CPU jiffies, every mounted file system for df);
  - prometheus-node-exporter with its default collectors (none disabled; the textfile collector
    points at an empty directory), scraped once per second over HTTP by this script, asking for
    gzip as a Prometheus server does.

After --warmup seconds it measures, for --seconds, each process's CPU (utime + stime of
/proc/<pid>/stat, all threads, the delta over the window) and RSS (VmRSS of /proc/<pid>/status,
polled every 0.25 s: at the end and the highest seen). CPU per sample is the CPU time divided by
the samples taken in the window: lagent's and collectd's rounds (the window over the 1 s
interval), node_exporter's scrapes that completed in the window. Because utime and stime count
in clock ticks (10 ms), a `sched` column also gives the run time from
/proc/<pid>/task/*/schedstat (nanoseconds, the threads alive at both ends) as a cross-check.

--jobs N: a cgroup v2 tree in the temporary directory laid out as Slurm makes it
(<root>/system.slice/slurmstepd.scope/job_<id>/step_0/user/task_0/cgroup.procs, with cpu.stat,
memory.current, memory.peak, io.stat and pids.current in each job directory), given to lagent
as [jobs] scheduler = slurm, cgroup_root = <root>. Each job lists 1 or 2 real `sleep`
processes this script starts, so JobProc and Taskstats read real /proc entries and real
netlink answers. PerfHW counts a job through the fd of its perf_event cgroup directory, which
a generated tree cannot give: lagent reports it unavailable, and this script prints the reason.
With --cgroup2 (root) the same layout is made of real cgroups instead, on a cgroup2 hierarchy
mounted in the temporary directory, under a cgroup of the run's own (every cgroup2 mount shows
the machine's one hierarchy), and each job's processes are moved into its task_0 cgroup:
lagent then reads what the kernel generates (only the files of the controllers this kernel can
give a cgroup2 hierarchy; none where they are all bound to cgroup v1, as on the build VM, which
leaves cpu.stat and cgroup.procs). Those cgroups and the mount are removed at the end.

Beside lagent runs build/bench/reads_only with lagent's configuration (row reads_only): the
same sensors, made the same way and read at the same instants on one thread, and nothing else
(no scheduling, sending, spooling or logging). Its CPU is the floor under lagent's, what any
agent pays the kernel to answer these sensors' questions at this rate, and the report gives it
against collectd's and against the target (--reads-only PATH names another build of it; it is
left out when that program is missing).

--compare LAGENT runs a second lagent (another build, e.g. before an optimisation) with the same
configuration at the same time, sending to the same lmaster: row lagent_b, measured the same
way, so that two builds are compared under the same load (sensor costs depend on what else
runs: NetConnections' on the sockets of the node, printed with the figures).

Every process started is stopped by its PID (SIGTERM, then SIGKILL after 10 s). Prints a table
and the command line that reproduces it. Needs root for Taskstats (CAP_NET_ADMIN) only.
"""
import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from benchlib import free_port, read_text, wait_for
from peer_consumers import GraphiteSink, Scraper  # os_noise.py takes them from here too

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLK_TCK = os.sysconf("SC_CLK_TCK")

# FrUCToSA's sample set: the 20 system sensors of etc/fructosa/lagent.conf.
SYSTEM_SENSORS = [
    "CPUPercent", "CPUTimes", "CPUTimesPercent", "CPUCount", "CPUStats", "CPUFreq", "VirtualMemory",
    "SwapMemory", "DiskPartitions", "DiskUsage", "DiskIOCounters", "NetIOCounters", "NetConnections",
    "NetIFAddrs", "NetIFStats", "SensorsTemperatures", "SensorsFans", "SensorsBattery", "BootTime", "Users",
]
JOB_SENSORS = ["JobCgroup", "JobProc", "Taskstats", "PerfHW"]
COLLECTD_PLUGINS = ["cpu", "memory", "disk", "interface", "load", "df", "swap", "processes"]
FIRST_JOB_ID = 700001


def default_program(name):
    """build/<name>/<name> when it was built, else <name> from PATH."""
    path = os.path.join(ROOT, "build", name, name)
    return path if os.access(path, os.X_OK) else name


def cpu_ticks(pid):
    """utime + stime of every thread of `pid` (clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def sched_ns(pid):
    """Run time of the threads of `pid` alive now, per thread (ns, from schedstat)."""
    times = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            times[tid] = int(read_text(f"/proc/{pid}/task/{tid}/schedstat").split()[0])
        except (IndexError, ValueError):
            pass
    return times


def rss_kib(pid, field="VmRSS"):
    match = re.search(rf"^{field}:\s+(\d+) kB", read_text(f"/proc/{pid}/status"), re.M)
    return int(match.group(1)) if match else 0


def sample_config_intervals():
    """time_interval of each active [sensor:Name] of etc/fructosa/lagent.conf."""
    intervals, sensor = {}, None
    for line in read_text(os.path.join(ROOT, "etc", "fructosa", "lagent.conf")).splitlines():
        section = re.match(r"^\[sensor:(\w+)\]", line)
        if section or line.startswith("["):
            sensor = section.group(1) if section else None
        value = re.match(r"^time_interval\s*=\s*([\d.]+)", line)
        if sensor and value:
            intervals[sensor] = value.group(1)
    return intervals


def tcp_sockets():
    """TCP sockets of this network namespace (in use + TIME_WAIT): NetConnections' cost grows with them."""
    counts = re.search(r"^TCP: inuse (\d+) orphan \d+ tw (\d+)", read_text("/proc/net/sockstat"), re.M)
    return int(counts.group(1)) + int(counts.group(2)) if counts else 0


class Bench:
    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="fructosa-agentbench-")
        self.processes = {}  # name -> Popen
        self.sleepers = []
        self.files = []
        self.cgroup2 = None  # the cgroup2 mount point of --cgroup2
        self.cgroup2_root = None  # this run's cgroup in it, the jobs' cgroup_root
        self.affinity = {}  # name -> CPUs the program (all its threads) runs on (os_noise.py --peer-cpus)

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def spawn(self, name, argv):
        out = open(self.path(name + ".out"), "w")
        err = open(self.path(name + ".err"), "w")
        self.files += [out, err]
        cpus = self.affinity.get(name)
        # Set in the child before exec: every thread the program starts inherits it.
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.processes[name] = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                                preexec_fn=pin)
        return self.processes[name]

    def check_running(self):
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n" +
                                   read_text(self.path(name + ".err"))[-3000:] +
                                   read_text(self.path(name + ".out"))[-2000:])

    # --- the programs -----------------------------------------------------------------------

    def start_lmaster(self):
        config = self.write("lmaster.conf", (
            "[lmaster]\nhost = 127.0.0.1\nincoming data port = 0\n"
            f"data_dir = {self.path('lmaster-data')}\n"
            f"[hdf5]\npath = {self.path('data.h5')}\n"))
        process = self.spawn("lmaster", [self.args.lmaster, "run", "-c", config, "-p", self.path("lmaster.pid")])

        def port():
            self.check_running()
            match = re.search(r"listening on tcp://127\.0\.0\.1:(\d+)", read_text(self.path("lmaster.err")))
            return int(match.group(1)) if match else None
        return process, wait_for(port, 30, "lmaster to listen")

    def make_jobs(self):
        """N Slurm-like job cgroups (v2 layout) whose leaf cgroup.procs list real sleep processes."""
        if self.args.cgroup2:
            return self.make_real_jobs()
        root = self.path("cgroup")
        scope = os.path.join(root, "system.slice", "slurmstepd.scope")
        os.makedirs(scope)
        with open(os.path.join(root, "cgroup.controllers"), "w") as f:
            f.write("cpuset cpu io memory pids\n")
        for name in [os.path.join(root, "cgroup.procs"), os.path.join(scope, "cgroup.procs")]:
            open(name, "w").close()
        for index in range(self.args.jobs):
            job = FIRST_JOB_ID + index
            job_dir = os.path.join(scope, f"job_{job}")
            task_dir = os.path.join(job_dir, "step_0", "user", "task_0")
            os.makedirs(task_dir)
            pids = []
            for _ in range(1 + index % 2):
                sleeper = subprocess.Popen(["sleep", "infinity"], stdin=subprocess.DEVNULL)
                self.sleepers.append(sleeper)
                pids.append(sleeper.pid)
            files = {
                "cgroup.procs": "",
                "step_0/cgroup.procs": "",
                "step_0/user/cgroup.procs": "",
                "step_0/user/task_0/cgroup.procs": "".join(f"{pid}\n" for pid in pids),
                "cpu.stat": (f"usage_usec {1000000 + index}\nuser_usec {800000 + index}\nsystem_usec 200000\n"
                             "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n"),
                "memory.current": f"{(64 + index) << 20}\n",
                "memory.peak": f"{(128 + index) << 20}\n",
                "io.stat": f"8:0 rbytes={4096 * index} wbytes=1048576 rios={index} wios=256 dbytes=0 dios=0\n",
                "pids.current": f"{len(pids)}\n",
            }
            for name, text in files.items():
                with open(os.path.join(job_dir, name), "w") as f:
                    f.write(text)
        return root

    def make_real_jobs(self):
        """--cgroup2: the same layout as real cgroups, on a cgroup2 hierarchy mounted in the
        temporary directory, with each job's sleep processes moved into its task_0 cgroup.
        Every mount of cgroup2 shows the one hierarchy of the machine (on a systemd host, the
        cgroups of its services), so the jobs go under a cgroup of this run's own, given to
        lagent as its cgroup_root, and only that subtree is removed at the end."""
        mount = self.path("cgroup")
        os.makedirs(mount)
        subprocess.run(["mount", "-t", "cgroup2", "none", mount], check=True)
        self.cgroup2 = mount
        root = os.path.join(mount, f"fructosa-agentbench-{os.getpid()}")
        os.mkdir(root)
        self.cgroup2_root = root
        scope = os.path.join(root, "system.slice", "slurmstepd.scope")
        for index in range(self.args.jobs):
            task_dir = os.path.join(scope, f"job_{FIRST_JOB_ID + index}", "step_0", "user", "task_0")
            os.makedirs(task_dir)
            for _ in range(1 + index % 2):
                sleeper = subprocess.Popen(["sleep", "infinity"], stdin=subprocess.DEVNULL)
                self.sleepers.append(sleeper)
                with open(os.path.join(task_dir, "cgroup.procs"), "w") as f:  # one pid per write
                    f.write(f"{sleeper.pid}\n")
        return root

    def remove_real_jobs(self):
        """Removes this run's cgroups (their processes have ended), deepest first, and the mount."""
        if not self.cgroup2:
            return
        if self.cgroup2_root:
            for directory, _, _ in sorted(os.walk(self.cgroup2_root), key=lambda entry: -len(entry[0])):
                try:
                    os.rmdir(directory)
                except OSError as error:
                    print(f"cannot remove cgroup {directory}: {error}", file=sys.stderr)
        subprocess.run(["umount", self.cgroup2], check=False)
        self.cgroup2 = self.cgroup2_root = None

    def start_reads_only(self):
        """The floor: lagent's configuration read by bench/reads_only (sensors only)."""
        return self.spawn("reads_only", [self.args.reads_only, "-c", self.path("lagent.conf")])

    def start_lagent(self, port, name="lagent", program=None, cgroup_root=None):
        config = (f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\n"
                  f"[lagent]\nhost = {name}\nspool_dir = {self.path(name + '-spool')}\n"
                  # only when set: a --compare build from before the key would refuse it
                  + (f"batch_interval = {self.args.batch_interval:g}\n" if getattr(self.args, "batch_interval", 0) else "")
                  + "[logging]\nlevel = INFO\n")
        sensors = list(SYSTEM_SENSORS)
        if self.args.jobs:
            config += (f"[jobs]\nscheduler = slurm\ncgroup_root = {cgroup_root}\n")
            sensors += JOB_SENSORS
        intervals = sample_config_intervals() if self.args.sample_intervals else {}
        for sensor in sensors:
            config += f"\n[sensor:{sensor}]\ntime_interval = {intervals.get(sensor, 1)}\n"
        return self.spawn(name, [program or self.args.lagent, "run", "-c", self.write(name + ".conf", config),
                                 "-p", self.path(name + ".pid")])

    def start_collectd(self, sink_port):
        os.makedirs(self.path("collectd"))
        config = (f'Hostname "benchnode"\nFQDNLookup false\nBaseDir "{self.path("collectd")}"\n'
                  f'PIDFile "{self.path("collectd", "collectd.pid")}"\nPluginDir "/usr/lib/collectd"\n'
                  'TypesDB "/usr/share/collectd/types.db"\nInterval 1\nAutoLoadPlugin false\n'
                  'LoadPlugin logfile\n<Plugin logfile>\n  LogLevel "info"\n  File STDERR\n</Plugin>\n')
        config += "".join(f"LoadPlugin {plugin}\n" for plugin in COLLECTD_PLUGINS)
        config += ('LoadPlugin write_graphite\n<Plugin write_graphite>\n  <Node "sink">\n'
                   f'    Host "127.0.0.1"\n    Port "{sink_port}"\n    Protocol "tcp"\n'
                   '  </Node>\n</Plugin>\n')
        return self.spawn("collectd", ["/usr/sbin/collectd", "-f", "-C", self.write("collectd.conf", config)])

    def start_node_exporter(self):
        os.makedirs(self.path("textfile"))
        # node_exporter cannot be told to bind port 0: take one the kernel just gave out, and
        # try another if someone took it meanwhile.
        for _ in range(5):
            port = free_port()
            process = self.spawn("node_exporter", [
                "/usr/bin/prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{port}",
                f"--collector.textfile.directory={self.path('textfile')}"])

            def listening():
                if process.poll() is not None:
                    return "exited"
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    return "up"
                except OSError:
                    return None
            if wait_for(listening, 30, "node_exporter to listen") == "up":
                return process, port
            del self.processes["node_exporter"]
        raise RuntimeError("node_exporter did not start:\n" + read_text(self.path("node_exporter.err"))[-3000:])

    # --- measuring ----------------------------------------------------------------------------

    def run(self):
        sink = GraphiteSink()
        sink.start()
        lmaster, port = self.start_lmaster()
        cgroup_root = self.make_jobs() if self.args.jobs else None
        self.start_lagent(port, cgroup_root=cgroup_root)
        if self.args.compare:
            self.start_lagent(port, "lagent_b", self.args.compare, cgroup_root)
        if self.args.reads_only:
            self.start_reads_only()
        collectd = self.start_collectd(sink.port)
        exporter, exporter_port = self.start_node_exporter()
        scraper = Scraper(exporter_port)
        scraper.start()
        try:
            time.sleep(self.args.warmup)
            self.check_running()
            context = {"load_start": os.getloadavg()[0], "tcp_sockets": tcp_sockets()}
            pids = {name: p.pid for name, p in self.processes.items()}
            start_ticks = {name: cpu_ticks(pid) for name, pid in pids.items()}
            start_sched = {name: sched_ns(pid) for name, pid in pids.items()}
            start_wall, start_mono = time.time(), time.monotonic()
            rss_max = {name: 0 for name in pids}
            end_mono = start_mono + self.args.seconds
            while time.monotonic() < end_mono:
                for name, pid in pids.items():
                    rss_max[name] = max(rss_max[name], rss_kib(pid))
                time.sleep(min(0.25, max(0.0, end_mono - time.monotonic())))
            self.check_running()
            end_ticks = {name: cpu_ticks(pid) for name, pid in pids.items()}
            end_sched = {name: sched_ns(pid) for name, pid in pids.items()}
            end_wall, end_mono = time.time(), time.monotonic()
            rss_end = {name: rss_kib(pid) for name, pid in pids.items()}
            anon_end = {name: rss_kib(pid, "RssAnon") for name, pid in pids.items()}
            for name, pid in pids.items():
                rss_max[name] = max(rss_max[name], rss_end[name])
        finally:
            scraper.stop()
        window = end_mono - start_mono
        # lagent reads on whole seconds of the wall clock: the rounds that fell in the window.
        rounds = int(end_wall) - int(start_wall)
        scrapes = sum(start_mono < t <= end_mono for t in scraper.done)
        samples = {"lagent": rounds, "lagent_b": rounds, "reads_only": rounds, "lmaster": rounds, "collectd": window / 1.0,
                   "node_exporter": scrapes}
        rows = {}
        for name in (["lagent"] + (["lagent_b"] if self.args.compare else []) +
                     (["reads_only"] if self.args.reads_only else []) + ["lmaster", "collectd", "node_exporter"]):
            ticks = end_ticks[name] - start_ticks[name]
            sched = sum(end_sched[name][tid] - start_sched[name][tid]
                        for tid in end_sched[name] if tid in start_sched[name])
            n = max(samples[name], 1e-9)
            rows[name] = {"samples": samples[name], "cpu_ms": ticks * 1000.0 / CLK_TCK / n,
                          "sched_ms": sched / 1e6 / n, "rss_end": rss_end[name] / 1024.0,
                          "rss_max": rss_max[name] / 1024.0, "anon_end": anon_end[name] / 1024.0}
        context["load_end"] = os.getloadavg()[0]
        context["tcp_sockets_end"] = tcp_sockets()
        return rows, {"window": window, "context": context, "graphite_lines": sink.lines, "series": scraper.series,
                      "scrape_errors": scraper.errors, "sink": sink,
                      "h5_bytes": os.path.getsize(self.path("data.h5")) if os.path.exists(self.path("data.h5")) else 0}

    def lagent_notes(self):
        err = read_text(self.path("lagent.err")) + read_text(self.path("lagent_b.err"))
        return (re.findall(r"sensor (\w+) unavailable: (.*)", err),
                [line for line in err.splitlines() if re.search(r"\] (error|critical): |failed:", line)])

    def stop(self):
        """Stops every process started, by PID, the last started first (lagent before lmaster,
        so that it does not wait for acknowledgements from a master that is gone)."""
        def stop_one(name, process):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                print(f"{name} (pid {process.pid}) ignored SIGTERM for 10 s: SIGKILL", file=sys.stderr)
                process.kill()
                process.wait()
        for name, process in reversed(list(self.processes.items())):
            stop_one(name, process)
        for sleeper in self.sleepers:
            if sleeper.poll() is None:
                sleeper.send_signal(signal.SIGTERM)
        for sleeper in self.sleepers:
            stop_one(f"sleep {sleeper.pid}", sleeper)
        self.remove_real_jobs()
        for f in self.files:
            f.close()

    def cleanup(self):
        if self.args.keep:
            print(f"kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def ratio(a, b):
    return f"{a / b:.3f}" if b > 0 else "-"


def report(args, rows, extra, unavailable, errors):
    mode = f"{len(SYSTEM_SENSORS)} system sensors" + (
        " at the intervals of etc/fructosa/lagent.conf" if args.sample_intervals else "") + (
        f" + {', '.join(JOB_SENSORS)} over {args.jobs} synthetic Slurm jobs" +
        (" (real cgroup2 cgroups)" if args.cgroup2 else "") if args.jobs else "")
    print(f"agent overhead: lagent ({mode}, {'others' if args.sample_intervals else 'all'} at 1 s), collectd ({', '.join(COLLECTD_PLUGINS)}; "
          f"Interval 1), node_exporter (defaults, scraped every 1 s)")
    context = extra["context"]
    print(f"window {extra['window']:.1f} s after {args.warmup:g} s warm-up; {os.cpu_count()} CPUs; load average "
          f"{context['load_start']:.2f} -> {context['load_end']:.2f}; TCP sockets on the node "
          f"{context['tcp_sockets']} -> {context['tcp_sockets_end']}")
    print("CPU = utime+stime of /proc/<pid>/stat (10 ms ticks); sched = schedstat run time (ns) as a cross-check; "
          "RSS = VmRSS, anon = its RssAnon part (the rest is file pages: program and shared libraries)")
    header = (f"{'process':<14} {'samples':>7} {'CPU ms/sample':>13} {'sched ms/sample':>15} "
              f"{'RSS end MiB':>11} {'RSS max MiB':>11} {'anon MiB':>8} {'lagent/it CPU':>13} {'lagent/it RSS':>13}")
    print(header)
    print("-" * len(header))
    lagent = rows["lagent"]
    for name, row in rows.items():
        peer = name in ("collectd", "node_exporter", "lagent_b", "reads_only")
        cpu_ratio = ratio(lagent["cpu_ms"], row["cpu_ms"]) if peer else ""
        rss_ratio = ratio(lagent["rss_max"], row["rss_max"]) if peer else ""
        print(f"{name:<14} {row['samples']:>7.0f} {row['cpu_ms']:>13.3f} {row['sched_ms']:>15.3f} "
              f"{row['rss_end']:>11.2f} {row['rss_max']:>11.2f} {row['anon_end']:>8.2f} {cpu_ratio:>13} {rss_ratio:>13}")
    print("(lmaster: per lagent round, for information; samples: lagent rounds, collectd intervals, "
          "node_exporter scrapes)")
    if args.compare:
        print(f"lagent_b: {args.compare}, the same configuration at the same time (to compare two builds)")
    target = 0.25 if args.jobs else 0.10
    collectd = rows["collectd"]
    print(f"targets (issue 9): lagent CPU/sample <= {target:.2f} x collectd's: "
          f"{lagent['cpu_ms']:.3f} vs {target * collectd['cpu_ms']:.3f} ms "
          f"(sched {lagent['sched_ms']:.3f} vs {target * collectd['sched_ms']:.3f}); "
          f"lagent RSS <= 6 MiB: {lagent['rss_max']:.2f} MiB max")
    if "reads_only" in rows:
        floor = rows["reads_only"]
        print(f"floor (reads_only: the same sensors' reads and nothing else): {floor['cpu_ms']:.3f} ms/sample "
              f"(sched {floor['sched_ms']:.3f}) = {ratio(floor['cpu_ms'], collectd['cpu_ms'])} x collectd's "
              f"(sched {ratio(floor['sched_ms'], collectd['sched_ms'])}); lagent's own work above it: "
              f"{lagent['sched_ms'] - floor['sched_ms']:.3f} ms/sample (sched)")
    print(f"data: lmaster HDF5 {extra['h5_bytes']} bytes; collectd sent {extra['graphite_lines']} Graphite lines; "
          f"node_exporter {extra['series']} series per scrape"
          + (f"; {len(extra['scrape_errors'])} failed scrapes ({extra['scrape_errors'][0]})" if extra["scrape_errors"] else ""))
    if unavailable:
        print("lagent sensors unavailable here: " + "; ".join(f"{name}: {why}" for name, why in unavailable))
    for line in errors[:5]:
        print(f"lagent logged: {line}")
    command = ["/usr/bin/python3", os.path.relpath(os.path.abspath(__file__), os.getcwd()),
               "--seconds", f"{args.seconds:g}", "--warmup", f"{args.warmup:g}"]
    if args.jobs:
        command += ["--jobs", str(args.jobs)]
    if args.cgroup2:
        command += ["--cgroup2"]
    if args.sample_intervals:
        command += ["--sample-intervals"]
    if args.compare:
        command += ["--compare", args.compare]
    if args.reads_only:
        command += ["--reads-only", args.reads_only]
    command += ["--lagent", args.lagent, "--lmaster", args.lmaster]
    print("command: " + shlex.join(command))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60, help="measurement window (default 60)")
    parser.add_argument("--warmup", type=float, default=5, help="seconds before measuring (default 5)")
    parser.add_argument("--jobs", type=int, default=0, help="synthetic Slurm jobs; > 0 turns on the per-job sensors")
    parser.add_argument("--cgroup2", action="store_true",
                        help="with --jobs: make the jobs real cgroups on a cgroup2 hierarchy mounted in the "
                             "temporary directory (root only) instead of a tree of ordinary files")
    parser.add_argument("--lagent", default=os.environ.get("LAGENT", default_program("lagent")))
    parser.add_argument("--lmaster", default=os.environ.get("LMASTER", default_program("lmaster")))
    parser.add_argument("--sample-intervals", action="store_true",
                        help="the system sensors at the time_interval of etc/fructosa/lagent.conf instead of 1 s "
                             "(lagent's samples are then its seconds)")
    parser.add_argument("--compare", metavar="LAGENT",
                        help="also run this lagent build with the same configuration, at the same time "
                             "(row lagent_b), e.g. to measure an optimisation under the same load")
    parser.add_argument("--reads-only", metavar="PATH",
                        help="the reads_only program of the floor row (default: bench/reads_only of lagent's "
                             "build directory, when there)")
    parser.add_argument("--batch-interval", type=float, default=0, metavar="S",
                        help="lagent's [lagent] batch_interval (default 0: a batch per round)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, configs)")
    args = parser.parse_args()
    if args.reads_only is None:
        beside = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(shutil.which(args.lagent) or args.lagent))),
                              "bench", "reads_only")
        args.reads_only = beside if os.access(beside, os.X_OK) else ""
    elif not os.access(args.reads_only, os.X_OK):
        parser.error(f"--reads-only {args.reads_only}: not an executable")
    if args.seconds < 1 or args.warmup < 0 or args.jobs < 0:
        parser.error("--seconds >= 1, --warmup >= 0, --jobs >= 0")
    if args.cgroup2 and (not args.jobs or os.geteuid() != 0):
        parser.error("--cgroup2 needs --jobs and root (it mounts a cgroup2 hierarchy)")
    for program in ["/usr/sbin/collectd", "/usr/bin/prometheus-node-exporter"]:
        if not os.access(program, os.X_OK):
            sys.exit(f"{program} is missing (apt-get install collectd-core prometheus-node-exporter)")

    bench = Bench(args)
    try:
        rows, extra = bench.run()
        unavailable, errors = bench.lagent_notes()
    finally:
        bench.stop()
        bench.cleanup()
    extra["sink"].stop()
    report(args, rows, extra, unavailable, errors)


if __name__ == "__main__":
    main()
