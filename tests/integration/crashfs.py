"""crashfs for the integration tests: a FUSE filesystem that models what survives a power cut
(tests/tools/crashfs, docs/durability.md), mounted on a temporary directory.

    fs = crashfs.mount(backing, mountpoint)   # crashfs runs and the mount is up
    ...                                       # processes write under mountpoint
    fs.cut()                                  # power cut: every call there now fails with EIO
    ...                                       # stop those processes (by PID)
    fs.unmount()
    fs = crashfs.mount(backing, mountpoint)   # what the disk kept

ctest sets CRASHFS to the built program. available() says whether a FUSE mount works here
(tests skip otherwise, with its reason).
"""
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

CRASHFS = os.environ.get("CRASHFS", "crashfs")


class CrashFsError(RuntimeError):
    pass


def _mount_points():
    """The mount points of this mount namespace (octal escapes of mountinfo undone)."""
    with open("/proc/self/mountinfo") as mountinfo:
        return {re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
                for line in mountinfo if len(line.split()) > 4}


def is_mounted(mountpoint):
    return mountpoint in _mount_points()


class CrashFs:
    """One crashfs process: its mount, its control socket, its log."""

    def __init__(self, backing, mountpoint, capacity=None):
        self.backing = os.path.abspath(backing)
        # Resolved now: once the mount is dead, resolving a path through it fails.
        self.mountpoint = os.path.realpath(mountpoint)
        self.capacity = capacity
        self._dir = tempfile.mkdtemp(prefix="crashfs-")  # the control socket and the log
        self.control = os.path.join(self._dir, "control.sock")
        self.log_path = os.path.join(self._dir, "crashfs.log")
        self.process = None
        self._final_log = ""  # the log, kept once unmount() has removed its directory

    def start(self, timeout=30):
        """Starts crashfs and waits until its mount is up; returns self."""
        args = [CRASHFS, self.backing, self.mountpoint, "--control", self.control]
        if self.capacity is not None:
            args += ["--capacity", str(self.capacity)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not is_mounted(self.mountpoint):
            if self.process.poll() is not None:
                code = self.process.returncode
                self.unmount()
                raise CrashFsError(f"crashfs exited with {code} before mounting {self.mountpoint}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.unmount()
                raise CrashFsError(f"crashfs did not mount {self.mountpoint} within {timeout} s:\n{self.log()}")
            time.sleep(0.01)
        return self

    def log(self):
        """What crashfs printed (also after unmount)."""
        try:
            with open(self.log_path, errors="replace") as log:
                return log.read()
        except FileNotFoundError:
            return self._final_log

    def command(self, text, timeout=60):
        """Sends one control command; returns its "ok ..." reply, raises CrashFsError on "error ..."."""
        reply = b""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(timeout)
                connection.connect(self.control)
                connection.sendall(text.encode() + b"\n")
                while not reply.endswith(b"\n"):
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    reply += chunk
        except OSError as error:
            raise CrashFsError(f"crashfs {text!r}: {error}:\n{self.log()}") from error
        if not reply.endswith(b"\n"):
            raise CrashFsError(f"crashfs closed the control connection on {text!r}:\n{self.log()}")
        reply = reply.decode().strip()
        if not reply.startswith("ok"):
            raise CrashFsError(f"crashfs {text!r}: {reply}")
        return reply

    def cut(self, seed=None):
        """Power cut: the durable state (with a seed, also a seeded part of the pending changes)
        is on the backing directory when this returns; every call on the mount fails with EIO."""
        return self.command("cut" if seed is None else f"cut {int(seed)}")

    def set_capacity(self, capacity):
        return self.command(f"capacity {'none' if capacity is None else int(capacity)}")

    def fail_fsync(self, on):
        return self.command(f"fail-fsync {'on' if on else 'off'}")

    def stats(self):
        """{"files": N, "dirty_files": N, ..., "capacity": N or "none"}"""
        fields = dict(item.split("=", 1) for item in self.command("stats").split()[1:])
        return {key: int(value) if value.isdigit() else value for key, value in fields.items()}

    def unmount(self, timeout=30):
        """fusermount3 -u, then waits for crashfs by its PID (SIGTERM, then SIGKILL, past the
        deadline). Without a cut, crashfs writes the live state to the backing directory before
        it exits. Returns crashfs's exit status (None when it was not running)."""
        if self.process is None:
            return None
        if is_mounted(self.mountpoint):
            result = subprocess.run(["fusermount3", "-u", self.mountpoint], capture_output=True, text=True,
                                    timeout=timeout, stdin=subprocess.DEVNULL)
            if result.returncode != 0 and is_mounted(self.mountpoint) and self.process.poll() is None:
                # Busy (something still uses it): crashfs detaches its mount itself on SIGTERM.
                self.process.terminate()
        try:
            try:
                self.process.wait(timeout=min(5, timeout))
            except subprocess.TimeoutExpired:
                # Unmounted here but not gone: a mount namespace made meanwhile (unshare, a
                # container) still holds a copy of the mount, so the kernel never ends the FUSE
                # session. SIGTERM ends it, with the live state written as at an unmount.
                self.process.terminate()
                self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)
        if is_mounted(self.mountpoint):  # crashfs died without unmounting
            subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], capture_output=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        code = self.process.returncode
        self.process = None
        self._final_log = self.log()
        shutil.rmtree(self._dir, ignore_errors=True)
        return code

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.unmount()


def mount(backing, mountpoint, capacity=None, timeout=30):
    """A crashfs on `mountpoint` with its durable image in `backing` (created if missing), up."""
    return CrashFs(backing, mountpoint, capacity).start(timeout)


_availability = None


def available():
    """(True, "") where crashfs can mount here, else (False, the reason). Probed once."""
    global _availability
    if _availability is None:
        _availability = _probe()
    return _availability


def _probe():
    if shutil.which(CRASHFS) is None:
        return False, f"no crashfs program at {CRASHFS!r} (ctest sets CRASHFS)"
    if shutil.which("fusermount3") is None:
        return False, "no fusermount3 (Debian's fuse3)"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as error:
        return False, f"cannot open /dev/fuse: {error}"
    probe = tempfile.mkdtemp(prefix="crashfs-probe-")
    try:
        os.mkdir(os.path.join(probe, "mnt"))
        try:
            with mount(os.path.join(probe, "backing"), os.path.join(probe, "mnt"), timeout=20):
                pass
        except CrashFsError as error:
            return False, f"cannot mount a FUSE filesystem here: {error}"
    finally:
        if not is_mounted(os.path.join(os.path.realpath(probe), "mnt")):
            shutil.rmtree(probe, ignore_errors=True)
    return True, ""
