#!/usr/bin/python3
"""What pushing metrics to lagent costs (docs/push.md): lines per second its push thread takes on
one core, and lagent's CPU per 1000 lines, taken and dropped, and per connection.

Usage:
  /usr/bin/python3 bench/push_throughput.py [--seconds 5] [--lagent PATH] [--lmaster PATH] [--keep]

Runs on this machine, everything under one temporary directory (removed unless --keep):
lmaster with the HDF5 output only, and lagent with [sensor:User] and [sensor:lagent] every
second, push_allow_outside_jobs = true (this script is in no job; the job lookup is made once
per connection either way, and costs the same: the pid's /proc/<pid>/cgroup against the job
list), sending to that lmaster. Then, one after the other:

  taken    one connection writes lines as fast as it can for --seconds, with
           push_max_lines_per_second high enough that none is dropped: statsd gauges and
           counters over 50 names, in 1 MiB writes. The lines taken per second of the push
           thread's CPU is what one core takes; lagent's whole CPU (every thread) per 1000
           lines is what the node pays.
  connect  (same lagent) 1000 connections one after the other, each one line and the reply read: lagent's
           CPU per connection (SO_PEERCRED, the job lookup, the reply), as `lagent push` in a
           loop would cost it.
  dropped  a new lagent, and the same flood against the default limit (1000 lines per second):
           what a flooding job costs, per 1000 lines dropped.

CPU is utime + stime from /proc/<pid>/stat (all threads) and /proc/<pid>/task/<tid>/stat (the
push thread: the one whose CPU grew most in the first run), as deltas over each run. Lines
taken and dropped come from lagent's own reply to the flooding connection (`done accepted=...`).
Figures depend on the machine: compare runs made on the same machine.
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from benchlib import read_text, stop_processes, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(stat_path):
    text = read_text(stat_path)
    fields = text[text.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK if len(fields) > 12 else 0.0


def thread_cpu(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        out[tid] = cpu_seconds(f"/proc/{pid}/task/{tid}/stat")
    return out


def flood(path, seconds, chunk):
    """One connection writing `chunk` for `seconds`; returns (accepted, refused, dropped)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            s.sendall(chunk)
        s.shutdown(socket.SHUT_WR)
        reply = b""
        while data := s.recv(65536):
            reply += data
    match = re.search(rb"done accepted=(\d+) refused=(\d+) dropped=(\d+)", reply)
    if not match:
        raise RuntimeError(f"no tally from lagent: {reply[-200:]!r}")
    return tuple(int(n) for n in match.groups())


def one_line(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        s.sendall(b"bench_connect:1|c\n")
        s.shutdown(socket.SHUT_WR)
        while s.recv(4096):
            pass


def lines_chunk():
    lines = []
    for i in range(50):
        lines.append(f"gauge_{i}:{i * 1.5}|g\n" if i % 2 else f"counter_{i}:1|c\n")
    block = "".join(lines).encode()
    return block * ((1 << 20) // len(block))


class Run:
    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="fructosa-push-bench-")
        self.sock = os.path.join(self.dir, "push.sock")
        self.processes = []

    def path(self, name):
        return os.path.join(self.dir, name)

    def spawn(self, name, argv):
        out = open(self.path(name + ".err"), "w")
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out, stdin=subprocess.DEVNULL)
        self.processes.append(process)
        return process

    def start(self, max_lines):
        with open(self.path("lmaster.conf"), "w") as f:
            f.write(f"[lmaster]\nhost = 127.0.0.1\nincoming data port = 0\ndata_dir = {self.path('lmaster-data')}\n"
                    f"[hdf5]\npath = {self.path('data.h5')}\n")
        self.master = self.spawn("lmaster", [self.args.lmaster, "run", "-c", self.path("lmaster.conf"),
                                             "-p", self.path("lmaster.pid")])
        port = wait_for(lambda: re.search(r"listening on tcp://127\.0\.0\.1:(\d+)", read_text(self.path("lmaster.err"))),
                        30, "lmaster to listen").group(1)
        with open(self.path("lagent.conf"), "w") as f:
            f.write(f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\n"
                    f"[lagent]\nhost = benchnode\nspool_dir = {self.path('spool')}\npush_socket = {self.sock}\n"
                    f"push_allow_outside_jobs = true\npush_max_lines_per_second = {max_lines}\n"
                    f"[sensor:User]\ntime_interval = 1\n[sensor:lagent]\ntime_interval = 1\n")
        self.agent = self.spawn("lagent", [self.args.lagent, "run", "-c", self.path("lagent.conf"),
                                           "-p", self.path("lagent.pid")])
        wait_for(lambda: os.path.exists(self.sock), 30, "the push socket")

    def stop(self):
        stop_processes(self.processes)
        self.processes = []

    def cleanup(self):
        self.stop()
        if not self.args.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            print(f"kept {self.dir}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--lagent", default=os.path.join(ROOT, "build", "lagent", "lagent"))
    parser.add_argument("--lmaster", default=os.path.join(ROOT, "build", "lmaster", "lmaster"))
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    chunk = lines_chunk()
    print(f"command: /usr/bin/python3 {' '.join(sys.argv)}")
    line_bytes = len(chunk) / chunk.count(b"\n")
    print(f"machine: {os.cpu_count()} CPUs; lines of {line_bytes:.1f} bytes on average, 50 names, "
          f"written 1 MiB at a time")

    run = Run(args)
    try:
        run.start(max_lines=100_000_000)
        pid = run.agent.pid
        threads_before, whole_before = thread_cpu(pid), cpu_seconds(f"/proc/{pid}/stat")
        started = time.monotonic()
        accepted, refused, dropped = flood(run.sock, args.seconds, chunk)
        wall = time.monotonic() - started
        threads_after, whole_after = thread_cpu(pid), cpu_seconds(f"/proc/{pid}/stat")
        grew = {tid: threads_after[tid] - threads_before.get(tid, 0) for tid in threads_after}
        push_thread = max(grew, key=grew.get)
        thread_seconds = grew[push_thread]
        whole = whole_after - whole_before
        if refused or dropped:
            raise RuntimeError(f"lines not taken in the unlimited run: refused {refused}, dropped {dropped}")
        print(f"\ntaken:    {accepted} lines in {wall:.2f} s = {accepted / wall:,.0f} lines/s of wall time")
        print(f"          push thread: {thread_seconds:.2f} s CPU = {accepted / max(thread_seconds, 1e-9):,.0f} "
              f"lines per second of one core")
        print(f"          lagent (all threads): {whole:.2f} s CPU = {1000 * whole / accepted * 1000:.3f} ms per 1000 lines")

        connections = 1000
        whole_before = cpu_seconds(f"/proc/{pid}/stat")
        started = time.monotonic()
        for _ in range(connections):
            one_line(run.sock)
        wall = time.monotonic() - started
        whole = cpu_seconds(f"/proc/{pid}/stat") - whole_before
        print(f"\nconnect:  {connections} connections of one line in {wall:.2f} s ({connections / wall:,.0f} per s)")
        print(f"          lagent: {whole:.3f} s CPU = {1e6 * whole / connections:.0f} us per connection")
        run.stop()

        run.start(max_lines=1000)
        pid = run.agent.pid
        whole_before = cpu_seconds(f"/proc/{pid}/stat")
        started = time.monotonic()
        accepted, refused, dropped = flood(run.sock, args.seconds, chunk)
        wall = time.monotonic() - started
        whole = cpu_seconds(f"/proc/{pid}/stat") - whole_before
        print(f"\ndropped:  limit 1000 lines/s: {accepted} taken, {dropped} dropped in {wall:.2f} s "
              f"({dropped / wall:,.0f} lines/s)")
        print(f"          lagent: {whole:.2f} s CPU = {1000 * whole / max(dropped, 1) * 1000:.3f} ms per 1000 lines dropped")

        run.stop()
    finally:
        run.cleanup()


if __name__ == "__main__":
    main()
