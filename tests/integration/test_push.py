"""Metrics pushed from inside a job (docs/push.md), live: processes moved into job-like cgroups
push through `lagent push` and through the raw socket; lagent attributes each line to the
pusher's job by SO_PEERCRED and the pid's cgroup, whatever the line says; the samples reach
HDF5 and Graphite under that job. Processes in no job are refused; the per-job rate and name
limits drop and count exactly the excess; garbage never stops lagent nor its other sensors.

The job tests need root and a writable cgroup hierarchy under /sys/fs/cgroup (skipped with the
reason otherwise, as test_jobs.py); the others run anywhere.
"""
import json
import os
import re
import signal
import socket
import subprocess

from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT, HERE
from pickle_sink import PickleSink
from test_jobs import hierarchies

JOB = 4242
OTHER_JOB = 4343


def push_raw(path, data, shut=True):
    """Writes `data` to the push socket as any program could; returns lagent's reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused: the reason is in the reply
        if shut:
            s.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    return reply.decode()


def done_counts(reply):
    match = re.search(r"^done accepted=(\d+) refused=(\d+) dropped=(\d+)$", reply, re.M)
    assert match, reply
    return tuple(int(n) for n in match.groups())


# Run inside a job: moves itself into the job's cgroups (argv[1]: their cgroup.procs files,
# comma-separated), then runs argv[2:] as a shell command line, whose processes inherit them.
IN_JOB = """
import os, subprocess, sys
for procs in sys.argv[1].split(","):
    with open(procs, "w") as f:
        f.write(str(os.getpid()))
sys.exit(subprocess.run(sys.argv[2], shell=True).returncode)
"""

# Pushes stdin's bytes through the raw socket from inside a job and prints the reply.
RAW = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(sys.stdin.buffer.read())
s.shutdown(socket.SHUT_WR)
reply = b""
while chunk := s.recv(65536):
    reply += chunk
sys.stdout.write(reply.decode())
"""


class PushTest(FructosaTestCase):
    def setUp(self):
        super().setUp()
        self.sock = self.path("run/push.sock")
        self.job_dirs = {}

    def make_jobs(self, *jobs):
        top = f"fructosa-push-{os.getpid()}"
        found = hierarchies()
        if not found:
            self.skipTest("no cgroup hierarchy under /sys/fs/cgroup")
        for job in jobs:
            made = []
            for hierarchy in found:
                job_dir = os.path.join(hierarchy, top, f"job_{job}")
                try:
                    os.makedirs(job_dir)
                except OSError as error:
                    self.skipTest(f"cannot create a cgroup under {hierarchy}: {error}")
                made.append(job_dir)
                self.addCleanup(self.remove_cgroup, job_dir)
            self.job_dirs[job] = made
        return (f"[jobs]\nscheduler = regex\nregex = ^{re.escape(top)}/job_(\\d+)$\n"
                f"rescan_interval = 3600\n")

    @staticmethod
    def remove_cgroup(job_dir):
        # Whatever still runs in it was ours and has exited; the parent goes once empty.
        for path in [job_dir, os.path.dirname(job_dir)]:
            try:
                os.rmdir(path)
            except OSError:
                pass

    def in_job(self, job, command, stdin=b""):
        """Runs a shell command line as a process of `job`; returns the CompletedProcess."""
        procs = ",".join(os.path.join(d, "cgroup.procs") for d in self.job_dirs[job])
        return subprocess.run(["/usr/bin/python3", "-c", IN_JOB, procs, command], input=stdin,
                              capture_output=True, timeout=60)

    def start(self, extra_lagent="", sensors=("User",), interval=0.5, graphite=None):
        master_extra = "[stdout]\n"
        if graphite:
            master_extra += f"[Graphite]\nhost = 127.0.0.1\ncarbon receiver pickle port = {graphite.port}\n"
        master, port = self.start_master(master_extra)
        config = self.agent_config(port, list(sensors), interval=interval,
                                   extra=f"push_socket = {self.sock}\n{extra_lagent}")
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])
        wait_for(lambda: os.path.exists(self.sock) or self.agent_exited(agent), what="the push socket")
        return master, agent

    def agent_exited(self, agent):
        if agent.poll() is not None:
            raise AssertionError("lagent exited:\n" + read_text(self.path("lagent.err")))
        return False

    def lines_of(self, sensor, job=0):
        return [l for l in read_text(self.path("lmaster.out")).splitlines()
                if f" testnode {sensor} " in l and f" job={job} " in l]

    def values(self, sensor, job, key):
        """Every value of `key` lmaster printed for `sensor` and `job`, in order."""
        found = []
        for line in self.lines_of(sensor, job):
            match = re.search(rf" {re.escape(key)}=([-0-9.e+]+)", line)
            if match:
                found.append(float(match.group(1)))
        return found

    def last_self(self, key, job=0):
        found = self.values("lagent", job, key)
        return found[-1] if found else None

    def stop_both(self, master, agent):
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

    def hdf5(self):
        dump = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "read_hdf5.py"), self.path("data.h5")],
                              capture_output=True, text=True, check=True)
        return json.loads(dump.stdout)["testnode"]

    def test_job_pushes_through_lagent_push_and_the_raw_socket_reach_hdf5_and_graphite(self):
        jobs = self.make_jobs(JOB, OTHER_JOB)
        sink = PickleSink()
        self.addCleanup(sink.close)
        master, agent = self.start(extra_lagent="[sensor:lagent]\ntime_interval = 0.5\n" + jobs, graphite=sink)
        # `lagent push`: a gauge, negative, and a counter.
        pushed = self.in_job(JOB, f"{LAGENT} push loss -0.25 --socket {self.sock} && "
                                  f"{LAGENT} push steps 5 --counter --socket {self.sock}")
        self.assertEqual(pushed.returncode, 0, pushed.stderr)
        self.assertEqual(pushed.stderr, b"")
        # The raw socket: statsd and Prometheus lines; the line naming another job changes nothing.
        raw = self.in_job(JOB, f"/usr/bin/python3 -c '{RAW}' {self.sock}",
                          stdin=b'steps:2|c\nsteps:1|c|@0.5\nrank_time{rank="3"} 7.5\n# a comment\n'
                                b'loss{job="4343"} 9\n')
        self.assertEqual(done_counts(raw.stdout.decode()), (4, 0, 0), raw.stdout)
        # The other job pushes the same name: its own, never the first job's.
        other = self.in_job(OTHER_JOB, f"{LAGENT} push loss 100 --socket {self.sock}")
        self.assertEqual(other.returncode, 0, other.stderr)

        wait_for(lambda: 9.0 in self.values("User", JOB, "steps") or
                 (self.values("User", JOB, "steps") and sum(self.values("User", JOB, "steps")) >= 9),
                 what="the job's counter in lmaster")
        wait_for(lambda: self.values("User", OTHER_JOB, "loss"), what="the other job's gauge")
        wait_for(lambda: (self.last_self("push_lines", JOB) or 0) >= 6, what="lagent to count the job's pushes")
        self.stop_both(master, agent)

        # A counter's interval sums add up to what was pushed (5 + 2 + 1/0.5); gauges keep their last.
        self.assertEqual(sum(self.values("User", JOB, "steps")), 9.0)
        self.assertEqual(set(self.values("User", JOB, "loss")), {-0.25})
        self.assertEqual(set(self.values("User", JOB, "rank_time_rank_3")), {7.5})
        self.assertEqual(set(self.values("User", JOB, "loss_job_4343")), {9.0})
        self.assertEqual(set(self.values("User", OTHER_JOB, "loss")), {100.0})
        self.assertEqual(self.values("User", 0, "loss"), [], "node samples: nothing was pushed outside the jobs")

        table = self.hdf5()["User"]
        rows = [i for i, job in enumerate(table["job"]) if job == JOB]
        self.assertGreaterEqual(len(rows), 1)
        self.assertEqual(sum(table["columns"]["steps"]["values"][i] or 0 for i in rows), 9.0)
        self.assertEqual({table["columns"]["loss"]["values"][i] for i in rows}, {-0.25})
        self.assertIn("user-defined", table["columns"]["loss"]["description"])
        other_rows = [i for i, job in enumerate(table["job"]) if job == OTHER_JOB]
        self.assertEqual({table["columns"]["loss"]["values"][i] for i in other_rows}, {100.0})
        self.assertEqual(sorted(set(table["jobs"])), [JOB, OTHER_JOB])

        graphite = {}
        for path, _, value in sink.snapshot():
            graphite.setdefault(path, []).append(value)
        self.assertEqual(sum(graphite[f"jobs.{JOB}.testnode.User.steps"]), 9.0)
        self.assertEqual(set(graphite[f"jobs.{JOB}.testnode.User.loss"]), {-0.25})
        self.assertEqual(set(graphite[f"jobs.{OTHER_JOB}.testnode.User.loss"]), {100.0})

    def test_a_process_in_no_job_is_refused_and_counted(self):
        master, agent = self.start(extra_lagent="[sensor:lagent]\ntime_interval = 0.5\n")
        refused = self.run_tool([LAGENT, "push", "loss", "1", "--socket", self.sock])
        self.assertEqual(refused.returncode, 77, refused.stderr)
        self.assertIn("in no batch job", refused.stderr)
        self.assertIn("push_allow_outside_jobs", refused.stderr)
        reply = push_raw(self.sock, b"loss:1|g\n")
        self.assertTrue(reply.startswith("refused: "), reply)
        wait_for(lambda: self.last_self("push_outside_jobs") == 2, what="lagent to count the two refusals")
        self.stop_both(master, agent)
        self.assertEqual(self.lines_of("User"), [])

        # A missing socket is a clear error too.
        missing = self.run_tool([LAGENT, "push", "loss", "1", "--socket", self.path("nothing.sock")])
        self.assertEqual(missing.returncode, 69)
        self.assertIn("nothing.sock", missing.stderr)

    def test_outside_jobs_when_allowed_are_the_nodes_and_malformed_lines_are_explained(self):
        master, agent = self.start(extra_lagent="push_allow_outside_jobs = true\n[sensor:lagent]\ntime_interval = 0.5\n")
        ok = self.run_tool([LAGENT, "push", "temperature", "-3e1", "--socket", self.sock])
        self.assertEqual(ok.returncode, 0, ok.stderr)
        bad = subprocess.run([LAGENT, "push", "--socket", self.sock], input="a.b:1|g\nx:nan|g\ny:1|ms\nz:2|g\n",
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(bad.returncode, 65)
        self.assertIn("line 1: name 'a.b' holds '.'", bad.stderr)
        self.assertIn("line 2: value 'nan' is not finite", bad.stderr)
        self.assertIn("line 3: type 'ms' is not supported", bad.stderr)
        self.assertIn("1 line(s) taken, 3 refused, 0 dropped", bad.stderr)
        wait_for(lambda: self.values("User", 0, "z"), what="the node's pushed gauge")
        wait_for(lambda: self.last_self("push_refused") == 3, what="lagent to count the refused lines")
        self.stop_both(master, agent)
        self.assertEqual(set(self.values("User", 0, "temperature")), {-30.0})

    def test_flooding_past_the_rate_limit_drops_and_counts_exactly_the_excess(self):
        jobs = self.make_jobs(JOB)
        master, agent = self.start(extra_lagent="push_max_lines_per_second = 500\n[sensor:lagent]\ntime_interval = 0.5\n"
                                   + jobs)
        sent = 3000
        raw = self.in_job(JOB, f"/usr/bin/python3 -c '{RAW}' {self.sock}", stdin=b"n:1|c\n" * sent)
        accepted, refused, dropped = done_counts(raw.stdout.decode())
        self.assertEqual(refused, 0)
        self.assertEqual(accepted + dropped, sent)
        self.assertGreater(dropped, 0)
        # One second's window takes 500; a write spanning a second boundary may take twice that.
        self.assertLessEqual(accepted, 1000)
        self.assertEqual(raw.stdout.decode().count("error "), 20, "the first 20 refusals are listed")
        wait_for(lambda: self.last_self("push_rate_dropped", JOB) == dropped and
                 sum(self.values("User", JOB, "n")) == accepted,
                 what="every accepted line in lmaster and the dropped ones counted for the job")
        self.stop_both(master, agent)
        self.assertEqual(self.last_self("push_rate_dropped"), dropped)
        self.assertEqual(self.last_self("push_lines", JOB), accepted)
        log = read_text(self.path("lagent.err"))
        self.assertEqual(log.count(f"job {JOB} pushes more than 500 lines per second"), 1, log)

    def test_garbage_never_stops_lagent_nor_delays_its_other_sensors(self):
        jobs = self.make_jobs(JOB)
        master, agent = self.start(extra_lagent="[sensor:lagent]\ntime_interval = 1\n" + jobs,
                                   sensors=("User", "VirtualMemory"), interval=1.0)
        wait_for(lambda: len(self.lines_of("VirtualMemory")) >= 2, what="VirtualMemory's first readings")
        garbage = [
            bytes(range(256)) * 64,                    # binary, NULs and all
            b"x" * 5_000_000 + b"\n",                  # a line of 5 MB
            b"y" * 3000 + b":1|g\nafter_huge:1|g\n",   # a long line, then a good one
            b"nan:NaN|g\ninf:inf|g\np NaN\nq +Inf\n",  # no number
            b"".join(b"name_%d:1|g\n" % i for i in range(10_000)),  # 10,000 names
        ]
        for data in garbage:
            raw = self.in_job(JOB, f"/usr/bin/python3 -c '{RAW}' {self.sock}", stdin=data)
            self.assertIn("done accepted=", raw.stdout.decode(), raw.stderr)
        # A known name still gets through after all that (once the flood's second is over).
        wait_for(lambda: self.in_job(JOB, f"{LAGENT} push after_huge 2 --socket {self.sock}").returncode == 0,
                 what="a push after the garbage to be taken")
        wait_for(lambda: 2.0 in self.values("User", JOB, "after_huge"), what="the push after the garbage in lmaster")
        readings = len(self.lines_of("VirtualMemory"))
        wait_for(lambda: len(self.lines_of("VirtualMemory")) >= readings + 2, what="VirtualMemory to go on")
        self.assertIsNone(agent.poll())
        wait_for(lambda: self.last_self("VirtualMemory.reads") and self.last_self("VirtualMemory.reads") >= readings + 2,
                 what="lagent's own count of VirtualMemory's reads")
        self.stop_both(master, agent)
        # The readings kept their times: every one on the 1 s grid, and none was skipped.
        self.assertEqual(self.last_self("VirtualMemory.missed"), 0)
        self.assertEqual(self.last_self("VirtualMemory.failures"), 0)
        # The names beyond the job's 100 were dropped, not stored.
        names = {key for line in self.lines_of("User", JOB) for key in re.findall(r" (\w[\w-]*)=", line)} - {"job"}
        self.assertLessEqual(len(names), 100)
        self.assertGreater(self.last_self("push_names_dropped", JOB), 0)
        self.assertGreater(self.last_self("push_refused", JOB), 0)

    def test_a_job_that_ends_has_its_names_forgotten(self):
        jobs = self.make_jobs(JOB)
        master, agent = self.start(extra_lagent="[sensor:lagent]\ntime_interval = 0.5\n" + jobs)
        self.assertEqual(self.in_job(JOB, f"{LAGENT} push loss 2 --socket {self.sock}").returncode, 0)
        wait_for(lambda: len(self.values("User", JOB, "loss")) >= 2, what="the job's gauge reported again")
        for job_dir in self.job_dirs[JOB]:
            self.remove_cgroup(job_dir)  # the job ends (its process already has)

        # Reported every 0.5 s while the job ran: none in the 2 s after the last one.
        def forgotten():
            lines = read_text(self.path("lmaster.out")).splitlines()
            last = max((i for i, l in enumerate(lines) if " testnode User " in l), default=-1)
            return sum(" testnode lagent " in l and " job=0 " in l for l in lines[last + 1:]) >= 4
        wait_for(forgotten, what="User samples to stop once the job ended")
        self.stop_both(master, agent)
        self.assertEqual(self.lines_of("User", 0), [])

    def test_a_reload_keeps_the_socket_and_its_connections_and_applies_new_limits(self):
        master, agent = self.start(extra_lagent="push_allow_outside_jobs = true\npush_max_names_per_job = 1\n")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(self.sock)
            s.sendall(b"first:1|g\n")
            config = read_text(self.path("lagent.conf")).replace("push_max_names_per_job = 1", "push_max_names_per_job = 5")
            self.write("lagent.conf", config)
            agent.send_signal(signal.SIGHUP)
            wait_for(lambda: "SIGHUP: configuration re-read" in read_text(self.path("lagent.err")), what="the reload")
            s.sendall(b"second:2|g\n")  # a second name: over the old limit, within the new
            s.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        self.assertEqual(done_counts(reply.decode()), (2, 0, 0), reply)
        wait_for(lambda: self.values("User", 0, "second"), what="the second name in lmaster")
        self.stop_both(master, agent)

    def test_one_users_idle_connections_do_not_lock_out_the_others(self):
        master, agent = self.start(extra_lagent="push_allow_outside_jobs = true\n")
        held = []
        self.addCleanup(lambda: [s.close() for s in held])
        for _ in range(64):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.sock)
            held.append(s)
        refused = push_raw(self.sock, b"x:1|g\n")
        self.assertIn("refused: uid 0 has 64 push connections open already", refused)
        # Another user still gets in (the socket and its directories are open to everyone).
        os.chmod(self.dir, 0o755)
        os.chmod(os.path.dirname(self.sock), 0o755)
        other = subprocess.run(["runuser", "-u", "nobody", "--", LAGENT, "push", "y", "1", "--socket", self.sock],
                               capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(other.returncode, 0, other.stderr)
        # Closing some gives the user room again.
        for s in held[:10]:
            s.close()
        wait_for(lambda: "done accepted=1" in push_raw(self.sock, b"z:1|g\n"), what="room for uid 0 again")
        self.stop_both(master, agent)
