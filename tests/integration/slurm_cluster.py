"""A private one-node Slurm for tests: munged, slurmctld and slurmd from Debian's packages
(slurm-wlm 22.05), run in the foreground on 127.0.0.1 and free ports, with the task/cgroup and
proctrack/cgroup plugins on cgroup v1, in a directory of its own.

    cluster = SlurmCluster()
    cluster.start(accounting="linux")        # JobAcctGatherType=jobacct_gather/linux
    job = cluster.submit("#!/bin/sh\\nsleep 5\\n", user="nobody", extra_args=["--mem=100M"])
    cluster.wait_state(job, "RUNNING")
    cluster.job_dirs(job)                    # {"freezer": "/sys/fs/cgroup/freezer/slurm_<node>/uid_65534/job_<id>", ...}
    cluster.stop()                           # cancels jobs, stops daemons by PID, removes its cgroups

Needs root and writable cgroup v1 hierarchies (freezer, memory, cpuset) under /sys/fs/cgroup;
`unavailable()` says why not, `start()` raises SlurmUnavailable (an AssertionError: a test that
needs Slurm fails, saying why, rather than skipping) with the tail of the daemons' logs.

The node name is unique per cluster (Debian's Slurm is built with multiple-slurmd support), so
job cgroups are <hierarchy>/slurm_<node>/uid_<uid>/job_<id>/step_<step>/..., apart from any
other Slurm on the machine. Every daemon is stopped by its PID; nothing is killed by name.
"""
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from fructosa_test import alive, free_port, read_text, wait_for

CGROUP = "/sys/fs/cgroup"
DAEMONS = ["munged", "mungekey", "slurmctld", "slurmd", "slurmstepd", "sbatch", "scontrol", "sinfo", "scancel", "srun"]
# Hierarchies Slurm's cgroup/v1 plugin needs (proctrack/cgroup: freezer; task/cgroup: memory, cpuset).
REQUIRED_HIERARCHIES = ["freezer", "memory", "cpuset"]


class SlurmUnavailable(AssertionError):
    """Slurm cannot run here; the message says why."""


def _which(name):
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None)


def unavailable():
    """Why a private Slurm cannot run on this machine, or None when it can."""
    if os.geteuid() != 0:
        return f"not root (euid {os.geteuid()}): slurmd needs root to make job cgroups"
    missing = [name for name in DAEMONS if not _which(name)]
    if missing:
        return f"Slurm or munge binaries missing: {' '.join(missing)} (apt-get install slurmd slurmctld slurm-client munge)"
    for name in REQUIRED_HIERARCHIES:
        path = os.path.join(CGROUP, name)
        if not os.path.exists(os.path.join(path, "tasks")):
            return f"no cgroup v1 {name} hierarchy at {path} (Slurm's cgroup/v1 plugin needs freezer, memory, cpuset)"
        if not os.access(path, os.W_OK):
            return f"cgroup v1 hierarchy {path} is not writable"
    return None


def _tail(path, lines=30):
    text = read_text(path)
    return "\n".join(text.splitlines()[-lines:]) if text else "(empty or missing)"


def _hierarchies():
    """Every mounted cgroup hierarchy directory under /sys/fs/cgroup (links such as
    cpu,cpuacct -> cpu resolved; each once)."""
    found = []
    for name in sorted(os.listdir(CGROUP)) if os.path.isdir(CGROUP) else []:
        path = os.path.realpath(os.path.join(CGROUP, name))
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "cgroup.procs")) and path not in found:
            found.append(path)
    return found


def cgroup_procs(directory):
    """The pids in `directory`/cgroup.procs (empty when it is gone)."""
    return [int(p) for p in read_text(os.path.join(directory, "cgroup.procs")).split() if p.isdigit()]


def tree_procs(directory):
    """The pids in `directory` and every cgroup below it."""
    pids = []
    for root, _, _ in os.walk(directory):
        pids += cgroup_procs(root)
    return pids


class SlurmCluster:
    """One slurmctld + one slurmd (node `node`, `cpus` CPUs) with their munged."""

    def __init__(self, directory=None, node=None, cpus=None, memory_mb=4000):
        if directory is None:
            directory = tempfile.mkdtemp(prefix="fructosa-slurm-")
            self._own_directory = True
        else:
            os.makedirs(directory, exist_ok=True)
            self._own_directory = False
        # munged refuses a socket directory that others cannot search; slurmstepd, running the
        # job as its user, writes the job's output under out/.
        os.chmod(directory, 0o755)
        self.dir = directory
        self.node = node or f"fx{os.getpid()}x{next(_counter)}"
        self.cpus = cpus or os.cpu_count() or 1
        self.memory_mb = memory_mb
        self.host = socket.gethostname()
        self.accounting = None
        self.conf = self.path("etc", "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CONF_SERVER"):
            self.env.pop(name, None)
        self._processes = {}  # daemon name -> Popen
        self._logs = {}
        self.submitted = []

    def path(self, *names):
        return os.path.join(self.dir, *names)

    # ---- configuration -------------------------------------------------------------------

    def _write_config(self, accounting, epilog_slurmctld=None):
        for sub, mode in [("etc", 0o755), ("munge", 0o755), ("state", 0o755), ("spool", 0o755),
                          ("log", 0o755), ("out", 0o1777), ("run", 0o755)]:
            os.makedirs(self.path(sub), exist_ok=True)
            os.chmod(self.path(sub), mode)
        ctld_port, slurmd_port = free_port(), free_port()
        while slurmd_port == ctld_port:
            slurmd_port = free_port()
        text = f"""ClusterName=fx
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.path('munge', 'munge.socket')}
CredType=cred/munge
StateSaveLocation={self.path('state')}
SlurmdSpoolDir={self.path('spool', '%n')}
SlurmctldPidFile={self.path('run', 'slurmctld.pid')}
SlurmdPidFile={self.path('run', 'slurmd-%n.pid')}
SlurmctldLogFile={self.path('log', 'slurmctld.log')}
SlurmdLogFile={self.path('log', 'slurmd.log')}
SlurmctldDebug=info
SlurmdDebug=debug
MailProg=/bin/true
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/{accounting}
JobAcctGatherFrequency=task=30
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
SlurmdTimeout=60
InactiveLimit=0
KillWait=2
NodeName={self.node} NodeAddr=127.0.0.1 NodeHostname={self.host} CPUs={self.cpus} RealMemory={self.memory_mb} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""
        if epilog_slurmctld:
            text += f"EpilogSlurmctld={epilog_slurmctld}\n"
        with open(self.conf, "w") as f:
            f.write(text)
        with open(self.path("etc", "cgroup.conf"), "w") as f:
            f.write("CgroupPlugin=cgroup/v1\nConstrainCores=yes\nConstrainRAMSpace=yes\n")

    # ---- daemons -------------------------------------------------------------------------

    def _spawn(self, name, args):
        out = open(self.path("log", f"{name}.stdout"), "w")
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=self.env, start_new_session=True)
        out.close()
        self._processes[name] = process
        return process

    def logs(self, lines=30):
        """The tails of every daemon's log, for failure messages."""
        parts = []
        for name in ["munged.log", "munged.stdout", "slurmctld.log", "slurmctld.stdout", "slurmd.log", "slurmd.stdout"]:
            path = self.path("log", name)
            if os.path.exists(path):
                parts.append(f"--- {path} (last {lines} lines) ---\n{_tail(path, lines)}")
        return "\n".join(parts)

    def _fail(self, why):
        raise SlurmUnavailable(f"private Slurm cluster (node {self.node}, {self.dir}) could not start: {why}\n{self.logs()}")

    def _wait(self, condition, timeout, what, daemons=()):
        """wait_for, failing at once (with the logs) when one of `daemons` exits."""
        def check():
            for name in daemons:
                process = self._processes.get(name)
                if process is not None and process.poll() is not None:
                    self._fail(f"{name} exited with status {process.returncode} while waiting for {what}")
            return condition()
        try:
            return wait_for(check, timeout=timeout, what=what)
        except SlurmUnavailable:
            raise
        except AssertionError as error:
            self._fail(str(error))

    def start(self, accounting="linux", timeout=60, epilog_slurmctld=None):
        """Starts munged, slurmctld and slurmd with JobAcctGatherType=jobacct_gather/<accounting>
        ("linux" or "cgroup"), and EpilogSlurmctld when given, and waits until the node is idle."""
        why = unavailable()
        if why:
            raise SlurmUnavailable(f"private Slurm cluster cannot run here: {why}")
        if accounting not in ("linux", "cgroup"):
            raise ValueError(f"accounting must be linux or cgroup, not {accounting!r}")
        self.accounting = accounting
        self._write_config(accounting, epilog_slurmctld)
        key = self.path("munge", "munge.key")
        if not os.path.exists(key):
            result = subprocess.run([_which("mungekey"), "-c", "-k", key], capture_output=True, text=True)
            if result.returncode != 0:
                self._fail(f"mungekey failed: {result.stdout}{result.stderr}")
        socket_path = self.path("munge", "munge.socket")
        self._spawn("munged", [_which("munged"), "-F", f"--socket={socket_path}", f"--key-file={key}",
                               f"--log-file={self.path('log', 'munged.log')}",
                               f"--pid-file={self.path('munge', 'munged.pid')}",
                               f"--seed-file={self.path('munge', 'munged.seed')}"])
        self._wait(lambda: os.path.exists(socket_path), 15, "munged's socket", ["munged"])
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i"])
        self._wait(lambda: self._run(["scontrol", "ping"], check=False).returncode == 0, timeout,
                   "slurmctld to answer scontrol ping", ["munged", "slurmctld"])
        self._spawn("slurmd", [_which("slurmd"), "-D", "-N", self.node])
        self._wait(lambda: self.node_state() == "idle", timeout, f"node {self.node} to be idle (sinfo)",
                   ["munged", "slurmctld", "slurmd"])
        return self

    def node_state(self):
        result = self._run(["sinfo", "-h", "-n", self.node, "-o", "%t"], check=False)
        return result.stdout.strip() if result.returncode == 0 else None

    def stop(self):
        """Cancels the jobs left, waits for their cgroups to empty (killing by PID what stays),
        stops slurmd, slurmctld and munged by PID and removes the node's cgroup trees."""
        errors = []
        try:
            if self._processes.get("slurmctld") and self._processes["slurmctld"].poll() is None:
                running = [j for j in self.submitted if self.job_state(j) not in (None, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")]
                if running:
                    self._run(["scancel"] + [str(j) for j in running], check=False)
        except Exception as error:  # noqa: BLE001 - cleanup goes on
            errors.append(f"scancel: {error}")
        self._empty_cgroups(timeout=15)
        for name in ["slurmd", "slurmctld", "munged"]:
            process = self._processes.get(name)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)
        # slurmctld's helper (slurmscriptd) and any slurmstepd left: found by their pidfiles /
        # cgroups, never by name.
        self._empty_cgroups(timeout=5)
        self._remove_cgroups()
        if self._own_directory:
            shutil.rmtree(self.dir, ignore_errors=True)
        return errors

    def node_cgroup_roots(self):
        """<hierarchy>/slurm_<node> for every hierarchy that has it."""
        return [os.path.join(h, f"slurm_{self.node}") for h in _hierarchies()
                if os.path.isdir(os.path.join(h, f"slurm_{self.node}"))]

    def _empty_cgroups(self, timeout):
        """Waits for the node's cgroups to hold no process; then kills (by PID) what stays."""
        def pids():
            found = set()
            for root in self.node_cgroup_roots():
                found.update(tree_procs(root))
            return found
        deadline = time.monotonic() + timeout
        while pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        for _ in range(3):
            left = pids()
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            wait_for(lambda: not any(alive(p) for p in left), timeout=10, what=f"processes {sorted(left)} to die")

    def _remove_cgroups(self):
        """rmdir the node's cgroup trees, deepest first, in every hierarchy."""
        for root in self.node_cgroup_roots():
            for directory, _, _ in sorted(os.walk(root), key=lambda entry: -entry[0].count("/")):
                for _ in range(50):
                    try:
                        os.rmdir(directory)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)  # EBUSY for a moment after its last process exits

    # ---- clients -------------------------------------------------------------------------

    def _run(self, args, user=None, check=True, timeout=30):
        command = [_which(args[0]) or args[0]] + list(args[1:])
        if user is not None:
            command = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={self.conf}"] + command
        result = subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=timeout,
                                stdin=subprocess.DEVNULL, cwd="/tmp")
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed ({result.returncode}): {result.stdout}{result.stderr}\n{self.logs(15)}")
        return result

    def run(self, args, user=None, check=True, timeout=30):
        """Runs a Slurm client (sbatch, scontrol, ...) against this cluster, as `user`."""
        return self._run(args, user=user, check=check, timeout=timeout)

    def submit(self, script, user=None, extra_args=()):
        """sbatch of the script text `script` as `user` (None: root); returns the job id."""
        scripts = self.path("out")
        fd, path = tempfile.mkstemp(prefix="job-", suffix=".sh", dir=scripts)
        with os.fdopen(fd, "w") as f:
            f.write(script)
        os.chmod(path, 0o755)
        result = self._run(["sbatch", "--parsable", "--chdir=/tmp", "-o", self.path("out", "job-%j.out"),
                            *extra_args, path], user=user)
        job = int(result.stdout.strip().split(";")[0])
        self.submitted.append(job)
        return job

    def job_info(self, job):
        """`scontrol show job -o <job>` as a dict (None when slurmctld no longer knows it)."""
        result = self._run(["scontrol", "show", "job", "-o", str(job)], check=False)
        if result.returncode != 0 or not result.stdout.strip():
            return None
        info = {}
        for match in re.finditer(r"(\S+?)=(\S*)", result.stdout.strip()):
            info.setdefault(match.group(1), match.group(2))
        return info

    def job_state(self, job):
        info = self.job_info(job)
        return info.get("JobState") if info else None

    def wait_state(self, job, states, timeout=60):
        """Waits until the job is in one of `states` ("RUNNING", "COMPLETED", ...); returns it.
        Fails with the job's record and the logs when it ends in another state."""
        if isinstance(states, str):
            states = [states]
        final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}

        def reached():
            state = self.job_state(job)
            if state in states:
                return state
            if state in final:
                raise AssertionError(f"job {job} is {state}, not {'/'.join(states)}: {self.job_info(job)}\n"
                                     f"{read_text(self.path('out', f'job-{job}.out'))}\n{self.logs(20)}")
            return None
        try:
            return wait_for(reached, timeout=timeout, what=f"job {job} to be {'/'.join(states)}")
        except AssertionError as error:
            if "timed out" in str(error):
                raise AssertionError(f"{error}: {self.job_info(job)}\n{self.logs(20)}") from None
            raise

    def output(self, job):
        return read_text(self.path("out", f"job-{job}.out"))

    # ---- job cgroups ---------------------------------------------------------------------

    def job_dirs(self, job):
        """{hierarchy name: <hierarchy>/slurm_<node>/uid_<uid>/job_<id>} for every hierarchy
        holding the job's cgroup now (empty once Slurm removed them)."""
        found = {}
        for hierarchy in _hierarchies():
            for path in glob.glob(os.path.join(hierarchy, f"slurm_{self.node}", "uid_*", f"job_{job}")):
                found[os.path.basename(hierarchy)] = path
        return found

    def job_dir(self, job, hierarchy="freezer"):
        return self.job_dirs(job).get(hierarchy)

    def job_uid(self, job):
        path = self.job_dir(job) or next(iter(self.job_dirs(job).values()), None)
        return int(os.path.basename(os.path.dirname(path))[4:]) if path else None

    def step_pids(self, job, hierarchy="freezer"):
        """{step dir name: pids} of the job's step_* cgroups (and their task_* below) in `hierarchy`."""
        job_dir = self.job_dir(job, hierarchy)
        steps = {}
        for step in sorted(glob.glob(os.path.join(job_dir, "step_*"))) if job_dir else []:
            steps[os.path.basename(step)] = tree_procs(step)
        return steps


class JobWatcher:
    """Polls the cgroups of some jobs from a thread (every `interval` s): when each job's
    cgroup appeared and vanished (wall clock, time.time()), and what `probe(job, dirs)` gave
    while it ran: a list of (time, value) per job."""

    def __init__(self, cluster, probe=None, interval=0.05):
        self.cluster = cluster
        self.probe = probe
        self.interval = interval
        self.jobs = set()
        self.appeared = {}
        self.vanished = {}
        self.samples = {}
        self.errors = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def watch(self, job):
        with self._lock:
            self.jobs.add(job)

    def _loop(self):
        while not self._stop.is_set():
            with self._lock:
                jobs = [j for j in self.jobs if j not in self.vanished]
            for job in jobs:
                try:
                    dirs = self.cluster.job_dirs(job)
                    now = time.time()
                    if dirs and job not in self.appeared:
                        self.appeared[job] = now
                    elif not dirs and job in self.appeared:
                        self.vanished[job] = now
                    if dirs and self.probe:
                        value = self.probe(job, dirs)
                        if value is not None:
                            self.samples.setdefault(job, []).append((now, value))
                except Exception as error:  # noqa: BLE001 - reported by the test
                    self.errors.append(f"job {job}: {error!r}")
            self._stop.wait(self.interval)

    def wait_gone(self, job, timeout=60):
        return wait_for(lambda: self.vanished.get(job), timeout=timeout, what=f"job {job}'s cgroups to vanish")

    def wait_appeared(self, job, timeout=60):
        return wait_for(lambda: self.appeared.get(job), timeout=timeout, what=f"job {job}'s cgroups to appear")

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)


def _count():
    n = 0
    while True:
        n += 1
        yield n


_counter = _count()
