"""The package's OpenRC life cycle on a Debian 12 machine booted with sysvinit + OpenRC as its
init (container.py: systemd-nspawn, no network): install (enables and starts nothing), rc-update
and rc-service start/status/reload/restart/stop, data in lmaster's HDF5 file (read from the host),
supervise-daemon's respawn after a SIGKILL, a boot with lmaster down, an upgrade that restarts
what runs, remove/reinstall/purge leaving no runlevel entry.

What differs from a real machine, and why:
- The package: the build directory's .deb puts the scripts in /etc/init.d only when configured
  with FRUCTOSA_INSTALL_OPENRC=ON (the default on OpenRC machines only); otherwise the test adds
  them as that build would (init.d and conf.d copied from /usr/share/fructosa/openrc, conffiles).
- `net`: nothing on Debian provides it (its openrc ships no network script; ifupdown's LSB
  `$network` becomes `use networking` through lsb2rcconf), as on a real Debian machine: the
  scripts `use net` (they said `need net`, and `rc-service lmaster start` failed here with
  "lmaster needs service(s) net" until they did).
- The hostname: initscripts' hostname.sh sets it from /etc/hostname at boot, which
  Container writes (debootstrap copied this machine's): lagent names its data HOST.
- Powering off: `poweroff` works (sysvinit runs `rc 0`, OpenRC stops the services and halt's
  reboot(2) ends the PID namespace, which nspawn reports as a power-off).
BUILD_DIR is the built build directory, CPACK the cpack to use (ctest sets both)."""
import os
import re
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)
import read_hdf5  # noqa: E402
from container import Container, cached_root, packages, require_containers  # noqa: E402
from fructosa_test import wait_for  # noqa: E402

BUILD_DIR = os.path.abspath(os.environ.get("BUILD_DIR", "build"))
CPACK = os.environ.get("CPACK", "cpack")
HOST = "openrc-node"
# debootstrap resolves sysvinit-core's "sysv-rc | file-rc | openrc" to sysv-rc, which conflicts
# with openrc: the init system comes with the dependencies (apt-get satisfy) instead.
ROOT_PACKAGES = ["procps"]
INIT = "sysvinit-core, openrc"
HDF5 = "/var/lib/fructosa/fructosa.h5"
SERVICES = ("lagent", "lmaster", "fructosa")
APT = "DEBIAN_FRONTEND=noninteractive apt-get -y -q"


def with_openrc_scripts(tree):
    """The package as a FRUCTOSA_INSTALL_OPENRC=ON build makes it: the scripts in /etc/init.d and
    /etc/conf.d too, conffiles (a build here has them in /usr/share/fructosa/openrc only)."""
    if os.path.exists(os.path.join(tree, "etc/init.d/lagent")):
        return
    for kind in ("init.d", "conf.d"):
        shutil.copytree(os.path.join(tree, "usr/share/fructosa/openrc", kind), os.path.join(tree, "etc", kind))
    with open(os.path.join(tree, "DEBIAN/conffiles"), "a") as f:
        f.writelines(f"/etc/{kind}/{service}\n" for service in SERVICES for kind in ("init.d", "conf.d"))


class OpenRCBootTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        out = tempfile.mkdtemp(prefix="fructosa-openrc-debs-")
        cls.addClassCleanup(shutil.rmtree, out, ignore_errors=True)
        cls.deb, cls.upgrade, cls.depends = packages(BUILD_DIR, CPACK, out, with_openrc_scripts)

    def setUp(self):
        require_containers(self)
        directory = tempfile.mkdtemp(prefix="fructosa-openrc-boot-")
        self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
        tarball = cached_root("openrc", ROOT_PACKAGES, f"{INIT}, {self.depends}")
        self.c = Container(tarball, directory, HOST)
        self.addCleanup(self.c.kill)  # before the directory goes (cleanups run last first)
        for deb in (self.deb, self.upgrade):
            shutil.copy(deb, self.c.path("/srv"))

    # --- evidence and polling -------------------------------------------------------------

    def evidence(self):
        """What the machine shows now: OpenRC's view, the processes, the logs, the console."""
        if self.c.leader is None:
            return f"\n--- console:\n{self.c.console()[-3000:]}"
        result = self.c.sh("rc-status -a; ps -eo pid,user,args | grep -v getty; "
                           "for f in /var/log/fructosa/lmaster/lmaster.log /var/log/fructosa/lagent.log; do "
                           "echo \"--- $f\"; tail -n 15 $f; done", check=False)
        return f"\n--- rc-status -a, ps:\n{result.stdout}{result.stderr}\n--- console:\n{self.c.console()[-2000:]}"

    def expect(self, condition, message):
        if not condition:
            self.fail(f"{message}{self.evidence()}")

    def poll(self, condition, what, timeout=30):
        try:
            return wait_for(condition, timeout, what, interval=0.2)  # each look is an nsenter
        except AssertionError as timed_out:
            self.fail(f"{timed_out}{self.evidence()}")

    def sh(self, script, timeout=180):
        """`script`'s output; failing with it and the evidence when it fails."""
        result = self.c.sh(script, check=False, timeout=timeout)
        self.expect(result.returncode == 0, f"`{script}` exited with {result.returncode}:\n{result.stdout}{result.stderr}")
        return result.stdout

    # --- the machine's state ----------------------------------------------------------------

    def booted(self):
        """The default runlevel reached: OpenRC says so and `openrc default` has ended."""
        result = self.c.sh("rc-status --runlevel; pgrep -x openrc >/dev/null && echo busy; ls /run/openrc/starting",
                           check=False)
        return result.stdout.split() == ["default"]

    def wait_booted(self):
        self.poll(self.booted, "the default runlevel reached (rc-status --runlevel: default, no openrc left)", 90)

    def status(self, service):
        """`rc-service X status`'s word: started, stopped, crashed..."""
        result = self.c.sh(f"rc-service {service} status", check=False)
        match = re.search(r"status: (\w+)", result.stdout + result.stderr)
        return match.group(1) if match else f"exit {result.returncode}: {result.stdout}{result.stderr}"

    def programs(self):
        """{program: [(pid, user)]} of the running lagent and lmaster (not supervise-daemon)."""
        found = {"lagent": [], "lmaster": []}
        for line in self.c.out("ps -eo pid=,user=,args=").splitlines():
            pid, user, program = line.split()[:3]
            if program in ("/usr/bin/lagent", "/usr/bin/lmaster"):
                found[program.rsplit("/", 1)[1]].append((int(pid), user))
        return found

    def pid(self, program):
        """The PID in `program`'s own pidfile, if that process runs."""
        result = self.c.sh(f"p=$(cat /run/{program}/{program}.pid) && [ -n \"$p\" ] && [ -d /proc/$p ] && echo $p", check=False)
        return int(result.stdout) if result.returncode == 0 else None

    def links(self):
        return self.c.out("find /etc/runlevels \\( -name lagent -o -name lmaster -o -name fructosa \\)").split()

    def rows(self):
        """VirtualMemory rows of HOST in every file of lmaster's HDF5 series (read with SWMR,
        lmaster writing); a file caught while lmaster sets it up is read again."""
        for _ in range(50):
            try:
                return sum(len(read_hdf5.read_file(path, swmr=True).get(HOST, {}).get("VirtualMemory", {"time": []})["time"])
                           for path in read_hdf5.series_files(self.c.path(HDF5)))
            except (OSError, KeyError, ValueError):
                time.sleep(0.2)
        self.fail(f"cannot read {HDF5}'s series{self.evidence()}")

    def rows_grow(self, what):
        before = self.rows()
        self.poll(lambda: self.rows() >= before + 3,
                  f"{what}: VirtualMemory rows of {HOST} growing in {HDF5} (from {before})", 45)

    def install(self, deb):
        self.sh(f"{APT} install /srv/{os.path.basename(deb)}")

    # --- the tests ----------------------------------------------------------------------------

    def test_life_cycle(self):
        c = self.c
        # 1. The boot reaches the default runlevel.
        c.boot()
        self.wait_booted()

        # 2. Installing enables and starts nothing.
        self.install(self.deb)
        self.expect(self.links() == [], f"no runlevel link after the install, found {self.links()}")
        shown = self.sh("rc-update show -v")
        for service in SERVICES:
            line = re.search(rf"(?m)^\s*{service} \|(.*)$", shown)
            self.expect(line and not line.group(1).strip(), f"{service} listed in no runlevel:\n{shown}")
        self.expect(self.programs() == {"lagent": [], "lmaster": []}, f"nothing started: {self.programs()}")
        self.expect(self.status("lmaster") == "stopped", "lmaster stopped after the install")

        # 3. Enabled and started (no provider of net on Debian: `use net`); data arrives.
        self.sh("rc-update add lmaster default && rc-update add lagent default && "
                "rc-service lmaster start && rc-service lagent start")
        for service in ("lmaster", "lagent"):
            self.expect(self.status(service) == "started", f"{service} started, status: {self.status(service)}")
        programs = self.programs()
        self.expect([user for _, user in programs["lmaster"]] == ["lmaster"], f"one lmaster as lmaster: {programs}")
        self.expect([user for _, user in programs["lagent"]] == ["root"], f"one lagent as root: {programs}")
        self.expect(sorted(self.links()) == ["/etc/runlevels/default/lagent", "/etc/runlevels/default/lmaster"],
                    f"lagent and lmaster in default: {self.links()}")
        self.rows_grow("after the start")

        # 4. reload: a new file, the same process; a broken configuration keeps it running.
        pid = self.pid("lmaster")
        current = os.readlink(c.path(HDF5))
        self.sh("rc-service lmaster reload")
        self.poll(lambda: os.readlink(c.path(HDF5)) != current, f"a new file behind {HDF5} after the reload (was {current})")
        self.expect(self.pid("lmaster") == pid, f"lmaster still {pid} after the reload, now {self.pid('lmaster')}")
        self.sh("cp -p /etc/fructosa/lmaster.conf /root/lmaster.conf && echo 'not an INI line' >> /etc/fructosa/lmaster.conf")
        line = self.sh("wc -l < /etc/fructosa/lmaster.conf").strip()
        result = c.sh("rc-service lmaster reload", check=False)
        said = result.stdout + result.stderr
        self.expect(result.returncode != 0 and f"/etc/fructosa/lmaster.conf:{line}" in said,
                    f"reload with a broken configuration fails naming /etc/fructosa/lmaster.conf:{line}; "
                    f"exit {result.returncode}:\n{said}")
        self.expect(self.pid("lmaster") == pid and self.status("lmaster") == "started",
                    f"lmaster {pid} still running after the failed reload, now {self.pid('lmaster')}")
        self.sh("cp -p /root/lmaster.conf /etc/fructosa/lmaster.conf")

        # 5. restart: a new process, lagent reconnects; SIGKILL: supervise-daemon respawns it; stop.
        self.sh("rc-service lmaster restart")
        restarted = self.pid("lmaster")
        self.expect(restarted not in (None, pid), f"a new lmaster after the restart (was {pid}, now {restarted})")
        self.rows_grow("after lmaster's restart")
        self.sh(f"kill -9 {restarted}")
        respawned = self.poll(lambda: self.pid("lmaster") not in (None, restarted) and self.pid("lmaster"),
                              f"supervise-daemon respawning lmaster after SIGKILL of {restarted}")
        self.expect(self.status("lmaster") == "started", f"lmaster {respawned} respawned, status started")
        self.rows_grow("after lmaster's respawn")
        self.sh("rc-service lmaster stop")
        self.expect(self.status("lmaster") == "stopped", "lmaster stopped")
        self.expect(self.programs()["lmaster"] == [] and "supervise-daemon lmaster" not in c.out("ps -eo args"),
                    "no lmaster process (nor its supervise-daemon) after the stop")

        # 6. A boot with lmaster down finishes; lagent runs; lmaster started later gets data.
        self.sh("rc-update del lmaster default")
        c.sh("poweroff", check=False)
        c.wait_stopped(timeout=120)
        c.boot()
        self.wait_booted()
        self.expect(self.status("lagent") == "started" and self.pid("lagent"), "lagent started at boot")
        self.expect(self.status("lmaster") == "stopped" and not self.programs()["lmaster"], "lmaster not started at boot")
        self.sh("rc-service lmaster start")
        self.rows_grow("after lmaster's start following the boot")

        # 7. An upgrade restarts lmaster (which runs) on the new program, not lagent (stopped).
        self.sh("rc-service lagent stop")
        old = self.pid("lmaster")
        self.install(self.upgrade)
        self.expect(self.sh("dpkg-query -W -f '${Version}' fructosa").endswith("+upgrade"), "the upgrade installed")
        new = self.poll(lambda: self.pid("lmaster"), "lmaster running after the upgrade")
        exe = self.sh(f"readlink /proc/{new}/exe").strip()
        if new == old or not exe.endswith("/usr/bin/lmaster"):  # not "... (deleted)"
            # The postinst discards what rc-service says: ask again, to show it.
            again = c.sh("rc-service --ifexists --ifstarted lmaster restart", check=False)
            self.fail(f"lmaster restarted by the upgrade on the new program: was {old}, now {new} running {exe}; "
                      f"the postinst's `rc-service --ifexists --ifstarted lmaster restart` run again: exit "
                      f"{again.returncode}:\n{again.stdout}{again.stderr}{self.evidence()}")
        self.expect(self.status("lagent") == "stopped" and not self.programs()["lagent"], "lagent left stopped")

        # 8. remove: stopped, out of every runlevel; reinstall: nothing; purge: no script left.
        self.sh("rc-service lagent start && rc-update add lmaster default && rc-update add fructosa nonetwork")
        self.expect(len(self.links()) == 3, f"three runlevel links before the removal: {self.links()}")
        self.sh(f"{APT} remove fructosa")
        self.expect(self.programs() == {"lagent": [], "lmaster": []}, f"nothing runs after the removal: {self.programs()}")
        self.expect(self.status("lagent") == "stopped" and self.status("lmaster") == "stopped",
                    "OpenRC says lagent and lmaster stopped after the removal")
        self.expect(self.links() == [], f"no runlevel link after the removal: {self.links()}")
        self.install(self.upgrade)
        self.expect(self.links() == [] and self.programs() == {"lagent": [], "lmaster": []},
                    f"the reinstall enables and starts nothing: {self.links()} {self.programs()}")
        self.sh(f"{APT} purge fructosa")
        left = self.sh("ls /etc/init.d/lagent /etc/init.d/lmaster /etc/init.d/fructosa /etc/conf.d/lagent 2>/dev/null; true")
        self.expect(self.links() == [] and not left.strip(), f"purge leaves no link ({self.links()}) nor script ({left})")


if __name__ == "__main__":
    unittest.main()
