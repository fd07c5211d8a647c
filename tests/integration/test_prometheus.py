"""lagent -> lmaster -> [prometheus] -> Debian's real Prometheus (remote_write receiver), read back
with PromQL over the HTTP API.

lmaster also writes [hdf5], which tells exactly what it received (values, units, kinds, labels):
every point of the agent must be in Prometheus once, under the name and labels the mapping
(prometheus_server.py's oracle) gives, with the exact value; and nothing else. The outage test
stops Prometheus for 10 s in the middle of a run. Run with /usr/bin/python3 (Debian's h5py).
"""
import math
import os
import signal
import time
import unittest

import read_hdf5
from fructosa_test import (FructosaTestCase, LAGENT, LMASTER, MASTER_HOST, free_port, proc_with_fixture_mounts,
                           read_text, wait_for)
from prometheus_server import PrometheusServer, metric_name, series_labels

HOST = "testnode"
SENSORS = ["VirtualMemory", "NetIOCounters", "CPUTimes", "DiskPartitions", "CPUCount"]


def expected_points(h5_path, host=HOST):
    """{(name, frozenset(labels)): {time_ms: value}} of every point lmaster wrote to HDF5 (every
    file of the series), named by the oracle; NaN (None in read_hdf5) left out, as HDF5 cannot
    tell a NaN from a key the sample did not have."""
    expected = {}
    for path in read_hdf5.series_files(h5_path):
        try:
            content = read_hdf5.read_file(path)
        except OSError:
            content = read_hdf5.read_file(path, swmr=True)
        for sensor, table in content.get(host, {}).items():
            for row, (time_ns, job) in enumerate(zip(table["time"], table["job"])):
                labels = {key: values[row] for key, values in table["labels"].items() if values[row] != ""}
                for key, column in table["columns"].items():
                    value = column["values"][row]
                    if value is None:
                        continue
                    name = metric_name(sensor, key, column["unit"], column["kind"])
                    series = (name, frozenset(series_labels(host, job, key, labels).items()))
                    points = expected.setdefault(series, {})
                    assert time_ns // 1_000_000 not in points, f"two rows of {series} in one millisecond"
                    points[time_ns // 1_000_000] = value
    return expected


class PrometheusTest(FructosaTestCase):
    def setUp(self):
        super().setUp()
        self.prometheus = PrometheusServer(self, self.path("prometheus")).start()
        self.masters = 0

    def start_master(self, extra="", port=0):
        self.masters += 1
        name = f"lmaster{self.masters}"
        config = self.write("lmaster.conf", (
            f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\ndata_dir = {self.path('lmaster-data')}\n"
            f"stats_interval = 0.5\n"
            f"[hdf5]\npath = {self.path('data.h5')}\nflush_interval = 0.5\n"
            f"[prometheus]\nurl = {self.prometheus.write_url}\nflush_interval = 0.2\nretry_max_interval = 1\n"
            f"timeout = 3\n{extra}"))
        process = self.spawn(name, [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        log = self.path(name + ".err")

        def listening():
            if process.poll() is not None:
                raise AssertionError(f"lmaster exited with {process.returncode}:\n{read_text(log)}")
            return self.listening_port(log)
        return process, wait_for(listening, what="lmaster to listen")

    def start_agent(self, port):
        proc = proc_with_fixture_mounts(self.dir)  # DiskPartitions with device labels on any machine
        config = self.write("lagent.conf", self.agent_config(port, SENSORS, extra=f"proc_root = {proc}\n"))
        return self.spawn("lagent", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])

    def stored_times(self, name):
        """Times (ms) of HOST's samples of one series in Prometheus now."""
        found = self.prometheus.raw_samples(f'{name}{{host="{HOST}"}}', window="10m")
        return sorted(t for points in found.values() for t in points)

    def assert_prometheus_holds_exactly(self, expected):
        stored = self.prometheus.raw_samples(f'{{host="{HOST}"}}')
        missing, wrong, extra = [], [], []
        for series, points in expected.items():
            got = stored.get(series, {})
            for t, value in points.items():
                if t not in got:
                    missing.append((series[0], t))
                elif got[t] != value:
                    wrong.append((series[0], t, value, got[t]))
        for series, points in stored.items():
            want = expected.get(series, {})
            # A NaN HDF5 shows as None (left out of `expected`): allowed as NaN only.
            extra += [(series, t) for t, v in points.items() if t not in want and not math.isnan(v)]
        total = sum(len(p) for p in expected.values())
        self.assertGreater(total, 100)
        self.assertEqual((missing[:5], wrong[:5], extra[:5]), ([], [], []),
                         f"of {total} points: {len(missing)} missing, {len(wrong)} wrong, {len(extra)} extra\n"
                         + self.logs())
        return total

    def logs(self):
        text = ""
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".err"):
                text += f"--- {name}\n{read_text(self.path(name))[-3000:]}\n"
        return text + f"--- prometheus\n{self.prometheus.log()[-3000:]}"

    def master_counter(self, key):
        """The last value of the lmaster sensor's `key` in HDF5."""
        tables = read_hdf5.read_file(self.path("data.h5")).get(MASTER_HOST, {})
        values = [v for v in tables["lmaster"]["columns"][key]["values"] if v is not None]
        return values[-1]

    def test_every_point_is_stored_once_with_its_exact_value_and_counters_work_with_rate(self):
        master, port = self.start_master()
        agent = self.start_agent(port)
        used = metric_name("VirtualMemory", "used", "bytes", "gauge")
        wait_for(lambda: len(self.stored_times(used)) >= 20 or agent.poll() is not None, timeout=40,
                 what="4 s of VirtualMemory in Prometheus")
        self.assertEqual(self.stop(agent), 0, self.logs())
        self.assertEqual(self.stop(master), 0, self.logs())
        expected = expected_points(self.path("data.h5"))
        self.assert_prometheus_holds_exactly(expected)
        names = {name for name, _ in expected}
        self.assertIn("fructosa_cpu_times_user_seconds_total", names)
        self.assertIn("fructosa_cpu_count", names)  # a scalar sensor
        # DiskPartitions' item labels (tests/fixtures/partitions) are on its per-mount series.
        self.assertTrue(any(name.startswith("fructosa_disk_partitions_") and dict(labels).get("device")
                            for name, labels in expected), sorted(names))

        # A counter works with rate(): irate() over the raw points is exactly the last step's slope.
        counter = "fructosa_cpu_times_user_seconds_total"
        (series,) = [s for s in expected if s[0] == counter]
        times = sorted(expected[series])
        t1, t2 = times[-2], times[-1]
        at = t2 / 1000
        (result,) = self.prometheus.query(f'irate({counter}{{host="{HOST}"}}[1s])', time=at)["result"]
        slope = (expected[series][t2] - expected[series][t1]) / ((t2 - t1) / 1000)
        self.assertAlmostEqual(float(result["value"][1]), slope, places=9)
        # A window of 1 s holds about 5 points at 0.2 s, even where a loaded machine spaced them.
        ranged = self.prometheus.query_range(f'rate({counter}{{host="{HOST}"}}[1s])', times[0] / 1000 + 1, at, 0.5)
        values = [float(v) for _, v in ranged["result"][0]["values"]]
        self.assertGreater(len(values), 2)
        self.assertTrue(all(v >= 0 for v in values) and any(v > 0 for v in values), values)

        # lmaster's own sensor reaches Prometheus too, with this output's counters.
        sent = self.prometheus.query(f'max_over_time(fructosa_lmaster_prometheus_sent_total{{host="{MASTER_HOST}"}}[1h])')
        self.assertGreater(float(sent["result"][0]["value"][1]), 0)
        self.assertEqual(self.master_counter("prometheus.dropped"), 0)

    def test_prometheus_stopped_10_s_loses_and_duplicates_nothing(self):
        master, port = self.start_master()
        agent = self.start_agent(port)
        used = metric_name("VirtualMemory", "used", "bytes", "gauge")
        wait_for(lambda: len(self.stored_times(used)) >= 5 or agent.poll() is not None, timeout=40,
                 what="1 s of VirtualMemory in Prometheus")
        down = time.time()
        self.prometheus.stop()
        time.sleep(10)  # the outage itself, not a wait for a condition
        up = time.time()
        self.prometheus.start()  # same port and storage

        # Recovered once Prometheus holds every 0.2 s reading of the outage and one after it.
        def recovered():
            if agent.poll() is not None or master.poll() is not None:
                raise AssertionError("a process exited:\n" + self.logs())
            times = self.stored_times(used)
            grid = range(int(down * 5 + 2) * 200, int(up * 5 - 1) * 200, 200)
            return set(grid) <= set(times) and times[-1] > up * 1000
        wait_for(recovered, timeout=40, what="the readings of the outage in Prometheus")
        self.assertEqual(self.stop(agent), 0, self.logs())
        self.assertEqual(self.stop(master), 0, self.logs())
        total = self.assert_prometheus_holds_exactly(expected_points(self.path("data.h5")))
        log = read_text(self.path("lmaster1.err"))
        self.assertIn(self.prometheus.write_url, log, "the failures name the server")
        self.assertGreater(self.master_counter("prometheus.retried"), 0)
        self.assertEqual(self.master_counter("prometheus.dropped"), 0)
        # Prometheus refused nothing (it logs out-of-order and duplicate samples it is sent).
        for start in range(1, self.prometheus.starts + 1):
            text = read_text(os.path.join(self.prometheus.dir, f"prometheus{start}.err"))
            self.assertNotIn("out of order", text.lower())
            self.assertNotIn("duplicate sample", text.lower())
        print(f"\nprometheus stopped {up - down:.1f} s: {total} points stored exactly once", flush=True)

    def test_lmaster_kill_9_then_restarted_replays_its_journal_in_order(self):
        # lmaster dies after Prometheus stored requests whose journal position it had not saved
        # yet: the restarted lmaster sends those records again. Nothing may be missing or wrong;
        # points Prometheus refuses as already stored (out of order) are dropped and counted.
        port = free_port()
        master, _ = self.start_master(port=port)
        agent = self.start_agent(port)
        used = metric_name("VirtualMemory", "used", "bytes", "gauge")
        wait_for(lambda: len(self.stored_times(used)) >= 5 or agent.poll() is not None, timeout=40,
                 what="1 s of VirtualMemory in Prometheus")
        master.send_signal(signal.SIGKILL)
        master.wait(timeout=30)
        killed = time.time()
        master, _ = self.start_master(port=port)
        wait_for(lambda: (self.stored_times(used) or [0])[-1] > (killed + 2) * 1000 or master.poll() is not None,
                 timeout=40, what="readings after the restart in Prometheus")
        self.assertEqual(self.stop(agent), 0, self.logs())
        self.assertEqual(self.stop(master), 0, self.logs())
        self.assert_prometheus_holds_exactly(expected_points(self.path("data.h5")))
        # Names kept their units across the restart: nothing was sent without the catalog.
        self.assertNotIn("no agent described", read_text(self.path("lmaster2.err")))


if __name__ == "__main__":
    unittest.main()
