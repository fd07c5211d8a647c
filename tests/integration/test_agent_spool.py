"""lagent's on-disk spool: batches wait on disk while lmaster is away, survive kill -9 of lagent,
arrive exactly once; over spool_max_bytes the oldest are dropped and lagent's drop counter
equals what is missing."""
import datetime
import os
import re
import signal
import time
import unittest

import read_hdf5
from fructosa_test import spooled_batches, free_port, FructosaTestCase, read_text, wait_for, LAGENT, LMASTER

INTERVAL_NS = 200_000_000
SECOND_NS = 1_000_000_000




def lagent_lines(text):
    """(time in ns, {key: value}) of every `testnode lagent` sample lmaster printed."""
    found = []
    for line in text.splitlines():
        match = re.match(r"(\S+)Z testnode lagent job=0 (.*)$", line)
        if not match:
            continue
        stamp = datetime.datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S.%f")
        ns = int(stamp.replace(tzinfo=datetime.timezone.utc).timestamp()) * SECOND_NS + stamp.microsecond * 1000
        values = dict(pair.split("=", 1) for pair in match.group(2).split() if "=" in pair)
        found.append((ns, values))
    return found


class AgentSpoolTest(FructosaTestCase):
    def start_agent(self, config, name="lagent"):
        return self.spawn(name, [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])

    def start_master_on(self, port):
        config = self.write("lmaster.conf", self.master_config("[stdout]\n", port=port))
        master = self.spawn("lmaster", [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        wait_for(lambda: self.listening_port(self.path("lmaster.err")) or self.exited(master), what="lmaster to listen")
        return master

    def caught_up(self, agent, since_ns):
        """True once lmaster printed a lagent sample taken after `since_ns` with (almost) nothing left in the spool."""
        if agent.poll() is not None:
            raise AssertionError("lagent exited:\n" + read_text(self.path("lagent.err")))
        return any(t >= since_ns and float(v.get("unacked", "99")) <= 2
                   for t, v in lagent_lines(read_text(self.path("lmaster.out"))))

    def test_batches_wait_on_disk_survive_kill_9_and_arrive_exactly_once(self):
        port = free_port()
        spool = self.path("lagent-spool")
        config = self.write("lagent.conf", self.agent_config(port, ["VirtualMemory"]) +
                            "[sensor:lagent]\ntime_interval = 0.5\n")
        first = self.start_agent(config, "lagent1")
        # lmaster is not running: batches pile up on disk (3 s of them).
        wait_for(lambda: spooled_batches(spool) >= 15, what="15 batches in the spool")
        # kill -9 between two readings (0.2 s apart, none at x.5 s), so that every reading taken
        # has had its batch written: what the spool holds is all the first lagent read.
        wait_for(lambda: (time.time() % 1.0) % 0.2 >= 0.08 and (time.time() % 1.0) % 0.2 < 0.16
                 and not 0.4 <= time.time() % 1.0 < 0.6, what="a moment between two readings")
        kill_ns = time.time_ns()
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        at_kill = spooled_batches(spool)

        restart_ns = time.time_ns()
        second = self.start_agent(config, "lagent2")
        wait_for(lambda: spooled_batches(spool) >= at_kill + 10 or second.poll() is not None,
                 what="the restarted lagent to spool more")
        self.assertIn("kept for lmaster", read_text(self.path("lagent2.err")))

        master_ns = time.time_ns()
        master = self.start_master_on(port)
        wait_for(lambda: self.caught_up(second, master_ns + SECOND_NS), timeout=60, what="lagent to catch up")
        self.assertEqual(self.stop(second), 0, read_text(self.path("lagent2.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        node = read_hdf5.read_file(self.path("data.h5"))["testnode"]
        vm = node["VirtualMemory"]["time"]
        health = node["lagent"]
        self.assertEqual(len(vm), len(set(vm)), "a VirtualMemory sample arrived twice")
        self.assertEqual(len(health["time"]), len(set(health["time"])), "a lagent sample arrived twice")
        self.assertTrue(all(t % INTERVAL_NS == 0 for t in vm))

        # Each lagent run: at a lagent sample taken at x.5 s (between two 0.2 s readings), its
        # VirtualMemory.reads equals the VirtualMemory samples stored before it in that run.
        reads = health["columns"]["VirtualMemory.reads"]["values"]
        for name, start, end in (("before kill -9", 0, restart_ns), ("after restart", restart_ns, 2**63)):
            checks = [(t, r) for t, r in zip(health["time"], reads)
                      if start <= t < end and t % SECOND_NS == SECOND_NS // 2 and r]
            self.assertTrue(checks, f"{name}: no lagent sample at x.5 s")
            t, expected = checks[-1]
            stored = sum(1 for v in vm if start <= v < t)
            self.assertEqual(stored, expected, f"{name}: stored vs read VirtualMemory samples up to {t}")
        # The first run's last reading (before kill -9) arrived.
        last_before = max(v for v in vm if v < restart_ns)
        self.assertLessEqual(last_before, kill_ns)
        self.assertGreaterEqual(last_before, kill_ns - 3 * INTERVAL_NS)
        self.assertNotIn("error", read_text(self.path("lagent2.err")).lower())

    def test_acknowledged_batches_resent_after_a_restart_are_stored_once(self):
        master, port = self.start_master()
        spool = self.path("lagent-spool")
        config = self.write("lagent.conf", self.agent_config(port, ["VirtualMemory"]) +
                            "[sensor:lagent]\ntime_interval = 0.5\n")
        first = self.start_agent(config, "lagent1")
        wait_for(lambda: read_text(self.path("lmaster.out")).count("testnode VirtualMemory") >= 10
                 or first.poll() is not None, what="10 samples through lmaster")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        # Without its `acked` file the spool sends every batch it still has, most of them already
        # acknowledged: the session is the same, so lmaster drops them by (host, session, sequence).
        os.remove(os.path.join(spool, "acked"))
        resent = spooled_batches(spool)
        self.assertGreater(resent, 5)
        second = self.start_agent(config, "lagent2")
        since = time.time_ns()
        wait_for(lambda: self.caught_up(second, since + SECOND_NS), timeout=60, what="lagent to catch up")
        self.assertEqual(self.stop(second), 0, read_text(self.path("lagent2.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))
        self.assertIn(f"{resent} batch(es)", read_text(self.path("lagent2.err")))
        vm = read_hdf5.read_file(self.path("data.h5"))["testnode"]["VirtualMemory"]["time"]
        self.assertEqual(len(vm), len(set(vm)), "a resent sample was stored twice")

    def test_over_the_budget_the_drop_counter_equals_what_is_missing(self):
        port = free_port()
        sensors = ["VirtualMemory", "SwapMemory", "CPUTimes", "CPUStats", "NetIOCounters"]
        config = self.write("lagent.conf", self.agent_config(port, sensors, extra="spool_max_bytes = 65536\n") +
                            "[sensor:lagent]\ntime_interval = 0.5\n")
        agent = self.start_agent(config)
        # lmaster is away long enough for the spool to drop its oldest segments twice.
        wait_for(lambda: read_text(self.path("lagent.err")).count("dropped the oldest") >= 2 or agent.poll() is not None,
                 timeout=90, what="the spool to drop batches twice")
        master_ns = time.time_ns()
        master = self.start_master_on(port)
        wait_for(lambda: self.caught_up(agent, master_ns + SECOND_NS), timeout=60, what="lagent to catch up")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        log = read_text(self.path("lagent.err"))
        logged = sum(int(n) for n in re.findall(r"dropped the oldest \d+ batch\(es\), (\d+) sample", log))
        node = read_hdf5.read_file(self.path("data.h5"))["testnode"]
        health = node["lagent"]
        columns = health["columns"]
        # A lagent sample at x.5 s taken after the last drop: no 0.2 s reading is in progress then,
        # so each sensor's reads count equals the samples it had made before that moment.
        final = max(columns["samples_dropped"]["values"])
        self.assertGreater(final, 0)
        self.assertEqual(final, logged, "the counter and the log lines agree")
        at = [i for i, t in enumerate(health["time"])
              if t % SECOND_NS == SECOND_NS // 2 and columns["samples_dropped"]["values"][i] == final]
        self.assertTrue(at, "no lagent sample at x.5 s after the drops")
        i = at[-1]
        t = health["time"][i]
        missing = 0
        for sensor in sensors + ["lagent"]:
            times = node[sensor]["time"]
            self.assertEqual(len(times), len(set(times)), f"{sensor}: a sample arrived twice")
            made = columns[f"{sensor}.reads"]["values"][i]
            stored = sum(1 for v in times if v < t)
            self.assertLessEqual(stored, made, sensor)
            missing += made - stored
        self.assertEqual(missing, final, "samples missing in HDF5 vs lagent's samples_dropped")
        self.assertEqual(columns["batches_dropped"]["values"][i] > 0, True)


if __name__ == "__main__":
    unittest.main()
