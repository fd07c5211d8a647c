"""Fault tests (issue 6): lagent -> lmaster -> [hdf5], [Graphite] -> a real carbon-cache and
[elasticsearch] -> the Elasticsearch test server (es_test_server.py), with one fault injected per
test. Afterwards every reading time the agent was due to take must be stored exactly once in HDF5
and in Elasticsearch, and be in whisper.

- Readings fall on multiples of the interval (lagent/schedule.h), so the expected set is
  countable: for each lagent run, every multiple of the interval from its first stored reading
  to its last. Edges are checked too: the last stored reading is the one just before lagent
  stopped, and at lagent's last own sample (its `lagent` sensor, at x.5 s, when no 0.2 s
  reading is in progress) the stored readings equal `<sensor>.reads`. A reading time lagent
  itself skipped (busy machine: `<sensor>.missed`) is not a delivery loss and is subtracted.
- HDF5: exactly once = no two rows with the same (host, sensor, job, time), across the series of
  files (a new one at every lmaster start).
- Carbon: whisper cannot hold 0.2 s steps (its smallest step is 1 s; points within one second
  share one slot, the last write wins), and carbon has no way to tell a duplicate from an
  overwrite (lmaster's Graphite output sends the last seconds again after a reconnect by design).
  So the carbon check is per second: CPUStats reads every 1 s and whisper (1s:1h) must hold
  exactly HDF5's value at every expected second; for the 0.2 s sensors every expected second must
  hold one of the values HDF5 has in that second.
- Elasticsearch: read back with the official client (scan of each sensor's indices); exactly once =
  one document per (host, sensor, job, @timestamp), with HDF5's values. Documents have a
  deterministic _id, so a re-sent reading overwrites its document; how many were written more than
  once (the server's bulk log) is shown as "rewritten", which is not a duplicate.

Each scenario prints its figures (expected, found, duplicates, missing per output; recovery time)
to stderr. test_1 (kill -9 of lmaster) fails with an lmaster that acknowledges batches once they
are in memory: what it acknowledged but had not written yet is lost. It needs lmaster's journal
(acknowledge once durable, outputs replay from it).
Run with /usr/bin/python3 (Debian's h5py, python3-whisper and python3-elasticsearch).
"""
import calendar
import collections
import datetime
import glob
import os
import signal
import sys
import time
import unittest

from elasticsearch import Elasticsearch, helpers

import read_hdf5
from carbon_cache import CarbonCache, free_port
from es_test_server import EsTestServer
from test_elasticsearch import field_name, sensor_part
from fructosa_test import FructosaTestCase, LAGENT, LMASTER, read_text, wait_for

HOST = "testnode"
SECOND_NS = 1_000_000_000
FAST_NS = 200_000_000
# Cheap system sensors every 0.2 s, and one every 1 s (whisper's resolution) for the exact carbon
# check; lagent's own sensor every 0.5 s (x.0 and x.5) for its reads/missed counters.
FAST = ["VirtualMemory", "CPUTimes"]
SLOW = ["CPUStats"]
INTERVALS = {"VirtualMemory": FAST_NS, "CPUTimes": FAST_NS, "CPUStats": SECOND_NS, "lagent": SECOND_NS // 2}
CHECKED = FAST + SLOW


def grid(first, last, step):
    return set(range(first, last + 1, step))


def es_time_ns(timestamp):
    """Nanoseconds of an @timestamp as lmaster writes it (UTC, milliseconds: 0.2 s readings are exact)."""
    stamp = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    return calendar.timegm(stamp.timetuple()) * SECOND_NS + stamp.microsecond * 1000


def stdout_times(text, sensor):
    """Reading times (ns) of `sensor` of HOST in lmaster's [stdout] lines."""
    times = []
    for line in text.splitlines():
        fields = line.split(" ", 3)
        if len(fields) >= 3 and fields[1] == HOST and fields[2] == sensor:
            stamp = datetime.datetime.strptime(fields[0], "%Y-%m-%dT%H:%M:%S.%fZ")
            stamp = stamp.replace(tzinfo=datetime.timezone.utc)
            times.append(int(stamp.timestamp()) * SECOND_NS + stamp.microsecond * 1000)
    return times


class FaultTest(FructosaTestCase):
    def setUp(self):
        super().setUp()
        self.started = int(time.time()) - 5
        self.carbon = CarbonCache(self, self.path("carbon"), retention="1s:1h")
        self.carbon.start()
        self.es = EsTestServer().start()
        self.addCleanup(self.es.stop)
        # Fixed across lmaster restarts, so that the agent finds it again.
        self.master_port = free_port()
        self.masters = 0
        self.agents = 0
        self.runs = []  # (first spawn ns, end ns: kill or stop) of each lagent run

    # --- processes -----------------------------------------------------------------------------

    def start_master_process(self):
        self.masters += 1
        name = f"lmaster{self.masters}"
        config = self.write("lmaster.conf", (
            f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {self.master_port}\n"
            f"data_dir = {self.path('lmaster-data')}\nstats_interval = 1\n"
            f"[hdf5]\npath = {self.path('data.h5')}\nflush_interval = 0.5\n"
            f"[stdout]\n"
            f"[Graphite]\nhost = 127.0.0.1\ncarbon receiver pickle port = {self.carbon.pickle_port}\n"
            f"retry_max_interval = 1\n"
            f"[elasticsearch]\nurl = {self.es.url}\nflush_interval = 0.2\nretry_max_interval = 1\ntimeout = 3\n"))
        process = self.spawn(name, [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])

        def listening():
            if process.poll() is not None:
                raise AssertionError(f"{name} exited with {process.returncode} (negative: killed by that signal)\n"
                                     + self.logs())
            return self.listening_port(self.path(name + ".err"))
        wait_for(listening, what=f"{name} to listen")
        self.master = process
        return process

    def start_agent_process(self):
        self.agents += 1
        name = f"lagent{self.agents}"
        text = (f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {self.master_port}\n"
                f"[lagent]\nhost = {HOST}\nspool_dir = {self.path('lagent-spool')}\n"
                f"[sensor:lagent]\ntime_interval = 0.5\n")
        for sensor in CHECKED:
            text += f"[sensor:{sensor}]\ntime_interval = {INTERVALS[sensor] / SECOND_NS}\n"
        config = self.write("lagent.conf", text)
        self.runs.append([time.time_ns(), None])
        self.agent = self.spawn(name, [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])
        return self.agent

    def check_running(self):
        for process, what in ((self.agent, "lagent"), (self.master, "lmaster")):
            if process.poll() is not None:
                raise AssertionError(f"{what} exited with {process.returncode}:\n" + self.logs())
        return None

    def logs(self):
        text = ""
        for path in sorted(glob.glob(self.path("l*.err"))) + [self.carbon.log]:
            text += f"--- {os.path.basename(path)} (end)\n{read_text(path)[-2000:]}\n"
        return text

    # --- what arrived --------------------------------------------------------------------------

    def received_times(self, sensor):
        """Reading times of `sensor` that the lmasters printed so far ([stdout])."""
        times = []
        for path in glob.glob(self.path("lmaster*.out")):
            times += stdout_times(read_text(path), sensor)
        return times

    def whisper_times(self, sensor, key):
        return self.carbon.stored(f"{HOST}.{sensor}.{key}", self.started)

    def es_times(self, sensor):
        """Reading times of HOST's `sensor` the test server holds now (from the deterministic _id
        host|sensor|job|time; a cheap look while waiting, the check reads back with the client)."""
        return {int(doc_id.rsplit("|", 1)[1]) for _, doc_id in self.es.documents(f"fructosa_{sensor_part(sensor)}-*")
                if doc_id.startswith(f"{HOST}|{sensor}|")}

    def start_pipeline(self):
        self.start_master_process()
        self.start_agent_process()
        # Running once carbon and Elasticsearch hold a few seconds of the 1 s sensor.
        wait_for(lambda: (len(self.whisper_times("CPUStats", "ctx_switches")) >= 3
                          and len(self.es_times("CPUStats")) >= 3) or self.check_running(),
                 timeout=30, what="3 seconds of CPUStats in whisper and Elasticsearch")

    def recovery(self, fault_start_ns, fault_end_ns, readings_during_fault=True, timeout=45):
        """Seconds after `fault_end_ns` until (a) lmaster has received every VirtualMemory reading
        taken during the fault and one taken after it, (b) whisper holds every CPUStats second
        of the fault and one after it, and (c) Elasticsearch holds every VirtualMemory reading of
        the fault and one after it (the spool and the outputs send what waited oldest first).
        None for one that did not recover within `timeout` (verify() then says what is missing)."""
        inside = (lambda step: grid((fault_start_ns // step + 2) * step, (fault_end_ns // step - 1) * step, step)
                  if readings_during_fault else set())

        def lmaster_has():
            self.check_running()
            times = set(self.received_times("VirtualMemory"))
            return inside(FAST_NS) <= times and any(t >= fault_end_ns for t in times)

        def carbon_has():
            self.check_running()
            seconds = {s * SECOND_NS for s in self.whisper_times("CPUStats", "ctx_switches")}
            return inside(SECOND_NS) <= seconds and any(s >= fault_end_ns for s in seconds)

        def es_has():
            self.check_running()
            times = self.es_times("VirtualMemory")
            return inside(FAST_NS) <= times and any(t >= fault_end_ns for t in times)

        # Polled together, so that each time is its own and not bounded by the one before it.
        conditions = [(lmaster_has, "lmaster to receive the readings of the fault and after it"),
                      (carbon_has, "whisper to hold the seconds of the fault and after it"),
                      (es_has, "Elasticsearch to hold the readings of the fault and after it")]
        result = [None] * len(conditions)

        def all_recovered():
            for i, (condition, _) in enumerate(conditions):
                if result[i] is None and condition():
                    result[i] = (time.time_ns() - fault_end_ns) / 1e9
            return None not in result
        try:
            wait_for(all_recovered, timeout=timeout, what="the outputs to recover")
        except AssertionError as error:
            late = "; ".join(what for (_, what), r in zip(conditions, result) if r is None)
            print(f"\n{error}: still waiting for {late}", file=sys.stderr)
        return result

    def run_on(self, seconds):
        """Lets the pipeline run for `seconds` more readings (bounded by the readings lmaster gets,
        not by a sleep: waits until it has received a reading taken `seconds` from now)."""
        until = time.time_ns() + int(seconds * SECOND_NS)
        wait_for(lambda: self.check_running() or any(t >= until for t in self.received_times("CPUStats")),
                 timeout=seconds + 30, what=f"{seconds} s more of readings")

    def kill_agent_between_readings(self):
        # Between two 0.2 s readings and away from lagent's x.0/x.5 ones, so that every reading
        # taken has had its batch written to the spool (batch_delay is 0.05 s): kill -9 can only
        # lose a reading lagent has not spooled yet, which no spool can keep.
        wait_for(lambda: 0.08 <= (time.time() % 1.0) % 0.2 < 0.16 and not 0.4 <= time.time() % 1.0 < 0.6,
                 what="a moment between two readings")
        self.runs[-1][1] = time.time_ns()
        self.agent.send_signal(signal.SIGKILL)
        self.agent.wait(timeout=30)

    def finish(self):
        """Stops lagent (it waits for its acknowledgements) and lmaster (it flushes its outputs)."""
        self.runs[-1][1] = time.time_ns()
        self.assertEqual(self.stop(self.agent), 0, self.logs())
        self.assertEqual(self.stop(self.master), 0, self.logs())

    def hdf5_rows(self):
        """{sensor: [(time, job, {key: value})]} of HOST over every file of the series."""
        rows = {}
        for path in read_hdf5.series_files(self.path("data.h5")):
            try:
                content = read_hdf5.read_file(path)
            except OSError:  # left open by a writer that died and not repaired: SWMR reads it
                content = read_hdf5.read_file(path, swmr=True)
            for sensor, table in content.get(HOST, {}).items():
                columns = table["columns"]
                for i, (t, job) in enumerate(zip(table["time"], table["job"])):
                    values = {k: c["values"][i] for k, c in columns.items() if c["values"][i] is not None}
                    rows.setdefault(sensor, []).append((t, job, values))
        return rows

    # --- the check -----------------------------------------------------------------------------

    def verify(self, scenario, recovery_s):
        rows = self.hdf5_rows()
        problems = []
        seconds_text = lambda s: "not within the deadline" if s is None else f"{s:.2f} s"
        figures = [f"FAULT {scenario}: recovery lmaster {seconds_text(recovery_s[0])}, carbon "
                   f"{seconds_text(recovery_s[1])}, elasticsearch {seconds_text(recovery_s[2])} (from the "
                   f"end of the fault until what was read during it and a reading after it arrived)"]
        health = sorted(rows.get("lagent", []))
        expected = {}
        for sensor in CHECKED:
            step = INTERVALS[sensor]
            sensor_rows = rows.get(sensor, [])
            keys = [(t, job) for t, job, _ in sensor_rows]
            unique = set(keys)
            duplicates = len(keys) - len(unique)
            times = {t for t, _ in unique}
            off_grid = sorted(t for t in times if t % step)
            want = set()
            missed = 0
            for run, (start, end) in enumerate(self.runs, 1):
                in_run = sorted(t for t in times if start <= t <= end)
                if not in_run:
                    problems.append(f"{sensor}: nothing stored from lagent run {run}")
                    continue
                want |= grid(in_run[0], in_run[-1], step)
                # The edges: the reading just before lagent stopped arrived; and at lagent's last
                # own sample at x.5 s of this run, stored readings == reads (none lost at the start).
                if in_run[-1] < end - 3 * step:
                    problems.append(f"{sensor}: run {run}'s last stored reading {in_run[-1]} is more than "
                                    f"3 intervals before lagent stopped ({end})")
                counters = [(t, v) for t, _, v in health
                            if start <= t <= end and t % SECOND_NS == SECOND_NS // 2 and f"{sensor}.reads" in v]
                if not counters:
                    problems.append(f"{sensor}: no lagent sample at x.5 s from run {run}")
                    continue
                t, values = counters[-1]
                missed += int(values.get(f"{sensor}.missed", 0))
                stored = sum(1 for s in in_run if s < t)
                if stored != int(values[f"{sensor}.reads"]):
                    problems.append(f"{sensor}: run {run}: lagent read {int(values[f'{sensor}.reads'])} times "
                                    f"before {t}, HDF5 holds {stored}")
            expected[sensor] = want
            missing = sorted(want - times)
            figures.append(f"  hdf5   {sensor:13} expected {len(want):4} found {len(want & times):4} "
                           f"duplicates {duplicates:3} missing {len(missing):3} (lagent skipped {missed})"
                           + (f" off-grid {len(off_grid)}" if off_grid else ""))
            if duplicates:
                seen = set()
                dup = sorted({k for k in keys if k in seen or seen.add(k)})
                problems.append(f"hdf5 {sensor}: {duplicates} duplicate row(s), e.g. (time, job) {dup[:5]}")
            if len(missing) > missed:
                problems.append(f"hdf5 {sensor}: {len(missing)} reading time(s) missing, lagent skipped {missed}: "
                                f"{self.spans(missing, step)}")
            if off_grid:
                problems.append(f"hdf5 {sensor}: times not on the {step} ns grid: {off_grid[:5]}")

        problems += self.verify_carbon(rows, expected, figures)
        problems += self.verify_elasticsearch(rows, expected, figures)
        report = "\n".join(figures)
        print("\n" + report, file=sys.stderr, flush=True)
        if problems:
            self.fail(f"{scenario}:\n" + "\n".join(problems) + "\n" + report + "\n" + self.logs())

    def verify_carbon(self, rows, expected, figures):
        """Per second (whisper's step): every expected second holds HDF5's value (1 s sensor) or
        one of HDF5's values of that second (0.2 s sensors). Waits until whisper is complete, up
        to a deadline (carbon writes about once a second)."""
        values = {}  # (sensor, key) -> {second: set of values HDF5 holds}
        for sensor in CHECKED:
            for t, _, metrics in rows.get(sensor, []):
                for key, value in metrics.items():
                    values.setdefault((sensor, key), {}).setdefault(t // SECOND_NS, set()).add(value)
        seconds = {sensor: {t // SECOND_NS for t in expected[sensor]} for sensor in CHECKED}

        def check():
            result = {}
            for sensor in CHECKED:
                keys = [key for (s, key) in values if s == sensor]
                missing, wrong = set(), set()
                for key in keys:
                    stored = self.whisper_times(sensor, key)
                    known = values[(sensor, key)]
                    for second in seconds[sensor]:
                        if second not in stored:
                            missing.add(second)
                        elif second in known and stored[second] not in known[second]:
                            wrong.add(second)
                result[sensor] = (keys, missing, wrong)
            return result
        try:
            wait_for(lambda: all(not m and not w for _, m, w in check().values()), timeout=20,
                     what="whisper to hold every expected second")
        except AssertionError:
            pass  # counted below
        problems = []
        for sensor, (keys, missing, wrong) in check().items():
            want = seconds[sensor]
            figures.append(f"  carbon {sensor:13} expected {len(want):4} found {len(want - missing):4} "
                           f"duplicates  n/a missing {len(missing):3} wrong {len(wrong)} "
                           f"(seconds with every one of {len(keys)} paths)")
            if not keys:
                problems.append(f"carbon {sensor}: no values in HDF5 to look for")
            if missing:
                problems.append(f"carbon {sensor}: {len(missing)} second(s) missing in whisper: "
                                f"{self.spans(sorted(s * SECOND_NS for s in missing), SECOND_NS)}")
            if wrong:
                problems.append(f"carbon {sensor}: {len(wrong)} second(s) hold a value HDF5 does not: {sorted(wrong)[:5]}")
        return problems

    def verify_elasticsearch(self, rows, expected, figures):
        """One document per (host, sensor, job, @timestamp) at every expected time, holding HDF5's
        values. lmaster has stopped (it drains its outputs first), so nothing more will come."""
        writes = collections.Counter()  # _id -> successful writes, from the server's bulk log
        for entry in self.es.stats()["log"]:
            for item in entry.get("items", []):
                if item["status"] in (200, 201):
                    writes[item["id"]] += 1
        problems = []
        with Elasticsearch([self.es.url]) as es:
            es.indices.refresh(index="fructosa_*")
            for sensor in CHECKED:
                hdf5 = {(t, job): values for t, job, values in rows.get(sensor, [])}
                per_key = collections.Counter()
                wrong, rewritten = [], 0
                for hit in helpers.scan(es, index=f"fructosa_{sensor_part(sensor)}-*", size=1000,
                                        query={"query": {"term": {"host": HOST}}}):
                    source = hit["_source"]
                    key = (es_time_ns(source["@timestamp"]), source["job"])
                    per_key[(source["host"], source["sensor"], *key)] += 1
                    rewritten += writes[hit["_id"]] > 1
                    stored = {k: v for k, v in source["metrics"].items() if v is not None}
                    if key in hdf5 and stored != {field_name(k): v for k, v in hdf5[key].items()}:
                        wrong.append(key)
                times = {t for (_, s, t, _) in per_key if s == sensor}
                duplicates = sum(n - 1 for n in per_key.values())
                want = expected[sensor]
                missing = sorted(want - times)
                figures.append(f"  es     {sensor:13} expected {len(want):4} found {len(want & times):4} "
                               f"duplicates {duplicates:3} missing {len(missing):3} wrong {len(wrong)} "
                               f"(documents {sum(per_key.values())}, rewritten {rewritten})")
                if duplicates:
                    dup = sorted(k for k, n in per_key.items() if n > 1)
                    problems.append(f"elasticsearch {sensor}: {duplicates} duplicate document(s), e.g. {dup[:5]}")
                if missing:
                    problems.append(f"elasticsearch {sensor}: {len(missing)} reading time(s) missing: "
                                    f"{self.spans(missing, INTERVALS[sensor])}")
                if wrong:
                    problems.append(f"elasticsearch {sensor}: {len(wrong)} document(s) differ from HDF5, e.g. "
                                    f"(time, job) {wrong[:5]}")
        return problems

    @staticmethod
    def spans(times, step):
        """[(first, last, count)] of runs of consecutive grid times, in UTC text."""
        spans = []
        for t in times:
            if spans and t == spans[-1][1] + step:
                spans[-1][1] = t
                spans[-1][2] += 1
            else:
                spans.append([t, t, 1])
        text = lambda ns: datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]
        return ", ".join(f"{text(a)}..{text(b)} ({n})" for a, b, n in spans[:10])

    # --- the scenarios -------------------------------------------------------------------------

    def test_1_lmaster_kill_9_down_5_s_then_restarted(self):
        self.start_pipeline()
        start = time.time_ns()
        self.master.send_signal(signal.SIGKILL)
        self.master.wait(timeout=30)
        time.sleep(5)  # the outage itself (the fault's length), not a wait for a condition
        self.start_master_process()  # same port, data_dir and HDF5 path
        recovery = self.recovery(start, time.time_ns())
        self.run_on(2)
        self.finish()
        self.verify("lmaster kill -9, 5 s down, restarted", recovery)

    def test_2_carbon_stopped_10_s(self):
        self.start_pipeline()
        start = time.time_ns()
        self.carbon.stop()
        time.sleep(10)  # the outage
        self.carbon.start()  # same ports and whisper files
        recovery = self.recovery(start, time.time_ns())
        self.run_on(2)
        self.finish()
        self.verify("carbon stopped 10 s", recovery)
        self.assertIn("graphite: lost the connection to carbon", read_text(self.path("lmaster1.err")))

    def test_3_agent_master_link_cut_10_s(self):
        # The link is cut by stopping lmaster (SIGTERM: it flushes its outputs and exits) and
        # starting it again on the same port: the agent keeps its batches in its spool meanwhile.
        self.start_pipeline()
        start = time.time_ns()
        self.assertEqual(self.stop(self.master), 0, self.logs())
        time.sleep(10)  # the outage
        self.start_master_process()
        recovery = self.recovery(start, time.time_ns())
        self.run_on(2)
        self.finish()
        self.verify("agent-master link cut (lmaster stopped) 10 s", recovery)

    def test_4_lagent_kill_9_then_restarted(self):
        self.start_pipeline()
        start = time.time_ns()
        self.kill_agent_between_readings()
        self.start_agent_process()  # same spool_dir
        # No readings are taken while no lagent runs: recovered once readings arrive again.
        recovery = self.recovery(start, time.time_ns(), readings_during_fault=False)
        self.run_on(2)
        self.finish()
        self.verify("lagent kill -9, restarted", recovery)

    def test_5_elasticsearch_answers_429_then_500_for_10_s(self):
        # Every _bulk request fails for 10 s: 429 (rejected execution) for 5 s, then 500. lmaster
        # retries with back-off up to retry_max_interval (1 s), so each status is met several times.
        self.start_pipeline()
        start = time.time_ns()
        self.es.fail_next(10**9, status=429, path_contains="_bulk")
        time.sleep(5)  # the outage
        with self.es.state.lock:  # switched at once: no request slips through in between
            self.es.clear_failures()
            self.es.fail_next(10**9, status=500, path_contains="_bulk")
        time.sleep(5)  # the outage
        self.es.clear_failures()
        recovery = self.recovery(start, time.time_ns())
        self.run_on(2)
        self.finish()
        self.verify("elasticsearch answers 429 for 5 s, then 500 for 5 s", recovery)
        injected = collections.Counter(e["status"] for e in self.es.stats()["log"] if e.get("injected"))
        print(f"  es     injected failures: {dict(injected)}", file=sys.stderr, flush=True)
        self.assertGreaterEqual(injected[429], 3, injected)
        self.assertGreaterEqual(injected[500], 3, injected)
        self.assertIn(self.es.url, read_text(self.path("lmaster1.err")), "the failures name the node")


if __name__ == "__main__":
    unittest.main()
