"""The package's life under a real systemd: the .deb (built by cpack from the build directory) in a
Debian 12 container booted with systemd 252 as PID 1 (tests/packaging/container.py: a cached
debootstrap root, systemd-nspawn, no network). What a site does, in order: install (nothing
enabled), `enable --now` (Type=notify readiness, rows arriving in HDF5), reload (a new file; a
broken configuration fails the reload with file:line and the service keeps running), restart with
a broken configuration (status 78, no restart loop), restart, SIGKILL (systemd restarts lmaster,
lagent reconnects), a boot with lmaster down (the boot finishes; lagent spools and says so), an
upgrade (running services restart on the new programs, stopped ones stay stopped), remove and
purge (no link left), a reinstall (nothing enabled), and the units' exposure scores as the
container's systemd computes them.

Fails saying why where no container can be booted (container.require_containers); the first run
makes the cached root (debootstrap, about a minute). BUILD_DIR: the built build directory, CPACK
the cpack to use (ctest sets both)."""
import functools
import os
import re
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import container  # noqa: E402
import read_hdf5  # noqa: E402
import fructosa_test  # noqa: E402

# Each look into the container is an nsenter: not every 50 ms.
wait_for = functools.partial(fructosa_test.wait_for, interval=0.2)

BUILD_DIR = os.path.abspath(os.environ.get("BUILD_DIR", "build"))
CPACK = os.environ.get("CPACK", "cpack")
# The most each unit may expose (systemd 252's scale: 0 safe .. 10 unprotected).
EXPOSURE_LIMITS = {"lagent.service": 3.0, "lmaster.service": 1.5}
UNITS = ("lmaster.service", "lagent.service", "fructosa.target")
HDF5_LINK = "/var/lib/fructosa/fructosa.h5"
LMASTER_CONF = "/etc/fructosa/lmaster.conf"


class SystemdBootTest(unittest.TestCase):
    def setUp(self):
        container.require_containers(self)
        self.work = tempfile.mkdtemp(prefix="fructosa-systemd-")
        self.addCleanup(shutil.rmtree, self.work, ignore_errors=True)
        self.deb, self.upgrade, depends = container.packages(BUILD_DIR, CPACK, self.work)
        tarball = container.cached_root("systemd", ["systemd", "systemd-sysv", "procps"], depends)
        self.host = "fructosa-node-" + os.urandom(4).hex()
        self.box = container.Container(tarball, os.path.join(self.work, "machine"), self.host)
        self.addCleanup(self.box.kill)
        for deb in (self.deb, self.upgrade):
            shutil.copy(deb, self.box.path("/srv"))

    # -- what systemd says, and what the services wrote ----------------------------------------

    def show(self, unit, *properties):
        lines = self.box.out(f"systemctl show -p {','.join(properties)} {unit}").splitlines()
        return dict(line.split("=", 1) for line in lines)

    def state(self):
        """The services' states and the journal's last lines, for failure messages."""
        return self.box.sh("systemctl --no-pager status lmaster lagent; journalctl --no-pager -n 40 "
                           "-u lmaster -u lagent", check=False).stdout

    def wait_active(self, unit, timeout=60):
        wait_for(lambda: self.show(unit, "ActiveState")["ActiveState"] == "active", timeout,
                 f"{unit} active\n{self.state()}")
        return int(self.show(unit, "MainPID")["MainPID"])

    def wait_status(self, prefix, timeout=60):
        """Waits for lagent's STATUS= (sd_notify) to start with `prefix`."""
        wait_for(lambda: self.show("lagent", "StatusText")["StatusText"].startswith(prefix), timeout,
                 f"lagent's status to start with {prefix!r}\n{self.state()}")

    def rows(self, sensor="VirtualMemory"):
        """Rows of `sensor` of this container's host in every file of the HDF5 series."""
        total = 0
        for path in read_hdf5.series_files(self.box.path(HDF5_LINK)):
            try:
                table = read_hdf5.read_file(path, swmr=True).get(self.host, {}).get(sensor)
            except OSError:  # a file being made this moment
                return None
            total += len(table["time"]) if table else 0
        return total

    def wait_more_rows(self, than, timeout=60):
        return wait_for(lambda: (self.rows() or 0) > than and self.rows(), timeout,
                        f"more than {than} VirtualMemory rows of {self.host} in {HDF5_LINK}\n{self.state()}")

    def unit_links(self):
        """Links to the package's units anywhere under /etc/systemd/system."""
        found = self.box.out("find /etc/systemd/system -type l \\( -name lagent.service -o -name lmaster.service "
                             "-o -name fructosa.target \\)")
        return sorted(found.split())

    def enabled(self):
        return self.box.sh(f"systemctl is-enabled {' '.join(UNITS)}", check=False).stdout.split()

    def wait_boot_finished(self, timeout=90):
        """Waits for systemd to have finished booting (is-system-running: running, or degraded
        with the failed units named in the failure)."""
        def finished():
            state = self.box.sh("systemctl is-system-running", check=False).stdout.strip()
            # "offline": systemd does not answer yet (its PID 1 has just started).
            return state not in ("", "offline", "initializing", "starting") and state
        try:
            state = wait_for(finished, timeout, "the boot to finish")
        except AssertionError as timeout_error:
            jobs = self.box.sh("systemctl list-jobs --no-pager; systemctl --no-pager status lagent lmaster; "
                               "journalctl --no-pager -b -n 60", check=False).stdout
            raise AssertionError(f"{timeout_error}; what systemd still does:\n{jobs}") from None
        failed = self.box.sh("systemctl --failed --no-pager --plain", check=False).stdout
        self.assertEqual(state, "running", failed)

    def reboot(self):
        self.box.sh("systemctl poweroff --no-block")
        self.box.wait_stopped()
        self.box.boot()
        self.wait_boot_finished()

    def exe(self, pid):
        return self.box.out(f"readlink /proc/{pid}/exe")

    # -- the life cycle ----------------------------------------------------------------------------

    def test_life_cycle(self):
        self.box.boot()
        self.wait_boot_finished()
        self.box.sh("apt-get install -y -q /srv/" + os.path.basename(self.deb), timeout=300)
        self.assertEqual(self.enabled(), ["disabled"] * 3, "installing enabled something")
        self.assertEqual(self.unit_links(), [])
        self.assertEqual(self.show("lmaster", "ActiveState")["ActiveState"], "inactive", "installing started lmaster")

        # Type=notify: `start` returns once the service said READY=1.
        self.box.sh("systemctl enable --now lmaster lagent")
        for unit in ("lmaster", "lagent"):
            self.assertEqual(self.show(unit, "ActiveState", "SubState"),
                             {"ActiveState": "active", "SubState": "running"}, self.state())
        self.assertEqual(self.box.out("ps -o user= -C lmaster"), "lmaster")
        self.wait_status("sending to lmaster at tcp://127.0.0.1:7888")
        rows = self.wait_more_rows(0)
        # Units, data and journal are readable by root and the lmaster group only (UMask=0027).
        hdf5 = os.path.realpath(self.box.path(HDF5_LINK))
        self.assertEqual(os.stat(hdf5).st_mode & 0o777, 0o640)

        # Reload: a new HDF5 file by the same process.
        pid = int(self.show("lmaster", "MainPID")["MainPID"])
        self.box.sh("systemctl reload lmaster")
        wait_for(lambda: os.path.realpath(self.box.path(HDF5_LINK)) != hdf5, 30, "a new HDF5 file after the reload")
        self.assertEqual(int(self.show("lmaster", "MainPID")["MainPID"]), pid)
        rows = self.wait_more_rows(rows)

        # A broken configuration: the reload fails naming the file and line; lmaster keeps running.
        with open(self.box.path(LMASTER_CONF)) as f:
            good = f.read()
        broken_line = good.count("\n") + 1
        with open(self.box.path(LMASTER_CONF), "a") as f:
            f.write("this line is not INI\n")
        reload = self.box.sh("systemctl reload lmaster", check=False)
        self.assertNotEqual(reload.returncode, 0, "a reload with a broken configuration succeeded")
        journal = self.box.out("journalctl --no-pager -u lmaster -n 20")
        self.assertIn(f"{LMASTER_CONF}:{broken_line}", journal)
        self.assertEqual(self.show("lmaster", "ActiveState", "MainPID"), {"ActiveState": "active", "MainPID": str(pid)})
        # A restart with it: exit status 78 (EX_CONFIG), failed, and no restart loop.
        restarts = int(self.show("lmaster", "NRestarts")["NRestarts"])
        self.assertNotEqual(self.box.sh("systemctl restart lmaster", check=False).returncode, 0)
        failed = self.show("lmaster", "ActiveState", "ExecMainStatus", "NRestarts")
        self.assertEqual(failed, {"ActiveState": "failed", "ExecMainStatus": "78", "NRestarts": str(restarts)},
                         self.state())
        with open(self.box.path(LMASTER_CONF), "w") as f:
            f.write(good)

        # Restart with the configuration mended; lagent finds the new lmaster.
        self.box.sh("systemctl restart lmaster")
        pid = self.wait_active("lmaster")
        rows = self.wait_more_rows(rows)

        # SIGKILL: systemd restarts lmaster (RestartSec=5s); lagent reconnects.
        restarts = int(self.show("lmaster", "NRestarts")["NRestarts"])
        self.box.sh(f"kill -KILL {pid}")
        wait_for(lambda: self.show("lmaster", "NRestarts")["NRestarts"] == str(restarts + 1), 60,
                 f"systemd to restart the killed lmaster\n{self.state()}")
        self.assertNotEqual(self.wait_active("lmaster"), pid)
        rows = self.wait_more_rows(rows)

        # A site's group for the data (docs/security.md): a drop-in's Group=; systemd gives the
        # state directory and what is in it that group, and lmaster's new files have it.
        self.box.sh("mkdir -p /etc/systemd/system/lmaster.service.d && printf '[Service]\\nGroup=adm\\n' "
                    "> /etc/systemd/system/lmaster.service.d/group.conf && systemctl daemon-reload && "
                    "systemctl restart lmaster")
        self.box.sh("systemctl reload lmaster")  # a file made by this lmaster
        wait_for(lambda: self.box.out(f"stat -L -c %G {HDF5_LINK}") == "adm", 30, "a new HDF5 file of group adm")
        self.assertEqual(self.box.out("stat -c '%U:%G %a' /var/lib/fructosa /var/lib/fructosa/journal").splitlines(),
                         ["lmaster:adm 750", "lmaster:adm 750"])
        rows = self.wait_more_rows(rows)

        # Stop: both, no process left.
        self.box.sh("systemctl stop lagent lmaster")
        self.assertEqual(self.box.sh("ps -C lagent,lmaster -o pid=", check=False).stdout.strip(), "")

        # A boot with lmaster down (disabled): the boot finishes; lagent is ready and spooling.
        self.box.sh("systemctl disable lmaster")
        self.reboot()
        self.assertEqual(self.show("lagent", "ActiveState")["ActiveState"], "active")
        self.wait_status("waiting for lmaster at tcp://127.0.0.1:7888; readings are spooled")
        self.assertIn("Startup finished", self.box.out("systemd-analyze time"))
        # lmaster comes: what lagent spooled arrives, and the rest follows.
        self.box.sh("systemctl enable --now lmaster")
        self.wait_status("sending to lmaster")
        rows = self.wait_more_rows(rows)
        # A boot with both enabled brings both up.
        self.reboot()
        self.wait_active("lmaster")
        self.wait_active("lagent")
        rows = self.wait_more_rows(rows)

        # Upgrade with lmaster running and lagent stopped: lmaster runs the new program, lagent
        # stays stopped, enablement is kept.
        self.box.sh("systemctl stop lagent")
        old = int(self.show("lmaster", "MainPID")["MainPID"])
        self.box.sh("apt-get install -y -q /srv/" + os.path.basename(self.upgrade), timeout=300)
        self.assertIn("+upgrade", self.box.out("dpkg-query -W -f='${Version}' fructosa"))
        new = self.wait_active("lmaster")
        self.assertNotEqual(new, old, "the upgrade did not restart lmaster")
        # Not "/usr/bin/lmaster (deleted)". (Seen from a chroot's container, the path starts
        # with the chroot's, the service's mount namespace being rooted above the container's.)
        self.assertTrue(self.exe(new).endswith("/usr/bin/lmaster"), self.exe(new))
        self.assertEqual(self.show("lagent", "ActiveState")["ActiveState"], "inactive", "the upgrade started lagent")
        self.assertEqual(self.enabled()[:2], ["enabled", "enabled"])

        # Exposure, as this systemd computes it from the installed units.
        security = self.box.out("systemd-analyze security --no-pager lagent.service lmaster.service")
        for unit, limit in EXPOSURE_LIMITS.items():
            score = float(re.search(rf"^{re.escape(unit)}\s+([0-9.]+)", security, re.M).group(1))
            self.assertLessEqual(score, limit, f"{unit}'s exposure\n{security}")

        # Remove: stopped, disabled, no link left; installing again enables and starts nothing.
        self.box.sh("systemctl start lagent")
        self.box.sh("apt-get remove -y -q fructosa", timeout=300)
        self.assertEqual(self.unit_links(), [], "links left after apt-get remove")
        self.assertEqual(self.box.sh("ps -C lagent,lmaster -o pid=", check=False).stdout.strip(), "")
        self.box.sh("apt-get install -y -q /srv/" + os.path.basename(self.deb), timeout=300)
        self.assertEqual(self.enabled(), ["disabled"] * 3, "a reinstall after removal enabled something")
        self.assertEqual(self.box.sh("ps -C lagent,lmaster -o pid=", check=False).stdout.strip(), "")
        # Purge: no link, no mask, no configuration.
        self.box.sh("systemctl enable lagent && systemctl mask lmaster")
        self.box.sh("apt-get purge -y -q fructosa", timeout=300)
        self.assertEqual(self.unit_links(), [], "links left after apt-get purge")
        self.assertFalse(os.path.lexists(self.box.path("/etc/fructosa")))
        # The next boot is clean.
        self.reboot()


if __name__ == "__main__":
    unittest.main()
