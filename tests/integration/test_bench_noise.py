"""Smoke test of bench/os_noise.py (and build/bench/os_noise), so that the benchmark does not rot:
a 2 s run of each phase prints every figure. Never asserts on the figures' values.

collectd's and node_exporter's phases run when their programs are installed (.ci/install-deps
--tests installs them); without them the script must say it skipped them.
"""
import os
import re
import subprocess
import unittest

from fructosa_test import HERE, LAGENT, LMASTER

BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "os_noise.py")
# ctest gives the built program; by hand, the one beside lagent's build (the script's default).
OS_NOISE = os.environ.get("OS_NOISE") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(LAGENT))), "bench", "os_noise")
PEERS = {"collectd": "/usr/sbin/collectd", "node_exporter": "/usr/bin/prometheus-node-exporter"}
NUMBER = r"\d+(?:\.\d+)?"
SIGNED = r"[+-]\d+\.\d+"
# quanta, min, p50, p99, p99.9, max, delayed>10us, delayed>100us
DISTRIBUTION = r"\s+".join([NUMBER] * 8)
FIRST_CPU = str(min(os.sched_getaffinity(0)))  # one this test may run on (not always CPU 0)


class OsNoiseBenchTest(unittest.TestCase):
    def test_prints_every_figure(self):
        peers = [name for name, program in PEERS.items() if os.access(program, os.X_OK)]
        phases = ["baseline", "lagent"] + peers
        result = subprocess.run(["/usr/bin/python3", BENCH, "--seconds", "2", "--warmup", "1",
                                 "--phases", ",".join(["baseline", "lagent", *PEERS]), "--lagent", LAGENT,
                                 "--lmaster", LMASTER, "--os-noise", OS_NOISE],
                                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        out = result.stdout
        self.assertEqual(result.returncode, 0, out + result.stderr)
        self.assertIn("command: /usr/bin/python3 ", out)
        self.assertRegex(out, rf"machine: .*, \d+ CPUs .*; load average at start {NUMBER} {NUMBER} {NUMBER}")
        self.assertRegex(out, rf"load average at end {NUMBER} {NUMBER} {NUMBER}")
        self.assertRegex(out, r"quantum 100 us = \d+ loops")
        for name in set(PEERS) - set(peers):
            self.assertRegex(out, rf"== phase {name}: skipped, .* is missing")

        sections = dict(re.findall(r"^== phase (\w+): (.*?)(?=^== )", out, re.M | re.S))
        for phase in phases:
            section = sections[phase]
            # Per CPU (at least one) and over all; the added noise against the baseline after it.
            added = r"\s+-\s+-" if phase == "baseline" else rf"\s+{SIGNED}\s+{SIGNED}"
            self.assertRegex(section, re.compile(rf"^{FIRST_CPU}\s+{DISTRIBUTION}{added}$", re.M), section)
            self.assertRegex(section, re.compile(rf"^all\s+{DISTRIBUTION}{added}$", re.M), section)
            self.assertRegex(section, rf"CPU time in the window .*: os_noise {NUMBER}, .* {NUMBER}, "
                                      rf"hypervisor steal {NUMBER}, interrupts {NUMBER}, anything else on the machine -?{NUMBER}")
        # Wake-ups of every thread of lagent (and lmaster), and of each peer, per second and per sample.
        wakeups = rf"\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}$"
        for phase, process in [("lagent", "lagent"), ("lagent", "lmaster")] + [(peer, peer) for peer in peers]:
            self.assertRegex(sections[phase], re.compile(rf"^  {process}\s+\(all \d+ threads\){wakeups}", re.M))
        # ... and one row per thread of lagent: name, tid, the figures.
        self.assertRegex(sections["lagent"], re.compile(rf"^ {{17}}\S.*?\s+\d+{wakeups}", re.M))

        summary = out[out.index("== summary"):]
        for phase in phases:
            added = r"\s+\+0\.000000\s+\+0\.000000\s+-" if phase == "baseline" else rf"\s+{SIGNED}\s+{SIGNED}\s+{NUMBER}"
            self.assertRegex(summary, re.compile(rf"^{phase}\s+{DISTRIBUTION}{added}$", re.M), summary)
        added = rf"{SIGNED} \(\+-{NUMBER}\)"
        ratio = rf"{added} / {added} = (?:{NUMBER}|-) \((?:met|not met|not resolved)[^)]*\)"
        for peer, target in [("collectd", "0.2"), ("node_exporter", "0.1")]:
            if peer in peers:
                self.assertRegex(summary, rf"lagent/{peer} <= {target}: >10us {ratio}; >100us {ratio}")
            else:
                self.assertRegex(summary, rf"lagent/{peer}: not measured")
        self.assertRegex(summary, rf"lagent wake-ups: \d+ in {NUMBER} s = {NUMBER} per second, {NUMBER} per "
                                  r"sampling instant \(\d+ instants.*target <= 2: (?:met|not met)\)")
        self.assertNotIn("lagent logged:", out)

    def test_os_noise_program(self):
        result = subprocess.run([OS_NOISE, "--seconds", "0.2", "--quantum-us", "50", "--cpus", FIRST_CPU],
                                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertRegex(result.stdout, r"os_noise: loops=\d+ quantum_us=50 \(calibrated\)")
        for cpu in [FIRST_CPU, "all"]:
            self.assertRegex(result.stdout, rf"os_noise: cpu={cpu} quanta=\d+ min_us={NUMBER} p50_us={NUMBER} "
                                            rf"p99_us={NUMBER} p999_us={NUMBER} max_us={NUMBER} "
                                            rf"delayed10={NUMBER} delayed100={NUMBER}")
        self.assertEqual(len(re.findall(r"os_noise: cpu=", result.stdout)), 2, result.stdout)  # one CPU + all


    @unittest.skipIf(len(os.sched_getaffinity(0)) < 2, "--peer-cpus needs 2 CPUs to split")
    def test_peer_cpus_keep_lmaster_and_this_script_off_the_measured_cpus(self):
        cpus = sorted(os.sched_getaffinity(0))
        peer, measured = str(cpus[0]), ",".join(str(cpu) for cpu in cpus[1:])
        result = subprocess.run(["/usr/bin/python3", BENCH, "--seconds", "1", "--warmup", "1", "--phases",
                                 "baseline,lagent", "--peer-cpus", peer, "--lagent", LAGENT, "--lmaster", LMASTER,
                                 "--os-noise", OS_NOISE],
                                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        out = result.stdout
        self.assertEqual(result.returncode, 0, out + result.stderr)
        self.assertIn(f"--peer-cpus {peer}", out)
        self.assertRegex(out, rf"one thread pinned to each CPU of {re.escape(measured)},")
        # Read from /proc/<pid>/task/*/status of the running programs, not from the options.
        lagent_phase = out[out.index("== phase lagent"):]
        allowed = re.search(r"^CPUs allowed \(all threads\): (.*)$", lagent_phase, re.M).group(1)
        expected = measured if len(cpus) == 2 else f"{cpus[1]}-{cpus[-1]}"
        self.assertIn(f"lagent {expected}", allowed)
        self.assertIn(f"lmaster {peer}", allowed)
        self.assertIn(f"os_noise.py {peer}", allowed)


if __name__ == "__main__":
    unittest.main()
