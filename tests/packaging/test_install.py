"""`cmake --install` into a DESTDIR tree: what lands where, configurations never overwritten,
the prefix followed, the systemd units clean under `systemd-analyze verify`, the OpenRC scripts
valid sh. BUILD_DIR is the configured and built build directory, CMAKE the cmake to use
(ctest sets both)."""
import os
import shutil
import subprocess
import tempfile
import unittest

BUILD_DIR = os.environ.get("BUILD_DIR", "build")
CMAKE = os.environ.get("CMAKE", "cmake")
HOST_UNITS = "/lib/systemd/system"


def install(destdir, prefix):
    env = dict(os.environ, DESTDIR=destdir)
    result = subprocess.run([CMAKE, "--install", BUILD_DIR, "--prefix", prefix], env=env,
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"cmake --install failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


class InstallTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="fructosa-install-")
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)

    def at(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def read(self, path):
        with open(self.at(path)) as f:
            return f.read()

    def test_usr_prefix_puts_everything_in_place(self):
        install(self.root, "/usr")
        for program in ("lagent", "lmaster"):
            self.assertTrue(os.access(self.at(f"/usr/bin/{program}"), os.X_OK), program)
            self.assertTrue(os.path.isfile(self.at(f"/usr/share/man/man8/{program}.8")), program)
            self.assertTrue(os.path.isfile(self.at(f"/etc/fructosa/{program}.conf")), program)
            self.assertTrue(os.access(self.at(f"/usr/share/fructosa/openrc/init.d/{program}"), os.X_OK), program)
            self.assertTrue(os.path.isfile(self.at(f"/usr/share/fructosa/openrc/conf.d/{program}")), program)
        if os.path.exists(os.path.join(BUILD_DIR, "dashboards")):
            self.assertTrue(os.access(self.at("/usr/bin/make-dashboard"), os.X_OK))
        for unit in ("lagent.service", "lmaster.service", "fructosa.target"):
            self.assertTrue(os.path.isfile(self.at(f"/usr/lib/systemd/system/{unit}")), unit)
        self.assertIn("u lmaster ", self.read("/usr/lib/sysusers.d/fructosa.conf"))
        self.assertIn("/var/spool/fructosa", self.read("/usr/lib/tmpfiles.d/fructosa.conf"))
        lagent = self.read("/usr/lib/systemd/system/lagent.service")
        self.assertIn("ExecStart=/usr/bin/lagent run -c /etc/fructosa/lagent.conf", lagent)
        self.assertIn("Type=notify", lagent)
        self.assertIn("ExecStart=/usr/bin/lmaster run -c /etc/fructosa/lmaster.conf",
                      self.read("/usr/lib/systemd/system/lmaster.service"))
        self.assertIn("User=lmaster", self.read("/usr/lib/systemd/system/lmaster.service"))
        self.assertIn('command="/usr/bin/lagent"', self.read("/usr/share/fructosa/openrc/init.d/lagent"))
        for path in ("/usr/lib/systemd/system/lagent.service", "/usr/lib/systemd/system/lmaster.service",
                     "/usr/share/fructosa/openrc/init.d/lagent", "/usr/share/fructosa/openrc/init.d/lmaster"):
            self.assertNotIn("@FRUCTOSA_", self.read(path), path)

    def test_an_existing_configuration_is_never_overwritten(self):
        os.makedirs(self.at("/etc/fructosa"))
        with open(self.at("/etc/fructosa/lagent.conf"), "w") as f:
            f.write("# the site's own\n")
        out = install(self.root, "/usr")
        self.assertEqual(self.read("/etc/fructosa/lagent.conf"), "# the site's own\n")
        self.assertIn("Keeping existing", out)
        # The other one was missing: installed; the new sample is there to compare with.
        self.assertIn("[lmaster]", self.read("/etc/fructosa/lmaster.conf"))
        self.assertIn("[lmaster]", self.read("/usr/share/doc/fructosa/examples/lagent.conf"))
        install(self.root, "/usr")  # again, over itself
        self.assertEqual(self.read("/etc/fructosa/lagent.conf"), "# the site's own\n")

    def test_another_prefix_keeps_everything_under_it(self):
        install(self.root, "/opt/fructosa")
        self.assertTrue(os.access(self.at("/opt/fructosa/bin/lagent"), os.X_OK))
        self.assertTrue(os.path.isfile(self.at("/opt/fructosa/etc/fructosa/lagent.conf")))
        self.assertFalse(os.path.exists(self.at("/etc")))
        unit = self.read("/opt/fructosa/lib/systemd/system/lagent.service")
        self.assertIn("ExecStart=/opt/fructosa/bin/lagent run -c /opt/fructosa/etc/fructosa/lagent.conf", unit)
        self.assertIn('command="/opt/fructosa/bin/lmaster"', self.read("/opt/fructosa/share/fructosa/openrc/init.d/lmaster"))

    @unittest.skipUnless(shutil.which("systemd-analyze") and os.path.isdir(HOST_UNITS),
                         "needs systemd-analyze and the host's units in /lib/systemd/system")
    def test_units_pass_systemd_analyze_verify_without_warnings(self):
        install(self.root, "/usr")
        # The units refer to systemd's own (sysinit.target, network-online.target, journald's
        # socket): the host's are copied into the tree as /lib/systemd/system beside ours.
        shutil.copytree(HOST_UNITS, self.at(HOST_UNITS), symlinks=True)
        result = subprocess.run(["systemd-analyze", "verify", f"--root={self.root}",
                                 "lagent.service", "lmaster.service", "fructosa.target"],
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr + result.stdout, "", "systemd-analyze verify is not silent")

    def test_openrc_scripts_are_valid_sh(self):
        install(self.root, "/usr")
        directory = self.at("/usr/share/fructosa/openrc")
        for sub in ("init.d", "conf.d"):
            for name in os.listdir(os.path.join(directory, sub)):
                path = os.path.join(directory, sub, name)
                for shell in [s for s in ("sh", "dash", "busybox") if shutil.which(s)]:
                    args = [shell, "sh", "-n", path] if shell == "busybox" else [shell, "-n", path]
                    result = subprocess.run(args, capture_output=True, text=True)
                    self.assertEqual(result.returncode, 0, f"{shell} -n {path}: {result.stderr}")
                if sub == "init.d":
                    with open(path) as f:
                        self.assertEqual(f.readline(), "#!/sbin/openrc-run\n", path)


if __name__ == "__main__":
    unittest.main()
