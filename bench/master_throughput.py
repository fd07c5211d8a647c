#!/usr/bin/python3
"""lmaster against carbon-c-relay, in one run, on this machine (issue 9, "Master").

Usage:
    bench/master_throughput.py [--build DIR] [--agents N] [--metrics M] [--seconds S]
                               [--warmup S] [--window W] [--interval S] [--threads T] [--client C]
                               [--relay-start P] [--relay-factor F] [--relay-seconds S]
                               [--relay-workers W] [--relay-queue Q] [--lmaster-only | --relay-only]
                               [--no-hdf5] [--hdf5-layout L] [--rotate-age S] [--hdf5-option K=V]...
                               [--stall AT:FOR]
                               [--prometheus] [--lmaster PATH] [--master-load PATH]
                               [--carbon-sink PATH] [--remote-write-sink PATH] [--json FILE]

(a) lmaster with [hdf5] (in a temporary directory) and [Graphite] pickle to a counting
    carbon_sink, journal on (the defaults), driven by master_load as N agents (default 1000) with
    M values each (default 200) over ZMTP on plain TCP sockets (--client zmtp, the default: lmaster
    gets the bytes libzmq's DEALER sockets would send, and the generator, which shares the CPUs
    with lmaster, spends about half as much per point; --client libzmq: libzmq's sockets), as fast as acknowledgements allow (--window unacknowledged
    batches per agent; --interval S paces each agent to one batch every S seconds instead), for
    --seconds after --warmup. Measured: lmaster's CPU (utime+stime of its pid over the
    measurement window, % of one core and ns per point), its peak RSS (VmHWM) and the slope of
    its RSS over the second half of the window (VmRSS every 0.2 s, least squares, MiB per hour:
    run `--interval 1 --seconds 1800` for a paced half hour; `--stall AT:FOR` stops lmaster for
    FOR s AT s into the window, and the report gives its RSS before, after and at the end), points/s
    acknowledged (master_load) and arriving at the sink in the same window, whether every
    acknowledged point reached the sink once everything is delivered, latency (receive time at
    the sink - sample time) p50/p99 of the points received in the measurement window, payload bytes per point on the wire (master_load) and HDF5
    bytes per stored point (the .h5 files after lmaster stopped and compressed them / the points
    acknowledged; lmaster's own `lmaster` sensor adds a few rows).
    --prometheus adds lmaster's [prometheus] output (defaults) to bench/remote_write_sink, which
    decodes each request (snappy, protobuf) and counts its samples: in the same run, each
    output's points/s at its sink and the CPU of its own thread ("out:graphite",
    "out:prometheus") per point, and whether every acknowledged point reached both sinks.
(b) carbon-c-relay (Debian) listening on an ephemeral 127.0.0.1 port and forwarding everything
    (a `forward` cluster of one) to a carbon_sink as plaintext, driven by master_load
    --plaintext with the same N and M (one TCP connection per agent). The offered rate is stepped
    up (x --relay-factor from --relay-start points/s, each step --relay-seconds long after a 2 s
    warm-up, on the same relay process); a step is sustained when master_load sent >= 99 % of the
    offered rate and the sink received >= 99 % of what was sent (the sink keeps up: what was
    sent in the step has arrived 3 s after it). The highest sustained step is the relay's rate;
    its CPU and RSS are those of that step.
(c) A table: lmaster vs carbon-c-relay points/s and the ratio, CPU per point, RSS, latency
    p50/p99, bytes per point, and the command that reproduces it.

Every process is stopped by its PID and the temporary directory removed; only 127.0.0.1 and
ephemeral ports are used. Generator, lmaster (or the relay) and the sink share this machine's
cores: the figures are for that setting.
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import free_port, read_text, wait_for
from master_processes import ProcessMonitor, Sink, stop

AGENT_PREFIX = "mload"  # master_load's host names; the sink counts only these paths
PROGRAMS = {}  # lmaster, master_load, carbon_sink: their paths (main() fills it)


def run_load(args, directory, name, timeout):
    """Runs master_load to its end; returns its JSON summary."""
    command = [PROGRAMS["master_load"]] + args
    with open(os.path.join(directory, name + ".err"), "w") as err:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True)
        try:
            out, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(process)
            raise RuntimeError(f"{name} did not finish within {timeout} s")
    if process.returncode != 0:
        raise RuntimeError(f"{name} exited with {process.returncode}: {read_text(err.name)[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def load_arguments(options):
    return ["--agents", str(options.agents), "--metrics", str(options.metrics), "--threads", str(options.threads),
            "--host-prefix", AGENT_PREFIX]


def measure_lmaster(options, directory):
    data = os.path.join(directory, "lmaster")
    os.makedirs(data)
    sink = Sink(directory, "lmaster-sink", PROGRAMS["carbon_sink"], AGENT_PREFIX)
    # --prometheus: the [prometheus] output too, to a counting remote_write receiver.
    prom = Sink(directory, "prometheus-sink", PROGRAMS["remote_write_sink"], AGENT_PREFIX) if options.prometheus else None
    sinks = [sink] + ([prom] if prom else [])
    lmaster = None
    monitor = None
    try:
        config = os.path.join(directory, "lmaster.conf")
        with open(config, "w") as f:
            f.write(f"[lmaster]\nhost = 127.0.0.1\nincoming data port = 0\ndata_dir = {data}/data\n"
                    + ("" if options.no_hdf5 else
                       f"[hdf5]\npath = {data}/hdf5/fructosa.h5\nlayout = {options.hdf5_layout}\n"
                       + (f"rotate_age = {options.rotate_age}\n" if options.rotate_age else "")
                       + "".join(f"{pair.partition('=')[0].strip()} = {pair.partition('=')[2].strip()}\n"
                                 for pair in options.hdf5_option)) +
                    f"[Graphite]\nhost = 127.0.0.1\ncarbon receiver pickle port = {sink.port}\nprotocol = pickle\n"
                    + (f"[prometheus]\nurl = http://127.0.0.1:{prom.port}/api/v1/write\n" if prom else ""))
        err_path = os.path.join(directory, "lmaster.err")
        with open(err_path, "w") as err:
            lmaster = subprocess.Popen([PROGRAMS["lmaster"], "run", "-c", config, "-p",
                                        os.path.join(directory, "lmaster.pid")],
                                       stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)

        def listening():
            if lmaster.poll() is not None:
                raise RuntimeError(f"lmaster exited with {lmaster.returncode}: {read_text(err_path)[-2000:]}")
            match = re.search(r"listening on tcp://127\.0\.0\.1:(\d+)", read_text(err_path))
            return int(match.group(1)) if match else None

        port = wait_for(listening, 60, "lmaster to listen")
        monitor = ProcessMonitor(lmaster.pid)
        sink_monitor = ProcessMonitor(sink.process.pid)
        pace = ["--interval", str(options.interval)] if options.interval else ["--interval", "0"]
        # The latency percentiles of the measurement window (master_load's, give or take the
        # milliseconds it takes to start), apart from the start of N connections in the warm-up.
        marks = [threading.Timer(options.warmup, s.mark, ["start"]) for s in sinks] + \
                [threading.Timer(options.warmup + options.seconds, s.mark, ["end"]) for s in sinks]
        for mark in marks:
            mark.start()
        # --stall AT:FOR: lmaster stopped (SIGSTOP) for FOR s, AT s into the window, as a pause of
        # the machine would: the agents' batches wait, then come at once.
        stalled_at = []
        stall = None
        if options.stall:
            at, length = options.stall

            def pause():
                stalled_at.append(time.time())
                os.kill(lmaster.pid, signal.SIGSTOP)
                try:
                    time.sleep(length)  # the stall itself, not a wait for a condition
                finally:
                    os.kill(lmaster.pid, signal.SIGCONT)

            stall = threading.Timer(options.warmup + at, pause)
            stall.start()
        load = run_load(load_arguments(options) + [
            "--endpoint", f"tcp://127.0.0.1:{port}", "--seconds", str(options.seconds), "--warmup",
            str(options.warmup), "--window", str(options.window), "--drain", "30"] + pace +
            (["--client", "zmtp"] if options.client == "zmtp" else []),  # libzmq: master_load's default
            directory, "master_load", timeout=options.warmup + options.seconds + 300)
        for mark in marks + ([stall] if stall else []):
            mark.join()
        # Everything acknowledged must reach the sink (the Graphite output works behind the acks).
        delivered = sink.wait_quiet(load["points_acked"], quiet_s=15, timeout=600)
        # The [prometheus] output sends lmaster's own sensor too: the sink counts the agents'.
        prom_delivered = prom.wait_quiet(load["points_acked"], quiet_s=15, timeout=600) if prom else 0
        monitor.sample()
        start, end = load["window_start_unix"], load["window_end_unix"]
        cpu_s = monitor.cpu_between(start, end)
        sink_window = sink.matched_at(end) - sink.matched_at(start)
        sink_monitor.stop()
        sink_cpu_s = sink_monitor.cpu_between(start, end)
        outputs = {}
        for name, output_sink in (("graphite", sink), ("prometheus", prom)):
            if output_sink is None:
                continue
            thread_s = monitor.thread_cpu_between("out:" + name, start, end)
            arrived = output_sink.matched_at(end) - output_sink.matched_at(start)
            outputs[name] = {"sink_points_per_s": arrived / options.seconds,
                             "thread_cpu_percent": 100.0 * thread_s / options.seconds,
                             "thread_cpu_ns_per_point": 1e9 * thread_s / arrived if arrived else None}
        stopping = time.monotonic()
        code = stop(lmaster, timeout=600)  # the HDF5 files are compressed on the way out
        stop_s = time.monotonic() - stopping
        monitor.stop()
        final = sink.close()
        if prom:
            prom_final = prom.close()
            outputs["prometheus"].update({
                "points_at_sink": prom_final.get("matched", prom_delivered),
                "difference": prom_final.get("matched", prom_delivered) - load["points_acked"],
                "requests": prom_final.get("requests"), "bad_requests": prom_final.get("bad_requests"),
                "latency_p50_s": prom_final.get("window_latency_s", {}).get("p50"),
                "latency_p99_s": prom_final.get("window_latency_s", {}).get("p99")})
        h5_files = [p for p in glob.glob(os.path.join(data, "hdf5", "*.h5")) if not os.path.islink(p)]
        h5_bytes = sum(os.path.getsize(p) for p in h5_files)
        window_acked = load["window_points_acked"]
        # What the HDF5 output had not written when lmaster stopped (it stays in the journal).
        behind = re.search(r"output hdf5: stopping with (\d+) points undelivered", read_text(err_path))
        return {
            "points_per_s": load["points_per_s_acked"],
            "sink_points_per_s": sink_window / options.seconds,
            "points_acked": load["points_acked"],
            "points_at_sink": final.get("matched", delivered),
            "difference": final.get("matched", delivered) - load["points_acked"],
            "cpu_percent": 100.0 * cpu_s / options.seconds,
            "cpu_ns_per_point": 1e9 * cpu_s / window_acked if window_acked else None,
            "sink_cpu_ns_per_point": 1e9 * sink_cpu_s / sink_window if sink_window else None,
            "peak_rss_mib": monitor.peak_rss_kib / 1024.0,
            "rss_slope_mib_per_hour": monitor.rss_slope(start, end),
            "rss_per_rotation_mib": monitor.rss_periods(start, end, options.rotate_age) if options.rotate_age else None,
            # RSS in the 10 s before the stall, its peak after, and in the window's last 10 s.
            "rss_around_stall_mib": (monitor.rss_median(stalled_at[0] - 10, stalled_at[0]),
                                     max((kib / 1024.0 for t, kib in monitor.rss if t >= stalled_at[0]), default=None),
                                     monitor.rss_median(end - 10, end)) if stalled_at else None,
            "latency_p50_s": final.get("window_latency_s", {}).get("p50"),
            "latency_p99_s": final.get("window_latency_s", {}).get("p99"),
            "latency_max_s": final.get("window_latency_s", {}).get("max"),
            "run_latency_p50_s": final.get("latency_s", {}).get("p50"),
            "run_latency_p99_s": final.get("latency_s", {}).get("p99"),
            "wire_bytes_per_point": load["batch_bytes_per_point"],
            "hello_dictionary_bytes": load["bytes"]["hello_and_dictionary"],
            "hdf5_bytes": h5_bytes,
            "hdf5_behind_at_stop": int(behind.group(1)) if behind else 0,
            "hdf5_bytes_per_point": h5_bytes / load["points_acked"] if load["points_acked"] else None,
            "lmaster_exit": code,
            "lmaster_stop_s": stop_s,
            "resyncs": load.get("resyncs"),
            "generator_cpu_ns_per_point": load.get("cpu_ns_per_point_sent"),
            "outputs": outputs,
            "load": load,
        }
    finally:
        if monitor:
            monitor.stop()
        if lmaster:
            stop(lmaster, timeout=600)
        for each in sinks:
            each.close()


def relay_step(options, directory, rate, number):
    """One offered rate through a fresh carbon-c-relay and sink; returns the step's figures."""
    sink = Sink(directory, f"relay-sink-{number}", PROGRAMS["carbon_sink"], AGENT_PREFIX)
    relay = monitor = None
    try:
        port = free_port()
        config = os.path.join(directory, "relay.conf")
        with open(config, "w") as f:
            f.write(f"listen type linemode 127.0.0.1:{port} proto tcp ;\n"
                    f"cluster sink forward 127.0.0.1:{sink.port} proto tcp ;\n"
                    f"match * send to sink stop ;\n")
        relay_command = ["carbon-c-relay", "-f", config, "-w", str(options.relay_workers), "-q",
                         str(options.relay_queue), "-B", "4096", "-s"]
        log_path = os.path.join(directory, f"relay-{number}.log")
        with open(log_path, "w") as log:
            relay = subprocess.Popen(relay_command, stdout=log, stderr=log, stdin=subprocess.DEVNULL)

        def listening():
            if relay.poll() is not None:
                raise RuntimeError(f"carbon-c-relay exited with {relay.returncode}: {read_text(log_path)[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
            except OSError:
                return False

        wait_for(listening, 30, "carbon-c-relay to listen")
        monitor = ProcessMonitor(relay.pid)
        marks = [threading.Timer(2, sink.mark, ["start"]),
                 threading.Timer(2 + options.relay_seconds, sink.mark, ["end"])]
        for mark in marks:
            mark.start()
        load = run_load(load_arguments(options) + [
            "--plaintext", f"127.0.0.1:{port}", "--rate", str(rate), "--seconds", str(options.relay_seconds),
            "--warmup", "2"], directory, f"relay-load-{number}", timeout=options.relay_seconds + 120)
        for mark in marks:
            mark.join()
        arrived = sink.wait_quiet(load["points_sent"], quiet_s=3, timeout=60)
        monitor.sample()
        start, end = load["window_start_unix"], load["window_end_unix"]
        monitor.stop()
        stop(relay)
        final = sink.close()
        sent_rate = load["points_per_s_sent"]
        step = {
            "offered_points_per_s": rate,
            "sent_points_per_s": sent_rate,
            "sink_points_per_s": (sink.matched_at(end) - sink.matched_at(start)) / options.relay_seconds,
            "points_sent": load["points_sent"],
            "points_at_sink": final.get("matched", arrived),
            "cpu_percent": 100.0 * monitor.cpu_between(start, end) / options.relay_seconds,
            "peak_rss_mib": monitor.peak_rss_kib / 1024.0,
            "rss_slope_mib_per_hour": monitor.rss_slope(start, end),
            "latency_p50_s": final.get("window_latency_s", {}).get("p50"),
            "latency_p99_s": final.get("window_latency_s", {}).get("p99"),
            "wire_bytes_per_point": load["batch_bytes_per_point"],
            "generator_cpu_ns_per_point": load.get("cpu_ns_per_point_sent"),
            "relay_command": " ".join(relay_command),
        }
        # The rate counts only when everything sent arrived: then it is the rate sent.
        step["sustained"] = sent_rate >= 0.99 * rate and step["points_at_sink"] >= 0.99 * load["points_sent"]
        step["points_per_s"] = sent_rate
        step["cpu_ns_per_point"] = 1e7 * step["cpu_percent"] / sent_rate if sent_rate else None
        return step
    finally:
        if monitor:
            monitor.stop()
        if relay:
            stop(relay)
        sink.close()


def measure_relay(options, directory):
    steps = []
    best = None
    rate = options.relay_start
    while len(steps) < options.relay_max_steps:
        step = relay_step(options, directory, rate, len(steps))
        steps.append(step)
        print(f"  relay step: offered {rate:,.0f}/s, sent {step['sent_points_per_s']:,.0f}/s, arrived "
              f"{step['points_at_sink']:,} of {step['points_sent']:,}, relay CPU {step['cpu_percent']:.0f} %, "
              f"p99 {step['latency_p99_s']:.3f} s: {'sustained' if step['sustained'] else 'NOT sustained'}",
              file=sys.stderr)
        if not step["sustained"]:
            break
        best = step
        rate = int(rate * options.relay_factor)
    result = dict(best or {"points_per_s": 0})
    result["steps"] = steps
    return result


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def print_table(options, lmaster, relay):
    rows = [("points/s (sustained)", "points_per_s", "points_per_s", ",.0f"),
            ("CPU, % of one core", "cpu_percent", "cpu_percent", ".0f"),
            ("CPU ns per point", "cpu_ns_per_point", "cpu_ns_per_point", ",.0f"),
            ("peak RSS, MiB", "peak_rss_mib", "peak_rss_mib", ".1f"),
            ("RSS slope, MiB/h (2nd half)", "rss_slope_mib_per_hour", "rss_slope_mib_per_hour", "+.1f"),
            ("latency p50, s", "latency_p50_s", "latency_p50_s", ".3f"),
            ("latency p99, s", "latency_p99_s", "latency_p99_s", ".3f"),
            ("wire bytes per point", "wire_bytes_per_point", "wire_bytes_per_point", ".2f"),
            ("master_load ns per point", "generator_cpu_ns_per_point", "generator_cpu_ns_per_point", ",.0f")]
    print(f"\n{'':28} {'lmaster':>14} {'carbon-c-relay':>16}")
    for title, lkey, rkey, spec in rows:
        left = fmt(lmaster.get(lkey), spec) if lmaster else "-"
        right = fmt(relay.get(rkey), spec) if relay else "-"
        print(f"{title:28} {left:>14} {right:>16}")
    if lmaster:
        if not options.no_hdf5:
            print(f"{'HDF5 bytes per point':26} {fmt(lmaster['hdf5_bytes_per_point'], '.2f'):>14} "
                  f"(layout = {options.hdf5_layout})")
            print(f"{'HDF5 behind at stop':26} {lmaster['hdf5_behind_at_stop']:>14,} points (kept in the journal)")
        if lmaster.get("rss_per_rotation_mib"):
            print(f"RSS per {options.rotate_age:g} s HDF5 file (peak/last, MiB): " +
                  ", ".join(f"{peak:.0f}/{last:.0f}" for peak, last in lmaster["rss_per_rotation_mib"]))
        if lmaster.get("rss_around_stall_mib"):
            before, peak, last = lmaster["rss_around_stall_mib"]
            print(f"RSS around the stall (MiB): {fmt(before, '.1f')} before, {fmt(peak, '.1f')} at the peak after, "
                  f"{fmt(last, '.1f')} in the window's last 10 s")
        print(f"{'lmaster stop, s':26} {fmt(lmaster['lmaster_stop_s'], '.1f'):>14}")
        print(f"{'latency p50/p99, whole run':26} {fmt(lmaster['run_latency_p50_s'], '.3f'):>7}/"
              f"{fmt(lmaster['run_latency_p99_s'], '.3f')} s (warm-up included)")
        print(f"{'sink points/s (lmaster)':26} {fmt(lmaster['sink_points_per_s'], ',.0f'):>14}")
        # Flat out the three processes share the machine's CPUs: its points/s is about the CPUs
        # over what the three spend per point, whatever part lmaster's is.
        parts = [lmaster.get("cpu_ns_per_point"), lmaster.get("generator_cpu_ns_per_point"),
                 lmaster.get("sink_cpu_ns_per_point")]
        if all(parts):
            total = sum(parts)
            print(f"CPU ns per point: lmaster {parts[0]:,.0f} + master_load {parts[1]:,.0f} + carbon_sink "
                  f"{parts[2]:,.0f} = {total:,.0f}; {os.cpu_count()} CPUs / that = "
                  f"{os.cpu_count() * 1e9 / total:,.0f} points/s")
        print(f"acknowledged {lmaster['points_acked']:,} points, the sink got {lmaster['points_at_sink']:,} "
              f"(difference {lmaster['difference']:+,})")
        for name, figures in lmaster.get("outputs", {}).items():
            print(f"output {name}: sink {fmt(figures['sink_points_per_s'], ',.0f')} points/s in the window, "
                  f"its thread {fmt(figures['thread_cpu_percent'], '.0f')} % of a core = "
                  f"{fmt(figures['thread_cpu_ns_per_point'], ',.0f')} ns per point")
            if "points_at_sink" in figures:
                print(f"  {name}: the sink got {figures['points_at_sink']:,} of the agents' points (difference "
                      f"{figures['difference']:+,}), {figures['requests']:,} requests, {figures['bad_requests']} bad, "
                      f"latency p50 {fmt(figures['latency_p50_s'], '.3f')} s, p99 {fmt(figures['latency_p99_s'], '.3f')} s")
    if relay:
        print(f"carbon-c-relay: the highest of {len(relay['steps'])} offered rates (x{options.relay_factor} from "
              f"{options.relay_start:,}/s) at which everything sent arrived"
              + ("" if relay["steps"][-1]["sustained"] else
                 f"; {relay['steps'][-1]['offered_points_per_s']:,}/s was not sustained")
              + f"\n  {relay.get('relay_command', '')}")
    if lmaster and relay and relay.get("points_per_s"):
        print(f"lmaster / carbon-c-relay points/s: {lmaster['points_per_s'] / relay['points_per_s']:.2f}")
    print(f"\nmachine: {os.cpu_count()} CPUs (generator, server and sink share them)")
    if lmaster:
        print(f"generator's agents: {options.client} (" + ("ZMTP on plain TCP sockets" if options.client == "zmtp"
                                                            else "libzmq DEALER sockets") + ")")
    print("command: " + " ".join(shlex.quote(a) for a in sys.argv))


def parse_stall(text):
    at, colon, length = text.partition(":")
    try:
        values = (float(at), float(length))
    except ValueError:
        values = None
    if not colon or values is None or values[0] < 0 or values[1] <= 0:
        raise argparse.ArgumentTypeError(f"--stall wants AT:FOR in seconds (e.g. 60:25), not {text!r}")
    return values


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build", help="build directory (default build/)")
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--metrics", type=int, default=200, help="values per agent per batch")
    parser.add_argument("--seconds", type=float, default=30, help="measurement window")
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--window", type=int, default=8, help="unacknowledged batches per agent")
    parser.add_argument("--interval", type=float, default=0,
                        help="lmaster run: one batch per agent every S s (default 0: as fast as acks allow)")
    parser.add_argument("--threads", type=int, default=1, help="master_load threads")
    parser.add_argument("--client", choices=("zmtp", "libzmq"), default="zmtp",
                        help="how master_load's agents reach lmaster (default zmtp: ZMTP on plain TCP sockets, "
                             "the generator's cheaper way to send the same bytes; libzmq: DEALER sockets)")
    parser.add_argument("--relay-start", type=int, default=50000, help="first offered rate, points/s")
    parser.add_argument("--relay-factor", type=float, default=1.5)
    parser.add_argument("--relay-seconds", type=float, default=10)
    parser.add_argument("--relay-max-steps", type=int, default=12)
    parser.add_argument("--relay-workers", type=int, default=2, help="carbon-c-relay -w")
    parser.add_argument("--relay-queue", type=int, default=1000000,
                        help="carbon-c-relay -q (its default, 25000, drops data above ~30 k points/s)")
    parser.add_argument("--no-hdf5", action="store_true", help="lmaster run without the HDF5 output")
    parser.add_argument("--prometheus", action="store_true",
                        help="lmaster run with the [prometheus] output too, to BUILD/bench/remote_write_sink")
    parser.add_argument("--hdf5-layout", choices=["per_host", "per_sensor"], default="per_sensor",
                        help="[hdf5] layout (default per_sensor, the layout for many hosts)")
    parser.add_argument("--rotate-age", type=float, default=0,
                        help="[hdf5] rotate_age (default: lmaster's, 3600 s); the report then gives the RSS "
                             "peak of each such period of the window")
    parser.add_argument("--hdf5-option", action="append", default=[], metavar="KEY=VALUE",
                        help="another [hdf5] key (repeatable), e.g. queue_max_points=1000000")
    parser.add_argument("--stall", metavar="AT:FOR", type=parse_stall,
                        help="lmaster run: stop lmaster (SIGSTOP) AT s into the window for FOR s, then let it "
                             "go on: the burst after a pause; the report gives the RSS before, at the peak "
                             "after and at the end of the window")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--lmaster-only", action="store_true")
    group.add_argument("--relay-only", action="store_true")
    parser.add_argument("--json", help="also write every figure to this file")
    programs = (("lmaster", "lmaster/lmaster"), ("master_load", "bench/master_load"),
                ("carbon_sink", "bench/carbon_sink"), ("remote_write_sink", "bench/remote_write_sink"))
    for name, where in programs:
        parser.add_argument("--" + name.replace("_", "-"), metavar="PATH", help=f"default: BUILD/{where}")
    options = parser.parse_args()
    options.build = os.path.abspath(options.build)
    for name, where in programs:
        path = os.path.abspath(getattr(options, name) or os.path.join(options.build, where))
        PROGRAMS[name] = path
        needed = {"lmaster": not options.relay_only, "remote_write_sink": options.prometheus}.get(name, True)
        if needed and not os.access(path, os.X_OK):
            parser.error(f"{path} is missing: build it first")
    if not options.lmaster_only and not shutil.which("carbon-c-relay"):
        parser.error("carbon-c-relay is not installed (Debian package carbon-c-relay)")

    directory = tempfile.mkdtemp(prefix="master-throughput-")
    results = {"command": " ".join(shlex.quote(a) for a in sys.argv)}
    try:
        lmaster = relay = None
        if not options.relay_only:
            print(f"lmaster: {options.agents} agents x {options.metrics} values, {options.seconds} s "
                  f"after {options.warmup} s", file=sys.stderr)
            lmaster = results["lmaster"] = measure_lmaster(options, directory)
        if not options.lmaster_only:
            print(f"carbon-c-relay: {options.agents} agents x {options.metrics} values, steps of "
                  f"{options.relay_seconds} s", file=sys.stderr)
            relay = results["relay"] = measure_relay(options, directory)
        print_table(options, lmaster, relay)
        if options.json:
            with open(options.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
