"""Per-job attribution with a real Slurm: a private one-node Slurm 22.05 (Debian's slurmd,
slurmctld, munge; slurm_cluster.py) runs jobs in its own cgroup v1 trees, the real lagent
(scheduler = slurm, slurm_node_name = the node) samples them every 0.5 s, lmaster writes HDF5,
and the file (read_hdf5.py) is checked against what the test saw in the jobs' cgroups.

Once for JobAcctGatherType=jobacct_gather/linux (the job has freezer, memory and cpuset
cgroups, no cpuacct) and once for jobacct_gather/cgroup (a cpuacct cgroup too). Per setting,
one lagent run, three phases one after another (the node has os.cpu_count() CPUs):
  A. a job burning one CPU and holding 200 MiB, with a job of user nobody sleeping beside it;
  B. two concurrent one-CPU jobs, one busy and one idle;
  C. a job of two tasks with two srun steps (one busy, one sleeping).

Needs root, Slurm and munge, and writable cgroup v1 freezer/memory/cpuset hierarchies: where
they are missing, or slurmd does not start, the test FAILS saying why (with the daemons' log
tails); it never skips.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import unittest

from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT, HERE
from slurm_cluster import JobWatcher, SlurmCluster, cgroup_procs, tree_procs

REPORT = os.environ.get("FRUCTOSA_REPORT", "fructosa-report")
EPILOG = os.path.join(HERE, "..", "..", "contrib", "slurm", "fructosa-epilog")
INTERVAL = 0.5
JOB_SENSORS = ["JobCgroup", "JobProc", "Taskstats"]
NODE_SENSOR = "VirtualMemory"
MIB = 1 << 20
HOLD_MIB = 200

# argv: MiB to hold, seconds to burn. Says (on the job's output) when the busy part starts and
# ends, with the CPU time it had used then: what the job really got, the figure lagent's must
# match (about 1 CPU-s/s on an idle node; less where other tests share its core).
BUSY = """
import sys, time
buf = bytearray(int(sys.argv[1]) << 20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
print("busy_start", time.time(), time.process_time(), flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    pass
print("busy_end", time.time(), time.process_time(), flush=True)
"""


def probe(job, dirs):
    """What the test reads of a running job's cgroups (JobWatcher, every 50 ms)."""
    value = {"dirs": dict(dirs)}
    memory = dirs.get("memory")
    if memory:
        text = read_text(os.path.join(memory, "memory.usage_in_bytes")).strip()
        if text.isdigit():
            value["memory"] = int(text)
    freezer = dirs.get("freezer")
    if freezer:
        value["job_dir_pids"] = cgroup_procs(freezer)  # slurmstepd
        try:
            names = sorted(os.listdir(freezer))
        except FileNotFoundError:  # the job ended between job_dirs() and here
            names = []
        steps = [os.path.join(freezer, n) for n in names if n.startswith("step_")]
        value["step_pids"] = sorted(set(p for step in steps for p in tree_procs(step)))
    return value


def busy_window(output):
    """(start, end) of the busy loop(s) a job's output reports (wall clock)."""
    starts = [float(x) for x in re.findall(r"busy_start (\S+)", output)]
    ends = [float(x) for x in re.findall(r"busy_end (\S+)", output)]
    if not starts or not ends:
        raise AssertionError(f"no busy_start/busy_end in the job's output:\n{output}")
    return min(starts), max(ends)


def own_cpu_rate(output):
    """CPU-s/s the busy loop measured of itself (time.process_time over its wall time)."""
    start = re.search(r"busy_start (\S+) (\S+)", output)
    end = re.search(r"busy_end (\S+) (\S+)", output)
    if not start or not end:
        raise AssertionError(f"no busy_start/busy_end with CPU times in the job's output:\n{output}")
    return (float(end[2]) - float(start[2])) / (float(end[1]) - float(start[1]))


def close_to(rate, own):
    """lagent's rate over the busy rows against the loop's own: 0.1 CPU-s/s and 10% apart at most."""
    return abs(rate - own) <= 0.1 + 0.1 * own


def job_rows(table, job):
    """Indices and times (s) of the table's rows attributed to `job`."""
    return [(i, t / 1e9) for i, (t, j) in enumerate(zip(table["time"], table["job"])) if j == job]


def values(table, key, rows):
    return [(t, table["columns"][key]["values"][i]) for i, t in rows] if key in table["columns"] else []


def rates(points):
    """Consecutive-row rates of a counter: [(t0, t1, rate)]."""
    return [(t0, t1, (v1 - v0) / (t1 - t0)) for (t0, v0), (t1, v1) in zip(points, points[1:])
            if v0 is not None and v1 is not None and t1 > t0]


def nearest(samples, t):
    """The watcher sample nearest to time t: (time, value) or None."""
    return min(samples, key=lambda s: abs(s[0] - t)) if samples else None


class SlurmAttributionTest(FructosaTestCase):
    maxDiff = None

    def test_jobacct_gather_linux(self):
        self.check_attribution("linux")

    def test_jobacct_gather_cgroup(self):
        self.check_attribution("cgroup")

    # ---- running ---------------------------------------------------------------------------

    def epilog_wrapper(self, cluster):
        """contrib/slurm/fructosa-epilog as slurmctld runs it, told where this test's files and
        fructosa-report are (slurmctld gives its epilog no environment of ours), its log in
        epilog.err."""
        text = (f"#!/bin/sh\nexport FRUCTOSA_REPORT={REPORT} FRUCTOSA_REPORT_ARGS='-d {self.path('data.h5')}' "
                f"SACCTMGR={shutil.which('sacctmgr') or 'sacctmgr'} SLURM_CONF={cluster.conf} "
                f"FRUCTOSA_POLL=0.5 FRUCTOSA_WAIT=30\n"
                f"exec sh {EPILOG} 2>> {self.path('epilog.err')}\n")
        path = cluster.path("epilog-slurmctld")
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
        return path

    def start_pipeline(self, cluster):
        master, port = self.start_master(extra="")
        jobs = f"[jobs]\nscheduler = slurm\nslurm_node_name = {cluster.node}\n"
        config = self.agent_config(port, JOB_SENSORS + [NODE_SENSOR], interval=INTERVAL, extra=jobs)
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])
        # lagent is sampling once lmaster has its node samples.
        wait_for(lambda: os.path.exists(self.path("data.h5")) or (agent.poll() is not None and self.fail(
            f"lagent exited with {agent.returncode}:\n{read_text(self.path('lagent.err'))}")),
                 timeout=30, what="lmaster's HDF5 file")
        return master, agent

    def run_phase(self, cluster, watcher, submissions):
        """Submits the jobs together; waits until every one ran and its cgroups vanished."""
        jobs = []
        for script, user, args in submissions:
            job = cluster.submit(script, user=user, extra_args=args)
            watcher.watch(job)
            jobs.append(job)
        for job in jobs:
            try:
                watcher.wait_appeared(job, timeout=60)
                watcher.wait_gone(job, timeout=60)
            except AssertionError as error:
                raise AssertionError(f"{error}: {cluster.job_info(job)}\n{cluster.output(job)}\n{cluster.logs(20)}") from None
        for job in jobs:
            cluster.wait_state(job, "COMPLETED", timeout=30)
        return jobs

    def note(self, text):
        """A figure the checks compared, printed (stderr) when the test ends, pass or fail."""
        self.notes.append(text)

    def check_attribution(self, accounting):
        self.notes = []
        self.addCleanup(lambda: sys.stderr.write("".join(f"\n  [{accounting}] {n}" for n in self.notes) + "\n"))
        cluster = SlurmCluster()
        self.addCleanup(cluster.stop)
        cluster.start(accounting=accounting, epilog_slurmctld=self.epilog_wrapper(cluster))
        busy_py = cluster.path("out", "busy.py")
        with open(busy_py, "w") as f:
            f.write(BUSY)
        os.chmod(busy_py, 0o644)
        watcher = JobWatcher(cluster, probe)
        self.addCleanup(watcher.stop)
        master, agent = self.start_pipeline(cluster)

        one_cpu = ["--cpus-per-task=1", "-n1"]
        # A: scenario 1 (busy, holding memory) beside scenario 3 (user nobody, idle).
        burner, other_user = self.run_phase(cluster, watcher, [
            (f"#!/bin/sh\nexec python3 {busy_py} {HOLD_MIB} 6\n", None, one_cpu + ["--mem=500M", "--time=10"]),
            ("#!/bin/sh\nsleep 4\n", "nobody", one_cpu + ["--mem=100M"]),
        ])
        # B: scenario 2, two concurrent jobs, one busy, one idle.
        busy, idle = self.run_phase(cluster, watcher, [
            (f"#!/bin/sh\nexec python3 {busy_py} 0 5\n", None, one_cpu + ["--mem=200M"]),
            ("#!/bin/sh\nsleep 5\n", None, one_cpu + ["--mem=200M"]),
        ])
        # C: scenario 4, two srun steps in one job.
        steps_script = (f"#!/bin/sh\nsrun -n1 --mem=100M python3 {busy_py} 0 4 &\n"
                        "srun -n1 --mem=100M sleep 5 &\nwait\n")
        two_steps_n = min(2, cluster.cpus)
        (steps,) = self.run_phase(cluster, watcher, [
            (steps_script, None, [f"-n{two_steps_n}", "--cpus-per-task=1", "--mem=500M"]),
        ])
        all_jobs = [burner, other_user, busy, idle, steps]
        self.assertFalse(watcher.errors, watcher.errors)
        self.check_epilog(cluster, all_jobs)
        self.check_request(cluster, burner)

        watcher.stop()
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))
        dump = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "read_hdf5.py"), self.path("data.h5")],
                              capture_output=True, text=True)
        self.assertEqual(dump.returncode, 0, dump.stderr)
        node = json.loads(dump.stdout)["testnode"]
        log = read_text(self.path("lagent.err"))
        unavailable = set(re.findall(r"sensor (\w+) unavailable", log))
        for sensor in ["JobCgroup", "JobProc"]:
            self.assertNotIn(sensor, unavailable, log)
            self.assertIn(sensor, node, f"no {sensor} table in HDF5; lagent's log:\n{log}")
        self.assertIn(NODE_SENSOR, node)
        per_job = [s for s in JOB_SENSORS if s in node and s not in unavailable]
        outputs = {job: cluster.output(job) for job in all_jobs}
        context = (f"[{accounting}] jobs: burner {burner}, nobody {other_user}, busy {busy}, idle {idle}, "
                   f"two steps {steps}; appeared {watcher.appeared}; vanished {watcher.vanished}")

        self.check_timing(node, per_job, watcher, all_jobs, context)
        self.check_busy_job(node, watcher, burner, outputs[burner], context)
        self.check_busy_and_idle(node, watcher, busy, idle, outputs[busy], context)
        self.check_other_user(node, watcher, other_user, context)
        self.check_two_steps(node, watcher, steps, outputs[steps], all_jobs, context)
        self.check_cpu_source(node, accounting, log, all_jobs, context)

    # ---- checks ----------------------------------------------------------------------------

    def check_request(self, cluster, job):
        """fructosa-report asks Slurm what the job requested (scontrol here: no slurmdbd)."""
        with self.subTest(check="fructosa-report gets the job's request from Slurm"):
            result = subprocess.run([REPORT, "-d", self.path("data.h5"), "--format", "json", str(job)],
                                    capture_output=True, text=True, env=cluster.env, timeout=60)
            self.assertEqual(result.returncode, 0, result.stderr)
            request = json.loads(result.stdout)["request"]
            self.note(f"job {job} request: {request}")
            self.assertEqual(request, {"time_limit_s": 600.0, "partition": "debug", "cpus": 1.0,
                                       "memory_bytes": 500.0 * (1 << 20), "gpus": None, "state": "COMPLETED",
                                       "source": "scontrol"})

    def check_epilog(self, cluster, jobs):
        """slurmctld ran the epilog at each job's end, and it got the job's report summary from
        the data stored meanwhile. It cannot store it here: sacctmgr needs slurmdbd (and MariaDB),
        which this cluster has not, and says so; test_slurm_epilog.py checks what it asks
        sacctmgr."""
        with self.subTest(check="the epilog gets each job's report summary"):
            def summaries():
                found = dict(re.findall(r"job (\d+): (fructosa: .*)", read_text(self.path("epilog.err"))))
                return found if all(str(job) in found for job in jobs) else None
            found = wait_for(summaries, timeout=60, what="the epilog's summary of every job")
            for job in jobs:
                summary = found[str(job)]
                self.note(f"job {job} epilog: {summary}")
                self.assertRegex(summary, r"^fructosa: [a-z_]+.* \| CPU .*, memory .*, elapsed \d+:\d\d:\d\d")
                self.assertIn("not stored: sacctmgr", summary)

    def check_timing(self, node, per_job, watcher, jobs, context):
        """Rows within 2 s of the job's cgroup appearing, none > 1 s after it vanished; node
        samples labelled involved_jobs with the id exactly while it runs."""
        for sensor in per_job:
            table = node[sensor]
            for job in jobs:
                with self.subTest(check="rows follow the job", sensor=sensor, job=job):
                    appeared, vanished = watcher.appeared[job], watcher.vanished[job]
                    times = [t for _, t in job_rows(table, job)]
                    if times:
                        self.note(f"{sensor} job {job}: {len(times)} rows, first {times[0] - appeared:+.2f} s after its "
                                  f"cgroup appeared, last {times[-1] - vanished:+.2f} s after it vanished")
                    self.assertTrue(times, f"{sensor}: no rows of job {job}; {context}")
                    self.assertLessEqual(times[0], appeared + 2.0,
                                         f"{sensor}: first row of job {job} {times[0] - appeared:.2f} s after its "
                                         f"cgroup appeared; {context}")
                    self.assertLessEqual(times[-1], vanished + 1.0,
                                         f"{sensor}: row of job {job} {times[-1] - vanished:.2f} s after its cgroup "
                                         f"vanished; {context}")
        table = node[NODE_SENSOR]
        labels = table["labels"].get("involved_jobs", [""] * len(table["time"]))
        for job in jobs:
            with self.subTest(check="involved_jobs", job=job):
                appeared, vanished = watcher.appeared[job], watcher.vanished[job]
                inside = outside = 0
                wrong = []
                for t_ns, label in zip(table["time"], labels):
                    t = t_ns / 1e9
                    ids = label.split(",") if label else []
                    if appeared + 1.0 <= t <= vanished - 0.5:
                        inside += 1
                        if str(job) not in ids:
                            wrong.append(f"t={t - appeared:+.2f}s: {label!r} lacks {job}")
                    elif t < appeared - 0.5 or t > vanished + 1.0:
                        outside += 1
                        if str(job) in ids:
                            wrong.append(f"t={t - vanished:+.2f}s after end: {label!r} has {job}")
                self.assertGreaterEqual(inside, 2, f"too few {NODE_SENSOR} rows while job {job} ran; {context}")
                self.assertGreater(outside, 0, context)
                self.assertFalse(wrong, f"{NODE_SENSOR} involved_jobs; {context}")

    def busy_rates(self, node, job, window, context):
        """JobCgroup cpu.usage rates of `job` between consecutive rows inside window."""
        start, end = window
        rows = [(i, t) for i, t in job_rows(node["JobCgroup"], job) if start + 0.3 <= t <= end]
        points = values(node["JobCgroup"], "cpu.usage", rows)
        self.assertTrue(points, f"JobCgroup has no cpu.usage for job {job} in its busy part; {context}")
        found = rates(points)
        self.assertGreaterEqual(len(found), 3, f"too few JobCgroup rows in job {job}'s busy part: {points}; {context}")
        return found, points

    def check_busy_job(self, node, watcher, job, output, context):
        """Scenario 1: the CPU-s/s the busy loop got (~1); memory.current as the cgroup said."""
        window = busy_window(output)
        with self.subTest(check="busy job cpu", job=job):
            found, points = self.busy_rates(node, job, window, context)
            overall = (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
            median = statistics.median(r for _, _, r in found)
            own = own_cpu_rate(output)
            self.note(f"busy job {job}: cpu.usage rate overall {overall:.3f}, median {median:.3f}; "
                      f"the loop's own {own:.3f}")
            self.assertTrue(close_to(overall, own),
                            f"job {job} cpu.usage rate overall {overall:.3f}, the loop measured {own:.3f} CPU-s/s: "
                            f"{[round(r, 3) for _, _, r in found]}; {context}")
        with self.subTest(check="busy job memory", job=job):
            table = node["JobCgroup"]
            # Not the last half second: the job frees its memory as it ends, between a reading and
            # the test's look at the cgroup.
            rows = [(i, t) for i, t in job_rows(table, job) if window[0] + 0.3 <= t <= window[1] - 0.5]
            memory = values(table, "memory.current", rows)
            self.assertTrue(memory, f"JobCgroup has no memory.current for job {job}; {context}")
            seen = [(t, v["memory"]) for t, v in watcher.samples.get(job, []) if "memory" in v]
            compared = []
            for t, value in memory:
                near = nearest(seen, t)
                self.assertIsNotNone(near)
                compared.append((round(t - window[0], 2), value, near[1]))
                self.note(f"busy job {job}: memory.current {value / MIB:.1f} MiB, test read "
                          f"memory.usage_in_bytes {near[1] / MIB:.1f} MiB {near[0] - t:+.2f} s away")
                self.assertGreaterEqual(value, HOLD_MIB * MIB, f"memory.current {value} < {HOLD_MIB} MiB; {context}")
                self.assertLessEqual(abs(value - near[1]), 0.1 * near[1],
                                     f"memory.current {value} vs memory.usage_in_bytes {near[1]} read by the test "
                                     f"{near[0] - t:+.2f} s away; all (t, lagent, test): {compared}; {context}")

    def check_busy_and_idle(self, node, watcher, busy, idle, output, context):
        """Scenario 2: two concurrent jobs, each only its own usage."""
        start, end = busy_window(output)
        overlap = (max(start, watcher.appeared[idle]), min(end, watcher.vanished[idle]))
        self.assertGreater(overlap[1] - overlap[0], 2.0, f"jobs {busy} and {idle} hardly overlapped: {overlap}; {context}")
        own = own_cpu_rate(output)
        for job, expected in [(busy, own), (idle, 0.0)]:
            with self.subTest(check="concurrent jobs cpu", job=job):
                found, points = self.busy_rates(node, job, overlap, context)
                overall = (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
                median = statistics.median(r for _, _, r in found)
                self.note(f"concurrent job {job}: cpu.usage rate overall {overall:.3f}, median {median:.3f}; "
                          f"expected {expected:.3f}")
                self.assertTrue(close_to(overall, expected),
                                f"job {job} cpu.usage rate overall {overall:.3f}, expected {expected:.3f} (the busy "
                                f"loop's own figure, or 0 for the idle job): {[round(r, 3) for _, _, r in found]}; "
                                f"{context}")

    def check_other_user(self, node, watcher, job, context):
        """Scenario 3: a job of user nobody is attributed; its cgroup is under uid_65534."""
        with self.subTest(check="job of nobody", job=job):
            dirs = [v["dirs"] for _, v in watcher.samples.get(job, [])]
            self.assertTrue(dirs)
            self.assertTrue(all(f"/uid_65534/job_{job}" in d for d in dirs[0].values()), dirs[0])
            for sensor in ["JobCgroup", "JobProc"]:
                self.assertGreaterEqual(len(job_rows(node[sensor], job)), 3, f"{sensor}; {context}")
            processes = [v for _, v in values(node["JobProc"], "processes", job_rows(node["JobProc"], job))]
            self.assertGreater(max(processes), 0, f"JobProc processes of nobody's job: {processes}; {context}")

    def check_two_steps(self, node, watcher, job, output, jobs, context):
        """Scenario 4: two srun steps are one job; JobProc counts the job's processes (those of
        freezer's step_* cgroups), not slurmstepd (freezer's job directory itself)."""
        with self.subTest(check="two steps are one job", job=job):
            for sensor in ["JobCgroup", "JobProc"]:
                ids = set(node[sensor]["job"]) - {0}
                self.assertTrue(ids <= set(jobs), f"{sensor} has jobs {sorted(ids)}, submitted {jobs}; {context}")
            found, points = self.busy_rates(node, job, busy_window(output), context)
            overall = (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
            own = own_cpu_rate(output)
            self.note(f"two-step job {job}: cpu.usage rate overall {overall:.3f}; the loop's own {own:.3f}")
            self.assertTrue(close_to(overall, own),
                            f"job {job} (busy step + sleeping step) cpu.usage rate overall {overall:.3f}, the loop "
                            f"measured {own:.3f}: {[round(r, 3) for _, _, r in found]}; {context}")
        with self.subTest(check="JobProc counts the job's processes, not slurmstepd", job=job):
            seen = [(t, v) for t, v in watcher.samples.get(job, []) if "step_pids" in v]
            self.assertTrue(any(v["job_dir_pids"] for _, v in seen), "no slurmstepd in freezer's job directory")
            table = node["JobProc"]
            compared, steady = [], 0
            for t, processes in values(table, "processes", job_rows(table, job)):
                # Only where the test saw the same step processes from 0.3 s before the row's
                # instant to 1 s after it: a reading lists the processes after its instant, by as
                # long as the sensors due before it take (longer under the sanitizers).
                window = [v for s, v in seen if -0.3 <= s - t <= 1.0]
                around = [len(v["step_pids"]) for v in window]
                if len(around) < 3 or len(set(around)) != 1:
                    continue
                steady += 1
                stepd = max(len(v["job_dir_pids"]) for v in window)
                compared.append((round(t - watcher.appeared[job], 2), processes, around[0], stepd))
            self.note(f"two-step job {job}: (t, JobProc processes, step_* processes, slurmstepd) {compared}")
            self.assertGreaterEqual(steady, 3, f"too few steady JobProc rows of job {job}; {context}")
            # Never more than the step processes (slurmstepd would add 2 here), and equal on most
            # rows: a process ending within a reading's lag can make one row short by it.
            detail = (f"(t, JobProc processes, step_* processes, slurmstepd in job dir): {compared}; {context}")
            self.assertTrue(all(p <= s for _, p, s, _ in compared),
                            f"JobProc counted more than the processes in freezer step_* cgroups; {detail}")
            equal = sum(p == s for _, p, s, _ in compared)
            self.assertGreaterEqual(equal, max(3, len(compared) - 1),
                                    f"JobProc processes != processes in freezer step_* cgroups; {detail}")

    def check_cpu_source(self, node, accounting, log, jobs, context):
        """Scenario 5: cpu.usage from the cgroup (jobacct_gather/cgroup) or from the job's
        processes (jobacct_gather/linux: no cpuacct cgroup), said by the cpu_source label and
        once per job in lagent's log."""
        expected = "cgroup" if accounting == "cgroup" else "processes"
        table = node["JobCgroup"]
        sources = table["labels"].get("cpu_source")
        for job in jobs:
            with self.subTest(check="cpu_source", job=job):
                rows = job_rows(table, job)
                self.assertTrue(rows)
                usage = values(table, "cpu.usage", rows)
                self.assertTrue(usage and all(v is not None for _, v in usage),
                                f"JobCgroup rows of job {job} lack cpu.usage (columns {sorted(table['columns'])}); {context}")
                self.assertIsNotNone(sources, f"JobCgroup has no cpu_source label (labels {sorted(table['labels'])}); {context}")
                in_order = [sources[i] for i, _ in sorted(rows, key=lambda row: row[1])]
                self.note(f"job {job}: cpu_source {sorted(set(in_order))}")
                if accounting == "cgroup" and in_order[:1] == ["processes"]:
                    # slurmstepd makes the job's cpuacct directory after its freezer one: the
                    # first sample can fall between (not logged: lagent waits for two samples).
                    in_order = in_order[1:]
                self.assertEqual(set(in_order), {expected}, f"{in_order}; {context}")
            with self.subTest(check="cpu source logged once", job=job):
                # Said once per job where the cgroup gives no CPU time (jobacct_gather/linux).
                mentions = [line for line in log.splitlines()
                            if re.search(rf"\bjob[ _=#:]*{job}\b", line) and "cpu_source" in line]
                if accounting == "linux":
                    self.assertEqual(len(mentions), 1, f"lagent's log lines about job {job}'s cpu source: {mentions}")
                    self.assertIn("processes", mentions[0])
                    self.assertIn("JobAcctGatherType=jobacct_gather/cgroup", mentions[0])
                else:
                    self.assertFalse([m for m in mentions if "processes" in m],
                                     f"job {job} has a cpuacct cgroup, yet lagent says: {mentions}")
        if accounting == "linux":
            with self.subTest(check="log names JobAcctGatherType=jobacct_gather/cgroup"):
                self.assertIn("JobAcctGatherType=jobacct_gather/cgroup", log)


if __name__ == "__main__":
    unittest.main()
