#!/usr/bin/python3
"""The fixed cost of one lagent round: an agent with one sensor that reads almost nothing
(CPUCount), so what it costs is the agent's own machinery (timers, thread hand-offs, batching,
spool, ZeroMQ, acknowledgements), per round and per thread.

Usage:
  /usr/bin/python3 bench/round_cost.py [--seconds 20] [--warmup 3] [--interval 0.1 --interval 1]
                                       [--sensor CPUCount] [--batch-interval S] [--lagent PATH]
                                       [--lmaster PATH] [--keep]

For each --interval (default 0.1 and 1 s), one after the other: lmaster (HDF5 output) and an
lagent with only [sensor:<sensor>] at that interval (lagent's own sensor at its default 10 s),
on 127.0.0.1, in a temporary directory. After --warmup s it measures for --seconds, per thread of
lagent (/proc/<pid>/task/<tid>): run time (schedstat, ns), voluntary and involuntary context
switches (status), and divides by the rounds in the window (window / interval). Threads that
start or end inside the window are counted for what both ends saw, and listed.

--batch-interval sets [lagent] batch_interval (default 0: a batch per round).

Side by side in the same window runs build/bench/reads_only with the same lagent.conf: the same
sensors read at the same instants by one thread, and nothing else. Its cost per round is the floor
under any agent's on this machine: one thread woken per instant (on a virtual machine waking from
idle costs far more than the reads) and the reads.

Targets (issue 27): <= 100 us of CPU and <= 2 context switches per round for this agent.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import read_text, stop_processes, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def thread_counters(pid):
    """{tid: (name, run_ns, voluntary, involuntary)} of every thread of `pid` now."""
    counters = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{tid}"
        try:
            name = read_text(f"{base}/comm").strip()
            run_ns = int(read_text(f"{base}/schedstat").split()[0])
            status = read_text(f"{base}/status")
            voluntary = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
            involuntary = int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
        except (AttributeError, IndexError, ValueError):
            continue  # the thread ended while it was read
        counters[tid] = (name, run_ns, voluntary, involuntary)
    return counters


def measure(args, interval, directory):
    processes = []

    def spawn(name, argv):
        err = open(os.path.join(directory, name + ".err"), "w")
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
        processes.append(process)
        return process

    try:
        path = lambda name: os.path.join(directory, name)
        with open(path("lmaster.conf"), "w") as f:
            f.write(f"[lmaster]\nhost = 127.0.0.1\nincoming data port = 0\ndata_dir = {path('lmaster-data')}\n"
                    f"[hdf5]\npath = {path('data.h5')}\n")
        spawn("lmaster", [args.lmaster, "run", "-c", path("lmaster.conf"), "-p", path("lmaster.pid")])
        port = wait_for(lambda: re.search(r"listening on tcp://127\.0\.0\.1:(\d+)", read_text(path("lmaster.err"))),
                        30, "lmaster to listen").group(1)
        with open(path("lagent.conf"), "w") as f:
            f.write(f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\n"
                    f"[lagent]\nhost = benchnode\nspool_dir = {path('spool')}\n"
                    f"batch_interval = {args.batch_interval}\n"
                    f"[sensor:{args.sensor}]\ntime_interval = {interval}\n")
        agent = spawn("lagent", [args.lagent, "run", "-c", path("lagent.conf"), "-p", path("lagent.pid")])
        floor = spawn("reads_only", [args.reads_only, "-c", path("lagent.conf")])
        wait_for(lambda: "sending to lmaster" in read_text(path("lagent.err")) or
                 "lagent 0" in read_text(path("lagent.err")), 30, "lagent to start")
        time.sleep(args.warmup)  # the measurement window is a duration, not a condition
        before = thread_counters(agent.pid)
        floor_before = thread_counters(floor.pid)
        started = time.monotonic()
        time.sleep(args.seconds)
        after = thread_counters(agent.pid)
        floor_after = thread_counters(floor.pid)
        window = time.monotonic() - started
        for process, name in ((agent, "lagent"), (floor, "reads_only")):
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited:\n" + read_text(path(name + ".err")))
    finally:
        stop_processes(processes)
    rounds = window / interval
    return window, rounds, per_round(before, after, rounds), per_round(floor_before, floor_after, rounds)


def per_round(before, after, rounds):
    """[(tid, name, CPU us, voluntary, involuntary)] per round and thread; None for threads that
    started or ended inside the window."""
    rows = []
    for tid in sorted(set(before) | set(after), key=int):
        name = (after.get(tid) or before.get(tid))[0]
        if tid not in before or tid not in after:
            rows.append((tid, name, None, None, None))
            continue
        run = (after[tid][1] - before[tid][1]) / 1e3 / rounds  # us per round
        voluntary = (after[tid][2] - before[tid][2]) / rounds
        involuntary = (after[tid][3] - before[tid][3]) / rounds
        rows.append((tid, name, run, voluntary, involuntary))
    return rows


def print_rows(rows):
    """Prints the table; returns the totals (CPU us, voluntary, involuntary) per round."""
    print(f"  {'thread':<16} {'tid':>8} {'CPU us/round':>13} {'voluntary/round':>16} {'involuntary/round':>18}")
    total = [0.0, 0.0, 0.0]
    for tid, name, run, voluntary, involuntary in rows:
        if run is None:
            print(f"  {name:<16} {tid:>8}   (started or ended in the window: not counted)")
            continue
        total = [total[0] + run, total[1] + voluntary, total[2] + involuntary]
        print(f"  {name:<16} {tid:>8} {run:13.1f} {voluntary:16.2f} {involuntary:18.2f}")
    print(f"  {'all':<16} {'':>8} {total[0]:13.1f} {total[1]:16.2f} {total[2]:18.2f}")
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--interval", type=float, action="append")
    parser.add_argument("--sensor", default="CPUCount")
    parser.add_argument("--batch-interval", type=float, default=0)
    parser.add_argument("--lagent", default=os.environ.get("LAGENT", os.path.join(ROOT, "build", "lagent", "lagent")))
    parser.add_argument("--reads-only", default=os.environ.get("READS_ONLY", os.path.join(ROOT, "build", "bench", "reads_only")))
    parser.add_argument("--lmaster", default=os.environ.get("LMASTER", os.path.join(ROOT, "build", "lmaster", "lmaster")))
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    intervals = args.interval or [0.1, 1.0]
    print(f"command: /usr/bin/python3 {' '.join(sys.argv)}")
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; lagent {args.lagent}")
    directory = tempfile.mkdtemp(prefix="fructosa-round-cost-")
    try:
        for interval in intervals:
            run_dir = os.path.join(directory, f"interval-{interval}")
            os.makedirs(run_dir)
            window, rounds, rows, floor_rows = measure(args, interval, run_dir)
            print(f"\n[sensor:{args.sensor}] time_interval = {interval}, batch_interval = {args.batch_interval}: "
                  f"{rounds:.0f} rounds in {window:.1f} s")
            print("lagent:")
            total = print_rows(rows)
            print("reads_only (the floor: the same reads at the same instants on one thread, nothing else):")
            floor = print_rows(floor_rows)
            ratio = f" ({total[0] / floor[0]:.2f} x)" if floor[0] else ""
            print(f"round: {total[0]:.1f} us of CPU (target <= 100), {total[1] + total[2]:.2f} context switches "
                  f"(target <= 2) per round at {interval} s; floor {floor[0]:.1f} us and "
                  f"{floor[1] + floor[2]:.2f} switches, lagent {total[0] - floor[0]:+.1f} us{ratio}")
        print(f"load at the end {os.getloadavg()[0]:.2f}")
    finally:
        if args.keep:
            print(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
