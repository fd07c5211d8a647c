"""The OpenRC scripts run for real under Debian's openrc-run and supervise-daemon, on this machine
that OpenRC did not boot, without installing anything: the openrc, librc1 and libeinfo1 packages
are unpacked into a temporary directory, and a private mount namespace (unshare -m) overlays
them on /usr/lib/rc and /usr/sbin, with a fresh /run (OpenRC's state) and /var/log, /var/spool
tmpfs, and our scripts merged into /etc/init.d and /etc/conf.d; its own pid namespace ends every
process it started when the test ends. In a chroot, whose / is no mount point and so cannot be
made private, the namespace gets a private copy of the chroot to work in
(fructosa_test.private_mount_namespace). Needs root,
unshare and the three .deb files (apt-get download, or FRUCTOSA_OPENRC_DEBS=dir with them);
skipped otherwise. BUILD_DIR is the built build directory, CMAKE the cmake to use (ctest sets both)."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from fructosa_test import SANDBOX_UNAVAILABLE, free_port, private_mount_namespace  # noqa: E402

BUILD_DIR = os.path.abspath(os.environ.get("BUILD_DIR", "build"))
CMAKE = os.environ.get("CMAKE", "cmake")
PACKAGES = ("openrc", "librc1", "libeinfo1")

SCRIPT = r"""
set -eu
T="$1"
mount -t overlay overlay -o "lowerdir=$T/openrc/lib:/usr/lib" /usr/lib
mount -t overlay overlay -o "lowerdir=$T/openrc/sbin:/usr/sbin" /usr/sbin
mount -t overlay overlay -o "lowerdir=$T/etc:/etc" /etc
for d in /run /var/log /var/spool; do mount -t tmpfs tmpfs "$d"; done
mkdir -p /run/openrc
for d in started starting stopping inactive wasinactive failed hotplugged daemons options exclusive scheduled tmp; do
  mkdir -p "/run/openrc/$d"
done
touch /run/openrc/softlevel  # "this system was booted by OpenRC", as far as openrc-run can tell
export LD_LIBRARY_PATH="$T/openrc/lib/x86_64-linux-gnu"
step() { echo "== $*"; "$@"; echo "== rc=$?"; }
set +e
step /etc/init.d/lmaster start
step /etc/init.d/lmaster status
step /etc/init.d/lmaster reload
step /etc/init.d/lagent start
step /etc/init.d/lagent status
step /etc/init.d/lagent reload
echo "== lmaster pid $(cat /run/lmaster/lmaster.pid) lagent pid $(cat /run/lagent/lagent.pid)"
step /etc/init.d/lagent stop
step /etc/init.d/lmaster stop
step /etc/init.d/lmaster status
step /etc/init.d/fructosa start
step /etc/init.d/lmaster status
step /etc/init.d/lagent status
step /etc/init.d/fructosa stop
step /etc/init.d/lagent status
step /etc/init.d/lmaster status
"""


def openrc_debs(directory):
    """The three packages' .deb files: FRUCTOSA_OPENRC_DEBS, apt's cache, or apt-get download."""
    found = {}
    for where in (os.environ.get("FRUCTOSA_OPENRC_DEBS", ""), "/var/cache/apt/archives"):
        for package in PACKAGES:
            matches = sorted(glob.glob(os.path.join(where, f"{package}_*.deb"))) if where else []
            if matches and package not in found:
                found[package] = matches[-1]
    missing = [p for p in PACKAGES if p not in found]
    if missing and shutil.which("apt-get"):
        subprocess.run(["apt-get", "download", *missing], cwd=directory, capture_output=True, timeout=300)
        for package in missing:
            matches = glob.glob(os.path.join(directory, f"{package}_*.deb"))
            if matches:
                found[package] = matches[0]
    return found


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("unshare") and shutil.which("dpkg-deb"),
                     "needs root (mount namespaces), unshare and dpkg-deb")
class OpenRCTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="fructosa-openrc-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        os.chmod(self.dir, 0o755)
        debs = openrc_debs(self.dir)
        if len(debs) != len(PACKAGES):
            self.skipTest(f"cannot get the Debian packages {', '.join(p for p in PACKAGES if p not in debs)}")
        for deb in debs.values():
            subprocess.run(["dpkg-deb", "-x", deb, os.path.join(self.dir, "openrc")], check=True)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def test_start_status_reload_stop_and_the_stack(self):
        prefix = self.path("usr")
        subprocess.run([CMAKE, "--install", BUILD_DIR, "--prefix", prefix], check=True, capture_output=True)
        etc = self.path("etc")
        shutil.copytree(self.path("usr/share/fructosa/openrc"), etc)
        open(os.path.join(etc, "insserv.conf"), "w").close()  # Debian's openrc reads it
        # `use net`: ordered after net where something provides it (not on Debian).
        with open(os.path.join(etc, "init.d/net"), "w") as f:
            f.write("#!/sbin/openrc-run\ndepend() { provide net; }\nstart() { return 0; }\n")
        os.chmod(os.path.join(etc, "init.d/net"), 0o755)
        data = self.path("data")
        port = free_port()  # nothing listens on it now, and no other test can be handed it
        with open(self.path("lmaster.conf"), "w") as f:
            f.write(f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\ndata_dir = {data}\n[stdout]\n")
        with open(self.path("lagent.conf"), "w") as f:
            f.write(f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\n[lagent]\nhost = testnode\n"
                    f"spool_dir = {self.path('spool')}\n[sensor:VirtualMemory]\ntime_interval = 0.5\n")
        with open(os.path.join(etc, "conf.d/lmaster"), "a") as f:
            f.write(f'LMASTER_CONFIG="{self.path("lmaster.conf")}"\nLMASTER_USER=root\nLMASTER_DATA_DIR="{data}"\n')
        with open(os.path.join(etc, "conf.d/lagent"), "a") as f:
            f.write(f'LAGENT_CONFIG="{self.path("lagent.conf")}"\n')
        result = subprocess.run(private_mount_namespace(SCRIPT, self.dir, pid_namespace=True),
                                capture_output=True, text=True, timeout=300)
        out = result.stdout + result.stderr
        if result.returncode == SANDBOX_UNAVAILABLE:
            self.skipTest(out.strip())
        codes = [line for line in out.splitlines() if line.startswith("== rc=")]
        expected = ["0"] * 8 + ["3"] + ["0"] * 4 + ["3", "3"]
        self.assertEqual([c.split("=")[-1] for c in codes], expected, out)
        self.assertIn("status: started", out)
        # `start` returns once the program runs, so a reload right after it finds the program.
        self.assertIn("Waiting for lmaster to run", out)
        self.assertIn("Waiting for lagent to run", out)
        self.assertIn("Reloading lmaster", out)
        self.assertIn("Reloading lagent", out)
        # The stack came up in order: lmaster, then lagent, then the fructosa service itself.
        stack = out[out.index("== /etc/init.d/fructosa start"):]
        self.assertLess(stack.index("Starting lmaster"), stack.index("Starting lagent"), out)
        down = out[out.index("== /etc/init.d/fructosa stop"):]
        self.assertLess(down.index("Stopping lagent"), down.index("Stopping lmaster"), out)


if __name__ == "__main__":
    unittest.main()
