"""The Debian package: `cpack` builds fructosa_<version>_amd64.deb from the build directory; as
root, `dpkg -i` installs it (lagent --version from /usr/bin, the lmaster user, conffiles kept
across a reinstall) and `dpkg --purge` removes it all. This test changes the machine it runs on:
ctest runs it alone (RUN_SERIAL) and it purges the package even when it fails.
BUILD_DIR is the built build directory, CPACK the cpack to use (ctest sets both)."""
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import unittest

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

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def test_package_metadata(self):
        self.assertTrue(os.path.isfile(self.deb), os.listdir(self.out))
        depends = run(["dpkg-deb", "-f", self.deb, "Depends"]).stdout
        # Debian's runtime libraries, found by dpkg-shlibdeps from what the programs link.
        for library in ("libzmq5", "libcapnp-0.9.2", "libhdf5-103-1", "libcurl4", "libspdlog1.10", "libc6", "adduser"):
            self.assertIn(library, depends)
        control = tempfile.mkdtemp(prefix="fructosa-control-")
        self.addCleanup(shutil.rmtree, control, ignore_errors=True)
        run(["dpkg-deb", "-e", self.deb, control])
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
        self.assertTrue(os.path.isdir("/var/log/fructosa") and os.path.isdir("/var/spool/fructosa"))

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


if __name__ == "__main__":
    unittest.main()
