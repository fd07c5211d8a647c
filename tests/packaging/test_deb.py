"""The Debian package: `cpack` builds fructosa_<version>_amd64.deb from the build directory; as
root, `dpkg -i` installs it (lagent --version from /usr/bin, the lmaster user, conffiles kept
across a reinstall) and `dpkg --purge` removes it all. The maintainer scripts and the services:
installing enables nothing, removing disables what `systemctl enable` enabled, purging leaves no
link to the units, and an upgrade try-restarts what runs. This machine's PID 1 is not systemd
(nor OpenRC), so `systemctl enable` and `disable` work on the files, and a running service
manager is played in a private mount namespace: a /run of its own saying that systemd (or
OpenRC) runs, and stand-ins for deb-systemd-invoke, systemctl and rc-service that write down
what they are asked. This test changes the machine it runs on: ctest runs it alone
(RUN_SERIAL) and it purges the package even when it fails.
BUILD_DIR is the built build directory, CPACK the cpack to use (ctest sets both)."""
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from fructosa_test import SANDBOX_UNAVAILABLE, private_mount_namespace  # noqa: E402

BUILD_DIR = os.path.abspath(os.environ.get("BUILD_DIR", "build"))
PACKAGE = "fructosa"
CPACK = os.environ.get("CPACK", "cpack")


def run(args, check=True, **kwargs):
    result = subprocess.run(args, capture_output=True, text=True, timeout=kwargs.pop("timeout", 600), **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def installed():
    result = run(["dpkg-query", "-W", "-f=${db:Status-Status}", PACKAGE], check=False)
    return result.returncode == 0 and result.stdout.strip() not in ("", "not-installed", "config-files")


def user_exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


UNIT_NAMES = ("lagent.service", "lmaster.service", "fructosa.target")
SYSTEMD_CONFIG = "/etc/systemd/system"
HAND_MADE_WANTS = f"{SYSTEMD_CONFIG}/fructosa.target.wants"  # what `systemctl enable` does not make


def unit_links():
    """Every symbolic link under /etc/systemd/system named after one of the package's units."""
    found = []
    for directory, _, files in os.walk(SYSTEMD_CONFIG):
        found += [os.path.join(directory, name) for name in files
                  if name in UNIT_NAMES and os.path.islink(os.path.join(directory, name))]
    return sorted(found)


def remove_unit_links():
    for link in unit_links():
        os.unlink(link)
    if os.path.isdir(HAND_MADE_WANTS) and not os.listdir(HAND_MADE_WANTS):
        os.rmdir(HAND_MADE_WANTS)


# Stand-ins for the service managers' tools: each writes its name and arguments to $CALLS.
STAND_IN = '#!/bin/sh\necho "$(basename "$0") $*" >> "$CALLS"\n'

# In a private mount namespace: a /run saying which service manager runs ($1: systemd or
# openrc), the stand-ins first on PATH, then the command ($2...).
RUNNING_MANAGER = r"""
manager=$1
shift
mount -t tmpfs tmpfs /run
case $manager in
  systemd) mkdir -p /run/systemd/system ;;
  openrc) mkdir -p /run/openrc ;;
esac
PATH="$STAND_INS:$PATH" exec "$@"
"""


def project_version():
    with open(os.path.join(BUILD_DIR, "CPackConfig.cmake")) as f:
        return re.search(r'set\(CPACK_PACKAGE_VERSION "([^"]+)"\)', f.read()).group(1)


@unittest.skipUnless(shutil.which(CPACK) and shutil.which("dpkg-deb"), "needs cpack and dpkg-deb")
class DebianPackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="fructosa-deb-")
        run([CPACK, "-G", "DEB", "--config", os.path.join(BUILD_DIR, "CPackConfig.cmake"), "-B", cls.out])
        arch = run(["dpkg", "--print-architecture"]).stdout.strip()
        cls.deb = os.path.join(cls.out, f"{PACKAGE}_{project_version()}_{arch}.deb")
        cls.control = os.path.join(cls.out, "control")  # the maintainer scripts
        run(["dpkg-deb", "-e", cls.deb, cls.control])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def test_package_metadata(self):
        self.assertTrue(os.path.isfile(self.deb), os.listdir(self.out))
        depends = run(["dpkg-deb", "-f", self.deb, "Depends"]).stdout
        # Debian's runtime libraries, found by dpkg-shlibdeps from what the programs link.
        for library in ("libzmq5", "libcapnp-0.9.2", "libhdf5-103-1", "libcurl4", "libspdlog1.10", "libc6", "adduser"):
            self.assertIn(library, depends)
        control = self.control
        with open(os.path.join(control, "conffiles")) as f:
            conffiles = f.read().split()
        self.assertIn("/etc/fructosa/lagent.conf", conffiles)
        self.assertIn("/etc/fructosa/lmaster.conf", conffiles)
        for script in ("postinst", "prerm", "postrm"):
            self.assertTrue(os.access(os.path.join(control, script), os.X_OK), script)
            run(["sh", "-n", os.path.join(control, script)])
        files = run(["dpkg-deb", "-c", self.deb]).stdout
        for path in ("./usr/bin/lagent", "./usr/bin/lmaster", "./usr/bin/fructosa-report", "./usr/lib/systemd/system/lagent.service",
                     "./usr/lib/systemd/system/lmaster.service", "./usr/lib/sysusers.d/fructosa.conf",
                     "./usr/share/man/man8/lagent.8", "./usr/share/man/man1/fructosa-report.1",
                     "./usr/share/fructosa/slurm/fructosa-epilog",
                     "./usr/share/fructosa/openrc/init.d/fructosa"):
            self.assertIn(path, files)

    @unittest.skipUnless(os.geteuid() == 0, "dpkg -i needs root (run the test suite as root to include it)")
    def test_install_run_purge(self):
        if installed():
            self.skipTest("a fructosa package is installed on this machine already: not replacing it")
        had_user = user_exists("lmaster")
        # Purged whatever happens below (a half-installed package included).
        self.addCleanup(run, ["dpkg", "--purge", PACKAGE], check=False)

        run(["dpkg", "-i", self.deb])
        version = run(["/usr/bin/lagent", "--version"]).stdout
        self.assertEqual(version.strip(), f"lagent (fructosa) {project_version()}")
        self.assertIn(project_version(), run(["/usr/bin/lmaster", "--version"]).stdout)
        # The installed programs really work: one reading of a sensor.
        self.assertIn('"sensor":"VirtualMemory"', run(["/usr/bin/lagent", "probe", "VirtualMemory"]).stdout)

        user = pwd.getpwnam("lmaster")
        self.assertNotEqual(user.pw_uid, 0)
        self.assertLess(user.pw_uid, 1000, "a system user")
        self.assertIn(user.pw_shell, ("/usr/sbin/nologin", "/sbin/nologin"))
        self.assertEqual(os.stat("/var/lib/fructosa").st_uid, user.pw_uid)
        self.assertTrue(os.path.isdir("/var/spool/fructosa"))
        # Root's lagent logs in /var/log/fructosa, which lmaster's user cannot write (it could plant
        # a link there); lmaster in a directory of its own.
        logs = os.stat("/var/log/fructosa")
        self.assertEqual((logs.st_uid, logs.st_gid, logs.st_mode & 0o7777), (0, 0, 0o755))
        own = os.stat("/var/log/fructosa/lmaster")
        self.assertEqual((own.st_uid, own.st_mode & 0o7777), (user.pw_uid, 0o750))

        conffiles = run(["dpkg-query", "-W", "-f=${Conffiles}", PACKAGE]).stdout
        self.assertIn("/etc/fructosa/lagent.conf", conffiles)
        self.assertIn("/etc/fructosa/lmaster.conf", conffiles)
        # An administrator's change survives installing the package again.
        with open("/etc/fructosa/lagent.conf", "a") as f:
            f.write("# changed by the site\n")
        run(["dpkg", "-i", "--force-confold", self.deb])
        with open("/etc/fructosa/lagent.conf") as f:
            self.assertTrue(f.read().endswith("# changed by the site\n"))

        run(["dpkg", "--purge", PACKAGE])
        self.assertFalse(installed())
        self.assertNotEqual(run(["dpkg-query", "-W", "-f=${db:Status-Status}", PACKAGE], check=False).stdout.strip(),
                            "config-files")
        for path in ("/usr/bin/lagent", "/usr/bin/lmaster", "/etc/fructosa", "/usr/lib/systemd/system/lagent.service",
                     "/var/log/fructosa", "/var/spool/fructosa", "/var/lib/fructosa"):
            self.assertFalse(os.path.lexists(path), f"{path} is left after the purge")
        if not had_user:
            self.assertFalse(user_exists("lmaster"), "the lmaster user is left after the purge")

    def with_running_manager(self, manager, command):
        """Runs `command` while `manager` (systemd, openrc) seems to run; returns the calls made
        to the stand-ins, one "tool arguments" line each."""
        stand_ins = tempfile.mkdtemp(prefix="fructosa-stand-ins-")
        self.addCleanup(shutil.rmtree, stand_ins, ignore_errors=True)
        for tool in ("deb-systemd-invoke", "systemctl", "rc-service", "rc-update"):
            with open(os.path.join(stand_ins, tool), "w") as f:
                f.write(STAND_IN)
            os.chmod(os.path.join(stand_ins, tool), 0o755)
        calls = os.path.join(stand_ins, "calls")
        open(calls, "w").close()
        env = dict(os.environ, STAND_INS=stand_ins, CALLS=calls)
        result = subprocess.run(private_mount_namespace(RUNNING_MANAGER, manager, *command), env=env,
                                capture_output=True, text=True, timeout=600)
        if result.returncode == SANDBOX_UNAVAILABLE:
            self.skipTest(result.stdout.strip())
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        with open(calls) as f:
            return f.read().splitlines()

    @unittest.skipUnless(os.geteuid() == 0, "dpkg -i needs root (run the test suite as root to include it)")
    def test_enable_nothing_restart_on_upgrade_disable_on_removal(self):
        if installed():
            self.skipTest("a fructosa package is installed on this machine already: not replacing it")
        if unit_links():
            self.skipTest(f"links to fructosa's units exist on this machine already: {unit_links()}")
        if not shutil.which("systemctl") or not shutil.which("unshare"):
            self.skipTest("needs systemctl (to enable units without a running systemd) and unshare")
        # Whatever happens below: purged, and no link left.
        self.addCleanup(remove_unit_links)
        self.addCleanup(run, ["dpkg", "--purge", PACKAGE], check=False)

        run(["dpkg", "-i", self.deb])
        self.assertEqual(unit_links(), [], "installing enabled something")
        run(["systemctl", "enable", *UNIT_NAMES])
        self.assertIn(f"{SYSTEMD_CONFIG}/multi-user.target.wants/lagent.service", unit_links())
        # And one made by hand.
        os.makedirs(HAND_MADE_WANTS, exist_ok=True)
        os.symlink("/usr/lib/systemd/system/lagent.service", f"{HAND_MADE_WANTS}/lagent.service")
        enabled = unit_links()

        # An upgrade (dpkg -i of the package over itself runs the same scripts with the same
        # arguments) while systemd runs: daemon-reload, then try-restart, which restarts only
        # the services that run; nothing is stopped first, enabled or started.
        calls = self.with_running_manager("systemd", ["dpkg", "-i", self.deb])
        self.assertEqual(calls, ["systemctl daemon-reload",
                                 "deb-systemd-invoke try-restart lmaster.service lagent.service"])
        self.assertEqual(unit_links(), enabled, "an upgrade must keep what the administrator enabled")
        # The same under OpenRC (the postinst alone: its arguments are those of dpkg above).
        postinst = os.path.join(self.control, "postinst")
        version = project_version()
        calls = self.with_running_manager("openrc", [postinst, "configure", version])
        self.assertEqual(calls, ["rc-service --ifexists --ifstarted lmaster restart",
                                 "rc-service --ifexists --ifstarted lagent restart"])
        # Where no service manager runs (a chroot, an image build): nothing to restart.
        self.assertEqual(self.with_running_manager("none", [postinst, "configure", version]), [])
        # What removal asks a running systemd: stop, then disable.
        calls = self.with_running_manager("systemd", [os.path.join(self.control, "prerm"), "remove"])
        self.assertEqual(calls, ["deb-systemd-invoke stop lagent.service lmaster.service",
                                 "systemctl --no-reload disable lagent.service lmaster.service fructosa.target",
                                 "rc-update --quiet --all del lagent", "rc-update --quiet --all del lmaster",
                                 "rc-update --quiet --all del fructosa"])
        calls = self.with_running_manager("systemd", [os.path.join(self.control, "prerm"), "upgrade", version])
        self.assertEqual(calls, [], "an upgrade stops nothing")

        # Removal disables what was enabled; installing again enables nothing.
        run(["dpkg", "-r", PACKAGE])
        self.assertEqual(unit_links(), [], "links left after dpkg -r")
        run(["dpkg", "-i", self.deb])
        self.assertEqual(unit_links(), [], "installing again after a removal enabled something")

        # Purge: no link at all, a mask included.
        run(["systemctl", "enable", "lagent.service"])
        run(["systemctl", "mask", "lmaster.service"])
        run(["dpkg", "--purge", PACKAGE])
        self.assertEqual(unit_links(), [], "links left after dpkg --purge")
        self.assertFalse(os.path.exists(HAND_MADE_WANTS), "fructosa.target.wants is left after the purge")


if __name__ == "__main__":
    unittest.main()
