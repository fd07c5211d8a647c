"""fructosa-report --graphite: the same report from Graphite's render API as from the HDF5 files,
for the same data. lmaster has both outputs: [hdf5] and [Graphite] (with a prefix) to a private
carbon-cache (1 s points kept for an hour: no aggregation), read back through graphite-web
(Debian's packages, run as test_dashboard.py does). Two lagents (hosts nodea, nodeb) read
made-up cgroup v2 trees (test_report_html.py's FakeJobCgroup: CPU at a known rate, memory
ramping under its limit) every second for about 15 s. Then `--format json JOB`, `--format text
JOB` and `--list --format json` must say the same from both sources, but for what Graphite
does not keep: the user (JobCgroup's label; "?" in text) and the nodes' cpu_source.

And what goes wrong: no Graphite at the URL, an HTTP error, an answer that is not JSON (each
named with the URL), a job Graphite has no series of, the prefix left out.

Needs graphite-carbon and graphite-web (.ci/install-deps --tests installs them): without them
the test fails, saying so.
"""
import http.server
import json
import os
import threading
import time

from carbon_cache import CARBON_CACHE, CarbonCache, free_port
from fructosa_test import FructosaTestCase, LAGENT, read_text, wait_for
from test_dashboard import GRAPHITE_MANAGE, GraphiteWeb
from test_report_html import HOSTS, JOB, FakeJobCgroup

REPORT = os.environ.get("FRUCTOSA_REPORT", "fructosa-report")
PREFIX = "site1"
SECONDS = 15


def without_labels(report):
    """A JSON report without what Graphite cannot know: the user and the nodes' cpu_source."""
    report = dict(report)
    report.pop("user", None)
    report["nodes"] = [{k: v for k, v in node.items() if k != "cpu_source"} for node in report.get("nodes", [])]
    return report


class BrokenGraphite(http.server.BaseHTTPRequestHandler):
    """Under /error: HTTP 500; anything else: 200 with an HTML page."""

    def do_GET(self):
        failing = self.path.startswith("/error/")
        body = b"<html>Internal error</html>" if failing else b"<html><body>not Graphite</body></html>"
        self.send_response(500 if failing else 200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class ReportGraphiteTest(FructosaTestCase):
    def setUp(self):
        super().setUp()
        for program, package in [(CARBON_CACHE, "graphite-carbon"), (GRAPHITE_MANAGE, "graphite-web")]:
            if not os.path.exists(program):
                self.fail(f"{program} is missing: install {package} (.ci/install-deps --tests installs it); "
                          "the Graphite source is checked against the real carbon-cache and graphite-web")
        self.carbon = CarbonCache(self, self.path("carbon"), retention="1s:1h")
        self.graphite = GraphiteWeb(self, self.path("graphite-web"), self.carbon)
        self.url = f"http://127.0.0.1:{self.graphite.port}"

    def report(self, *args):
        result = self.run_tool([REPORT, *args])
        return result.returncode, result.stdout, result.stderr

    def run_job(self):
        """The job on both fake nodes for SECONDS; lmaster stores it in data.h5 and sends it to carbon."""
        cgroups = {host: FakeJobCgroup(self.path(f"cgroup-{host}"), *spec) for host, spec in HOSTS.items()}
        for cgroup in cgroups.values():
            self.addCleanup(cgroup.close)
        master, port = self.start_master(
            extra=f"[Graphite]\nhost = 127.0.0.1\ncarbon receiver pickle port = {self.carbon.pickle_port}\n"
                  f"carbon receiver port = {self.carbon.line_port}\nprefix = {PREFIX}\n")
        started = time.monotonic()
        stop = threading.Event()

        def feed():  # the job's CPU time and memory, rising while it runs
            while not stop.wait(0.01):
                elapsed = time.monotonic() - started
                for cgroup in cgroups.values():
                    cgroup.update(elapsed, min(1.0, elapsed / SECONDS))

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        self.addCleanup(lambda: (stop.set(), feeder.join()))
        agents = {}
        for host in HOSTS:
            jobs = (f"[jobs]\nscheduler = regex\nregex = ^fructosa\\.slice/job_(\\d+)$\n"
                    f"cgroup_root = {self.path(f'cgroup-{host}')}\nrescan_interval = 3600\n")
            config = (self.agent_config(port, ["JobCgroup"], interval=1, extra=jobs)
                      .replace("host = testnode", f"host = {host}")
                      .replace(self.path("lagent-spool"), self.path(f"lagent-spool-{host}")))
            agents[host] = self.spawn(f"lagent-{host}", [
                LAGENT, "run", "-c", self.write(f"lagent-{host}.conf", config), "-p", self.path(f"lagent-{host}.pid")])
        time.sleep(SECONDS)
        for host, agent in agents.items():
            self.assertEqual(self.stop(agent), 0, read_text(self.path(f"lagent-{host}.err")))
        stop.set()
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

    def test_graphite_gives_the_same_report_as_hdf5(self):
        self.carbon.start()
        self.graphite.start()
        self.run_job()
        hdf5 = ["--data", self.path("data.h5")]
        graphite = ["--graphite", self.url, "--graphite-prefix", PREFIX]

        code, out, err = self.report(*hdf5, "--format", "json", str(JOB))
        self.assertEqual(code, 0, err)
        expected = json.loads(out)
        self.assertEqual(sorted(node["host"] for node in expected["nodes"]), sorted(HOSTS))
        self.assertGreaterEqual(expected["elapsed_s"], SECONDS - 4, out)
        self.assertIsNotNone(expected["figures"]["cpu_seconds"], out)
        self.assertIsNotNone(expected["figures"]["memory_limit_bytes"], out)

        # Carbon writes whisper files a moment after lmaster has sent the points.
        seen = {}

        def same_from_graphite():
            code, out, err = self.report(*graphite, "--format", "json", str(JOB))
            seen.update(code=code, out=out, err=err)
            return code == 0 and without_labels(json.loads(out)) == without_labels(expected)

        try:
            wait_for(same_from_graphite, timeout=30, what="Graphite's report to match HDF5's")
        except AssertionError:
            self.assertEqual(seen["code"], 0, f"{seen['err']}\nwhisper holds: {self.carbon.metrics()}\n"
                             f"graphite-web log:\n{self.graphite.log()[-2000:]}")
            self.assertEqual(without_labels(json.loads(seen["out"])), without_labels(expected))
        from_graphite = json.loads(seen["out"])
        self.assertIsNone(from_graphite["user"])
        self.assertTrue(all(node["cpu_source"] is None for node in from_graphite["nodes"]), seen["out"])

        with self.subTest(what="text"):
            code, text_hdf5, err = self.report(*hdf5, str(JOB))
            self.assertEqual(code, 0, err)
            code, text_graphite, err = self.report(*graphite, str(JOB))
            self.assertEqual(code, 0, err)
            self.assertIn("user ?", text_graphite)
            user = expected["user"] or "?"
            self.assertEqual(text_graphite, text_hdf5.replace(f"user {user}", "user ?", 1))

        with self.subTest(what="--list"):
            listed = {}
            for name, source in [("hdf5", hdf5), ("graphite", graphite)]:
                code, out, err = self.report(*source, "--list", "--format", "json")
                self.assertEqual(code, 0, err)
                listed[name] = [{k: v for k, v in job.items() if k != "user"} for job in json.loads(out)["jobs"]]
            self.assertEqual(len(listed["hdf5"]), 1, listed)
            self.assertEqual(listed["graphite"], listed["hdf5"])

        with self.subTest(what="a job Graphite has no series of"):
            code, out, err = self.report(*graphite, "4242")
            self.assertEqual(code, 1, out)
            self.assertIn(f"job 4242: no sample of it in Graphite at {self.url}", err)

        with self.subTest(what="without the prefix lmaster sends under"):
            code, out, err = self.report("--graphite", self.url, str(JOB))
            self.assertEqual(code, 1, out)
            self.assertIn("no sample of it", err)

    def test_a_graphite_that_does_not_answer_is_named(self):
        port = free_port()  # nothing listens there
        code, out, err = self.report("--graphite", f"http://127.0.0.1:{port}", str(JOB))
        self.assertEqual(code, 1, out)
        self.assertIn(f"http://127.0.0.1:{port}/metrics/find: ", err)

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), BrokenGraphite)
        self.addCleanup(server.server_close)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.shutdown)
        base = f"http://127.0.0.1:{server.server_address[1]}"
        code, out, err = self.report("--graphite", base + "/error", str(JOB))
        self.assertEqual(code, 1, out)
        self.assertIn(f"{base}/error/metrics/find: HTTP 500", err)
        code, out, err = self.report("--graphite", base + "/html", "--list")
        self.assertEqual(code, 1, out)
        self.assertIn(f"{base}/html/metrics/find: not JSON", err)

        code, out, err = self.report("--graphite", "ftp://127.0.0.1/", str(JOB))
        self.assertEqual(code, 1, out)
        self.assertIn("ftp://127.0.0.1/: not a Graphite URL", err)


if __name__ == "__main__":
    import unittest
    unittest.main()
