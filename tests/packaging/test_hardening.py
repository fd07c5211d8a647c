"""The systemd units' sandboxes: their exposure scores (`systemd-analyze security --offline=true`:
lagent at most 3.0, lmaster at most 1.5), and lagent and lmaster really working inside the parts
of them that can be rebuilt without systemd as PID 1: each unit's SystemCallFilter= (with
SystemCallErrorNumber=, through libseccomp, as systemd loads it), CapabilityBoundingSet= (the
processes run as root, as lagent does, keeping only those capabilities) and ProtectProc=invisible
(a procfs of their own mounted with hidepid=invisible). Every sensor is read inside and outside
lagent's, and must give the same metrics with no new permission error: a job of another user's
process included (JobProc, JobCgroup, Taskstats), and the external command of IPMIPower. Then an
lagent and an lmaster each in its own exchange samples, reload and stop.

The scores need systemd-analyze 250 or later; the rest needs root and libseccomp (skipped, with
the reason, otherwise). BUILD_DIR is the built build directory (ctest sets it)."""
import ctypes
import ctypes.util
import errno
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
BUILD_DIR = os.path.abspath(os.environ.get("BUILD_DIR", "build"))
os.environ.setdefault("LAGENT", os.path.join(BUILD_DIR, "lagent", "lagent"))
os.environ.setdefault("LMASTER", os.path.join(BUILD_DIR, "lmaster", "lmaster"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))
from fructosa_test import FructosaTestCase, LAGENT, LMASTER, read_text, wait_for  # noqa: E402

# The most each unit may expose (systemd 252's scale: 0 safe .. 10 unprotected).
EXPOSURE_LIMITS = {"lagent.service": 3.0, "lmaster.service": 1.5}
# What cmake/install_services.cmake fills in for the prefix /usr.
UNIT_PATHS = {"FRUCTOSA_BIN_DIR": "/usr/bin", "FRUCTOSA_CONFIG_DIR": "/etc/fructosa",
              "FRUCTOSA_DOC_DIR": "/usr/share/doc/fructosa"}
PERMISSION_ERRORS = re.compile(r"EPERM|EACCES|Operation not permitted|Permission denied")
JOB = 4343
# The exit status of a child whose sandbox could not be made (the test is then skipped).
SANDBOX_FAILED = 86


def configured_unit(name):
    with open(os.path.join(SOURCE_DIR, "systemd", name + ".in")) as f:
        text = f.read()
    for key, value in UNIT_PATHS.items():
        text = text.replace(f"@{key}@", value)
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise AssertionError(f"{name}.in has {left}, which this test does not fill in")
    return text


def service_settings(unit_text):
    """[Service] KEY=VALUE assignments in order, comments and other sections left out."""
    settings, section = [], None
    for line in unit_text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            settings.append((key, value))
    return settings


def syscall_set(names):
    """System call names, with the @groups systemd-analyze knows expanded."""
    calls = set()
    for name in names:
        if not name.startswith("@"):
            calls.add(name)
            continue
        listing = subprocess.run(["systemd-analyze", "syscall-filter", name],
                                 capture_output=True, text=True, check=True)
        for line in listing.stdout.splitlines()[1:]:
            entry = line.strip()
            if entry and not entry.startswith("#"):
                calls |= syscall_set([entry])
    return calls


class Sandbox:
    """What a unit's SystemCallFilter=, SystemCallErrorNumber=, CapabilityBoundingSet= and
    ProtectProc= do to the process it starts, applied between fork and exec (preexec_fn)."""

    def __init__(self, unit_text):
        allowed, error_number, capabilities, self.hide_processes = None, errno.EPERM, None, False
        for key, value in service_settings(unit_text):
            if key == "SystemCallFilter":
                names = value.split()
                if not names:
                    allowed = None
                elif names[0].startswith("~"):
                    names[0] = names[0][1:]
                    if allowed is not None:  # a deny list after an allow list takes from it
                        allowed -= syscall_set(names)
                else:  # systemd starts an allow list with @default
                    start = allowed if allowed is not None else syscall_set(["@default"])
                    allowed = start | syscall_set(names)
            elif key == "SystemCallErrorNumber":
                error_number = getattr(errno, value)
            elif key == "CapabilityBoundingSet":
                capabilities = set(value.split())  # the units set it once
            elif key == "ProtectProc":
                self.hide_processes = value == "invisible"
        if allowed is None or capabilities is None:
            raise AssertionError("the unit sets no SystemCallFilter= allow list or no CapabilityBoundingSet=")
        self.error_number = error_number
        self.seccomp = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
        self.seccomp.seccomp_init.restype = ctypes.c_void_p
        self.seccomp.seccomp_init.argtypes = [ctypes.c_uint32]
        self.seccomp.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
        self.seccomp.seccomp_load.argtypes = [ctypes.c_void_p]
        self.seccomp.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        # Names this architecture has (@groups name every architecture's calls).
        numbers = (self.seccomp.seccomp_syscall_resolve_name(call.encode()) for call in sorted(allowed))
        self.numbers = [number for number in numbers if number >= 0]
        libcap = ctypes.CDLL(ctypes.util.find_library("cap") or "libcap.so.2")
        keep = set()
        for name in capabilities:
            value = ctypes.c_int()
            if libcap.cap_from_name(name.lower().encode(), ctypes.byref(value)) != 0:
                raise AssertionError(f"unknown capability {name}")
            keep.add(value.value)
        with open("/proc/sys/kernel/cap_last_cap") as f:
            self.dropped = [cap for cap in range(int(f.read()) + 1) if cap not in keep]
        self.libc = ctypes.CDLL(None, use_errno=True)

    def __call__(self):
        # In the child, between fork and exec: system calls through ctypes, no exception.
        libc = self.libc
        if self.hide_processes:
            ms_rec, ms_private, ms_nosuid, ms_nodev, ms_noexec = 0x4000, 0x40000, 2, 4, 8
            if (libc.unshare(0x00020000) != 0  # CLONE_NEWNS
                    or libc.mount(b"none", b"/proc", None, ms_rec | ms_private, None) != 0
                    or libc.mount(b"proc", b"/proc", b"proc", ms_nosuid | ms_nodev | ms_noexec,
                                  b"hidepid=invisible") != 0):
                os.write(2, b"sandbox: cannot mount a private /proc with hidepid=invisible\n")
                os._exit(SANDBOX_FAILED)
        for cap in self.dropped:
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                os.write(2, b"sandbox: cannot drop a capability from the bounding set\n")
                os._exit(SANDBOX_FAILED)
        context = self.seccomp.seccomp_init(0x00050000 | self.error_number)  # SCMP_ACT_ERRNO
        for number in self.numbers:
            self.seccomp.seccomp_rule_add(context, 0x7FFF0000, number, 0)  # SCMP_ACT_ALLOW
        if self.seccomp.seccomp_load(context) != 0:  # sets no_new_privs, as NoNewPrivileges=yes
            os.write(2, b"sandbox: cannot load the seccomp filter\n")
            os._exit(SANDBOX_FAILED)



def kernel_at_least(major, minor):
    found = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return bool(found) and (int(found.group(1)), int(found.group(2))) >= (major, minor)


class ExposureTest(unittest.TestCase):
    def test_exposure_scores(self):
        if not shutil.which("systemd-analyze"):
            self.skipTest("needs systemd-analyze (systemd 250 or later)")
        directory = tempfile.mkdtemp(prefix="fructosa-units-")
        self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
        for unit, limit in EXPOSURE_LIMITS.items():
            path = os.path.join(directory, unit)
            with open(path, "w") as f:
                f.write(configured_unit(unit))
            result = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", path],
                                    capture_output=True, text=True, timeout=60)
            if "offline" in result.stderr and result.returncode != 0:
                self.skipTest(f"systemd-analyze has no --offline (systemd 250 or later): {result.stderr.strip()}")
            found = re.search(rf"Overall exposure level for {re.escape(unit)}: (\d+\.\d)", result.stdout)
            self.assertIsNotNone(found, result.stdout + result.stderr)
            exposed = "\n".join(line for line in result.stdout.splitlines() if line.startswith("✗"))
            self.assertLessEqual(float(found.group(1)), limit, f"{unit}: what it exposes:\n{exposed}")


@unittest.skipUnless(os.geteuid() == 0, "needs root: lagent runs as root, and the sandbox drops capabilities")
@unittest.skipUnless(ctypes.util.find_library("seccomp") or os.path.exists("/usr/lib/x86_64-linux-gnu/libseccomp.so.2"),
                     "needs libseccomp")
@unittest.skipUnless(shutil.which("systemd-analyze"), "needs systemd-analyze (the system call groups)")
class SandboxTest(FructosaTestCase):
    def setUp(self):
        super().setUp()
        self.lagent_sandbox = Sandbox(configured_unit("lagent.service"))
        self.lmaster_sandbox = Sandbox(configured_unit("lmaster.service"))
        if (self.lagent_sandbox.hide_processes or self.lmaster_sandbox.hide_processes) and not kernel_at_least(5, 8):
            # Before 5.8, hidepid would change the options of the machine's own /proc.
            self.skipTest("ProtectProc=invisible needs Linux 5.8 (a procfs instance of its own)")

    @staticmethod
    def sandboxed_environment():
        """LeakSanitizer stops the world with ptrace, which the units' filters refuse: under the
        sanitizers (.ci/sanitize-and-fuzz) leaks are checked by every other test, not here."""
        env = dict(os.environ)
        if "ASAN_OPTIONS" in env:
            env["ASAN_OPTIONS"] += ":detect_leaks=0"
        return env

    def run_in(self, sandbox, args, timeout=60):
        result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                preexec_fn=sandbox, env=self.sandboxed_environment())
        if result.returncode == SANDBOX_FAILED:
            self.skipTest(result.stderr.strip())
        return result

    def spawn_in(self, sandbox, name, args):
        out = open(self.path(name + ".out"), "w")
        err = open(self.path(name + ".err"), "w")
        self.addCleanup(out.close)
        self.addCleanup(err.close)
        process = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL, preexec_fn=sandbox,
                                   env=self.sandboxed_environment())
        self._processes.append(process)
        return process

    def probe(self, sensors, options, sandbox=None):
        """{sensor: {job: metric keys}}, the unavailable sensors' reasons, and permission errors."""
        args = [LAGENT, "probe", *sensors, "--interval", "0.3"] + [a for o in options for a in ("-o", o)]
        result = self.run_in(sandbox, args) if sandbox else self.run_tool(args)
        self.assertIn(result.returncode, (0, 1), result.stderr)  # 1: some sensor is unavailable here
        samples = {}
        for line in result.stdout.splitlines():
            sample = json.loads(line)
            samples.setdefault(sample["sensor"], {})[sample["job"]] = (sorted(sample["metrics"]), sample["metrics"])
        unavailable = dict(re.findall(r"^(\w+): unavailable: (.*)$", result.stderr, re.M))
        # Without the time and pid at the start of log lines, so that both runs compare.
        denied = {re.sub(r"^\S+ \S+ lagent\[\d+\] ", "", line) for line in result.stderr.splitlines()
                  if PERMISSION_ERRORS.search(line)}
        return samples, unavailable, denied

    def assert_same_readings(self, sensors, options):
        plain, plain_unavailable, plain_denied = self.probe(sensors, options)
        boxed, boxed_unavailable, boxed_denied = self.probe(sensors, options, self.lagent_sandbox)
        self.assertEqual(boxed_denied - plain_denied, set(), "permission errors only inside the sandbox")
        self.assertEqual(boxed_unavailable, plain_unavailable)
        self.assertEqual({s: {j: keys for j, (keys, _) in jobs.items()} for s, jobs in boxed.items()},
                         {s: {j: keys for j, (keys, _) in jobs.items()} for s, jobs in plain.items()})
        return boxed

    def test_every_sensor_reads_the_same_inside_lagents_sandbox(self):
        listed = re.findall(r"^\[sensor:(\w+)\]", self.run_tool([LAGENT, "sensors"]).stdout, re.M)
        sensors = [s for s in listed if s != "User"]  # User listens on a socket rather than reading
        self.assertIn("PerfHW", sensors)
        boxed = self.assert_same_readings(sensors, [
            "PerfHW.scope=node",
            # IPMIPower's external command: fork, exec and wait under the filter, as ipmi-dcmi.
            "IPMIPower.method=command", "IPMIPower.command=echo 'Instantaneous power reading: 123 Watts'"])
        self.assertEqual(boxed["IPMIPower"][0][1]["power"], 123)

    def test_job_of_another_user_inside_lagents_sandbox(self):
        top = f"fructosa-hardening-{os.getpid()}"
        made, job_dirs = [], []
        self.addCleanup(lambda: [os.rmdir(d) for d in reversed(made) if os.path.isdir(d)])
        v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        roots = ["/sys/fs/cgroup"] if v2 else [os.path.realpath(os.path.join("/sys/fs/cgroup", c))
                                               for c in ("cpu,cpuacct", "cpuacct", "memory", "pids")
                                               if os.path.exists(os.path.join("/sys/fs/cgroup", c, "cgroup.procs"))]
        for root in dict.fromkeys(roots):
            for directory in (os.path.join(root, top), os.path.join(root, top, f"job_{JOB}")):
                try:
                    os.mkdir(directory)
                except OSError as error:
                    self.skipTest(f"cannot make a cgroup under {root}: {error}")
                made.append(directory)
            job_dirs.append(made[-1])
        if not job_dirs:
            self.skipTest("no cgroup hierarchy under /sys/fs/cgroup")
        # A process of user nobody: its /proc/<pid>/io is 0400 and ptrace-read only.
        worker = subprocess.Popen(["/usr/bin/python3", "-c", "while True: sum(range(20000))"],
                                  user=65534, group=65534, stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: worker.poll() is None and (worker.kill(), worker.wait()))
        for directory in job_dirs:
            with open(os.path.join(directory, "cgroup.procs"), "w") as procs:
                procs.write(str(worker.pid))
        boxed = self.assert_same_readings(["JobCgroup", "JobProc", "Taskstats"],
                                          ["jobs.scheduler=regex", rf"jobs.regex=^{top}/job_(\d+)$"])
        self.assertIn(JOB, boxed["JobProc"], boxed)
        self.assertEqual(boxed["JobProc"][JOB][1]["unreadable_processes"], 0, "nobody's /proc/<pid>/io")
        self.assertIn(JOB, boxed["JobCgroup"], boxed)

    def test_lagent_and_lmaster_in_their_sandboxes(self):
        config = self.write("lmaster.conf", self.master_config("[stdout]\n"))
        master = self.spawn_in(self.lmaster_sandbox, "lmaster",
                               [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        port = wait_for(lambda: self.listening_port(self.path("lmaster.err")) or self.exited(master),
                        what="lmaster to listen")
        sensors = ("[sensor:VirtualMemory]\ntime_interval = 0.2\n[sensor:PerfHW]\ntime_interval = 0.2\nscope = node\n"
                   "[sensor:IPMIPower]\ntime_interval = 0.2\nmethod = command\ncommand = echo 50 W\n")
        agent_config = self.write("lagent.conf", self.agent_config(port, []) + sensors)
        agent_pidfile = self.path("lagent.pid")
        agent = self.spawn_in(self.lagent_sandbox, "lagent", [LAGENT, "run", "-c", agent_config, "-p", agent_pidfile])

        def received(sensor, count):
            if agent.poll() is not None:
                raise AssertionError("lagent exited:\n" + read_text(self.path("lagent.err")))
            return read_text(self.path("lmaster.out")).count(f" testnode {sensor} ") >= count
        for sensor in ("VirtualMemory", "PerfHW", "IPMIPower"):
            wait_for(lambda: received(sensor, 3), what=f"lmaster to receive 3 {sensor} samples")
        # ExecReload= runs inside the unit's sandbox too: the check, then SIGHUP by pidfile.
        reload = self.run_in(self.lagent_sandbox, [LAGENT, "reload", "-c", agent_config, "-p", agent_pidfile])
        self.assertEqual(reload.returncode, 0, reload.stdout + reload.stderr)
        wait_for(lambda: "SIGHUP: configuration re-read" in read_text(self.path("lagent.err")), what="lagent's reload")
        seen = read_text(self.path("lmaster.out")).count(" testnode VirtualMemory ")
        wait_for(lambda: received("VirtualMemory", seen + 3), what="samples after the reload")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))
        for name in ("lagent", "lmaster"):
            log = read_text(self.path(name + ".err"))
            self.assertIsNone(PERMISSION_ERRORS.search(log), log)


if __name__ == "__main__":
    unittest.main()
