"""lmaster knows its agents: `up` per host in its own sensor, a log line when one falls silent
or comes back, and `lmaster status` printing the table, which survives a master restart.
lagent's own view of its sensors: one that is unavailable is tried again less and less often,
and comes back when what it reads appears."""
import os
import re
import shutil
import time
import unittest

from fructosa_test import FructosaTestCase, read_text, wait_for, FIXTURES, LAGENT, LMASTER, MASTER_HOST
from test_agent_spool import lagent_lines


def own_lines(text):
    """The lmaster sensor's stdout lines."""
    return [line for line in text.splitlines() if f" {MASTER_HOST} lmaster " in line]


class AgentStatusTest(FructosaTestCase):
    EXTRA = "[stdout]\n"

    def master_config(self, extra="", port=0):
        # Stats every 0.5 s; an agent silent for 1 s is down.
        text = super().master_config(extra, port)
        return text.replace("[lmaster]\n", "[lmaster]\nstats_interval = 0.5\nagent_timeout = 1\n", 1)

    def status(self):
        result = self.run_tool([LMASTER, "status", "-c", self.path("lmaster.conf"), "-p", self.path("lmaster.pid")])
        return result.returncode, result.stdout

    def latest_up(self, host):
        """The last agent.<host>.up value lmaster printed (None before any)."""
        values = re.findall(rf"agent\.{host}\.up=(\d)", read_text(self.path("lmaster.out")))
        return int(values[-1]) if values else None

    def test_an_unavailable_sensor_is_tried_less_often_and_comes_back(self):
        sys_root = self.path("sys")
        os.makedirs(os.path.join(sys_root, "class", "power_supply"))  # no battery yet
        master, port = self.start_master(self.EXTRA)
        config = (self.agent_config(port, ["SensorsBattery"], interval=0.1, extra=f"sys_root = {sys_root}\n") +
                  "[sensor:lagent]\ntime_interval = 0.5\n")
        started = time.time_ns()
        self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config), "-p", self.path("lagent.pid")])

        def failures_after(seconds):
            """SensorsBattery.failures in the first lagent sample `seconds` after the start."""
            for t, values in lagent_lines(read_text(self.path("lmaster.out"))):
                if t >= started + int(seconds * 1e9) and "SensorsBattery.failures" in values:
                    return int(float(values["SensorsBattery.failures"]))
            return None
        failures = wait_for(lambda: failures_after(5), timeout=30, what="a lagent sample 5 s after the start")
        # Tried after 1, 2, 4, 8, 16 intervals of 0.1 s: about 6 tries in 5 s, not 50.
        self.assertGreaterEqual(failures, 4)
        self.assertLessEqual(failures, 10)
        self.assertEqual(read_text(self.path("lagent.err")).count("sensor SensorsBattery unavailable"), 1)

        shutil.copytree(os.path.join(FIXTURES, "hw", "battery-charging", "sys", "class", "power_supply", "BAT1"),
                        os.path.join(sys_root, "class", "power_supply", "BAT1"))
        wait_for(lambda: "sensor SensorsBattery works again" in read_text(self.path("lagent.err")), timeout=60,
                 what="SensorsBattery to work again")
        wait_for(lambda: " testnode SensorsBattery " in read_text(self.path("lmaster.out")), timeout=30,
                 what="a SensorsBattery sample")

    def test_up_metric_log_lines_and_status_table(self):
        master, port = self.start_master(self.EXTRA)
        config = self.agent_config(port, ["VirtualMemory"])
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])
        wait_for(lambda: self.latest_up("testnode") == 1, timeout=30, what="agent.testnode.up = 1")
        wait_for(lambda: any(l.startswith("testnode ") for l in self.status()[1].splitlines()), timeout=10,
                 what="testnode in lmaster status")
        code, table = self.status()
        self.assertEqual(code, 0, table)
        row = next(line for line in table.splitlines() if line.startswith("testnode "))
        self.assertIn(" yes ", row)
        self.assertIn("127.0.0.1", row)

        # The node goes away: lmaster says so in its log, its metric and its table.
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        wait_for(lambda: self.latest_up("testnode") == 0, timeout=30, what="agent.testnode.up = 0")
        self.assertIn("agent testnode stopped reporting", read_text(self.path("lmaster.err")))
        wait_for(lambda: " NO " in next((l for l in self.status()[1].splitlines() if l.startswith("testnode ")), ""),
                 timeout=10, what="testnode down in lmaster status")

        # A restarted master still knows the node, and reports it down until it is heard.
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))
        code, table = self.status()
        self.assertEqual(code, 3, table)  # not running, but the last table is still shown
        self.assertIn("testnode", table)
        master = self.spawn("lmaster", [LMASTER, "run", "-c", self.path("lmaster.conf"), "-p", self.path("lmaster.pid")])
        before = len(own_lines(read_text(self.path("lmaster.out"))))
        wait_for(lambda: len(own_lines(read_text(self.path("lmaster.out")))) > before + 1, timeout=30,
                 what="the restarted master's own samples")
        self.assertEqual(self.latest_up("testnode"), 0)
        self.assertIn("1 agent(s) known from", read_text(self.path("lmaster.err")))

        # The node comes back.
        port = wait_for(lambda: self.listening_port(self.path("lmaster.err")), what="restarted lmaster port")
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", self.agent_config(port, ["VirtualMemory"])),
                                      "-p", self.path("lagent.pid")])
        wait_for(lambda: self.latest_up("testnode") == 1, timeout=30, what="agent.testnode.up = 1 again")
        self.assertRegex(read_text(self.path("lmaster.err")), r"agent testnode reports again")
        self.assertEqual(self.stop(agent), 0)
        self.assertEqual(self.stop(master), 0)


if __name__ == "__main__":
    unittest.main()
