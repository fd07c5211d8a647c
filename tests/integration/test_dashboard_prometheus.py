"""make-dashboard --datasource prometheus against the real thing: lagent -> lmaster ->
[prometheus] remote_write -> Debian's Prometheus (prometheus_server.py: loopback, free port, own
storage, stopped by PID), every PromQL target of the node dashboard asked over the HTTP API.

Each target is evaluated as Grafana would: $host set to the agent's host, $__rate_interval as
Grafana computes it for the target's min interval and a data source scrape interval of 1 s (the
shortest window it can give), a repeated panel once per value its hidden variable's
label_values() query finds. Every one must return data. A target of a sensor lagent reports as
unavailable on this machine is skipped, by name and with lagent's reason.
"""
import json
import os
import re
import time
import unittest

from fructosa_test import (FructosaTestCase, LAGENT, LMASTER, MASTER_HOST, proc_with_fixture_mounts, read_text,
                           wait_for)
from prometheus_server import PrometheusServer

MAKE_DASHBOARD = os.environ.get("MAKE_DASHBOARD", "make-dashboard")
HOST = "testnode"
# The sensors of test_dashboard.py (they work on any Linux machine), every second.
# CPUTimes and NetIOCounters per CPU and NIC: their counters' panels repeat over the items.
SENSORS = ["BootTime", "CPUCount", "CPUPercent", "CPUStats", "CPUTimesPercent", "VirtualMemory",
           "SwapMemory", "DiskIOCounters", "DiskUsage", "DiskPartitions", "NetIFAddrs", "NetIFStats"]
SCRAPE_INTERVAL_S = 1  # the Grafana data source's "scrape interval" the windows are computed for


def seconds(text):
    match = re.fullmatch(r"(\d+)s", text)
    assert match, text
    return int(match.group(1))


def rate_interval(target):
    """Grafana's $__rate_interval: max($__interval + scrape interval, 4 x scrape interval), where
    $__interval is at least the target's min interval."""
    step = seconds(target.get("interval", f"{SCRAPE_INTERVAL_S}s"))
    return f"{max(step + SCRAPE_INTERVAL_S, 4 * SCRAPE_INTERVAL_S)}s", step


class DashboardPrometheusTest(FructosaTestCase):
    def setUp(self):
        super().setUp()
        self.prometheus = PrometheusServer(self, self.path("prometheus")).start()

    def label_values(self, query):
        """Grafana's label_values(selector, label) variable query, through Prometheus's API."""
        match = re.fullmatch(r"label_values\((.*), (\w+)\)", query)
        self.assertTrue(match, query)
        selector, label = match.groups()
        return self.prometheus.api(f"label/{label}/values", **{"match[]": selector, "start": time.time() - 600,
                                                                 "end": time.time()})

    def variable_values(self, variable):
        """The values of a hidden item variable: its query's names through its regex's group."""
        query = variable["query"]["query"].replace("$host", HOST)
        regex = re.compile(variable["regex"].strip("/"))
        return sorted({m.group(1) for m in map(regex.fullmatch, self.label_values(query)) if m})

    def queries(self, dashboard):
        """(panel title, sensor, PromQL, step) of every target, variables substituted."""
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        out = []
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                window, step = rate_interval(target)
                expr = target["expr"].replace("$__rate_interval", window).replace("$host", HOST)
                sensor = panel["title"].split(" ")[0]
                repeat = panel.get("repeat")
                if not repeat:
                    out.append((panel["title"], sensor, expr, step))
                    continue
                items = self.variable_values(variables[repeat])
                if not items:
                    out.append((panel["title"], sensor, f"(no value of ${repeat})", step))
                for item in items:
                    out.append((panel["title"].replace("$" + repeat, item), sensor,
                                expr.replace("${" + repeat + "}", item), step))
        return out

    def has_data(self, expr, step):
        if expr.startswith("(no value"):
            return False
        end = time.time()
        result = self.prometheus.query_range(expr, end - 30, end, step)["result"]
        return any(value not in ("NaN", "+Inf", "-Inf") for series in result for _t, value in series["values"])

    def test_every_target_of_the_node_dashboard_returns_data_from_prometheus(self):
        config = self.write("lmaster.conf", (
            f"[lmaster]\nhost = 127.0.0.1\nincoming data port = 0\ndata_dir = {self.path('lmaster-data')}\n"
            f"stats_interval = 1\n"
            f"[prometheus]\nurl = {self.prometheus.write_url}\nflush_interval = 0.2\nretry_max_interval = 1\n"))
        master = self.spawn("lmaster", [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        port = wait_for(lambda: self.listening_port(self.path("lmaster.err")) or self.exited(master),
                        what="lmaster to listen")
        proc = proc_with_fixture_mounts(self.dir)  # DiskPartitions' per-mount panels on any machine
        agent_conf = self.agent_config(port, SENSORS, interval=1, extra=f"proc_root = {proc}\n")
        agent_conf += ("[sensor:NetIOCounters]\ntime_interval = 1\npernic = true\n[sensor:lagent]\ntime_interval = 1\n"
                       "[sensor:CPUTimes]\ntime_interval = 1\npercpu = true\n"
                       "[sensor:NetConnections]\ntime_interval = 1\nkind = all\n")
        agent_conf = self.write("lagent.conf", agent_conf)
        agent = self.spawn("lagent", [LAGENT, "run", "-c", agent_conf, "-p", self.path("lagent.pid")])

        out = self.path("dashboards")
        made = self.run_tool([MAKE_DASHBOARD, "--datasource", "prometheus", "--agent-config", agent_conf,
                              "--kind", "node", "--out", out])
        self.assertEqual(made.returncode, 0, made.stderr)
        with open(os.path.join(out, "fructosa-node.json")) as f:
            node = json.load(f)

        # $host lists the agent, not the master (whose own sensor has a host label too).
        host_query = next(v for v in node["templating"]["list"] if v["name"] == "host")["query"]["query"]
        wait_for(lambda: HOST in self.label_values(host_query), timeout=30, what="the agent's host in Prometheus")

        # Sensors lagent cannot read here are skipped, by name, with lagent's reason.
        def unavailable():
            return dict(re.findall(r"sensor (\w+) unavailable: (.*)", read_text(self.path("lagent.err"))))

        missing = {}

        def all_have_data():
            missing.clear()
            skipped = unavailable()
            for title, sensor, expr, step in self.queries(node):
                if sensor not in skipped and not self.has_data(expr, step):
                    missing[title] = expr
            return not missing

        try:
            wait_for(all_have_data, timeout=40, what="every PromQL target to return data")
        except AssertionError:
            self.fail(f"{len(missing)} targets return no data:\n" +
                      "\n".join(f"  {title}: {expr}" for title, expr in missing.items()) +
                      f"\nlmaster log:\n{read_text(self.path('lmaster.err'))[-2000:]}")
        queries = self.queries(node)
        skipped = unavailable()
        self.assertFalse(self.has_data(f'fructosa_no_such_metric{{host="{HOST}"}}', 1))  # the check can fail
        print(f"\n{len(queries)} PromQL queries of {sum(len(p.get('targets', [])) for p in node['panels'])} targets "
              f"returned data", flush=True)
        for title, sensor, _expr, _step in queries:
            if sensor in skipped:
                print(f"skipped {title}: sensor {sensor} unavailable here: {skipped[sensor]}", flush=True)
        self.assertGreater(len([q for q in queries if q[1] not in skipped]), 60)
        # A repeated panel really repeats: every CPU, every NIC.
        self.assertGreaterEqual(len([q for q in queries if q[0].startswith("CPUTimes *.nice")]), os.cpu_count() or 1)
        self.assertTrue(any(q[0].startswith("NetIOCounters *.bytes_sent (lo)") for q in queries),
                        [q[0] for q in queries if q[0].startswith("NetIOCounters")])
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))


if __name__ == "__main__":
    unittest.main()
