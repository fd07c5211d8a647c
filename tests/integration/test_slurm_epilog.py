"""contrib/slurm/fructosa-epilog's logic, with stand-ins for fructosa-report and sacctmgr that
record how they were called: the summary goes to the job's AdminComment in the accounting
database (slurmdbd, which cannot run here: it needs MariaDB); a job whose data is
not stored yet is asked for again; whatever fails, the epilog exits 0 and says why (a job's end
must never fail because of its report). The epilog against a real slurmctld is in
test_slurm.py.
"""
import os
import stat
import subprocess
import unittest

from fructosa_test import FructosaTestCase, read_text

EPILOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "contrib", "slurm", "fructosa-epilog")

# Answers as told by files in its directory: exit status per call (`statuses`, one per line,
# the last one repeating), and what it prints.
FAKE_REPORT = """#!/bin/sh
dir=$(dirname "$0")
echo "$*" >> "$dir/report.calls"
calls=$(wc -l < "$dir/report.calls")
status=$(sed -n "${calls}p" "$dir/statuses"); [ -n "$status" ] || status=$(tail -n 1 "$dir/statuses")
if [ "$status" -eq 0 ]; then cat "$dir/summary"; else echo "report failed ($status)" >&2; fi
exit "$status"
"""
FAKE_SACCTMGR = """#!/bin/sh
dir=$(dirname "$0")
for arg in "$@"; do printf '%s\\n' "$arg"; done > "$dir/sacctmgr.args"
status=$(cat "$dir/sacctmgr.status" 2>/dev/null || echo 0)
[ "$status" -eq 0 ] || echo "sacctmgr: error: Problem talking to the database: Connection refused"
exit "$status"
"""


class EpilogTest(FructosaTestCase):
    def setUp(self):
        super().setUp()
        for name, text in [("report", FAKE_REPORT), ("sacctmgr", FAKE_SACCTMGR)]:
            path = self.write(name, text)
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        self.write("summary", "cpu_underused: used 3.1 of 32 allocated cores on average: ask for 4\n")
        self.write("statuses", "0\n")

    def run_epilog(self, job="4242", **settings):
        env = {"PATH": os.environ["PATH"], "FRUCTOSA_REPORT": self.path("report"),
               "FRUCTOSA_REPORT_ARGS": "-d /data/fructosa", "SACCTMGR": self.path("sacctmgr"),
               "FRUCTOSA_POLL": "0.05", "FRUCTOSA_WAIT": "1"}
        if job is not None:
            env["SLURM_JOB_ID"] = job
        env.update(settings)
        return subprocess.run(["sh", EPILOG], env=env, capture_output=True, text=True, timeout=60)

    def test_the_summary_goes_to_the_jobs_admin_comment(self):
        result = self.run_epilog()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(read_text(self.path("report.calls")), "-d /data/fructosa --format summary 4242\n")
        self.assertEqual(read_text(self.path("sacctmgr.args")).splitlines(),
                         ["-i", "update", "job", "where", "jobid=4242", "set",
                          "AdminComment=fructosa: cpu_underused: used 3.1 of 32 allocated cores on average: ask for 4"])
        self.assertIn("job 4242: fructosa: cpu_underused", result.stderr)

    def test_a_job_not_stored_yet_is_asked_for_again(self):
        self.write("statuses", "1\n1\n0\n")
        result = self.run_epilog()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(read_text(self.path("report.calls")).splitlines()), 3)
        self.assertIn("AdminComment=fructosa: cpu_underused", read_text(self.path("sacctmgr.args")))

    def test_failures_are_said_and_never_fail_the_job(self):
        with self.subTest(case="no data within FRUCTOSA_WAIT"):
            self.write("statuses", "1\n")
            result = self.run_epilog(FRUCTOSA_WAIT="0.2")
            self.assertEqual(result.returncode, 0)
            self.assertIn("job 4242", result.stderr)
            self.assertIn("report failed (1)", result.stderr)
            self.assertFalse(os.path.exists(self.path("sacctmgr.args")))
        with self.subTest(case="the report fails otherwise: not asked again"):
            os.remove(self.path("report.calls"))
            self.write("statuses", "2\n")
            result = self.run_epilog()
            self.assertEqual(result.returncode, 0)
            self.assertIn("exited with 2", result.stderr)
            self.assertEqual(len(read_text(self.path("report.calls")).splitlines()), 1)
        with self.subTest(case="sacctmgr fails (no slurmdbd): the summary is still logged"):
            self.write("statuses", "0\n")
            self.write("sacctmgr.status", "1\n")
            result = self.run_epilog()
            self.assertEqual(result.returncode, 0)
            self.assertIn("job 4242: fructosa: cpu_underused", result.stderr)
            self.assertIn("not stored: sacctmgr update AdminComment failed: sacctmgr: error", result.stderr)
        with self.subTest(case="no job id"):
            for job in [None, "", "12;rm"]:
                result = self.run_epilog(job=job)
                self.assertEqual(result.returncode, 0)
                self.assertIn("not a job id", result.stderr)


if __name__ == "__main__":
    unittest.main()
