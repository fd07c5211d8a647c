"""Live cross-check of the CPU sensors against psutil on this machine: CPUCount, BootTime, Users,
CPUStats, CPUTimes, CPUFreq, CPUPercent and CPUTimesPercent (`lagent probe`, JSON lines).

Values that do not move are compared exactly. Counters are bracketed by psutil readings taken
just before and just after the probe (see each tolerance below). Run with /usr/bin/python3
(Debian's psutil 5.9.4).
"""
import json
import os
import shutil
import subprocess
import unittest

import psutil

from fructosa_test import FIXTURES, LAGENT, SANDBOX_UNAVAILABLE, FructosaTestCase, private_mount_namespace

SENSORS = ["CPUCount", "BootTime", "Users", "CPUStats", "CPUTimes", "CPUFreq", "CPUPercent", "CPUTimesPercent"]


def probe(*args):
    result = subprocess.run([LAGENT, "probe", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise AssertionError(f"lagent probe {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return {line["sensor"]: line for line in map(json.loads, result.stdout.splitlines())}


def freq_snapshot():
    return psutil.cpu_freq(percpu=True), psutil.cpu_freq()


class PsutilCpuTest(FructosaTestCase):
    @classmethod
    def setUpClass(cls):
        # psutil before, the probes (defaults, then the other option values), psutil after.
        cls.before = dict(stats=psutil.cpu_stats(), times=psutil.cpu_times(), percpu=psutil.cpu_times(percpu=True),
                          freq=freq_snapshot())
        cls.default = probe(*SENSORS, "--interval", "0.2")
        cls.other = probe(*SENSORS, "--interval", "0.2", "-o", "CPUCount.logical=false", "-o", "CPUTimes.percpu=true",
                          "-o", "CPUFreq.percpu=true", "-o", "CPUTimesPercent.percpu=true",
                          "-o", "CPUPercent.percpu=false")
        cls.after = dict(stats=psutil.cpu_stats(), times=psutil.cpu_times(), percpu=psutil.cpu_times(percpu=True),
                         freq=freq_snapshot())

    def metrics(self, sensor, other=False):
        return (self.other if other else self.default)[sensor]["metrics"]

    def test_cpu_count_logical_and_physical_exactly(self):
        self.assertEqual(self.metrics("CPUCount"), {"": psutil.cpu_count()})
        self.assertEqual(self.metrics("CPUCount", other=True), {"": psutil.cpu_count(logical=False)})

    def test_boot_time_exactly(self):
        # psutil.boot_time() is float(btime), no rounding: the same integer.
        self.assertEqual(self.metrics("BootTime"), {"": psutil.boot_time()})

    def test_users_exactly(self):
        users = psutil.users()
        metrics = self.metrics("Users")
        self.assertEqual(metrics["count"], len(users))
        for name in {user.name for user in users}:
            self.assertEqual(metrics[name.replace(".", "_") + ".sessions"], sum(u.name == name for u in users))

    def test_cpu_stats_bracketed_by_psutil(self):
        # Tolerance: none beyond the bracket; counters only grow, so the probe's reading lies
        # between psutil's readings taken before and after it.
        metrics = self.metrics("CPUStats")
        self.assertEqual(set(metrics), set(psutil.cpu_stats()._fields))
        for field in ("ctx_switches", "interrupts", "soft_interrupts"):
            self.assertLessEqual(getattr(self.before["stats"], field), metrics[field], field)
            self.assertLessEqual(metrics[field], getattr(self.after["stats"], field), field)
        self.assertEqual(metrics["syscalls"], 0)

    def test_cpu_times_bracketed_by_psutil(self):
        # Tolerance: 0.05 s outside the before/after bracket (one 100 Hz tick plus rounding;
        # the kernel's iowait may step back a little).
        def check(metrics, before, after, prefix=""):
            self.assertEqual(set(metrics), {prefix + field for field in before._fields})
            for field in before._fields:
                value = metrics[prefix + field]
                self.assertGreaterEqual(value, getattr(before, field) - 0.05, prefix + field)
                self.assertLessEqual(value, getattr(after, field) + 0.05, prefix + field)

        check(self.metrics("CPUTimes"), self.before["times"], self.after["times"])
        percpu = self.metrics("CPUTimes", other=True)
        self.assertEqual(len(self.before["percpu"]), len(self.after["percpu"]), "a CPU went on or off line")
        for cpu, (before, after) in enumerate(zip(self.before["percpu"], self.after["percpu"])):
            check({k: v for k, v in percpu.items() if k.startswith(f"{cpu}.")}, before, after, f"{cpu}.")

    def test_cpu_freq_min_max_exactly_current_near(self):
        per_cpu_before, average_before = self.before["freq"]
        per_cpu_after, average_after = self.after["freq"]

        def check(metrics, before, after, prefix=""):
            self.assertEqual(metrics[prefix + "min"], before.min)
            self.assertEqual(metrics[prefix + "max"], before.max)
            # Tolerance: the current frequency moves with load on hosts with cpufreq; it must lie
            # within psutil's before/after readings widened by half, and equal them where both agree
            # (this VM's constant cpuinfo MHz).
            if before.current == after.current:
                self.assertAlmostEqual(metrics[prefix + "current"], before.current, places=6)
            else:
                low, high = sorted((before.current, after.current))
                self.assertGreaterEqual(metrics[prefix + "current"], low * 0.5)
                self.assertLessEqual(metrics[prefix + "current"], high * 1.5)

        if average_before is None:
            self.assertIn("CPUFreq: unavailable", subprocess.run([LAGENT, "probe", "CPUFreq"], capture_output=True,
                                                                  text=True).stderr)
            return
        check(self.metrics("CPUFreq"), average_before, average_after)
        percpu = self.metrics("CPUFreq", other=True)
        self.assertEqual(len(percpu), 3 * len(per_cpu_before))
        for n, (before, after) in enumerate(zip(per_cpu_before, per_cpu_after)):
            check(percpu, before, after, f"{n}.")

    def test_percentages_within_0_100_with_psutil_keys(self):
        cpus = len(psutil.cpu_percent(percpu=True))
        fields = psutil.cpu_times_percent()._fields
        expected = {
            ("CPUPercent", False): {str(cpu) for cpu in range(cpus)},
            ("CPUPercent", True): {""},
            ("CPUTimesPercent", False): set(fields),
            ("CPUTimesPercent", True): {f"{cpu}.{field}" for cpu in range(cpus) for field in fields},
        }
        for (sensor, other), keys in expected.items():
            metrics = self.metrics(sensor, other)
            self.assertEqual(set(metrics), keys, (sensor, other))
            for key, value in metrics.items():
                self.assertTrue(0 <= value <= 100, (sensor, key, value))

    def test_users_match_psutil_on_a_fixture_utmp(self):
        """psutil reads only glibc's /var/run/utmp: give both the fixture there, in a private mount
        namespace (root with unshare only)."""
        if os.geteuid() != 0 or not shutil.which("unshare"):
            self.skipTest("needs root and unshare")
        fixture = os.path.join(FIXTURES, "cpu", "utmp")
        script = ("mount -t tmpfs none /run && cp \"$1\" /run/utmp && "
                  "/usr/bin/python3 -c 'import json, psutil; print(json.dumps([list(u) for u in psutil.users()]))' "
                  "&& \"$2\" probe Users")
        result = subprocess.run(private_mount_namespace(script, fixture, LAGENT), capture_output=True,
                                text=True, timeout=30)
        if result.returncode == SANDBOX_UNAVAILABLE:
            self.skipTest(result.stdout.strip())
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        psutil_line, probe_line = result.stdout.splitlines()
        users = json.loads(psutil_line)
        line = json.loads(probe_line)
        metrics, labels = line["metrics"], line["labels"]
        self.assertEqual(metrics["count"], len(users))
        for n, (name, terminal, host, started, pid) in enumerate(users):
            # psutil reads a 32-byte name with no NUL on into ut_host; the sensor stops at 32.
            self.assertTrue(name.startswith(labels[f"{n}.user"]) and len(labels[f"{n}.user"]) <= 32, name)
            self.assertEqual(labels.get(f"{n}.terminal"), terminal)
            self.assertEqual(labels.get(f"{n}.host", ""), host)
            self.assertEqual(metrics[f"{n}.pid"], pid)
            # psutil 5.9.4 rounds the start through a C float: within 128 s of the exact second.
            self.assertLessEqual(abs(int(labels[f"{n}.started"]) - started), 128)


if __name__ == "__main__":
    unittest.main()
