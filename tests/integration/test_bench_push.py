"""Smoke test of bench/push_throughput.py, so that the benchmark does not rot: a short run
prints every figure. Never asserts on the figures' values."""
import os
import subprocess
import unittest

from fructosa_test import HERE, LAGENT, LMASTER

BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "push_throughput.py")
NUMBER = r"[\d,]+(?:\.\d+)?"


class PushBenchTest(unittest.TestCase):
    def test_prints_every_figure(self):
        result = subprocess.run(["/usr/bin/python3", BENCH, "--seconds", "1", "--lagent", LAGENT, "--lmaster", LMASTER],
                                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        out = result.stdout
        self.assertRegex(out, rf"taken: +{NUMBER} lines in {NUMBER} s = {NUMBER} lines/s")
        self.assertRegex(out, rf"push thread: {NUMBER} s CPU = {NUMBER} lines per second of one core")
        self.assertRegex(out, rf"lagent \(all threads\): {NUMBER} s CPU = {NUMBER} ms per 1000 lines")
        self.assertRegex(out, rf"connect: +1000 connections of one line")
        self.assertRegex(out, rf"= {NUMBER} us per connection")
        self.assertRegex(out, rf"dropped: +limit 1000 lines/s: {NUMBER} taken, {NUMBER} dropped")


if __name__ == "__main__":
    unittest.main()
