"""make-dashboard's Graphite targets against the real thing: lagent -> lmaster -> carbon-cache ->
whisper, read back through graphite-web's render API (Debian's graphite-web, run with Django's
runserver on a free 127.0.0.1 port, with its own settings and storage in the test's directory).

Every target of the generated node dashboard, with $host set to the agent's host, must return
at least one non-null datapoint: the paths, wildcards, rates (perSecond needs two points of a
counter) and scales the generator writes are what Graphite really holds.
"""
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

from carbon_cache import CarbonCache, free_port
from fructosa_test import FructosaTestCase, LAGENT, MASTER_HOST, proc_with_fixture_mounts, read_text, wait_for

MAKE_DASHBOARD = os.environ.get("MAKE_DASHBOARD", "make-dashboard")
GRAPHITE_MANAGE = "/usr/bin/graphite-manage"
HOST = "testnode"
# Sensors that work on any Linux machine (no hwmon, cpufreq, RAPL, GPU or batch jobs needed),
# with keys that exist whatever the machine (Users has none without login sessions).
SENSORS = ["BootTime", "CPUCount", "CPUPercent", "CPUStats", "CPUTimes", "CPUTimesPercent", "VirtualMemory",
           "SwapMemory", "DiskIOCounters", "DiskUsage", "DiskPartitions", "NetIFAddrs",
           "NetIFStats"]


class GraphiteWeb:
    """graphite-web's Django app with a private local_settings module and storage."""

    def __init__(self, test, directory, carbon):
        self.test = test
        self.dir = directory
        self.port = free_port()
        os.makedirs(os.path.join(directory, "log"), exist_ok=True)
        settings_dir = os.path.join(directory, "settings")
        os.makedirs(settings_dir, exist_ok=True)
        with open(os.path.join(settings_dir, "fructosa_graphite_settings.py"), "w") as f:
            f.write(f"""SECRET_KEY = "fructosa-test"
STORAGE_DIR = {directory!r}
WHISPER_DIR = {carbon.whisper_dir!r}
STANDARD_DIRS = [WHISPER_DIR]
LOG_DIR = {os.path.join(directory, "log")!r}
INDEX_FILE = {os.path.join(directory, "index")!r}
CARBONLINK_HOSTS = ["127.0.0.1:{carbon.query_port}:a"]
DATABASES = {{"default": {{"NAME": {os.path.join(directory, "graphite.db")!r},
                          "ENGINE": "django.db.backends.sqlite3"}}}}
""")
        self.env = dict(os.environ, PYTHONPATH=settings_dir, GRAPHITE_SETTINGS_MODULE="fructosa_graphite_settings",
                        DJANGO_SETTINGS_MODULE="graphite.settings")

    def start(self):
        log = open(os.path.join(self.dir, "graphite-web.log"), "w")
        self.test.addCleanup(log.close)
        self.process = subprocess.Popen(
            ["/usr/bin/python3", GRAPHITE_MANAGE, "runserver", f"127.0.0.1:{self.port}", "--noreload"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.test.addCleanup(self._kill)
        wait_for(lambda: self._answers() or self._exited(), timeout=60, what="graphite-web to answer")

    def render(self, target, since="-2min"):
        """The series of one target, as graphite-web's render API returns them in JSON."""
        query = urllib.parse.urlencode({"target": target, "format": "json", "from": since, "until": "now"})
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/render?{query}", timeout=30) as answer:
            return json.load(answer)

    def log(self):
        return read_text(os.path.join(self.dir, "graphite-web.log"))

    def _answers(self):
        try:
            self.render("nothing.here")
            return True
        except (OSError, urllib.error.URLError):
            return False

    def _exited(self):
        if self.process.poll() is not None:
            raise AssertionError(f"graphite-web exited with {self.process.returncode}:\n{self.log()}")
        return False

    def _kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def targets_of(dashboard):
    """(panel title, target expression) of every Graphite target."""
    return [(panel["title"], target["target"]) for panel in dashboard["panels"]
            for target in panel.get("targets", [])]


class DashboardGraphiteTest(FructosaTestCase):
    def setUp(self):
        super().setUp()
        if not os.path.exists(GRAPHITE_MANAGE):
            self.fail("graphite-web is not installed (.ci/install-deps --tests installs it)")
        self.carbon = CarbonCache(self, self.path("carbon"))
        self.graphite = GraphiteWeb(self, self.path("graphite-web"), self.carbon)

    def master_config(self, extra="", port=0):
        return (f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\n"
                f"data_dir = {self.path('data')}\nstats_interval = 1\n{extra}")

    def generate(self, kind, agent_config):
        out = self.path(f"dashboards-{kind}")
        result = self.run_tool([MAKE_DASHBOARD, "--agent-config", agent_config, "--kind", kind, "--out", out])
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(out, f"fructosa-{kind}.json")) as f:
            return json.load(f)

    def wait_for_data(self, targets, timeout):
        """Polls until every target returns a non-null datapoint; fails naming the ones that do not."""
        empty = {}

        def all_have_data():
            empty.clear()
            for title, target in targets:
                series = self.graphite.render(target)
                if not any(value is not None for s in series for value, _time in s["datapoints"]):
                    empty[title] = target
            return not empty

        try:
            wait_for(all_have_data, timeout=timeout, what="every dashboard target to return data")
        except AssertionError:
            self.fail(f"{len(empty)} of {len(targets)} targets return no datapoint:\n" +
                      "\n".join(f"  {title}: {target}" for title, target in empty.items()) +
                      f"\nwhisper holds: {self.carbon.metrics()}\ngraphite-web log:\n{self.graphite.log()[-2000:]}")

    def test_every_target_of_the_node_and_cluster_dashboards_has_data(self):
        self.carbon.start()
        self.graphite.start()
        extra = (f"[Graphite]\nhost = 127.0.0.1\ncarbon receiver pickle port = {self.carbon.pickle_port}\n"
                 f"carbon receiver port = {self.carbon.line_port}\nretry_max_interval = 1\n")
        self.master, port = self.start_master(extra)
        # NetIOCounters per NIC: the wildcard panels (lo.bytes_sent, ...); lagent's own sensor
        # comes every second too.
        # DiskPartitions reads a fixture mount table, so that its per-partition panels have data
        # on a machine without partitions of its own (a chroot, a container).
        proc = proc_with_fixture_mounts(self.dir)
        config = self.agent_config(port, SENSORS, interval=1, extra=f"proc_root = {proc}\n")
        config += "[sensor:NetIOCounters]\ntime_interval = 1\npernic = true\n[sensor:lagent]\ntime_interval = 1\n"
        # kind = all: every socket family, so that unix.count (of the catalog) exists too.
        config += "[sensor:NetConnections]\ntime_interval = 1\nkind = all\n"
        config = self.write("lagent.conf", config)
        self.agent = self.spawn("lagent", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])

        node = self.generate("node", config)
        node_targets = [(title, target.replace("$host", HOST)) for title, target in targets_of(node)]
        self.assertGreater(len(node_targets), 40)
        self.assertTrue(all("$" not in target for _title, target in node_targets))
        self.wait_for_data(node_targets, timeout=40)

        # The cluster overview: top hosts, agents up, lmaster health (its CURVE counters exist
        # only with curve = true, which this test does not set up).
        cluster = self.generate("cluster", config)
        cluster_targets = [(title, target) for title, target in targets_of(cluster) if ".curve." not in target]
        self.assertTrue(any(".lmaster.agent.*.up" in target for _title, target in cluster_targets))
        self.wait_for_data(cluster_targets, timeout=20)
        self.assertIn(MASTER_HOST, json.dumps(self.graphite.render(f"*.lmaster.received")))

        self.assertEqual(self.stop(self.agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(self.master), 0, read_text(self.path("lmaster.err")))


if __name__ == "__main__":
    import unittest
    unittest.main()
