"""Debian 12 machines booted with their own init as PID 1, for the packaging tests that check the
package under a real service manager: a root made once by debootstrap (minbase, the init system,
the package's runtime dependencies) and kept as a tarball in a cache, unpacked afresh for each test,
booted with `systemd-nspawn -b` (its own PID, mount, UTS and network namespaces; no network) and
driven with `nsenter` into its PID 1's namespaces. `--keep-unit --register=no`: this machine's
PID 1 need not be systemd (nspawn then has no machined to register with, nor a unit to move to).

What it needs, with the reason it fails otherwise (the tests fail, they do not skip: set
FRUCTOSA_SKIP_CONTAINER_TESTS=<why> to skip them on a machine that cannot run containers):
root; systemd-nspawn (systemd-container), debootstrap and nsenter (.ci/install-deps --tests);
a Debian mirror the first time (this machine's, from /etc/apt, or FRUCTOSA_DEBIAN_MIRROR).
The cache: FRUCTOSA_CONTAINER_CACHE, by default /var/cache/fructosa-tests (a root is ~350 MB)."""
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from fructosa_test import private_mount_namespace  # noqa: E402

SUITE = "bookworm"
CACHE_DIR = os.environ.get("FRUCTOSA_CONTAINER_CACHE", "/var/cache/fructosa-tests")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def require_containers(test_case):
    """Fails `test_case` saying exactly what is missing to boot a container here (or skips it
    when FRUCTOSA_SKIP_CONTAINER_TESTS says why not to)."""
    reason = os.environ.get("FRUCTOSA_SKIP_CONTAINER_TESTS")
    if reason:
        raise unittest.SkipTest(f"FRUCTOSA_SKIP_CONTAINER_TESTS: {reason}")
    if os.geteuid() != 0:
        test_case.fail("booting a container needs root (systemd-nspawn, debootstrap, dpkg inside): "
                       "run the test suite as root, or set FRUCTOSA_SKIP_CONTAINER_TESTS=<why>")
    for tool, package in (("systemd-nspawn", "systemd-container"), ("debootstrap", "debootstrap"),
                          ("nsenter", "util-linux")):
        if not shutil.which(tool):
            test_case.fail(f"{tool} not found: apt-get install {package} (.ci/install-deps --tests installs it)")


def debian_mirror():
    """The Debian mirror this machine's apt uses (deb822 or one-line sources)."""
    if os.environ.get("FRUCTOSA_DEBIAN_MIRROR"):
        return os.environ["FRUCTOSA_DEBIAN_MIRROR"]
    try:
        with open("/etc/apt/sources.list.d/debian.sources") as f:
            for line in f:
                if line.startswith("URIs:"):
                    return line.split()[1]
    except OSError:
        pass
    try:
        with open("/etc/apt/sources.list") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[0] == "deb" and "debian" in fields[1] and "security" not in fields[1]:
                    return fields[1]
    except OSError:
        pass
    return "http://deb.debian.org/debian"


def _run_logged(args, log, what, timeout=1800):
    """Runs `args` with its output appended to `log`; fails with the log's end."""
    with open(log, "a") as out:
        out.write(f"$ {' '.join(args)}\n")
        out.flush()
        result = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout)
    if result.returncode != 0:
        with open(log, errors="replace") as f:
            tail = f.read()[-3000:]
        raise AssertionError(f"{what} failed (exit {result.returncode}); the end of {log}:\n{tail}")


def cached_root(name, packages, depends=""):
    """The tarball of a Debian 12 root with `packages` (debootstrap --include, dependencies
    resolved) and what the dependency field `depends` asks for (apt-get satisfy), made on first
    use and kept in CACHE_DIR under a name that changes with what it holds."""
    key = hashlib.sha256("\n".join([SUITE, *packages, depends]).encode()).hexdigest()[:16]
    os.makedirs(CACHE_DIR, exist_ok=True)
    tarball = os.path.join(CACHE_DIR, f"debian12-{name}-{key}.tar")
    with open(tarball + ".lock", "w") as lock:
        # Two tests making the same root: one makes it, the other waits and uses it.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isfile(tarball):
            return tarball
        work = tempfile.mkdtemp(prefix=f"debian12-{name}-", dir=CACHE_DIR)
        try:
            root = os.path.join(work, "root")
            log = tarball + ".log"
            open(log, "w").close()
            mirror = debian_mirror()
            _run_logged(["debootstrap", "--variant=minbase", "--include=" + ",".join(packages), SUITE, root, mirror],
                        log, f"debootstrap of a Debian 12 root from {mirror} (a mirror must be reachable the first "
                        f"time; FRUCTOSA_DEBIAN_MIRROR chooses another)")
            if depends:
                _run_logged(["chroot", root, "/usr/bin/env", "-i", "PATH=" + PATH, "DEBIAN_FRONTEND=noninteractive",
                             "apt-get", "satisfy", "-y", "-q", "--no-install-recommends", depends],
                            log, f"installing the package's dependencies ({depends}) in the root")
            subprocess.run(["chroot", root, "apt-get", "clean"], check=False, capture_output=True)
            _run_logged(["tar", "-C", root, "-cf", tarball + ".part", "."], log, "archiving the root")
            os.rename(tarball + ".part", tarball)
            return tarball
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _namespace_pids(pid):
    """A process's PIDs from this PID namespace down to its own ("NSpid:" of its status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return [int(n) for n in line.split()[1:]]
    except OSError:
        pass
    return []


def packages(build_dir, cpack, out, extra_tree=None):
    """(package, upgrade, Depends): the build directory's .deb (cpack), unpacked and built again
    with `extra_tree(tree)` applied (None: as it is) and then as version <version>+upgrade, the
    same programs under a newer version. Written into `out`."""
    def run(args):
        result = subprocess.run(args, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited with {result.returncode}:\n{result.stdout}{result.stderr}")
        return result.stdout
    run([cpack, "-G", "DEB", "--config", os.path.join(build_dir, "CPackConfig.cmake"), "-B", out])
    built = [os.path.join(out, n) for n in os.listdir(out) if n.endswith(".deb")][0]
    tree = os.path.join(out, "tree")
    run(["dpkg-deb", "-R", built, tree])
    if extra_tree:
        extra_tree(tree)
    version = run(["dpkg-deb", "-f", built, "Version"]).strip()
    control = os.path.join(tree, "DEBIAN", "control")
    debs = []
    for new_version in (version, version + "+upgrade"):
        with open(control) as f:
            text = f.read()
        with open(control, "w") as f:
            f.write(re.sub(r"(?m)^Version: .*$", f"Version: {new_version}", text))
        debs.append(os.path.join(out, f"fructosa_{new_version}_test.deb"))
        run(["dpkg-deb", "--root-owner-group", "-b", tree, debs[-1]])
    return debs[0], debs[1], run(["dpkg-deb", "-f", built, "Depends"]).strip()


class Container:
    """A root unpacked from a cached tarball into `directory`, booted by `boot()` as the machine
    `name` (its hostname), driven by `sh()`; `kill()` ends it (tests add it as a cleanup)."""

    def __init__(self, tarball, directory, name):
        self.name = name
        self.directory = directory
        self.root = os.path.join(directory, "root")
        os.makedirs(self.root)
        subprocess.run(["tar", "-C", self.root, "-xf", tarball], check=True)
        # debootstrap copied this machine's name; systemd would set it back from here.
        with open(self.path("/etc/hostname"), "w") as f:
            f.write(name + "\n")
        self.nspawn = None
        self.leader = None
        self.boots = 0

    def path(self, inside):
        """The host's path of the container's `inside`."""
        return os.path.join(self.root, inside.lstrip("/"))

    def console(self):
        """What the container's console showed in its last boot."""
        with open(os.path.join(self.directory, f"console-{self.boots}.log"), errors="replace") as f:
            return f.read()

    def boot(self, timeout=60):
        """Starts the container's init; returns once its PID 1 runs (not when it booted)."""
        assert self.nspawn is None, "already booted"
        self.boots += 1
        console = open(os.path.join(self.directory, f"console-{self.boots}.log"), "w")
        # In a mount namespace of its own where / is a mount point: nspawn makes / a slave mount,
        # which fails in a chroot ("Failed to mount n/a on / (MS_REC|MS_SLAVE)"), where it is
        # not one. The shell execs nspawn: its PID is the one Popen knows.
        self.nspawn = subprocess.Popen(
            private_mount_namespace('exec "$@"', "systemd-nspawn", "--quiet", "--boot", "--keep-unit",
                                    "--register=no", "--private-network", f"--machine={self.name}",
                                    "--console=read-only", f"--directory={self.root}"),
            stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
        console.close()
        deadline = time.monotonic() + timeout
        while self.leader is None:
            # The container's init: the child of nspawn that is PID 1 of a PID namespace of its
            # own (nspawn's short-lived helper children are not).
            inits = [pid for pid in self._nspawn_children() if _namespace_pids(pid)[1:] == [1]]
            if inits:
                self.leader = inits[0]
            elif self.nspawn.poll() is not None:
                self.nspawn = None
                raise AssertionError(f"systemd-nspawn could not boot {self.root}:\n{self.console()[-3000:]}")
            elif time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"systemd-nspawn started no init in {timeout} s:\n{self.console()[-3000:]}")
            else:
                time.sleep(0.05)

    def _nspawn_children(self):
        children = []
        for task in os.listdir(f"/proc/{self.nspawn.pid}/task") if self.nspawn.poll() is None else []:
            try:
                with open(f"/proc/{self.nspawn.pid}/task/{task}/children") as f:
                    children += [int(pid) for pid in f.read().split()]
            except OSError:
                pass
        return children

    def sh(self, script, check=True, timeout=120):
        """Runs `sh -c script` as root inside the container (all of its namespaces, a clean
        environment); returns the CompletedProcess, failing on a non-zero exit with `check`."""
        assert self.leader is not None, "not booted"
        # --root: the init's root directory, not the namespace's root mount (they differ where
        # nspawn ran in a chroot).
        result = subprocess.run(["nsenter", f"--target={self.leader}", "--all", "--root", "--wd", "--",
                                 "/usr/bin/env", "-i", "PATH=" + PATH, "LANG=C.UTF-8", "TERM=dumb", "/bin/sh", "-c",
                                 script],
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"in the container, `{script}` exited with {result.returncode}:\n"
                                 f"{result.stdout}{result.stderr}")
        return result

    def out(self, script, timeout=120):
        """The standard output of `script` (which must succeed), stripped."""
        return self.sh(script, timeout=timeout).stdout.strip()

    def wait_stopped(self, timeout=120):
        """Waits for the container's init to end (after a poweroff asked inside); kills it after
        `timeout` seconds and fails then."""
        try:
            self.nspawn.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the container did not stop within {timeout} s:\n{self.console()[-3000:]}")
        self.nspawn = None
        self.leader = None

    def kill(self):
        """Ends the container now: SIGKILL to its PID 1 ends every process of its PID namespace
        (what nsenter started too), then systemd-nspawn exits."""
        if self.nspawn is None:
            return
        # The init found at boot, and any other child of nspawn that is PID 1 of its namespace (a
        # boot that failed before the init was found): killing nspawn alone would orphan it.
        inits = {pid for pid in self._nspawn_children() if _namespace_pids(pid)[1:] == [1]}
        for pid in inits | ({self.leader} if self.leader is not None else set()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.nspawn.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.nspawn.kill()
            self.nspawn.wait(timeout=30)
        self.nspawn = None
        self.leader = None
