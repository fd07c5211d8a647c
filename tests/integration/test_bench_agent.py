"""Smoke test of bench/agent_overhead.py, so that the benchmark does not rot: a short run of
each mode prints a figure for every process it measures. Never asserts on the figures.

Needs collectd-core and prometheus-node-exporter (.ci/install-deps --tests).
"""
import os
import re
import subprocess
import unittest

from fructosa_test import HERE, LAGENT, LMASTER

BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "agent_overhead.py")
PROCESSES = ["lagent", "reads_only", "lmaster", "collectd", "node_exporter"]
# The floor row's program, built beside lagent (build/bench/reads_only).
READS_ONLY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(LAGENT))), "bench", "reads_only")
NUMBER = r"\d+(?:\.\d+)?"


class AgentOverheadBenchTest(unittest.TestCase):
    def run_bench(self, *extra):
        args = ["/usr/bin/python3", BENCH, "--seconds", "3", "--warmup", "1",
                "--lagent", LAGENT, "--lmaster", LMASTER, "--reads-only", READS_ONLY, *extra]
        result = subprocess.run(args, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return result.stdout

    def assert_figures(self, output):
        for process in PROCESSES:
            # process, samples, CPU ms/sample, sched ms/sample, RSS end, RSS max
            row = rf"^{process}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}"
            self.assertRegex(output, re.compile(row, re.M), output)
        self.assertIn("command: /usr/bin/python3 ", output)
        # The tick-based ratio is "-" when collectd used no 10 ms tick in a window this short (seen in a
        # fresh chroot); the schedstat ratio beside it is always there.
        self.assertRegex(output, rf"floor \(reads_only: .*\): {NUMBER} ms/sample \(sched {NUMBER}\) = "
                                 rf"(?:{NUMBER}|-) x collectd's \(sched {NUMBER}\)")
        self.assertNotIn("lagent logged:", output)

    def test_system_sensors(self):
        self.assert_figures(self.run_bench())

    def test_per_job_sensors(self):
        output = self.run_bench("--jobs", "5")
        self.assert_figures(output)
        self.assertIn("over 5 synthetic Slurm jobs", output)


if __name__ == "__main__":
    unittest.main()
