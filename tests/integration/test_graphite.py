"""lagent -> lmaster -> [Graphite] -> a real carbon-cache -> whisper files, as real processes.

The values whisper holds must be exactly the values lmaster received (its [hdf5] file, read after
it stopped, and its [stdout] lines while it runs), per path and timestamp: sensors sample every
1 s, whisper's resolution, so every second holds one value.
"""
import datetime
import os
import re
import time
import unittest

from carbon_cache import CarbonCache
from fructosa_test import FructosaTestCase, LAGENT, LMASTER, read_text, wait_for
from read_hdf5 import read_file

HOST = "testnode"
# A scalar sensor (BootTime: the path ends with the sensor), dotted per-NIC keys (NetIOCounters),
# per-CPU keys, and plain ones.
SENSORS = ["VirtualMemory", "CPUTimes", "CPUPercent", "BootTime", "NetIOCounters"]
VALUE = re.compile(r"-?(?:inf|nan|[0-9][0-9.]*(?:e[+-]?[0-9]+)?)")


def component(text):
    """One Graphite path component as the output writes it (common/graphite_name.h)."""
    if not text:
        return "_"
    return "".join(c if c.isascii() and (c.isalnum() or c in "_:#-") else "_" for c in text)


def graphite_path(host, sensor, key, job=0, prefix=""):
    parts = [prefix] if prefix else []
    if job:
        parts += ["jobs", str(job)]
    parts += [component(host.split(".")[0]), component(sensor.replace(".", "_"))]
    if key:
        parts += [component(part) for part in key.split(".")]
    return ".".join(parts)


def stdout_points(text, host=HOST, prefix=""):
    """{path: {second: value}} from lmaster's [stdout] lines of `host`:
    '<time> <host> <sensor> job=<job> key=value<unit> ... label="text"' (value=: a scalar)."""
    points = {}
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < 4 or fields[1] != host:
            continue
        stamp = datetime.datetime.strptime(fields[0], "%Y-%m-%dT%H:%M:%S.%fZ")
        second = int(stamp.replace(tzinfo=datetime.timezone.utc).timestamp())
        job = int(fields[3].split("=", 1)[1])
        for field in fields[4:]:
            key, _, text_value = field.partition("=")
            match = VALUE.match(text_value)
            if not match or text_value.startswith('"'):
                continue  # a label
            value = float(match.group(0))
            if value != value:
                continue  # NaN is not sent
            path = graphite_path(host, fields[2], "" if key == "value" else key, job, prefix)
            points.setdefault(path, {})[second] = value
    return points


def hdf5_points(path, host=HOST, prefix=""):
    """{path: {second: value}} of every value of `host` in lmaster's HDF5 file."""
    points = {}
    for sensor, table in read_file(path).get(host, {}).items():
        for key, column in table["columns"].items():
            for time_ns, job, value in zip(table["time"], table["job"], column["values"]):
                if value is None:
                    continue  # no value in this row
                second, rest = divmod(time_ns, 1_000_000_000)
                assert rest == 0, f"{sensor} at {time_ns} ns: not on a whole second"
                points.setdefault(graphite_path(host, sensor, key, job, prefix), {})[second] = value
    return points


class GraphiteTest(FructosaTestCase):
    def setUp(self):
        super().setUp()
        self.started = int(time.time()) - 5
        self.carbon = CarbonCache(self, self.path("carbon"))

    def master_config(self, extra="", port=0):
        # A private data_dir: the Graphite runner spools there while carbon is down.
        return (f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\n"
                f"data_dir = {self.path('data')}\nstats_interval = 1\n"
                f"[hdf5]\npath = {self.path('data.h5')}\nflush_interval = 0.5\n{extra}")

    def start_pipeline(self, graphite="", sensors=SENSORS, pickle_port=None):
        self.carbon.start()
        pickle_port = pickle_port or self.carbon.pickle_port
        extra = (f"[stdout]\n[Graphite]\nhost = 127.0.0.1\n"
                 f"carbon receiver pickle port = {pickle_port}\n"
                 f"carbon receiver port = {self.carbon.line_port}\n"
                 f"retry_max_interval = 1\n{graphite}")
        self.master, port = self.start_master(extra)
        config = self.agent_config(port, [s for s in sensors if s != "NetIOCounters"], interval=1)
        if "NetIOCounters" in sensors:  # per NIC: keys like lo.bytes_sent
            config += "[sensor:NetIOCounters]\ntime_interval = 1\npernic = true\n"
        config = self.write("lagent.conf", config)
        self.agent = self.spawn("lagent", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])

    def received(self, prefix=""):
        return stdout_points(read_text(self.path("lmaster.out")), prefix=prefix)

    def samples_of(self, sensor):
        return sum(1 for line in read_text(self.path("lmaster.out")).splitlines()
                   if line.split(" ")[1:3] == [HOST, sensor])

    def stored(self, paths):
        return {path: self.carbon.stored(path, self.started) for path in paths}

    def wait_until_stored(self, expected, timeout):
        """Polls the whisper files until they hold every expected point; returns what they hold."""
        def all_there():
            stored = self.stored(expected)
            return stored if all(stored[p].get(t) == v for p, points in expected.items()
                                 for t, v in points.items()) else None
        try:
            return wait_for(all_there, timeout=timeout, what="carbon to store every point")
        except AssertionError:
            stored = self.stored(expected)
            missing = {p: sorted(t for t, v in points.items() if stored[p].get(t) != v)
                       for p, points in expected.items()}
            self.fail(f"missing or different in whisper: { {p: m for p, m in missing.items() if m} }\n"
                      f"lmaster log:\n{read_text(self.path('lmaster.err'))[-3000:]}")

    def stop_and_compare(self, prefix=""):
        """Stops lagent and lmaster, then checks whisper against lmaster's HDF5 file: the same
        paths of HOST, and under each exactly the same seconds and values."""
        self.assertEqual(self.stop(self.agent), 0, read_text(self.path("lagent.err")))
        # Everything lmaster printed reaches carbon while lmaster still runs...
        self.wait_until_stored(self.received(prefix), timeout=20)
        self.assertEqual(self.stop(self.master), 0, read_text(self.path("lmaster.err")))
        # ... and everything it stored in HDF5 (the same samples) is in whisper, exactly.
        expected = hdf5_points(self.path("data.h5"), prefix=prefix)
        self.assertTrue(expected)
        self.assertEqual(expected, self.received(prefix))
        stored = self.wait_until_stored(expected, timeout=10)
        self.assertEqual(stored, expected)
        host_root = ".".join(filter(None, [prefix, HOST]))
        self.assertEqual(sorted(m for m in self.carbon.metrics() if m.startswith(host_root + ".")),
                         sorted(expected))
        return expected

    def test_pickle_stores_exactly_what_lmaster_received(self):
        self.start_pipeline(graphite="prefix = it.pickle\n")
        wait_for(lambda: all(self.samples_of(s) >= 4 for s in SENSORS) or self.agent.poll() is not None,
                 timeout=30, what="4 samples of each sensor")
        expected = self.stop_and_compare(prefix="it.pickle")
        self.assertIn(f"it.pickle.{HOST}.BootTime", expected)  # a scalar: no key component
        self.assertTrue(any(p.startswith(f"it.pickle.{HOST}.NetIOCounters.lo.") for p in expected), expected)
        self.assertIn(f"it.pickle.{HOST}.VirtualMemory.total", expected)
        self.assertGreaterEqual(len(expected[f"it.pickle.{HOST}.VirtualMemory.total"]), 4)
        # lmaster reports its Graphite output's counters, through Graphite too.
        master_host = graphite_path(os.uname().nodename, "lmaster", "graphite.sent", prefix="it.pickle")
        self.assertGreater(max(self.carbon.stored(master_host, self.started).values()), 0)

    def test_carbon_restart_loses_nothing(self):
        self.start_pipeline(sensors=["VirtualMemory", "CPUTimes"])
        path = f"{HOST}.VirtualMemory.total"
        wait_for(lambda: len(self.carbon.stored(path, self.started)) >= 2 or self.agent.poll() is not None,
                 timeout=30, what="the first points in whisper")
        self.carbon.stop()
        # The agent keeps sampling while carbon is down; lmaster keeps what it cannot send.
        down = self.samples_of("VirtualMemory")
        wait_for(lambda: self.samples_of("VirtualMemory") >= down + 3, timeout=30,
                 what="3 samples while carbon is down")
        self.carbon.start()
        up = self.samples_of("VirtualMemory")
        wait_for(lambda: self.samples_of("VirtualMemory") >= up + 2, timeout=30,
                 what="2 samples after carbon is back")
        # A crash loses what carbon had received but not written yet (it writes about once a
        # second): only sending the last seconds again after the reconnect brings that back.
        self.carbon.kill()
        self.carbon.start()
        up = self.samples_of("VirtualMemory")
        wait_for(lambda: self.samples_of("VirtualMemory") >= up + 2, timeout=30,
                 what="2 samples after carbon crashed and came back")
        expected = self.stop_and_compare()
        self.assertGreaterEqual(len(expected[path]), 7)
        log = read_text(self.path("lmaster.err"))
        self.assertIn("graphite: lost the connection to carbon", log)
        self.assertIn("graphite: connected to carbon at", log)
        # What went into the connection just before carbon died was sent again.
        self.assertRegex(log, r"graphite: sent [1-9][0-9]* points again")
        self.assertIn("MetricPickleReceiver connection", read_text(self.carbon.log))

    def test_plaintext_protocol_stores_exactly_what_lmaster_received(self):
        # The pickle port leads nowhere: plaintext must use `carbon receiver port`.
        self.start_pipeline(graphite="protocol = plaintext\n", sensors=["VirtualMemory", "BootTime"],
                            pickle_port=1)
        wait_for(lambda: self.samples_of("VirtualMemory") >= 3 or self.agent.poll() is not None,
                 timeout=30, what="3 samples")
        expected = self.stop_and_compare()
        self.assertIn(f"{HOST}.BootTime", expected)
        self.assertIn("MetricLineReceiver connection", read_text(self.carbon.log))


if __name__ == "__main__":
    unittest.main()
