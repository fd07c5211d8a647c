"""A site migrating from FrUCToSA keeps its configuration files.

FrUCToSA 0.3.2 (palao/FrUCToSA) runs its agents and masters with 45 files: its functional
tests' tests/functional/data/*.conf (lagent-*, lmaster-*, logging-test.*, single.sensor/*, the
docker ones aside), examples/etc/fructosa/{lagent,lmaster}.conf and its production
deploy/ansible/goethe/{lagent,lmaster}.conf. The files below are written here with the same
sections, keys and values (facts, not FrUCToSA's text). `lagent check` / `lmaster check` must
accept every one but lagent-test.2.conf, whose `[wacalamo:con_tomatre]` is nonsense on
purpose; then the production pair runs for real, lmaster listening on a host name.
"""
import re
import socket
import unittest

from fructosa_test import LAGENT, LMASTER, FructosaTestCase, read_text, wait_for
from pickle_sink import PickleSink

# The 20 psutil sensors of FrUCToSA, one file each in its single.sensor/ directory.
SINGLE_SENSORS = ["BootTime", "CPUCount", "CPUFreq", "CPUPercent", "CPUStats", "CPUTimes", "CPUTimesPercent",
                  "DiskIOCounters", "DiskPartitions", "DiskUsage", "NetConnections", "NetIFAddrs", "NetIFStats",
                  "NetIOCounters", "SensorsBattery", "SensorsFans", "SensorsTemperatures", "SwapMemory", "Users",
                  "VirtualMemory"]


def sensors(*pairs):
    return "".join(f"[sensor:{name}]\ntime_interval = {interval}\n" for name, interval in pairs)


def logging_section(filename, max_bytes, backup_count, level="INFO"):
    return f"[logging]\nfilename = {filename}\nmaxBytes = {max_bytes}\nbackupCount = {backup_count}\nlevel = {level}\n"


GRAPHITE = "[Graphite]\nhost = localhost\ncarbon receiver pickle port = 2004\n"
DEBUG = "[logging]\nlevel = DEBUG\n"
FIRST_FOUR = sensors(("CPUPercent", 0.2), ("VirtualMemory", 0.4), ("BootTime", 0.35), ("Users", 0.32))

# (program, file name, text): what each of FrUCToSA's files holds.
FILES = [
    ("lagent", "lagent-graphite.1.conf", GRAPHITE + FIRST_FOUR),
    ("lagent", "lagent-test.0.conf", ""),
    ("lagent", "lagent-test.1.conf", DEBUG + FIRST_FOUR),
    ("lagent", "lagent-test.3.conf", DEBUG + sensors(
        ("CPUPercent", 0.2), ("VirtualMemory", 0.4), ("CPUTimes", 0.5), ("CPUTimesPercent", 0.35), ("CPUCount", 1),
        ("CPUStats", 1), ("CPUFreq", 0.8), ("SwapMemory", 0.5), ("DiskPartitions", 0.9), ("DiskUsage", 1),
        ("DiskIOCounters", 0.8), ("NetIOCounters", 0.95), ("SensorsTemperatures", 1), ("SensorsFans", 1),
        ("BootTime", 1), ("Users", 0.5))),
    ("lagent", "lagent-test.4.conf", DEBUG + "[lmaster]\nhost = zurrasperador\nincoming data port = 4443\n"),
    ("lagent", "lagent-test.5.conf", "[lmaster]\n"),
    ("lagent", "lagent-test.6.conf", DEBUG + "[lmaster]\nhost = zurrasperador\n"),
    ("lagent", "lagent-test.7.conf", "[lmaster]\nincoming data port = 4443\n"),
    ("lagent", "lagent-test.8.conf", DEBUG + "[lmaster]\nhost = localhost\n"),
    ("lagent", "lagent-test.empty.conf", ""),
    ("lmaster", "lmaster-graphite.1.conf", GRAPHITE),
    ("lmaster", "lmaster.0.conf", ""),
    ("lmaster", "lmaster.1.conf", ""),
    ("lagent", "logging-test.1.conf", "[logging]\nfilename = /tmp/macarr.log\n"),
    ("lagent", "logging-test.2.conf", logging_section("/tmp/mocorr.log", 128, 3)),
    ("lagent", "logging-test.lagent.conf", logging_section("/tmp/mocorr.log", 256, 2)),
    ("lmaster", "logging-test.lmaster.conf", logging_section("/tmp/mocorr.log", 256, 3)),
    ("lagent", "logging-test.qagent.conf", logging_section("/tmp/mocorr.log", 256, 2)),
    ("lmaster", "logging-test.qmaster.conf", logging_section("/tmp/mocorr.log", 256, 3)),
    ("lmaster", "logging-test.qulod.conf", logging_section("/tmp/mocorr.log", 256, 2)),
    # examples/etc/fructosa: QULo's [qmaster] section is still there.
    ("lagent", "examples-lagent.conf", "[qmaster]\nhost = localhost\nincoming data port = 7888\n" + GRAPHITE +
     logging_section("/tmp/qagent.log", 1024, 10) +
     sensors(("CPUPercent", 60), ("Users", 300), ("CPUTimesPercent", 180), ("VirtualMemory", 120), ("CPUStats", 180))),
    ("lmaster", "examples-lmaster.conf", "[qmaster]\nhost = localhost\nincoming data port = 7888\n" +
     logging_section("/tmp/qmaster.log", 1048576, 10)),
] + [("lagent", f"single.sensor/lagent-test.{name}.conf", DEBUG + sensors((name, 0.2))) for name in SINGLE_SENSORS]

# deploy/ansible/goethe: the production pair, lmaster on host master2 (here: a name of this
# machine), carbon on the same host.
GOETHE_SENSORS = [("CPUPercent", 30), ("Users", 60), ("CPUTimesPercent", 100), ("VirtualMemory", 120),
                  ("CPUStats", 120), ("CPUTimes", 30), ("CPUCount", 10000), ("DiskUsage", 300)]


def goethe_agent(master, log):
    return (f"[lmaster]\nhost = {master}\nincoming data port = 7888\n"
            f"[logging]\nfilename = {log}\nbackupCount = 10\n" + sensors(*GOETHE_SENSORS))


def goethe_master(master, log, carbon_port):
    return (f"[lmaster]\nhost = {master}\nincoming data port = 7888\n"
            f"[Graphite]\nhost = localhost\ncarbon receiver pickle port = {carbon_port}\n"
            f"[logging]\nfilename = {log}\nbackupCount = 10\n")


def this_machine_name():
    """A name (not an address) this machine listens on: its host name when that resolves to an
    address of its own, else localhost."""
    name = socket.gethostname()
    try:
        with socket.socket() as probe:
            probe.bind((name, 0))
        return name
    except OSError:
        return "localhost"


class FrUCToSAFiles(FructosaTestCase):
    def check(self, program, path):
        return self.run_tool([LAGENT if program == "lagent" else LMASTER, "check", "-c", path])

    def test_every_file_but_the_nonsense_one_is_accepted(self):
        # With the goethe pair and the nonsense lagent-test.2.conf (tests below): FrUCToSA's 45.
        self.assertEqual(len(FILES) + 2 + 1, 45)
        for program, name, text in FILES + [("lagent", "goethe-lagent.conf", goethe_agent("master2", "/var/log/lagent.log"))]:
            path = self.write(name.replace("/", "-"), text)
            result = self.check(program, path)
            with self.subTest(file=name):
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("configuration OK", result.stdout)
        # FrUCToSA's production lmaster.conf, with a name of this machine for master2.
        path = self.write("goethe-lmaster.conf", goethe_master(this_machine_name(), "/var/log/lmaster.log", 2004))
        result = self.check("lmaster", path)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_sections_fructosa_does_not_use_are_warnings(self):
        path = self.write("lmaster.conf", "[qmaster]\nhost = localhost\n[Redis]\nhost = localhost\nport = 6379\n")
        result = self.check("lmaster", path)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"warning: {path}:1: [qmaster]: ignored: QULo's name for [lmaster]", result.stderr)
        self.assertIn(f"warning: {path}:3: [Redis]: ignored: FrUCToSA's Redis store is not part of fructosa", result.stderr)

    def test_the_nonsense_file_stays_an_error_naming_the_section(self):
        path = self.write("lagent-test.2.conf", DEBUG + "[wacalamo:con_tomatre]\ntime_interval = 3\n" +
                          sensors(("CPUPercent", 0.1)) + "[coco]\nno = se\n" + sensors(("VirtualMemory", 0.3), ("ice_cream", 3)))
        result = self.check("lagent", path)
        self.assertEqual(result.returncode, 78)
        self.assertIn(f"{path}:3: [wacalamo:con_tomatre]: unknown section", result.stderr)

    def test_misspelt_keys_are_errors_with_a_hint(self):
        # FrUCToSA's docker files write `port` (FrUCToSA ignored it); fructosa refuses and says why.
        path = self.write("lmaster.conf", "[lmaster]\nhost = 127.0.0.1\nport = 7888\n")
        result = self.check("lmaster", path)
        self.assertEqual(result.returncode, 78)
        self.assertIn(f"{path}:3: [lmaster] port: unknown key, did you mean 'incoming data port'?", result.stderr)
        path = self.write("lagent.conf", "[sensor:SlurmJobs]\ntime_interval = 10\n")
        result = self.check("lagent", path)
        self.assertEqual(result.returncode, 78)
        self.assertIn("[jobs] scheduler = slurm", result.stderr)

    def test_an_unresolvable_master_host_names_the_key(self):
        path = self.write("lmaster.conf", "[lmaster]\nhost = master2.invalid\n")
        result = self.check("lmaster", path)
        self.assertEqual(result.returncode, 78)
        self.assertIn(f"{path}:2: [lmaster] host: cannot resolve 'master2.invalid'", result.stderr)

    def test_the_production_pair_runs_with_lmaster_on_a_host_name(self):
        """goethe's files as they are but for ports and paths a test must own: lmaster listens on
        a host name and forwards to carbon; FrUCToSA's Graphite names arrive."""
        sink = PickleSink()
        self.addCleanup(sink.close)
        name = this_machine_name()
        master_text = goethe_master(name, self.path("lmaster.log"), sink.port)
        # A free port and the test's own directories instead of 7888, /var/lib and /var/spool.
        master_text = master_text.replace("incoming data port = 7888", "incoming data port = 0")
        master_text = master_text.replace("[Graphite]", f"data_dir = {self.path('lmaster-data')}\n[Graphite]", 1)
        master = self.spawn("lmaster", [LMASTER, "run", "-c", self.write("lmaster.conf", master_text),
                                        "-p", self.path("lmaster.pid")])

        def port():
            self.assertIsNone(master.poll(), read_text(self.path("lmaster.err")) + read_text(self.path("lmaster.log")))
            match = re.search(r"listening on tcp://[^ ,]+:(\d+)[^\n]*\(\[lmaster\] host = (\S+)\)",
                              read_text(self.path("lmaster.log")))
            return match and (int(match.group(1)), match.group(2))

        master_port, logged_name = wait_for(port, what="lmaster to listen on its host name")
        self.assertEqual(logged_name, name)
        agent_text = goethe_agent(name, self.path("lagent.log"))
        agent_text = agent_text.replace("incoming data port = 7888", f"incoming data port = {master_port}")
        # Every 1 s instead of 30 s to 10000 s; the host name samples are attributed to, and a spool of the test's own.
        agent_text = re.sub(r"time_interval = \d+", "time_interval = 1", agent_text)
        agent_text += f"[lagent]\nhost = goethe01\nspool_dir = {self.path('spool')}\n"
        self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", agent_text), "-p", self.path("lagent.pid")])

        # Among them the four DiskUsage paths of FrUCToSA's own node dashboard (make-fructosa-dashboard).
        wanted = {"goethe01.CPUPercent.0", "goethe01.VirtualMemory.percent", "goethe01.CPUCount",
                  "goethe01.CPUTimes.user", "goethe01.DiskUsage.percent", "goethe01.DiskUsage.free",
                  "goethe01.DiskUsage.used", "goethe01.DiskUsage.total"}

        def arrived():
            paths = {path for path, _, _ in sink.snapshot()}
            return wanted <= paths

        wait_for(arrived, timeout=60, what=f"{sorted(wanted)} in carbon")
        # FrUCToSA's DiskUsage had one path and no path component in its names.
        self.assertFalse([p for p, _, _ in sink.snapshot() if p.startswith("goethe01.DiskUsage._.")])


if __name__ == "__main__":
    unittest.main()
