"""Metrics pushed from inside a real Slurm job (docs/push.md): a private one-node Slurm
(slurm_cluster.py) runs a batch script of user nobody that calls `lagent push` and pipes statsd
lines into it; the real lagent (scheduler = slurm) finds the job from the pushing process's
cgroup that slurmstepd made, and lmaster's HDF5 file has the values under the Slurm job id. A
second job pushes the same name: each job keeps its own. A process of the same user outside any
job is refused.

Needs root, Slurm and munge, and writable cgroup v1 hierarchies, as test_slurm.py: where they are
missing the test FAILS saying why; it never skips.
"""
import json
import os
import subprocess

from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT, HERE
from slurm_cluster import SlurmCluster


class SlurmPushTest(FructosaTestCase):
    def test_a_batch_script_pushes_into_its_own_job(self):
        cluster = SlurmCluster()
        self.addCleanup(cluster.stop)
        cluster.start(accounting="linux")
        sock = cluster.path("run", "push.sock")  # the cluster's directories are 0755: nobody reaches it

        master, port = self.start_master()
        config = self.agent_config(port, ["User"], interval=0.5,
                                   extra=f"push_socket = {sock}\n"
                                         f"[jobs]\nscheduler = slurm\nslurm_node_name = {cluster.node}\n")
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])
        wait_for(lambda: os.path.exists(sock) or (agent.poll() is not None and self.fail(read_text(self.path("lagent.err")))),
                 what="the push socket")

        def script(value):
            # A gauge, then counter lines from a pipe, as a solver's output would be turned into them.
            return (f"#!/bin/sh\nset -e\n{LAGENT} push residual {value} --socket {sock}\n"
                    f"printf 'iterations:10|c\\niterations:5|c\\n' | {LAGENT} push --socket {sock}\n"
                    f"echo pushed\n")

        first = cluster.submit(script("0.5"), user="nobody")
        second = cluster.submit(script("-2"), user="nobody")
        for job in (first, second):
            cluster.wait_state(job, "COMPLETED", timeout=60)
            self.assertIn("pushed", cluster.output(job), cluster.output(job))

        # The same user, outside any job, is refused (exit 77).
        outside = subprocess.run(["runuser", "-u", "nobody", "--", LAGENT, "push", "residual", "1", "--socket", sock],
                                 capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(outside.returncode, 77, outside.stderr)

        def stored(job):
            return [l for l in read_text(self.path("lmaster.out")).splitlines() if f" User job={job} " in l]
        wait_for(lambda: stored(first) and stored(second), what="both jobs' pushes in lmaster")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        dump = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "read_hdf5.py"), self.path("data.h5")],
                              capture_output=True, text=True, check=True)
        table = json.loads(dump.stdout)["testnode"]["User"]
        for job, residual in ((first, 0.5), (second, -2.0)):
            rows = [i for i, j in enumerate(table["job"]) if j == job]
            self.assertTrue(rows, f"job {job}: no User rows; jobs {sorted(set(table['job']))}")
            self.assertEqual({table["columns"]["residual"]["values"][i] for i in rows}, {residual})
            self.assertEqual(sum(table["columns"]["iterations"]["values"][i] or 0 for i in rows), 15.0)
        self.assertNotIn(0, table["job"], "nothing of the node's own")
