"""Smoke test of bench/report_bench.cpp, so that the benchmark does not rot: a tiny run writes
both data sets with lmaster's HDF5 output, measures them and prints every figure line; the files
it keeps are a series fructosa-report reads. Never asserts on the figures.
"""
import json
import os
import re
import subprocess
import unittest

from fructosa_test import FructosaTestCase, LMASTER

# Built beside lmaster (build/bench/report_bench).
REPORT_BENCH = os.environ.get(
    "REPORT_BENCH",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(LMASTER))), "bench", "report_bench"))
FRUCTOSA_REPORT = os.environ.get("FRUCTOSA_REPORT", "fructosa-report")
NUMBER = r"\d+(?:\.\d+)?"


class ReportBenchTest(FructosaTestCase):
    def test_a_tiny_run_prints_its_figures_and_keeps_a_readable_series(self):
        kept = self.path("data")
        run = subprocess.run(
            [REPORT_BENCH, "--nodes", "2", "--hours", "0.1", "--job-rotate-hours", "0.05", "--days", "2",
             "--list-nodes", "4", "--cpus", "2", "--jobs-per-day", "5", "--repeat", "2", "--verdict-sample", "2",
             "--dir", kept],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        out = run.stdout
        self.assertEqual(run.returncode, 0, out + run.stderr)
        self.assertRegex(out, rf"reader floor .*: peak RSS {NUMBER} MiB")
        self.assertRegex(out, rf"\[1\] one job: 2 nodes x 0.1 h at 10 s; .* 2 file\(s\)")
        self.assertRegex(out, rf"report of one job \(2 nodes x 0.1 h at 10 s\): {NUMBER} s, peak RSS {NUMBER} MiB "
                              rf"\(target <= 1 s, <= 200 MiB\)")
        self.assertRegex(out, r"read: 2 file\(s\), 2 hosts, 44 series")
        self.assertRegex(out, rf"\[2\] a month: 2 day\(s\) in 2 file\(s\)")
        self.assertRegex(out, rf"--list's jobs\(\) over 2 files \(10 jobs, {NUMBER} hosts\): {NUMBER} s "
                              rf"\(target <= 2 s\)")
        # The files are closed, so every job's verdict comes from the job index's summaries.
        self.assertRegex(out, rf"--list with every job's verdict: {NUMBER} s, peak RSS {NUMBER} MiB "
                              rf"\(target <= 2 s\) .*: 10 from the index's summaries, 0 read with job\(\)")
        self.assertRegex(out, rf"--list's verdicts .*: {NUMBER} s a job over 2 jobs sampled")
        self.assertRegex(out, rf"written in {NUMBER} s: \d+ rows")
        self.assertRegex(out, rf"benchmark time {NUMBER} s")

        # The month is a series as lmaster names it, one file a day, `path` linking the last.
        month = os.path.join(kept, "month")
        self.assertEqual(sorted(name for name in os.listdir(month) if name.endswith(".h5")),
                         ["fructosa-20261101T000000Z.h5", "fructosa-20261102T000000Z.h5", "fructosa.h5"])
        self.assertEqual(os.readlink(os.path.join(month, "fructosa.h5")), "fructosa-20261102T000000Z.h5")
        listed = subprocess.run([FRUCTOSA_REPORT, "--data", os.path.join(month, "fructosa.h5"), "--list",
                                 "--format", "json", "--slurm", "no"],
                                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertEqual(len(json.loads(listed.stdout)["jobs"]), 10, listed.stdout)


if __name__ == "__main__":
    unittest.main()
