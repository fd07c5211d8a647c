"""fructosa-report on jobs of hardware this machine lacks: the fixtures of tests/fixtures/report
(GPUs, RAPL, IPMI, InfiniBand, PerfHW, Taskstats), written by a real lmaster from the samples of
scenarios.py. What the report must say is derived from the scenarios' rates, not from the report.
The fixtures are also remade with today's lmaster (make_fixtures.py) and must report the same.
"""
import json
import os
import subprocess
import sys
import tempfile
import shutil
import unittest

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
