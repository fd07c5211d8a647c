"""The processes bench/master_throughput.py watches: ProcessMonitor samples a pid's CPU and RSS
(and lmaster's output threads' CPU), Sink runs a counting sink (carbon_sink, remote_write_sink)
and follows what it has received; stop() ends a process by its PID."""

import glob
import json
import os
import re
import signal
import subprocess
import threading
import time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def interpolate(series, t):
    """Value of a (time, value) series at time t (linear between samples, clamped at the ends)."""
    if not series:
        return 0.0
    if t <= series[0][0]:
        return series[0][1]
    for (t0, v0), (t1, v1) in zip(series, series[1:]):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return series[-1][1]


def stop(process, timeout=60):
    """SIGTERM by PID, then wait (SIGKILL after `timeout`); returns the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait(timeout=30)
    return process.returncode


class ProcessMonitor:
    """Samples utime+stime (seconds) and RSS of one pid every 0.2 s, with wall-clock times."""

    def __init__(self, pid):
        self.pid = pid
        self.cpu = []  # (unix time, cpu seconds)
        self.threads = {}  # lmaster's output threads ("out:graphite"): [(unix time, cpu seconds)]
        self.peak_rss_kib = 0
        self.rss = []  # (unix time, VmRSS KiB)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self):
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{self.pid}/status") as f:
                status = f.read()
        except (FileNotFoundError, ProcessLookupError):
            return False
        now = time.time()
        self.cpu.append((now, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS))  # utime, stime
        match = re.search(r"VmHWM:\s+(\d+) kB", status)
        if match:
            self.peak_rss_kib = max(self.peak_rss_kib, int(match.group(1)))
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        if match:
            self.rss.append((now, int(match.group(1))))
        for task in glob.glob(f"/proc/{self.pid}/task/*/stat"):
            try:
                with open(task) as f:
                    text = f.read()
            except (FileNotFoundError, ProcessLookupError):
                continue
            name = text[text.index("(") + 1:text.rindex(")")]
            if name.startswith("out:"):
                fields = text.rsplit(")", 1)[1].split()
                self.threads.setdefault(name, []).append((now, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS))
        return True

    def _run(self):
        while not self._stop.is_set() and self.sample():
            self._stop.wait(0.2)

    def rss_slope(self, start, end):
        """MiB per hour by least squares over the second half of [start, end]: memory that still
        grows once the queues and buffers have filled (None with fewer than 10 samples)."""
        points = [(t, kib / 1024.0) for t, kib in self.rss if start + (end - start) / 2 <= t <= end]
        if len(points) < 10:
            return None
        mean_t = sum(t for t, _ in points) / len(points)
        mean_m = sum(m for _, m in points) / len(points)
        spread = sum((t - mean_t) ** 2 for t, _ in points)
        return 3600.0 * sum((t - mean_t) * (m - mean_m) for t, m in points) / spread if spread else None

    def rss_periods(self, start, end, period):
        """(peak, last) RSS in MiB of each whole `period` seconds of [start, end]: with the HDF5
        files rotated every period, flat peaks say that what a file costs goes with it."""
        periods = []
        t = start
        while t + period <= end + 1e-6:
            inside = [kib / 1024.0 for when, kib in self.rss if t <= when < t + period]
            if inside:
                periods.append((max(inside), inside[-1]))
            t += period
        return periods

    def cpu_between(self, start, end):
        return interpolate(self.cpu, end) - interpolate(self.cpu, start)

    def rss_median(self, start, end):
        """Median VmRSS in MiB over [start, end] (None without samples)."""
        inside = sorted(kib / 1024.0 for t, kib in self.rss if start <= t <= end)
        return inside[len(inside) // 2] if inside else None

    def thread_cpu_between(self, name, start, end):
        series = self.threads.get(name, [])
        return interpolate(series, end) - interpolate(series, start)

    def stop(self):
        self._stop.set()
        self._thread.join()


class Sink:
    """A carbon_sink process: its port, and its per-second (time, matched points) lines."""

    def __init__(self, directory, name, program, match):
        self.err_path = os.path.join(directory, name + ".err")
        self._err = open(self.err_path, "w")
        self.process = subprocess.Popen(
            [program, "--match", match, "--every"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True)
        self.port = int(self.process.stdout.readline())
        self.series = []  # (unix time, matched points)
        self.last = None
        self.final = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        for line in self.process.stdout:
            report = json.loads(line)
            self.last = report
            self.series.append((report["time_unix"], report["matched"]))
            if report["final"]:
                self.final = report

    def matched(self):
        return self.last["matched"] if self.last else 0

    def matched_at(self, t):
        return interpolate(self.series, t)

    def wait_quiet(self, target, quiet_s, timeout):
        """Waits until `target` points arrived, or nothing arrived for `quiet_s` s; returns the count."""
        deadline = time.monotonic() + timeout
        last, last_change = self.matched(), time.monotonic()
        while time.monotonic() < deadline:
            now_count = self.matched()
            if now_count >= target:
                return now_count
            if now_count != last:
                last, last_change = now_count, time.monotonic()
            elif time.monotonic() - last_change > quiet_s:
                return now_count
            time.sleep(0.1)
        return self.matched()

    def mark(self, word):
        """"start" / "end": the sink's window latency covers the points received in between."""
        if self.process.poll() is None:
            self.process.stdin.write(word + "\n")
            self.process.stdin.flush()

    def close(self):
        """Ends the sink (stdin closed) and returns its final report."""
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                stop(self.process)
        self._thread.join(timeout=10)
        self._err.close()
        return self.final or self.last or {}
