"""Smoke test of the master benchmark (bench/master_throughput.py, master_load, carbon_sink,
remote_write_sink).

Never on speed: it checks that the benchmark runs end to end and prints its figures, that every
point lmaster acknowledged reached the counting sink (through the Graphite output) exactly once,
also through the Prometheus output to remote_write_sink (--prometheus), and that carbon_sink
counts pickle frames written by Python's own pickle (memo references included) and plaintext
lines exactly.
"""
import json
import os
import pickle
import socket
import struct
import subprocess
import time
import unittest

from fructosa_test import FructosaTestCase, LMASTER

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "master_throughput.py")
MASTER_LOAD = os.environ.get("MASTER_LOAD", "master_load")
CARBON_SINK = os.environ.get("CARBON_SINK", "carbon_sink")
REMOTE_WRITE_SINK = os.environ.get("REMOTE_WRITE_SINK", "remote_write_sink")


class CarbonSinkTest(FructosaTestCase):
    def start_sink(self):
        sink = subprocess.Popen([CARBON_SINK, "--match", "node"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: sink.poll() is None and (sink.kill(), sink.wait(timeout=30)))
        port = int(sink.stdout.readline())
        return sink, port

    def test_counts_python_pickle_frames_and_plaintext_lines(self):
        sink, port = self.start_sink()
        now = time.time()
        path = "node01.CPUPercent.0"  # the same str object twice: pickle writes a memo reference
        points = [(path, (now, 1.5)), (path, (now, 2.0)), ("node01.BootTime", (int(now), 7)),
                  ("other.VirtualMemory.used", (now, 3e9))]
        frame = pickle.dumps(points, protocol=2)
        self.assertIn(b"h", frame)  # BINGET: the memo is exercised
        with socket.create_connection(("127.0.0.1", port)) as pickled, \
                socket.create_connection(("127.0.0.1", port)) as plain:
            for _ in range(3):
                pickled.sendall(struct.pack(">I", len(frame)) + frame)
            pickled.sendall(struct.pack(">I", len(frame)))  # a frame in two pieces
            pickled.sendall(frame)
            plain.sendall(f"node02.SwapMemory.free 123 {now:.3f}\nnode02.Users.count 1 {int(now)}\n".encode())
            plain.sendall(b"other.x 1 2\nnode03.partial 5 ")  # a line in two pieces
            plain.sendall(f"{now}\n".encode())
        out, err = sink.communicate("", timeout=30)
        report = json.loads(out.splitlines()[-1])
        self.assertEqual(report["frames"], 4, err)
        self.assertEqual(report["lines"], 4, err)
        self.assertEqual(report["points"], 4 * 4 + 4)
        self.assertEqual(report["matched"], 4 * 3 + 3)  # paths starting with "node"
        self.assertEqual(report["bad_frames"] + report["bad_lines"], 0, err)
        self.assertEqual(report["latency_s"]["count"], report["matched"])
        self.assertLess(report["latency_s"]["p50"], 3600)

    def test_a_bad_pickle_frame_is_counted_and_reported(self):
        sink, port = self.start_sink()
        with socket.create_connection(("127.0.0.1", port)) as connection:
            body = b"\x80\x02]q\x00(\xffe."  # 0xff is no opcode
            connection.sendall(struct.pack(">I", len(body)) + body)
        out, err = sink.communicate("", timeout=30)
        report = json.loads(out.splitlines()[-1])
        self.assertEqual(report["bad_frames"], 1)
        self.assertEqual(report["points"], 0)
        self.assertIn("unknown opcode 0xff", err)


class MasterThroughputTest(FructosaTestCase):
    def test_lmaster_delivers_every_acknowledged_point_and_the_figures_are_printed(self):
        result_path = self.path("result.json")
        run = subprocess.run(
            ["/usr/bin/python3", SCRIPT, "--lmaster", LMASTER, "--master-load", MASTER_LOAD, "--carbon-sink",
             CARBON_SINK, "--agents", "10", "--seconds", "3", "--warmup", "1", "--relay-start", "20000",
             "--relay-seconds", "3", "--relay-max-steps", "1", "--json", result_path],
            capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        for figure in ("points/s (sustained)", "CPU ns per point", "peak RSS, MiB", "latency p99, s",
                       "wire bytes per point", "HDF5 bytes per point", "command: "):
            self.assertIn(figure, run.stdout)
        with open(result_path) as f:
            result = json.load(f)
        lmaster = result["lmaster"]
        self.assertGreater(lmaster["points_acked"], 0)
        # Exactly the acknowledged points reached the sink through the Graphite output.
        self.assertEqual(lmaster["points_at_sink"], lmaster["points_acked"])
        self.assertEqual(lmaster["difference"], 0)
        self.assertEqual(lmaster["load"]["points_acked"], lmaster["load"]["points_sent"])
        self.assertEqual(lmaster["load"]["unacked_at_end"], 0)
        # The agents spoke ZMTP themselves (master_throughput's default; zmtp_dealer_test checks
        # it against libzmq, and test_hdf5_many_hosts runs master_load's libzmq sockets).
        self.assertEqual(lmaster["load"]["client"], "zmtp")
        self.assertEqual(lmaster["load"]["bad_messages"], 0)
        self.assertEqual(lmaster["lmaster_exit"], 0)
        self.assertGreater(lmaster["hdf5_bytes"], 0)
        relay = result["relay"]["steps"][0]
        self.assertEqual(relay["offered_points_per_s"], 20000)
        self.assertGreater(relay["points_sent"], 0)
        self.assertGreater(relay["points_at_sink"], 0)

    def test_the_prometheus_output_delivers_every_point_next_to_graphite(self):
        # Paced (one batch per agent every 0.2 s): flat out, an agent's batches can share a
        # millisecond, and a series cannot hold two points of one millisecond in Prometheus.
        # lmaster is stopped for 0.5 s 1 s into the window (--stall): nothing may be lost either.
        result_path = self.path("result.json")
        run = subprocess.run(
            ["/usr/bin/python3", SCRIPT, "--lmaster", LMASTER, "--master-load", MASTER_LOAD, "--carbon-sink",
             CARBON_SINK, "--remote-write-sink", REMOTE_WRITE_SINK, "--lmaster-only", "--prometheus", "--no-hdf5",
             "--agents", "10", "--seconds", "3", "--warmup", "1", "--interval", "0.2", "--stall", "1:0.5",
             "--json", result_path],
            capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        for figure in ("output graphite: sink", "output prometheus: sink", "ns per point", "command: ",
                       "RSS around the stall"):
            self.assertIn(figure, run.stdout)
        with open(result_path) as f:
            lmaster = json.load(f)["lmaster"]
        self.assertGreater(lmaster["points_acked"], 0)
        self.assertEqual(lmaster["difference"], 0)
        prometheus = lmaster["outputs"]["prometheus"]
        self.assertEqual(prometheus["points_at_sink"], lmaster["points_acked"], run.stdout)
        self.assertEqual(prometheus["bad_requests"], 0)
        self.assertGreater(prometheus["requests"], 0)
        self.assertIsNotNone(lmaster["outputs"]["graphite"]["thread_cpu_ns_per_point"])
        self.assertEqual(len(lmaster["rss_around_stall_mib"]), 3)
        self.assertTrue(all(figure > 0 for figure in lmaster["rss_around_stall_mib"]), lmaster["rss_around_stall_mib"])


if __name__ == "__main__":
    unittest.main()
