"""Counter rates of make-dashboard's Graphite targets against the real carbon-cache and
graphite-web (Debian's packages), and the carbon storage schemas `make-dashboard
--storage-schemas` prints.

Carbon is fed counters with known values straight over its plaintext port, readings in the
past on the sensors' aligned instants, so each expected rate is exact and no test waits for a
clock: a counter read every 10 s on 1 s points (perSecond() alone gives no rate at all there),
one read every second, and the same 10 s counter stored by the generated schemas.
"""
import json
import os
import re
import socket
import time
import urllib.error

import whisper

from carbon_cache import CarbonCache
from fructosa_test import FructosaTestCase, read_text, wait_for
from test_dashboard import GraphiteWeb, targets_of

MAKE_DASHBOARD = os.environ.get("MAKE_DASHBOARD", "make-dashboard")
HOST = "testnode"
# NetIOCounters' counters every 10 s, DiskIOCounters' every second (read_time and friends are
# milliseconds: their rates are scaled to a share of the time).
AGENT_CONFIG = """[lmaster]
host = 127.0.0.1
[sensor:NetIOCounters]
time_interval = 10
[sensor:DiskIOCounters]
time_interval = 1
[sensor:BootTime]
time_interval = 30
"""
SPAN = 120  # seconds of readings sent


class DashboardRatesTest(FructosaTestCase):
    def setUp(self):
        super().setUp()
        self.config = self.write("lagent.conf", AGENT_CONFIG)
        # The last reading 10 s in the past, on a multiple of 10 s as the agent's readings are.
        now = int(time.time())
        self.end = now - now % 10 - 10
        self.start = self.end - SPAN

    def make_dashboard(self, *args):
        result = self.run_tool([MAKE_DASHBOARD, "--agent-config", self.config, *args])
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout

    def node_targets(self, prefix=""):
        out = self.path("dashboards")
        self.make_dashboard("--kind", "node", "--prefix", prefix, "--out", out)
        with open(os.path.join(out, "fructosa-node.json")) as f:
            return [target.replace("$host", HOST) for _title, target in targets_of(json.load(f))]

    def send(self, carbon, points):
        """(path, value, timestamp) to carbon's plaintext port."""
        lines = "".join(f"{path} {value!r} {timestamp}\n" for path, value, timestamp in points)
        with socket.create_connection(("127.0.0.1", carbon.line_port), timeout=10) as connection:
            connection.sendall(lines.encode())

    def counters(self, paths, interval):
        """Readings every `interval` s from start to end: path i grows by 3 + i per second."""
        slopes = {path: 3 + i for i, path in enumerate(sorted(paths))}
        points = [(path, 1000.0 + slope * (t - self.start), t)
                  for path, slope in slopes.items() for t in range(self.start, self.end + 1, interval)]
        return slopes, points

    def rate_points(self, graphite, target):
        """{timestamp: value} of the non-null datapoints of each series a target gives."""
        series = graphite.render(target, since=str(self.start - 10))
        return [{t: v for v, t in s["datapoints"] if v is not None} for s in series]

    def check_rates(self, graphite, expected, step):
        """Waits until each target gives a rate at every `step` from the first reading's next step
        to the last reading, then checks the values. expected: {target: rate}."""
        want = set(range(self.start + step, self.end + 1, step))
        got = {}

        def complete():
            for target in expected:
                try:
                    got[target] = self.rate_points(graphite, target)
                except urllib.error.HTTPError as error:
                    # carbon-cache may be creating a whisper file as graphite-web reads it (seen
                    # once: HTTP 500): asked again; the log below has it if it never passes.
                    if error.code < 500:
                        raise
                    got[target] = []
                    return False
            return all(len(series) == 1 and set(series[0]) == want for series in got.values())

        try:
            wait_for(complete, timeout=60, what="the rates of every target")
        except AssertionError:
            self.fail("targets without a rate at every step:\n" + "\n".join(
                f"  {target}: {len(series)} series, points {[sorted(s) for s in series]}"
                for target, series in got.items() if len(series) != 1 or set(series[0]) != want) +
                f"\nwant {sorted(want)}\ngraphite-web log:\n{graphite.log()[-2000:]}")
        for target, rate in expected.items():
            wrong = {t: v for t, v in got[target][0].items() if abs(v - rate) > 1e-6 * max(1, rate)}
            self.assertEqual(wrong, {}, f"{target}: expected {rate} at every step")

    def expected_rates(self, targets, sensor, slopes):
        """{target: rate} for the counter (perSecond) targets of `sensor`, from the slopes sent."""
        expected = {}
        for target in targets:
            if f".{sensor}." not in target or "perSecond(" not in target:
                continue
            paths = re.findall(r"[A-Za-z0-9_.]*\." + sensor + r"\.[A-Za-z0-9_.]+", target)
            self.assertEqual(len(paths), 1, target)
            scale = re.search(r"scale\(perSecond\([^()]*(?:\([^()]*\))?\), ([0-9.e-]+)\)", target)
            expected[target] = slopes[paths[0]] * (float(scale.group(1)) if scale else 1)
        self.assertTrue(expected, f"no rate target of {sensor}")
        return expected

    def test_counter_rates_on_1_s_points(self):
        carbon = CarbonCache(self, self.path("carbon"), retention="1s:1h")
        graphite = GraphiteWeb(self, self.path("graphite-web"), carbon)
        carbon.start()
        graphite.start()
        targets = self.node_targets()
        paths = lambda sensor: {p for t in targets if "perSecond(" in t
                                for p in re.findall(HOST + r"\." + sensor + r"\.[A-Za-z0-9_.]+", t)}
        every_10_s, points_10 = self.counters(paths("NetIOCounters"), 10)
        every_1_s, points_1 = self.counters(paths("DiskIOCounters"), 1)
        self.assertIn(f"{HOST}.NetIOCounters.bytes_sent", every_10_s)
        self.assertIn(f"{HOST}.DiskIOCounters.read_time", every_1_s)
        self.send(carbon, points_10 + points_1)

        # A rate at every 1 s point from the first reading on: the increase over each 10 s
        # spread over its ten steps. (perSecond() alone: nothing, as the second check shows.)
        self.check_rates(graphite, self.expected_rates(targets, "NetIOCounters", every_10_s), step=1)
        self.check_rates(graphite, self.expected_rates(targets, "DiskIOCounters", every_1_s), step=1)
        plain = self.rate_points(graphite, f"perSecond({HOST}.NetIOCounters.bytes_sent)")
        self.assertEqual(plain, [{}], "graphite-web's perSecond() now bridges gaps: the test shows nothing")

    def test_generated_storage_schemas_store_each_sensor_at_its_interval(self):
        schemas = self.make_dashboard("--prefix", "site.a", "--storage-schemas")
        self.assertIn("[fructosa_10s]", schemas)
        # Below them, the catch-all rule a site has.
        carbon = CarbonCache(self, self.path("carbon"),
                             schemas=schemas + "\n[everything]\npattern = .*\nretentions = 1s:1h\n")
        graphite = GraphiteWeb(self, self.path("graphite-web"), carbon)
        carbon.start()
        graphite.start()
        # (seconds per point, points) of whisper's archives: the step for a day, minutes for 30
        # days, hours for two years.
        first_then_coarser = lambda step: [(s, days * 86400 // s) for s, days in ((step, 1), (60, 30), (3600, 730))]
        expected = {
            f"site.a.{HOST}.NetIOCounters.bytes_sent": first_then_coarser(10),
            f"site.a.jobs.42.{HOST}.NetIOCounters.bytes_recv": first_then_coarser(10),
            f"site.a.{HOST}.lagent.NetIOCounters.duration": first_then_coarser(10),  # lagent: 10 s
            f"site.a.{HOST}.DiskIOCounters.read_bytes": first_then_coarser(1),
            f"site.a.{HOST}.BootTime": first_then_coarser(30),
            # Not fructosa's under this prefix: the catch-all rule.
            f"{HOST}.NetIOCounters.bytes_sent": [(1, 3600)],
            f"site.a.{HOST}.NetIOCountersX.bytes_sent": [(1, 3600)],
        }
        slopes, points = self.counters([p for p in expected if ".NetIOCounters." in p], 10)
        self.send(carbon, points + [(path, 1.0, self.end) for path in expected if path not in slopes])

        def archives(path):
            try:
                info = whisper.info(carbon.whisper_path(path))
            except (OSError, whisper.CorruptWhisperFile):  # not there yet, being created
                return None
            return info and [(a["secondsPerPoint"], a["points"]) for a in info["archives"]]

        wait_for(lambda: all(archives(path) for path in expected), timeout=60, what="the whisper files")
        self.assertEqual({path: archives(path) for path in expected}, expected)
        self.assertNotIn("Invalid schemas", read_text(carbon.log))

        # The 10 s counter on 10 s points: a rate at every point, the interpolation idle.
        targets = self.node_targets(prefix="site.a")
        target = next(t for t in targets if f"site.a.{HOST}.NetIOCounters.bytes_sent" in t)
        self.assertIn("interpolate(", target)
        self.check_rates(graphite, {target: slopes[f"site.a.{HOST}.NetIOCounters.bytes_sent"]}, step=10)


if __name__ == "__main__":
    import unittest
    unittest.main()
