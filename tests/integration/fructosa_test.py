"""Helpers for integration tests: temporary directories, real lagent/lmaster processes on
ephemeral 127.0.0.1 ports, waiting on conditions with deadlines, stopping by PID.

Run with /usr/bin/python3 (Debian's h5py and psutil). ctest sets LAGENT and LMASTER to the
built programs.
"""
import errno
import glob
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import unittest

LAGENT = os.environ.get("LAGENT", "lagent")
LMASTER = os.environ.get("LMASTER", "lmaster")
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")
# lmaster reports its own sensor `lmaster` under this host (short host name, like the agents).
MASTER_HOST = socket.gethostname().split(".")[0]


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now, for a server started later on a port
    known before (lmaster after its lagent, carbon-cache, a service from its configuration).
    Taken below the kernel's ephemeral range: bind(0) and outgoing connections, which every
    other test and program here uses, never get such a port, so none can take it in the
    seconds before the server binds it (a port from bind(0), closed again, can be)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    low = max(1024, ephemeral_low - 16384)
    for _ in range(200):
        port = random.randrange(low, ephemeral_low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {low}..{ephemeral_low - 1}")


def proc_with_fixture_mounts(directory):
    """A procfs root for `[lagent] proc_root` in `directory` in which DiskPartitions reads the
    mount table of tests/fixtures/partitions (its README), so that it reports partitions with
    device labels whatever the machine (a chroot or a container mounts no block device), while
    the other sensors read this machine's /proc: proc_root is agent-wide, so every other entry
    of /proc but the processes (they come and go) is a link to /proc's. With a proc_root other
    than /proc, NetConnections reads <proc_root>/net/* rather than asking the kernel by netlink."""
    root = os.path.join(directory, "proc")
    if os.path.isdir(root):
        return root
    os.makedirs(os.path.join(root, "self"))
    os.symlink(os.path.join(FIXTURES, "partitions", "mounts"), os.path.join(root, "self", "mounts"))
    os.symlink(os.path.join(FIXTURES, "storage", "proc", "filesystems"), os.path.join(root, "filesystems"))
    for name in os.listdir("/proc"):
        if not name.isdigit() and name not in ("self", "thread-self", "mounts", "filesystems"):
            os.symlink(os.path.join("/proc", name), os.path.join(root, name))
    return root


def wait_for(condition, timeout=30.0, what="condition", interval=0.05):
    """Polls `condition` every `interval` seconds until it returns something true; fails after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def alive(pid):
    """True while `pid` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def stdout_counts(text):
    """Samples of host testnode per sensor in lmaster's [stdout] lines: '<time> <host> <sensor> job=...'."""
    counts = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[1] == "testnode":
            counts[fields[2]] = counts.get(fields[2], 0) + 1
    return counts


def spooled_batches(directory):
    """Records in an agent spool's segment files (common/segment_log.h: a 32-byte header
    [magic "FAS2"][payload bytes][CRC][0][id][count], then the payload), taken ones included
    until their segment is deleted: it grows while lagent samples."""
    count = 0
    for path in glob.glob(os.path.join(directory, "*.seg")):
        with open(path, "rb") as f:
            data = f.read()
        offset = 0
        while offset + 32 <= len(data):
            magic, payload = struct.unpack_from("<II", data, offset)
            if magic != 0x32534146 or offset + 32 + payload > len(data):
                break
            count += 1
            offset += 32 + payload
    return count


# private_mount_namespace's exit status when this machine cannot give it a private namespace.
SANDBOX_UNAVAILABLE = 77

# Runs `sh -c "$1" sh "$2"...` where mounts reach no other namespace. unshare leaves propagation
# as it is, so that this works in a chroot too. Where / is a mount point, it is made private
# (what `unshare --propagation private` does). In a chroot it is not, and cannot be made one
# without its mounts reaching the machine's namespace (/ is shared under systemd): /proc, a
# mount point there, is made private, a tmpfs over it holds a recursive bind of the chroot, made
# private before anything is mounted under it, with a new procfs, and the script runs chrooted
# in that copy (the same paths). Exits SANDBOX_UNAVAILABLE, saying why, when neither / nor
# /proc is a mount point.
_SANDBOX = r"""
set -eu
script=$1
shift
if mount --make-rprivate / 2>/dev/null; then
  mount -t proc -o nosuid,nodev,noexec proc /proc
  exec sh -c "$script" sh "$@"
fi
if ! mount --make-rprivate /proc 2>/dev/null; then
  echo "no private mount namespace: neither / nor /proc is a mount point"
  exit 77
fi
mount -t tmpfs -o mode=0700 tmpfs /proc
mkdir /proc/root
mount --rbind / /proc/root
mount --make-rprivate /proc/root
mount -t proc -o nosuid,nodev,noexec proc /proc/root/proc
exec chroot /proc/root sh -c "$script" sh "$@"
"""


def private_mount_namespace(script, *args, pid_namespace=False):
    """The command line that runs `sh -c script sh args...` as root in a mount namespace of its
    own (and a pid namespace with `pid_namespace`), on a machine or in a chroot alike."""
    return (["unshare", "--mount", "--propagation", "unchanged"] + (["--pid", "--fork"] if pid_namespace else [])
            + ["sh", "-c", _SANDBOX, "sh", script, *args])


def read_text(path):
    """The file's text, or "" once it is gone: a cgroup file removed between open and read
    fails with ENODEV rather than ENOENT."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""
    except OSError as error:
        if error.errno == errno.ENODEV:
            return ""
        raise


class FructosaTestCase(unittest.TestCase):
    """Gives each test a temporary directory and stops every process it started."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="fructosa-it-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self._processes = []
        self.addCleanup(self._stop_all)

    def path(self, name):
        return os.path.join(self.dir, name)

    def probe_without_jobs(self):
        """`lagent probe` options that keep its job discovery off this machine's cgroups: a job of
        a test running beside this one (test_slurm's) would label the node's samples
        involved_jobs."""
        empty = self.path("no-cgroups")
        os.makedirs(empty, exist_ok=True)
        return ["-o", "jobs.scheduler=slurm", "-o", f"jobs.cgroup_root={empty}"]

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def _stop_all(self):
        for process in self._processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        # Daemons are not our children: find them by their pidfiles.
        for name in os.listdir(self.dir) if os.path.isdir(self.dir) else []:
            if name.endswith(".pid"):
                text = read_text(self.path(name)).strip()
                if text.isdigit() and alive(int(text)):
                    os.kill(int(text), signal.SIGKILL)

    def spawn(self, name, args):
        """Starts a foreground process with stdout/stderr in files NAME.out / NAME.err."""
        out = open(self.path(name + ".out"), "w")
        err = open(self.path(name + ".err"), "w")
        self.addCleanup(out.close)
        self.addCleanup(err.close)
        process = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        self._processes.append(process)
        return process

    def stop(self, process, timeout=30):
        """SIGTERM by PID, then wait; returns the exit code."""
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=timeout)

    def master_config(self, extra="", port=0):
        return (f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\n"
                f"data_dir = {self.path('lmaster-data')}\n"
                f"[hdf5]\npath = {self.path('data.h5')}\nflush_interval = 0.5\n{extra}")

    def agent_config(self, port, sensors, interval=0.2, extra=""):
        text = (f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\n[lagent]\nhost = testnode\n"
                f"spool_dir = {self.path('lagent-spool')}\n{extra}")
        for sensor in sensors:
            text += f"[sensor:{sensor}]\ntime_interval = {interval}\n"
        return text

    def start_master(self, extra="[stdout]\n"):
        """lmaster run on a free port; returns (process, port)."""
        config = self.write("lmaster.conf", self.master_config(extra))
        process = self.spawn("lmaster", [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        port = wait_for(lambda: self.listening_port(self.path("lmaster.err")) or self.exited(process),
                        what="lmaster to listen")
        return process, port

    def exited(self, process):
        if process.poll() is not None:
            raise AssertionError(f"process exited with {process.returncode}:\n" +
                                 read_text(self.path("lmaster.err")))
        return None

    @staticmethod
    def listening_port(log_path):
        match = re.search(r"listening on tcp://127\.0\.0\.1:(\d+)", read_text(log_path))
        return int(match.group(1)) if match else None

    def run_tool(self, args, timeout=60):
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

WIRE_CLIENT = os.environ.get("WIRE_CLIENT", "wire_client")
