"""fructosa-report on jobs of hardware this machine lacks: the fixtures of tests/fixtures/report
(GPUs, RAPL, IPMI, InfiniBand, PerfHW, Taskstats; metrics a job pushed), written by a real lmaster from the samples of
scenarios.py. What the report must say is derived from the scenarios' rates, not from the report.
The fixtures are also remade with today's lmaster (make_fixtures.py) and must report the same.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import shutil
import unittest

import h5py

from fructosa_test import FIXTURES, LMASTER

sys.path.insert(0, os.path.join(FIXTURES, "report"))
import scenarios as s  # noqa: E402
import make_fixtures  # noqa: E402

REPORT = os.environ.get("FRUCTOSA_REPORT", "fructosa-report")
REPLAY = os.environ.get("REPLAY_SAMPLES", "replay_samples")
FIXTURE_DIR = os.path.join(FIXTURES, "report")


def report(fixture, *args, directory=FIXTURE_DIR):
    done = subprocess.run([REPORT, "--slurm", "no", "-d", os.path.join(directory, fixture + ".h5"), *args],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise AssertionError(f"fructosa-report {' '.join(args)} on {fixture}: {done.returncode}\n{done.stderr}")
    return done.stdout


def job(fixture, job_id, directory=FIXTURE_DIR):
    return json.loads(report(fixture, "--format", "json", str(job_id), directory=directory))


def node(document, host):
    return next(n for n in document["nodes"] if n["host"] == host)


def rules(document):
    return [note["rule"] for note in document["notes"]]


class ReportFixtures(unittest.TestCase):
    def test_gpu_allocated_but_idle(self):
        d = job("gpu", s.GPU_JOB)
        self.assertEqual(d["verdict"], "gpu_idle")
        self.assertIn("cpu_underused", rules(d))
        f = d["figures"]
        self.assertEqual((f["gpus_allocated"], f["gpus_used"], f["gpus_without_process"]), (2, 1, 1))
        self.assertAlmostEqual(f["cores_used"], s.GPU_CORES_USED)
        gpus = {g["gpu"]: g for g in node(d, s.GPU_HOST)["gpus"]}
        busy, idle = gpus[str(s.GPU_BUSY_INDEX)], gpus[str(s.GPU_IDLE_INDEX)]
        # The cgroup allows minors; the report matches them to NVML's indices.
        self.assertEqual(busy["minor"], s.GPU_MINORS[s.GPU_BUSY_INDEX])
        self.assertEqual(idle["minor"], s.GPU_MINORS[s.GPU_IDLE_INDEX])
        self.assertTrue(busy["allocated"] and busy["used"])
        self.assertTrue(idle["allocated"] and not idle["used"])
        rows = [s.GPU_BUSY_UTILIZATION[step % 5] for step in range(s.STEPS + 1)]
        self.assertAlmostEqual(busy["utilization"], sum(rows) / len(rows) / 100)
        self.assertEqual(idle["utilization"], 0)
        self.assertEqual(busy["memory_peak_bytes"], s.GPU_BUSY_MEMORY)
        self.assertIn("ask for 1 GPU", d["notes"][0]["text"])

    def test_energy_whole_on_a_node_of_its_own_and_apportioned_on_a_shared_one(self):
        d = job("energy", s.ENERGY_JOB)
        rapl_watts = sum(s.RAPL_PACKAGE_WATTS.values()) + s.RAPL_DRAM_WATTS
        alone, shared = node(d, "cpu01"), node(d, "cpu02")
        self.assertEqual((alone["use"], alone["energy_attribution"]), ("alone", "whole"))
        self.assertAlmostEqual(alone["energy_rapl_j"], rapl_watts * s.DURATION_S)
        self.assertAlmostEqual(alone["energy_ipmi_j"], s.IPMI_WATTS["cpu01"] * s.DURATION_S)
        # cpu02 ran 7002's 8 cores beside 7003's 12: 7002's share of its busy CPU time.
        share = s.ENERGY_CORES["cpu02"] / (s.ENERGY_CORES["cpu02"] + s.NEIGHBOUR_CORES)
        self.assertEqual((shared["use"], shared["energy_attribution"]), ("shared", "apportioned"))
        self.assertAlmostEqual(shared["cpu_share_of_node"], share)
        self.assertAlmostEqual(shared["energy_rapl_j"], share * rapl_watts * s.DURATION_S)
        self.assertAlmostEqual(shared["energy_ipmi_j"], share * s.IPMI_WATTS["cpu02"] * s.DURATION_S)
        self.assertAlmostEqual(d["figures"]["energy_rapl_j"],
                               alone["energy_rapl_j"] + shared["energy_rapl_j"])
        self.assertEqual(d["figures"]["energy_attribution"], "apportioned")
        # Network: only the node it had alone is its own.
        sent, received = s.NET_BYTES_PER_S["cpu01"]
        xmit, rcv = s.IB_BYTES_PER_S["cpu01"]
        self.assertAlmostEqual(alone["network_sent_bytes"], sent * s.DURATION_S)
        self.assertAlmostEqual(alone["network_received_bytes"], received * s.DURATION_S)
        self.assertAlmostEqual(alone["infiniband_sent_bytes"], xmit * s.DURATION_S)
        self.assertAlmostEqual(alone["infiniband_received_bytes"], rcv * s.DURATION_S)
        self.assertIsNone(shared["network_sent_bytes"])
        self.assertEqual(shared["network_attribution"], "not attributed")
        text = report("energy", str(s.ENERGY_JOB))
        self.assertIn("Energy", text)

    def test_memory_bound_and_io_bound(self):
        perf = job("perf", s.PERF_JOB)
        self.assertEqual(perf["verdict"], "memory_bound")
        self.assertAlmostEqual(perf["figures"]["ipc"], s.PERF_IPC)
        self.assertAlmostEqual(perf["figures"]["cache_miss_ratio"], s.PERF_CACHE_MISS_RATIO)
        io = job("perf", s.IO_JOB)
        self.assertEqual(io["verdict"], "io_bound")
        delays = io["figures"]["delays"]
        # No ac_utime/ac_stime in the samples: the time it ran is cpu_run_real_total.
        active = (s.IO_CORES + s.IO_BLKIO_DELAY_PER_S + s.IO_CPU_DELAY_PER_S) * s.DURATION_S
        self.assertAlmostEqual(delays["blkio_s"], s.IO_BLKIO_DELAY_PER_S * s.DURATION_S)
        self.assertAlmostEqual(delays["blkio_share"], s.IO_BLKIO_DELAY_PER_S * s.DURATION_S / active)

    def test_user_metrics_per_node_and_in_all(self):
        """Job 7002's pushes (sensor User): the figures derived from the scenario, then the same
        computed by hand in text, JSON and HTML; job 7003 pushed nothing, the node's own push
        (job 0) is no job's."""
        temps = [s.USER_TEMP[step % len(s.USER_TEMP)] for step in range(s.STEPS + 1)]
        steps = {host: [s.USER_STEPS_PER_INTERVAL[host]] * s.USER_STEPS_LAST_ROW[host] for host in ("cpu01", "cpu02")}

        def figures(values, last):
            return {"samples": len(values), "last": last, "mean": sum(values) / len(values), "min": min(values),
                    "max": max(values), "sum": sum(values)}

        d = job("energy", s.ENERGY_JOB)
        expected_nodes = {"cpu01": {"temp": figures(temps, temps[-1]), "steps": figures(steps["cpu01"], 100)},
                          "cpu02": {"steps": figures(steps["cpu02"], 80)}}
        # In all: cpu01's steps sample at 600 s is the latest (cpu02's ranks ended at 590 s).
        expected_all = {"temp": figures(temps, temps[-1]), "steps": figures(steps["cpu01"] + steps["cpu02"], 100)}
        for host, expected in expected_nodes.items():
            with self.subTest(host=host):
                self.assertEqual(node(d, host)["user_metrics"].keys(), expected.keys())
                for name, values in expected.items():
                    for key, value in values.items():
                        self.assertAlmostEqual(node(d, host)["user_metrics"][name][key], value, msg=f"{name} {key}")
        self.assertEqual(d["figures"]["user_metrics"].keys(), expected_all.keys())
        for name, values in expected_all.items():
            for key, value in values.items():
                self.assertAlmostEqual(d["figures"]["user_metrics"][name][key], value, msg=f"{name} {key}")
        # By hand: temp 16 rows of 300 K and 15 of each of 310, 290 and 305 (18375 K in all, a mean
        # of 301.2), the last row's 300; steps 60 x 100 on cpu01 and 59 x 80 on cpu02, so the
        # counter's total is 10720 timesteps.
        self.assertEqual(d["figures"]["user_metrics"]["temp"]["sum"], 18375)
        self.assertEqual(d["figures"]["user_metrics"]["steps"]["sum"], 10720)
        self.assertEqual(d["figures"]["user_metrics"]["steps"]["samples"], 119)
        self.assertAlmostEqual(d["figures"]["user_metrics"]["steps"]["mean"], 10720 / 119)
        self.assertFalse([entry for entry in d["not_collected"] if "User" in entry["enable"]])

        text = report("energy", str(s.ENERGY_JOB))
        self.assertIn("  User metrics, pushed by the job (lagent push)\n", text)
        rows = [line.split() for line in text.split("User metrics")[1].split("\n\n")[0].splitlines()[1:]]
        self.assertEqual(rows, [["name", "node", "samples", "last", "mean", "min", "max", "sum", "of", "samples"],
                                ["steps", "all", "119", "100", "90", "80", "100", "10720"],
                                ["cpu01", "60", "100", "100", "100", "100", "6000"],
                                ["cpu02", "59", "80", "80", "80", "80", "4720"],
                                ["temp", "all", "61", "300", "301", "290", "310", "18375"],
                                ["cpu01", "61", "300", "301", "290", "310", "18375"]])

        html = report("energy", "--format", "html", str(s.ENERGY_JOB))
        table = re.search(r'<table class="figures user-metrics">(.*?)</table>', html, re.S)
        self.assertTrue(table, html)
        cells = [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row) for row in re.findall(r"<tr>(.*?)</tr>", table.group(1))]
        self.assertEqual(cells[0], ["name", "node", "samples", "last", "mean", "min", "max", "sum of samples"])
        self.assertEqual(cells[1], ["steps", "all nodes", "119", "100", "90", "80", "100", "10720"])
        self.assertEqual(cells[3], ["", "cpu02", "59", "80", "80", "80", "80", "4720"])
        self.assertEqual(cells[4], ["temp", "all nodes", "61", "300", "301", "290", "310", "18375"])
        self.assertEqual(len(cells), 6)

        for output in (text, html, json.dumps(d)):
            self.assertNotIn("scratch_free", output)
        neighbour = job("energy", s.NEIGHBOUR_JOB)
        self.assertEqual(neighbour["figures"]["user_metrics"], {})
        self.assertEqual(node(neighbour, "cpu02")["user_metrics"], {})
        self.assertNotIn("User metrics", report("energy", str(s.NEIGHBOUR_JOB)))
        self.assertNotIn("User metrics", report("energy", "--format", "html", str(s.NEIGHBOUR_JOB)))

    def test_a_file_without_its_job_index_reports_the_same(self):
        """The energy fixture with its job index taken out (as an lmaster before the index, or
        one killed, leaves it): its tables are scanned, and every figure, the user metrics
        included, is the same."""
        directory = tempfile.mkdtemp(prefix="fructosa-no-index-")
        self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
        shutil.copyfile(os.path.join(FIXTURE_DIR, "energy.h5"), os.path.join(directory, "energy.h5"))
        with h5py.File(os.path.join(directory, "energy.h5"), "r+") as f:
            del f[".jobs"]
        for job_id in (s.ENERGY_JOB, s.NEIGHBOUR_JOB):
            with self.subTest(job=job_id):
                self.assertEqual(job("energy", job_id, directory), job("energy", job_id))

    def test_list_judges_every_job_from_the_index(self):
        listed = json.loads(report("perf", "--list", "--format", "json"))
        verdicts = {job["job"]: job["verdict"] for job in listed["jobs"]}
        self.assertEqual(verdicts, {s.PERF_JOB: "memory_bound", s.IO_JOB: "io_bound"})

    def test_todays_lmaster_writes_what_the_fixtures_hold(self):
        directory = tempfile.mkdtemp(prefix="fructosa-fixtures-")
        self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
        for name, jobs in (("gpu", [s.GPU_JOB]), ("energy", [s.ENERGY_JOB, s.NEIGHBOUR_JOB]),
                           ("perf", [s.PERF_JOB, s.IO_JOB])):
            make_fixtures.make(name, LMASTER, REPLAY, directory)
            for job_id in jobs:
                with self.subTest(fixture=name, job=job_id):
                    self.assertEqual(job(name, job_id, directory), job(name, job_id))


if __name__ == "__main__":
    unittest.main()
