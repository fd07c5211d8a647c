"""lagent -> Cap'n Proto over ZeroMQ -> lmaster -> stdout + HDF5, as real processes."""
import math
import os
import re
import shutil
import unittest

import h5py

import read_hdf5
import psutil

import time

from fructosa_test import FIXTURES, FructosaTestCase, read_text, wait_for, LAGENT, LMASTER, MASTER_HOST, WIRE_CLIENT, stdout_counts

INTERVAL_NS = 200_000_000
SENSORS = ["CPUPercent", "VirtualMemory", "CPUTimes"]


class PipelineTest(FructosaTestCase):
    def test_samples_reach_hdf5_on_aligned_timestamps_with_plausible_values(self):
        master, port = self.start_master()
        config = self.agent_config(port, SENSORS) + "[sensor:lagent]\ntime_interval = 0.5\n"
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config), "-p", self.path("lagent.pid")])
        # Wait until lmaster has printed 15 samples of every sensor (3 s at 0.2 s).
        wait_for(lambda: all(stdout_counts(read_text(self.path("lmaster.out"))).get(s, 0) >= 15 for s in SENSORS + ["lagent"])
                 or agent.poll() is not None,
                 timeout=60, what="15 samples of each sensor")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))
        printed = stdout_counts(read_text(self.path("lmaster.out")))

        with h5py.File(self.path("data.h5"), "r") as f:
            self.assertEqual([h for h in read_hdf5.hosts(f) if h != MASTER_HOST], ["testnode"])
            node = read_hdf5.host_tables(f, "testnode")
            # Its sensors, and lmaster's rows about it (lmaster_agents: up, last_seen, rate, backlog)
            # when one of lmaster's stats instants fell within the run.
            self.assertEqual(sorted(k for k in node.keys() if k != read_hdf5.AGENTS_TABLE), sorted(SENSORS + ["lagent"]))
            if read_hdf5.AGENTS_TABLE in node:
                self.assertEqual(node[read_hdf5.AGENTS_TABLE]["up"][-1], 1)
            for sensor in SENSORS:
                table = node[sensor]
                self.assertEqual(table.attrs["host"], "testnode")
                self.assertEqual(table.attrs["sensor"], sensor)
                times = table["time"][:]
                # Every sample the master printed was also stored, once.
                self.assertEqual(len(times), printed[sensor], sensor)
                self.assertGreaterEqual(len(times), 15)
                # Timestamps sit on multiples of the interval and never repeat or go back.
                self.assertTrue(all(t % INTERVAL_NS == 0 for t in times), sensor)
                steps = [b - a for a, b in zip(times, times[1:])]
                self.assertTrue(all(step > 0 and step % INTERVAL_NS == 0 for step in steps), steps)
                # On a loaded 2-core machine a tick may be skipped now and then, but not often.
                self.assertGreaterEqual(steps.count(INTERVAL_NS), 0.8 * len(steps), steps)
                self.assertTrue(all(j == 0 for j in table["job"][:]))

            vm = node["VirtualMemory"]
            total = vm["total"][:]
            self.assertTrue(all(t == psutil.virtual_memory().total for t in total))
            self.assertEqual(vm["total"].attrs["unit"], "bytes")
            self.assertEqual(vm["percent"].attrs["unit"], "percent")
            for available, percent, t in zip(vm["available"][:], vm["percent"][:], total):
                self.assertLessEqual(available, t)
                self.assertTrue(0 <= percent <= 100)
                self.assertAlmostEqual(percent, round((t - available) / t * 100, 1), places=6)

            # lagent's own health: every sensor read, and worked, quickly.
            health = node["lagent"]
            for sensor in SENSORS:
                self.assertEqual(health[f"{sensor}.success"][-1], 1.0)
                self.assertGreater(health[f"{sensor}.reads"][-1], 10)
                self.assertTrue(0 < health[f"{sensor}.duration"][-1] < 0.2, health[f"{sensor}.duration"][-1])
                self.assertEqual(health[f"{sensor}.duration"].attrs["unit"], "seconds")
            self.assertGreater(health["batches_acked"][-1], 0)
            self.assertGreater(health["rss"][-1], 1 << 20)

            cpu = node["CPUPercent"]
            cpus = len(psutil.cpu_percent(percpu=True))
            self.assertEqual(sorted(k for k in cpu.keys() if k not in ("time", "job")),
                             sorted(str(i) for i in range(cpus)))
            for i in range(cpus):
                values = cpu[str(i)][:]
                self.assertTrue(all(0 <= v <= 100 for v in values), values)

            times = node["CPUTimes"]
            self.assertEqual(times["user"].attrs["kind"], "counter")
            self.assertEqual(times["user"].attrs["unit"], "seconds")
            for key in ("user", "system", "idle"):
                values = times[key][:]
                self.assertTrue(all(not math.isnan(v) for v in values))
                self.assertTrue(all(a <= b for a, b in zip(values, values[1:])), key)
            # The last idle reading is close to what psutil reads now (both from /proc/stat).
            self.assertLess(abs(times["idle"][-1] - psutil.cpu_times().idle), 60 * os.cpu_count())

    def test_a_sensor_whose_read_blocks_does_not_hold_back_the_others(self):
        # VirtualMemory's meminfo is a FIFO nobody writes to: its read blocks in open(2), as a
        # statvfs of a dead NFS server would. The sensors due at the same instants go on.
        proc = self.path("proc")
        os.makedirs(proc)
        shutil.copy(os.path.join(FIXTURES, "cpu-percent", "1", "stat"), os.path.join(proc, "stat"))
        meminfo = os.path.join(proc, "meminfo")
        os.mkfifo(meminfo)
        others = ["CPUTimes", "CPUStats", "BootTime"]
        master, port = self.start_master()
        config = self.agent_config(port, ["VirtualMemory"] + others, extra=f"proc_root = {proc}\n")
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config), "-p", self.path("lagent.pid")])
        counts = lambda: stdout_counts(read_text(self.path("lmaster.out")))
        wait_for(lambda: all(counts().get(s, 0) >= 10 for s in others) or agent.poll() is not None,
                 timeout=60, what="10 samples of each sensor but the blocked one")
        self.assertIsNone(agent.poll(), read_text(self.path("lagent.err")))
        self.assertEqual(counts().get("VirtualMemory", 0), 0)

        # Unblock it: the blocked read opens the FIFO (and fails: no pread on a FIFO); the next
        # ones read the regular file put in its place.
        self.write("meminfo.new", read_text("/proc/meminfo"))
        writer = os.open(meminfo, os.O_WRONLY | os.O_NONBLOCK)  # the blocked open(2) holds the read end
        os.replace(self.path("meminfo.new"), meminfo)
        os.close(writer)
        wait_for(lambda: counts().get("VirtualMemory", 0) >= 1 or agent.poll() is not None,
                 timeout=60, what="VirtualMemory once its file is readable")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

    def test_agent_started_before_master_delivers_once_master_is_up(self):
        # The agent keeps its batches until acknowledged, so starting it first loses nothing
        # that it holds: lmaster stores the first readings too. Port chosen by a first master.
        master, port = self.start_master()
        self.assertEqual(self.stop(master), 0)
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", self.agent_config(port, ["VirtualMemory"])),
                                      "-p", self.path("lagent.pid")])
        wait_for(lambda: "started as testnode" in read_text(self.path("lagent.err")), what="lagent to start")
        started_ns = time.time_ns()
        # Let a few readings pile up in the agent while nobody listens.
        wait_for(lambda: time.time_ns() > started_ns + 3 * INTERVAL_NS, what="readings to pile up")
        master_up_ns = time.time_ns()
        config = self.write("lmaster2.conf", self.master_config("[stdout]\n", port=port))
        master = self.spawn("lmaster2", [LMASTER, "run", "-c", config, "-p", self.path("lmaster2.pid")])
        wait_for(lambda: stdout_counts(read_text(self.path("lmaster2.out"))).get("VirtualMemory", 0) >= 10,
                 timeout=60, what="samples after lmaster came up")
        self.assertEqual(self.stop(agent), 0)
        self.assertEqual(self.stop(master), 0)
        with h5py.File(self.path("data.h5"), "r") as f:
            times = read_hdf5.host_tables(f, "testnode")["VirtualMemory"]["time"][:]
        self.assertLess(times[0], master_up_ns, "readings taken before lmaster was up were delivered")
        steps = [b - a for a, b in zip(times, times[1:])]
        self.assertTrue(all(step > 0 and step % INTERVAL_NS == 0 for step in steps), steps)
        self.assertGreaterEqual(steps.count(INTERVAL_NS), 0.8 * len(steps), steps)

    def test_bad_messages_are_logged_with_the_peer_and_the_master_keeps_serving(self):
        master, port = self.start_master()
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", self.agent_config(port, ["VirtualMemory"])),
                                      "-p", self.path("lagent.pid")])
        endpoint = f"tcp://127.0.0.1:{port}"
        count = lambda: stdout_counts(read_text(self.path("lmaster.out"))).get("VirtualMemory", 0)
        wait_for(lambda: count() >= 2, what="the agent's first samples")

        for scenario in ("garbage", "truncated", "wrong-version", "multipart"):
            result = self.run_tool([WIRE_CLIENT, endpoint, scenario])
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(result.stdout, "", f"{scenario}: a bad message gets no answer")
        log = read_text(self.path("lmaster.err"))
        self.assertGreaterEqual(log.count("dropped a message from 127.0.0.1"), 4, log)
        # wire_client's "wrong-version" is one past the newest version lmaster speaks.
        self.assertRegex(log, r"protocol version (\d+) \(this side speaks 1 to \d+\)")
        # A batch from an agent the master never heard from: asked to resync, not stored.
        result = self.run_tool([WIRE_CLIENT, endpoint, "batch-without-hello"])
        self.assertTrue(result.stdout.startswith("resync unknown agent"), result.stdout)
        # A well-formed newcomer is served as usual, and the real agent never stopped.
        result = self.run_tool([WIRE_CLIENT, endpoint, "valid"])
        self.assertEqual(result.stdout.strip(), "ack 1")
        before = count()
        wait_for(lambda: count() >= before + 2, what="the agent's samples after the bad messages")
        self.assertEqual(self.stop(agent), 0)
        self.assertEqual(self.stop(master), 0)
        self.assertIn("wirenode WireTest job=0 value=42B", read_text(self.path("lmaster.out")))
        with h5py.File(self.path("data.h5"), "r") as f:
            self.assertEqual(sorted(h for h in read_hdf5.hosts(f) if h != MASTER_HOST), ["testnode", "wirenode"])
            self.assertEqual(list(read_hdf5.host_tables(f, "wirenode")["WireTest"]["value"][:]), [42.0])

    def test_batches_that_arrive_together_are_acknowledged_together(self):
        # Acks are cumulative: an agent's batches taken in one round (a backlog, batch_interval's
        # held rounds) get one ack, the last, so that the agent wakes once for them.
        master, port = self.start_master()
        result = self.run_tool([WIRE_CLIENT, f"tcp://127.0.0.1:{port}", "burst"])
        self.assertEqual(result.returncode, 0, result.stderr)
        acks = [int(n) for n in re.findall(r"^ack (\d+)$", result.stdout, re.M)]
        self.assertEqual(acks[-1:], [50], result.stdout)
        self.assertEqual(acks, sorted(set(acks)), "acks go forward")
        self.assertLess(len(acks), 50, "one ack per batch: 50 batches sent back to back were never taken together")
        self.assertEqual(self.stop(master), 0)
        self.assertEqual(read_text(self.path("lmaster.out")).count("wirenode WireTest job=0 value=42B"), 50)


if __name__ == "__main__":
    unittest.main()
