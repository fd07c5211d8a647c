"""Smoke test of bench/round_cost.py, so that the benchmark does not rot: a short run prints the
per-thread table and the per-round figures. Never asserts on the figures' values."""
import os
import re
import subprocess
import unittest

from fructosa_test import HERE, LAGENT, LMASTER

BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "round_cost.py")
NUMBER = r"\d+(?:\.\d+)?"


class RoundCostBenchTest(unittest.TestCase):
    def test_prints_the_cost_of_a_round(self):
        reads_only = os.path.join(os.path.dirname(os.path.dirname(LAGENT)), "bench", "reads_only")
        result = subprocess.run(["/usr/bin/python3", BENCH, "--seconds", "2", "--warmup", "1", "--interval", "0.1",
                                 "--lagent", LAGENT, "--lmaster", LMASTER, "--reads-only", reads_only],
                                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        out = result.stdout
        self.assertRegex(out, rf"time_interval = 0\.1, batch_interval = 0(?:\.0)?: {NUMBER} rounds in {NUMBER} s")
        self.assertRegex(out, re.compile(rf"^  ZMQbg/IO/0 +\d+ +{NUMBER} +{NUMBER} +{NUMBER}$", re.M))
        self.assertRegex(out, re.compile(rf"^  reads_only +\d+ +{NUMBER} +{NUMBER} +{NUMBER}$", re.M))
        self.assertRegex(out, rf"round: {NUMBER} us of CPU \(target <= 100\), {NUMBER} context switches "
                              rf"\(target <= 2\) per round at 0\.1 s; floor {NUMBER} us")


if __name__ == "__main__":
    unittest.main()
