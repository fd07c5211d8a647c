"""[lagent] batch_interval: each round's readings are spooled at once, as a batch of their own,
and only their sending waits: the batches of several rounds leave together, back to back (fewer
wake-ups of lagent's network thread and of lmaster, docs/performance.md). Nothing is lost: every
reading arrives once, on its own aligned time; what waits when lagent is stopped leaves before
it exits, and what waits when it is killed leaves after its restart.
"""
import datetime
import json
import re
import signal
import time

import read_hdf5
from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT

INTERVAL_NS = 200_000_000
SECOND_NS = 1_000_000_000


class BatchIntervalTest(FructosaTestCase):
    def agent_batches(self):
        """Batches lmaster has received from testnode (agents.json, written every second)."""
        try:
            with open(self.path("lmaster-data/agents.json")) as f:
                return json.load(f)["agents"]["testnode"]["batches"]
        except (OSError, ValueError, KeyError):
            return None

    def stored(self):
        return {sensor: table for path in read_hdf5.series_files(self.path("data.h5"))
                for sensor, table in read_hdf5.read_file(path).get("testnode", {}).items()}

    def printed_times(self):
        """Times (ns) of the testnode VirtualMemory samples lmaster's [stdout] printed so far."""
        times = []
        for match in re.finditer(r"^(\S+)Z testnode VirtualMemory ", read_text(self.path("lmaster.out")), re.M):
            stamp = datetime.datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S.%f")
            times.append(int(stamp.replace(tzinfo=datetime.timezone.utc).timestamp()) * SECOND_NS
                         + stamp.microsecond * 1000)
        return times

    def wait_for_readings_waiting(self, process, name, since_ns=0):
        """Waits until readings of `process` (lagent with batch_interval = 5, VirtualMemory at
        0.2 s) have waited 2-4 s to be sent, at a moment between two readings (0.2 s apart, and
        away from lagent's own at x.5 s), so that every reading taken has had its batch written.
        The last reading lmaster printed (taken at or after since_ns) has not changed for 1.5 s:
        lmaster flushes its output every second and a send's batches come together, so it is the
        last of a send, and the next send comes 5 s after it. Returns its time."""
        last_printed = {"time": None, "since": 0}

        def readings_wait():
            self.assert_running(process, name)
            times = [t for t in self.printed_times() if t >= since_ns]
            now = time.time_ns()
            if not times:
                return False
            if max(times) != last_printed["time"]:
                last_printed.update(time=max(times), since=now)
                return False
            return (now - last_printed["since"] >= 1.5 * SECOND_NS
                    and 2 * SECOND_NS <= now - last_printed["time"] < 4 * SECOND_NS
                    and 0.08 <= (now / SECOND_NS) % 0.2 < 0.16 and not 0.4 <= (now / SECOND_NS) % 1.0 < 0.6)
        wait_for(readings_wait, timeout=60, what=f"readings of {name} waiting to be sent")
        return last_printed["time"]

    def assert_running(self, process, name):
        if process.poll() is not None:
            raise AssertionError(f"{name} exited with {process.returncode}:\n" + read_text(self.path(name + ".err")))

    def assert_every_reading_arrived(self, stored, start_ns, end_ns, run):
        """Every VirtualMemory reading of the lagent that ran from start_ns to end_ns arrived once,
        on its own aligned time: at the last of its own samples taken at x.5 s (between two 0.2 s
        readings), its count of VirtualMemory reads equals the VirtualMemory samples stored before
        it (a loaded machine may skip a reading time: lagent counts it as missed, not read).
        Returns the index of that lagent sample."""
        times = [t for t in stored["VirtualMemory"]["time"] if start_ns <= t < end_ns]
        self.assertEqual(len(times), len(set(times)), f"{run}: a reading arrived twice")
        self.assertTrue(all(t % INTERVAL_NS == 0 for t in times), f"{run}: a reading off its time")
        health = stored["lagent"]
        checks = [i for i, t in enumerate(health["time"]) if start_ns <= t < end_ns and t % SECOND_NS == SECOND_NS // 2]
        self.assertTrue(checks, f"{run}: no lagent sample at x.5 s")
        last = max(checks, key=lambda i: health["time"][i])
        reads = health["columns"]["VirtualMemory.reads"]["values"][last]
        self.assertEqual(sum(1 for t in times if t < health["time"][last]), reads,
                         f"{run}: VirtualMemory samples stored vs read up to {health['time'][last]}")
        return last

    def test_rounds_leave_together_and_every_reading_arrives_once(self):
        master, port = self.start_master()
        config = (self.agent_config(port, ["VirtualMemory"], extra="batch_interval = 1\n")
                  + "[sensor:lagent]\ntime_interval = 0.5\n")
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])
        wait_for(lambda: (self.agent_batches() or 0) >= 20, timeout=60, what="20 batches from the agent")
        stop_ns = time.time_ns()
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        stored = self.stored()
        last = self.assert_every_reading_arrived(stored, 0, 2**63, "lagent")
        # What waited to be sent when lagent was stopped left before it exited (at most 1 s of
        # readings here; the other test stops lagent while seconds of them wait).
        times = stored["VirtualMemory"]["time"]
        self.assertGreater(max(times), stop_ns - 3 * INTERVAL_NS - SECOND_NS)
        self.assertGreaterEqual(len(times), 10)
        # Each round is a batch of its own, but they leave together: 7 rounds a second (0.2 s and
        # x.5 s), a send at most every 1 s, so about 7 batches per send (lagent's own counters).
        # Sent one by one, there would be as many sends as batches.
        health = stored["lagent"]
        sent = health["columns"]["batches_sent"]["values"][last]
        sends = health["columns"]["sends"]["values"][last]
        self.assertGreaterEqual(sent, 10)
        self.assertLessEqual(sends, sent / 2, f"{sends} sends for {sent} batches")

    def test_what_waits_when_lagent_is_killed_leaves_after_its_restart(self):
        master, port = self.start_master()
        config = self.write("lagent.conf", self.agent_config(port, ["VirtualMemory"], extra="batch_interval = 5\n")
                            + "[sensor:lagent]\ntime_interval = 0.5\n")
        first = self.spawn("lagent1", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])

        # A send arrived, and the readings since wait.
        self.wait_for_readings_waiting(first, "lagent1")
        kill_ns = time.time_ns()
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        arrived_before_kill = max(self.printed_times())

        restart_ns = time.time_ns()
        second = self.spawn("lagent2", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])

        # The restarted lagent sent what waited in the spool at its start, then its own readings;
        # stopped while some of those wait, it sends them before it exits.
        arrived_before_stop = self.wait_for_readings_waiting(second, "lagent2", since_ns=restart_ns)
        stop_ns = time.time_ns()
        self.assertEqual(self.stop(second), 0, read_text(self.path("lagent2.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        stored = self.stored()
        times = stored["VirtualMemory"]["time"]
        self.assertEqual(len(times), len(set(times)), "a reading arrived twice")
        # The killed lagent's readings arrived, those that waited to be sent at the kill included:
        # every one up to its last own sample at x.5 s, which was taken after the last send that
        # arrived before the kill...
        last = self.assert_every_reading_arrived(stored, 0, restart_ns, "the killed lagent")
        waited = f"the readings after {arrived_before_kill} ns, which waited to be sent at the kill, are lost"
        self.assertGreater(stored["lagent"]["time"][last], arrived_before_kill, waited)
        # ...and the ones after it, up to the last.
        before = sorted(t for t in times if t < restart_ns)
        self.assertLessEqual(before[-1], kill_ns)
        self.assertGreaterEqual(before[-1], kill_ns - 3 * INTERVAL_NS, waited)
        # The restarted lagent's readings arrived too, those that waited at its stop included.
        self.assert_every_reading_arrived(stored, restart_ns, 2**63, "the restarted lagent")
        self.assertGreaterEqual(max(times), stop_ns - 3 * INTERVAL_NS,
                                f"the readings after {arrived_before_stop} ns, which waited to be sent at the stop, "
                                f"are lost")
        self.assertIn("kept for lmaster", read_text(self.path("lagent2.err")))
        self.assertNotIn("error", read_text(self.path("lagent2.err")).lower())


if __name__ == "__main__":
    import unittest
    unittest.main()
