"""fructosa-report on jobs whose behaviour the test knows: real processes in job cgroups made by
the test (cgroup v1: cpuset, memory, cpuacct), sampled by the real lagent, stored by lmaster in
HDF5, then reported. Expected figures come from what the test did and measured, not from the
report:
  101  a loop busy half the time on a cpuset of every CPU: efficiency = its own CPU time over
       (CPUs x elapsed), verdict cpu_underused, advice "ask for 1";
  102  a sleeper: idle;
  103  a process filling its memory cgroup to 93 % of a 96 MiB limit: memory_near_limit.

Needs root and writable cgroup v1 cpuset/memory/cpuacct hierarchies (skipped, with the reason,
otherwise; the rules themselves are unit-tested in tests/unit/report_analysis_test.cpp).
"""
import json
import os
import re
import subprocess
import time
import unittest

from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT

REPORT = os.environ.get("FRUCTOSA_REPORT", "fructosa-report")
CGROUP = "/sys/fs/cgroup"
RUN_SECONDS = 14
MIB = 1 << 20
MEMORY_LIMIT = 96 * MIB

# Waits for a line on stdin (the test moves it into its cgroups first), then works.
BUSY_HALF = """
import sys, time
sys.stdin.readline()
while True:
    end = time.monotonic() + 0.03
    while time.monotonic() < end:
        pass
    time.sleep(0.03)
"""
SLEEPER = "import sys, time\nsys.stdin.readline()\ntime.sleep(3600)\n"
# argv: its memory cgroup, the fraction of the limit to fill.
FILL_MEMORY = """
import sys, time
sys.stdin.readline()
cgroup, fraction = sys.argv[1], float(sys.argv[2])
def read(name):
    with open(cgroup + "/" + name) as f:
        return int(f.read())
limit, chunks = read("memory.limit_in_bytes"), []
while read("memory.usage_in_bytes") < fraction * limit:
    chunk = bytearray(1 << 20)
    for i in range(0, len(chunk), 4096):
        chunk[i] = 1
    chunks.append(chunk)
print("filled", read("memory.usage_in_bytes"), flush=True)
time.sleep(3600)
"""


def v1_hierarchy(controller):
    path = os.path.realpath(os.path.join(CGROUP, controller))
    return path if os.path.exists(os.path.join(path, "cgroup.procs")) else None


def cpu_seconds(pid):
    """utime + stime of a process (and its waited-for children), in seconds."""
    fields = read_text(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class ReportTest(FructosaTestCase):
    def make_cgroups(self, top, jobs):
        """<hierarchy>/<top>/job_<id> in cpuset, memory and cpuacct; returns {id: {controller: dir}}."""
        if os.path.exists(os.path.join(CGROUP, "cgroup.controllers")):
            self.skipTest("cgroup v2 only: this test makes v1 job cgroups (the rules are unit-tested)")
        hierarchies = {name: v1_hierarchy(name) for name in ["cpuset", "memory", "cpuacct"]}
        missing = [name for name, path in hierarchies.items() if not path]
        if missing:
            self.skipTest(f"no v1 {', '.join(missing)} hierarchy under {CGROUP}")
        made = {}
        for name, hierarchy in hierarchies.items():
            parent = os.path.join(hierarchy, top)
            try:
                os.makedirs(parent)
            except OSError as error:
                self.skipTest(f"cannot create a cgroup under {hierarchy}: {error}")
            self.addCleanup(os.rmdir, parent)
            if name == "cpuset":  # a cpuset takes no task before it has CPUs and memory nodes
                for key in ["cpuset.cpus", "cpuset.mems"]:
                    self.write_to(os.path.join(parent, key), read_text(os.path.join(hierarchy, key)).strip())
            for job, limit in jobs.items():
                directory = os.path.join(parent, f"job_{job}")
                os.mkdir(directory)
                self.addCleanup(self.remove_cgroup, directory)
                made.setdefault(job, {})[name] = directory
                if name == "cpuset":
                    for key in ["cpuset.cpus", "cpuset.mems"]:
                        self.write_to(os.path.join(directory, key), read_text(os.path.join(parent, key)).strip())
                if name == "memory":
                    self.write_to(os.path.join(directory, "memory.limit_in_bytes"), str(limit))
        return made

    @staticmethod
    def write_to(path, text):
        with open(path, "w") as f:
            f.write(text)

    @staticmethod
    def remove_cgroup(directory):
        wait_for(lambda: not read_text(os.path.join(directory, "cgroup.procs")).split(), timeout=10,
                 what=f"{directory} to empty")
        os.rmdir(directory)

    def start_job(self, name, script, cgroups, *args):
        worker = subprocess.Popen(["/usr/bin/python3", "-c", script, *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: worker.poll() is None and (worker.kill(), worker.wait()))
        for directory in cgroups.values():
            self.write_to(os.path.join(directory, "cgroup.procs"), str(worker.pid))
        worker.stdin.write("go\n")
        worker.stdin.flush()
        return worker

    def report(self, *args):
        return self.run_tool([REPORT, *args])

    def test_reports_what_the_jobs_did(self):
        top = f"fructosa-report-{os.getpid()}"
        cgroups = self.make_cgroups(top, {101: 1 << 30, 102: 1 << 30, 103: MEMORY_LIMIT})
        allocated = count_cpus(read_text(os.path.join(cgroups[101]["cpuset"], "cpuset.cpus")).strip())
        master, port = self.start_master(extra="")
        jobs = f"[jobs]\nscheduler = regex\nregex = ^{re.escape(top)}/job_(\\d+)$\nrescan_interval = 3600\n"
        config = self.agent_config(port, ["JobCgroup", "JobProc"], interval=0.5, extra=jobs)
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])

        started = time.monotonic()
        busy = self.start_job("busy", BUSY_HALF, cgroups[101])
        busy_cpu_before = cpu_seconds(busy.pid)
        sleeper = self.start_job("sleeper", SLEEPER, cgroups[102])
        filler = self.start_job("filler", FILL_MEMORY, cgroups[103], cgroups[103]["memory"], "0.93")
        self.assertTrue(filler.stdout.readline().startswith("filled"))
        wait_for(lambda: time.monotonic() - started >= RUN_SECONDS, timeout=RUN_SECONDS + 30,
                 what=f"the jobs to run {RUN_SECONDS} s")
        busy_cpu = cpu_seconds(busy.pid) - busy_cpu_before
        busy_wall = time.monotonic() - started
        max_usage = int(read_text(os.path.join(cgroups[103]["memory"], "memory.max_usage_in_bytes")))
        for worker in [busy, sleeper, filler]:
            worker.kill()
            worker.wait()
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        result = self.report("--data", self.path("data.h5"), "--format", "json", "101", "102", "103")
        self.assertEqual(result.returncode, 0, result.stderr)
        reports = {r["job"]: r for r in map(json.loads, result.stdout.splitlines())}
        self.assertEqual(sorted(reports), [101, 102, 103])
        context = f"reports: {json.dumps(reports, indent=1)[:3000]}"

        with self.subTest(job="busy half the time"):
            figures = reports[101]["figures"]
            self.assertEqual(figures["cpus"], allocated, context)
            expected = busy_cpu / busy_wall / allocated
            self.assertLess(abs(figures["cpu_efficiency"] - expected), 0.05 + 0.1 * expected,
                            f"efficiency {figures['cpu_efficiency']:.3f}, the loop used {busy_cpu:.2f} CPU-s in "
                            f"{busy_wall:.1f} s on {figures['cpus']} CPUs: {expected:.3f}; {context}")
            if expected < 0.45:  # the rule's threshold is 0.5: only where the loop stayed clear of it
                self.assertEqual(reports[101]["verdict"], "cpu_underused", context)
                self.assertIn("ask for 1", reports[101]["notes"][0]["text"], context)
            self.assertEqual(reports[101]["user"], "root", context)
            self.assertGreaterEqual(reports[101]["elapsed_s"], RUN_SECONDS - 3, context)
        with self.subTest(job="sleeper"):
            self.assertEqual(reports[102]["verdict"], "idle", context)
            self.assertLess(reports[102]["figures"]["cpu_efficiency"], 0.05, context)
        with self.subTest(job="memory near its limit"):
            figures = reports[103]["figures"]
            self.assertEqual(figures["memory_limit_bytes"], MEMORY_LIMIT, context)
            self.assertGreaterEqual(figures["memory_peak_bytes"], 0.9 * MEMORY_LIMIT, context)
            self.assertLessEqual(figures["memory_peak_bytes"], max_usage, context)
            self.assertEqual(reports[103]["verdict"], "memory_near_limit", context)
        with self.subTest(what="no I/O sensor figure is 0: JobProc's is there"):
            self.assertIsNotNone(reports[101]["figures"]["read_bytes"], context)
            # What JobCgroup and JobProc collect is there; what other sensors would is named.
            missing = {entry["what"]: entry["enable"] for entry in reports[101]["not_collected"]}
            self.assertEqual(set(missing) & {"CPU time", "CPU allocation", "memory", "I/O"}, set(), context)
            self.assertEqual(missing.get("IPC"), "[sensor:PerfHW] with scope = job", context)
            self.assertIsNone(reports[101]["figures"]["ipc"], context)
            self.assertIsNone(reports[101]["figures"]["energy_rapl_j"], context)

        with self.subTest(what="--list, and -c lmaster.conf's [hdf5] path"):
            listed = self.report("-c", self.path("lmaster.conf"), "--list", "--format", "json")
            self.assertEqual(listed.returncode, 0, listed.stderr)
            jobs = {j["job"]: j for j in json.loads(listed.stdout)["jobs"]}
            self.assertEqual(sorted(jobs), [101, 102, 103])
            self.assertEqual(jobs[102]["verdict"], "idle")
            self.assertEqual(jobs[101]["hosts"], ["testnode"])
            text = self.report("-c", self.path("lmaster.conf"), "--list", "--user", "nobody")
            self.assertEqual(text.stdout.splitlines()[1:], [], text.stdout)
        with self.subTest(what="the application, from JobProc's commands (python3 workers)"):
            self.assertEqual({j["application"] for j in jobs.values()}, {"python"}, jobs)
            listed = self.report("-d", self.path("data.h5"), "--list", "--format", "json", "--app", "python")
            self.assertEqual(len(json.loads(listed.stdout)["jobs"]), 3, listed.stdout + listed.stderr)
            listed = self.report("-d", self.path("data.h5"), "--list", "--format", "json", "--app", "gromacs")
            self.assertEqual(json.loads(listed.stdout)["jobs"], [], listed.stdout)
            site = self.write("apps.conf", "# ours first\nour-python python3*\n")
            listed = self.report("-d", self.path("data.h5"), "--list", "--format", "json", "--apps", site)
            self.assertEqual({j["application"] for j in json.loads(listed.stdout)["jobs"]}, {"our-python"})
            broken = self.report("-d", self.path("data.h5"), "--list", "--apps", self.write("bad.conf", "lonely\n"))
            self.assertEqual(broken.returncode, 1)
            self.assertIn(self.path("bad.conf") + ":1:", broken.stderr)
        with self.subTest(what="the rules' thresholds from [report]: -c's, or --rules FILE's"):
            # The sleeper is idle by the default threshold, underused when idle means under 0%.
            config = read_text(self.path("lmaster.conf")) + "\n[report]\nidle_efficiency = 0\n"
            lenient = self.report("-c", self.write("report.conf", config), "--list", "--format", "json")
            self.assertEqual(lenient.returncode, 0, lenient.stderr)
            verdicts = {j["job"]: j["verdict"] for j in json.loads(lenient.stdout)["jobs"]}
            self.assertEqual(verdicts[102], "cpu_underused", lenient.stdout)
            rules = self.write("rules.conf", "[report]\nidle_efficiency = 0\n")
            single = self.report("--data", self.path("data.h5"), "--rules", rules, "--format", "json", "102")
            self.assertEqual(json.loads(single.stdout)["verdict"], "cpu_underused", single.stdout + single.stderr)
            broken = self.report("--data", self.path("data.h5"), "--rules", self.write("bad.rules", "[report]\nidle = 1\n"), "102")
            self.assertEqual(broken.returncode, 1)
            self.assertIn(self.path("bad.rules") + ":2: [report] idle: unknown key", broken.stderr)
            self.assertEqual(broken.stdout, "")
        with self.subTest(what="text report"):
            text = self.report("--data", self.path("data.h5"), "103")
            self.assertEqual(text.returncode, 0, text.stderr)
            self.assertIn("Verdict: memory_near_limit", text.stdout)
            self.assertTrue(all(len(line) <= 80 for line in text.stdout.splitlines()), text.stdout)
        with self.subTest(what="errors name the job or the file"):
            unknown = self.report("--data", self.path("data.h5"), "999")
            self.assertEqual(unknown.returncode, 1)
            self.assertIn("job 999", unknown.stderr)
            self.assertEqual(unknown.stdout, "")
            missing = self.report("--data", self.path("nothing.h5"), "101")
            self.assertEqual(missing.returncode, 1)
            self.assertIn(self.path("nothing.h5"), missing.stderr)


def count_cpus(text):
    """CPUs in a list like 0-3,8."""
    count = 0
    for part in text.split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


if __name__ == "__main__":
    unittest.main()
