"""Per-job attribution end to end, live: a real process in a job-like cgroup found by the regex
scheduler, per-job samples in HDF5 under its job id, node samples labelled involved_jobs, and
the job vanishing while lagent runs (noticed through inotify).

Needs root and a writable cgroup hierarchy under /sys/fs/cgroup; skipped (with the reason)
otherwise. The same sensors are tested on fixture trees by the unit tests.
"""
import json
import os
import re
import subprocess
import unittest

import h5py

import read_hdf5
from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT, HERE

JOB = 4242
CGROUP = "/sys/fs/cgroup"
# Sensors that attribute to jobs; the helpers may not all be there on every kernel (Taskstats
# needs CAP_NET_ADMIN and CONFIG_TASKSTATS): those the agent reports unavailable are skipped.
JOB_SENSORS = ["JobCgroup", "JobProc", "Taskstats"]

# Burns a little CPU and writes to a file until killed.
WORKLOAD = """
import os, sys
path = sys.argv[1]
with open(path, "wb") as f:
    while True:
        f.write(b"x" * 4096); f.flush()
        if f.tell() > 64 << 20:
            f.seek(0)
        sum(range(20000))
"""


def hierarchies():
    """Where a job-like cgroup can be made: the v2 root, or the v1 controllers JobCgroup reads."""
    if os.path.exists(os.path.join(CGROUP, "cgroup.controllers")):
        return [CGROUP]
    found = []
    for name in ["cpu,cpuacct", "cpuacct", "memory", "pids", "blkio"]:
        path = os.path.realpath(os.path.join(CGROUP, name))
        if os.path.exists(os.path.join(path, "cgroup.procs")) and path not in found:
            found.append(path)
    return found


class JobAttributionTest(FructosaTestCase):
    def make_job(self, top):
        """mkdir <hierarchy>/<top>/job_<JOB> everywhere; returns the job directories."""
        made = []
        for hierarchy in hierarchies():
            job_dir = os.path.join(hierarchy, top, f"job_{JOB}")
            try:
                os.makedirs(job_dir)
            except OSError as error:
                self.remove_cgroups(made)
                self.skipTest(f"cannot create a cgroup under {hierarchy}: {error}")
            made.append(job_dir)
        if not made:
            self.skipTest(f"no cgroup hierarchy under {CGROUP}")
        return made

    @staticmethod
    def remove_cgroups(job_dirs):
        for job_dir in job_dirs:
            for path in [job_dir, os.path.dirname(job_dir)]:
                try:
                    os.rmdir(path)
                except OSError:
                    pass

    def test_job_samples_and_involved_jobs_follow_the_job(self):
        top = f"fructosa-it-{os.getpid()}"
        job_dirs = self.make_job(top)
        self.addCleanup(self.remove_cgroups, job_dirs)
        worker = subprocess.Popen(["/usr/bin/python3", "-c", WORKLOAD, self.path("work.dat")],
                                  stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: worker.poll() is None and (worker.kill(), worker.wait()))
        for job_dir in job_dirs:
            with open(os.path.join(job_dir, "cgroup.procs"), "w") as procs:
                procs.write(str(worker.pid))

        master, port = self.start_master()
        jobs = (f"[jobs]\nscheduler = regex\nregex = ^{re.escape(top)}/job_(\\d+)$\n"
                f"rescan_interval = 3600\n")
        config = self.agent_config(port, JOB_SENSORS + ["VirtualMemory"], extra=jobs)
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])

        def job_lines():
            return [line for line in read_text(self.path("lmaster.out")).splitlines()
                    if " testnode " in line and f" job={JOB} " in line]

        def unavailable():
            return set(re.findall(r"sensor (\w+) unavailable", read_text(self.path("lagent.err"))))

        # Every per-job sensor that works here reports the job several times.
        def reported():
            lines = job_lines()
            return all(sum(f" {s} " in l for l in lines) >= 5 for s in set(JOB_SENSORS) - unavailable())
        wait_for(reported, timeout=60, what="5 samples of the job from each per-job sensor")
        working = set(JOB_SENSORS) - unavailable()
        self.assertIn("JobCgroup", working, read_text(self.path("lagent.err")))
        self.assertIn("JobProc", working, read_text(self.path("lagent.err")))

        # The node's own samples name the job.
        out = read_text(self.path("lmaster.out"))
        vm = [l for l in out.splitlines() if " testnode VirtualMemory " in l]
        self.assertTrue(vm and all(f'involved_jobs="{JOB}"' in l for l in vm), vm[:3])

        # The job ends: its process goes, slurm (here: we) removes its cgroups.
        worker.kill()
        worker.wait()
        self.remove_cgroups(job_dirs)
        before = len(read_text(self.path("lmaster.out")).splitlines())

        def unlabelled_after_end():
            lines = read_text(self.path("lmaster.out")).splitlines()[before:]
            return sum(" testnode VirtualMemory " in l and "involved_jobs" not in l for l in lines) >= 3
        wait_for(unlabelled_after_end, timeout=30, what="node samples without involved_jobs after the job ended")

        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        # HDF5 keeps the job id and the label.
        dump = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "read_hdf5.py"), self.path("data.h5")],
                              capture_output=True, text=True, check=True)
        node = json.loads(dump.stdout)["testnode"]
        table = node["JobCgroup"]
        rows = [i for i, job in enumerate(table["job"]) if job == JOB]
        self.assertGreaterEqual(len(rows), 5)
        self.assertIn(JOB, table["jobs"])
        usage = [table["columns"]["cpu.usage"]["values"][i] for i in rows]
        self.assertTrue(all(b >= a for a, b in zip(usage, usage[1:])), usage)
        self.assertGreater(usage[-1], usage[0])
        self.assertEqual(table["columns"]["cpu.usage"]["unit"], "seconds")
        self.assertEqual(table["columns"]["cpu.usage"]["kind"], "counter")
        proc = node["JobProc"]
        written = [v for job, v in zip(proc["job"], proc["columns"]["wchar"]["values"]) if job == JOB]
        self.assertGreater(max(written), 4096)
        labels = node["VirtualMemory"]["labels"]["involved_jobs"]
        self.assertIn(str(JOB), labels)
        self.assertIn("", labels)  # after the job ended

        # The closed file's job index (docs/hdf5.md) sums up the same rows.
        with h5py.File(self.path("data.h5"), "r") as f:
            index = read_hdf5.read_job_index(f)
        self.assertEqual(index["complete"], 1)
        mine = [row for row in index["rows"] if row["job"] == JOB and row["host"] == "testnode"]
        self.assertEqual(len(mine), 1, index["rows"])
        cgroup = mine[0]["sensors"]["JobCgroup"]
        times = [table["time"][i] for i in rows]
        self.assertEqual((cgroup["rows"], cgroup["first"], cgroup["last"]), (len(rows), min(times), max(times)))
        summary = cgroup["metrics"]["cpu.usage"]
        self.assertEqual((summary["count"], summary["max"], summary["last"]), (len(usage), max(usage), usage[-1]))
        self.assertAlmostEqual(summary["sum"], sum(usage), delta=1e-9 * abs(sum(usage)))
        # A counter that never fell grew by its last value less its first.
        self.assertAlmostEqual(summary["growth"], usage[-1] - usage[0], delta=1e-9 * usage[-1])
        self.assertIn("JobProc", mine[0]["sensors"])
        self.assertGreaterEqual(mine[0]["rows"], len(rows) + mine[0]["sensors"]["JobProc"]["rows"])


if __name__ == "__main__":
    unittest.main()
