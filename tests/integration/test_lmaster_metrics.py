"""[lmaster] metrics_listen scraped by Debian's real Prometheus (prometheus_server.py: loopback,
free port, own storage, stopped by PID): lmaster serves its own health on GET /metrics, an
lagent sends to it, and PromQL over what Prometheus scraped gives the agent up, the points
received and each output's counters, with the types the exposition declared.
"""
import re
import unittest
import urllib.request

from fructosa_test import FructosaTestCase, LAGENT, LMASTER, read_text, wait_for
from prometheus_server import PrometheusServer

HOST = "testnode"


class LmasterMetricsTest(FructosaTestCase):
    def test_prometheus_scrapes_lmasters_health(self):
        config = self.write("lmaster.conf", (
            f"[lmaster]\nhost = 127.0.0.1\nincoming data port = 0\ndata_dir = {self.path('lmaster-data')}\n"
            f"stats_interval = 0.5\nmetrics_listen = 127.0.0.1:0\n"
            f"[hdf5]\npath = {self.path('data.h5')}\nflush_interval = 0.5\n"))
        master = self.spawn("lmaster", [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        port = wait_for(lambda: self.listening_port(self.path("lmaster.err")) or self.exited(master),
                        what="lmaster to listen")
        url = re.search(r"serving lmaster's metrics on (http://\S+/metrics)", read_text(self.path("lmaster.err")))
        self.assertTrue(url, read_text(self.path("lmaster.err")))
        url = url.group(1)
        agent_conf = self.write("lagent.conf", self.agent_config(port, ["VirtualMemory", "CPUTimes"]))
        agent = self.spawn("lagent", [LAGENT, "run", "-c", agent_conf, "-p", self.path("lagent.pid")])

        target = url.removeprefix("http://").removesuffix("/metrics")
        prometheus = PrometheusServer(self, self.path("prometheus"), scrape={"lmaster": target}).start()

        def value(promql):
            result = prometheus.query(promql)["result"]
            return float(result[0]["value"][1]) if result else None

        up = f'fructosa_lmaster_agent_{HOST}_up{{job="lmaster"}}'
        wait_for(lambda: value(up) == 1 and (value('fructosa_lmaster_received_total{job="lmaster"}') or 0) > 0,
                 timeout=30, what="the agent up and points received in what Prometheus scraped")
        self.assertEqual(value('up{job="lmaster"}'), 1)
        self.assertGreater(value('fructosa_lmaster_hdf5_sent_total{job="lmaster"}'), 0)
        self.assertEqual(value('fructosa_lmaster_hdf5_dropped_total{job="lmaster"}'), 0)
        self.assertIsNotNone(value('fructosa_lmaster_hdf5_queued{job="lmaster"}'))
        self.assertGreater(value('fructosa_lmaster_journal_bytes{job="lmaster"}'), 0)
        self.assertEqual(value('fructosa_lmaster_agents{job="lmaster"}'), 1)
        # The counters grow between scrapes: rate() over them works.
        wait_for(lambda: (value('rate(fructosa_lmaster_received_total{job="lmaster"}[3s])') or 0) > 0, timeout=30,
                 what="a rate of points received")
        # Prometheus kept the types and help texts the exposition declared.
        metadata = prometheus.api("targets/metadata", match_target='{job="lmaster"}')
        types = {entry["metric"]: entry["type"] for entry in metadata}
        self.assertEqual(types.get("fructosa_lmaster_received_total"), "counter", types)
        self.assertEqual(types.get(f"fructosa_lmaster_agent_{HOST}_up"), "gauge")
        self.assertTrue(all(entry["help"] for entry in metadata))
        # The scrape carries the master's host label, as remote_write would.
        series = prometheus.query('fructosa_lmaster_batches_total{job="lmaster"}')["result"][0]["metric"]
        self.assertTrue(series.get("host"), series)
        with urllib.request.urlopen(url, timeout=10) as answer:
            self.assertIn("text/plain; version=0.0.4", answer.headers["Content-Type"])
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))


if __name__ == "__main__":
    unittest.main()
