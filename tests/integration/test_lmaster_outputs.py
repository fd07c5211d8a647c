"""lmaster's own sensor and its outputs' independence: counters reach every output, and an
output that is down (nobody listening) neither blocks nor costs the others a sample."""
import calendar
import time
import unittest

import h5py

import read_hdf5

from fructosa_test import free_port, FructosaTestCase, read_text, wait_for, LAGENT, LMASTER, MASTER_HOST
from pickle_sink import PickleSink


def parse_lines(text, host):
    """[stdout] lines of `host` as (sensor, {key: float}); units stripped from the values."""
    samples = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[1] != host:
            continue
        values = {}
        for field in fields[4:]:
            key, _, value = field.partition("=")
            number = value.rstrip("%BsMHzWJrpm°C")
            try:
                values[key] = float(number)
            except ValueError:
                pass  # a label
        samples.append((fields[2], values))
    return samples




def graphite_points(text, host):
    """(path, timestamp in ms, value) of every point of `host` in [stdout] lines."""
    points = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[1] != host:
            continue
        stamp, millis = fields[0].rstrip("Z").split(".")
        ms = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) * 1000 + int(millis)
        for key, value in parse_lines(line, host)[0][1].items():
            points.add((f"{host}.{fields[2]}.{key}", ms, value))
    return points


class LmasterOutputsTest(FructosaTestCase):
    def start_master_only(self, outputs, name="lmaster"):
        config = self.write(name + ".conf",
                            "[lmaster]\nhost = 127.0.0.1\nincoming data port = 0\n"
                            f"data_dir = {self.path('lmaster-data')}\nstats_interval = 0.3\n" + outputs)
        return self.spawn(name, [LMASTER, "run", "-c", config, "-p", self.path(name + ".pid")])

    def start(self, outputs):
        config = self.write("lmaster.conf",
                            "[lmaster]\nhost = 127.0.0.1\nincoming data port = 0\n"
                            f"data_dir = {self.path('lmaster-data')}\nstats_interval = 0.3\n" + outputs)
        master = self.spawn("lmaster", [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        port = wait_for(lambda: self.listening_port(self.path("lmaster.err")) or self.exited(master),
                        what="lmaster to listen")
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", self.agent_config(
            port, ["VirtualMemory", "CPUTimes"])), "-p", self.path("lagent.pid")])
        return master, agent

    def printed(self):
        """lmaster's stdout up to its last whole line: it may be writing the next one."""
        text = read_text(self.path("lmaster.out"))
        return text[:text.rfind("\n") + 1]

    def own_samples(self):
        return [values for sensor, values in parse_lines(self.printed(), MASTER_HOST) if sensor == "lmaster"]

    def agent_points(self):
        return sum(len(values) for _, values in parse_lines(self.printed(), "testnode"))

    def test_counters_are_a_sensor_of_the_master_in_every_output(self):
        master, agent = self.start(f"[stdout]\n[hdf5]\npath = {self.path('data.h5')}\nflush_interval = 0.3\n")
        wait_for(lambda: len(self.own_samples()) >= 3, what="three samples of the lmaster sensor")
        self.assertEqual(self.stop(agent), 0)
        # Once the agent is quiet, the master's counters settle on what it printed.
        settled = lambda: next((s for s in reversed(self.own_samples())
                                if s["received"] == self.agent_points() and s["stdout.queued"] == 0), None)
        last = wait_for(settled, what="the lmaster sensor to count every point received")
        self.assertGreater(last["received"], 0)
        self.assertGreater(last["batches"], 0)
        self.assertGreaterEqual(last["stdout.sent"], last["received"])
        self.assertEqual(last["stdout.dropped"], 0)
        self.assertEqual(last["hdf5.dropped"], 0)
        samples = self.own_samples()
        for key in ("received", "stdout.sent"):
            series = [s[key] for s in samples]
            self.assertEqual(series, sorted(series), f"{key} is a counter")
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        with h5py.File(self.path("data.h5"), "r") as f:
            table = read_hdf5.host_tables(f, MASTER_HOST)["lmaster"]
            self.assertEqual(table["received"].attrs["kind"], "counter")
            self.assertEqual(table["received"].attrs["unit"], "count")
            self.assertEqual(table["journal.bytes"].attrs["unit"], "bytes")
            self.assertEqual(table["stdout.queued"].attrs["kind"], "gauge")
            self.assertGreaterEqual(len(table["time"]), 3)
            interval_ns = 300_000_000
            self.assertTrue(all(t % interval_ns == 0 for t in table["time"][:]), "aligned like an agent's")
            # Per-agent keys are rows of their own table (one per agent), not columns per agent.
            self.assertFalse([key for key in table.keys() if key.startswith("agent.")])
            agents = read_hdf5.host_tables(f, "testnode")["lmaster_agents"]
            self.assertEqual(agents["up"][-1], 1)
            self.assertEqual(agents["up"].attrs["unit"], "bool")

    def test_an_output_nobody_listens_to_does_not_disturb_the_others(self):
        dead = free_port()
        master, agent = self.start(
            f"[stdout]\n[Graphite]\nhost = 127.0.0.1\ncarbon receiver pickle port = {dead}\nretry_max_interval = 0.5\n")
        wait_for(lambda: len(self.own_samples()) >= 2 and self.own_samples()[-1].get("graphite.queued", 0) > 0,
                 what="graphite to fall behind")
        printed_before = self.agent_points()
        wait_for(lambda: self.agent_points() >= printed_before + 20, what="stdout to keep printing")
        self.assertEqual(self.stop(agent), 0)
        last = wait_for(lambda: next((s for s in reversed(self.own_samples())
                                      if s["received"] == self.agent_points() and s["stdout.queued"] == 0), None),
                        what="stdout to have printed everything received")
        self.assertEqual(last["stdout.dropped"], 0)
        self.assertEqual(last["graphite.sent"], 0)
        self.assertGreaterEqual(last["graphite.queued"], last["received"])
        self.assertIn("output graphite:", read_text(self.path("lmaster.err")))
        # Stopping keeps what Graphite never got for the next start...
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))
        self.assertRegex(read_text(self.path("lmaster.err")), r"output graphite: stopping with \d+ points")
        printed = graphite_points(read_text(self.path("lmaster.out")), "testnode")
        self.assertGreater(len(printed), 20)

        # ... which sends it, every point of it, once a carbon listens.
        sink = PickleSink()
        self.addCleanup(sink.close)
        master = self.start_master_only(
            f"[Graphite]\nhost = 127.0.0.1\ncarbon receiver pickle port = {sink.port}\n", name="lmaster2")
        received = lambda: {(p, round(ts * 1000), v) for p, ts, v in sink.snapshot() if p.startswith("testnode.")}
        wait_for(lambda: printed <= received(), what="the points kept in the journal to reach carbon")
        self.assertEqual(received(), printed)
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster2.err")))
        self.assertIn("resuming after journal record", read_text(self.path("lmaster2.err")))


if __name__ == "__main__":
    unittest.main()
