"""The service verbs (start/stop/status/restart/reload/run), pidfiles, config errors, probe."""
import json
import os
import subprocess
import unittest

from fructosa_test import FIXTURES, FructosaTestCase, alive, read_text, wait_for, LAGENT, LMASTER

EX_CONFIG = 78


class ServiceTest(FructosaTestCase):
    def daemon_configs(self):
        master = self.write("lmaster.conf", self.master_config(f"[logging]\nfilename = {self.path('lmaster.log')}\n"))
        return master

    def test_start_status_reload_stop_as_daemons(self):
        master_conf = self.daemon_configs()
        master_pidfile = self.path("lmaster.pid")
        started = self.run_tool([LMASTER, "start", "-c", master_conf, "-p", master_pidfile])
        self.assertEqual(started.returncode, 0, started.stderr)
        master_pid = int(read_text(master_pidfile))
        self.assertTrue(alive(master_pid))
        port = wait_for(lambda: self.listening_port(self.path("lmaster.log")), what="lmaster's log line")

        agent_conf = self.write("lagent.conf", self.agent_config(port, ["VirtualMemory"]) +
                                f"[logging]\nfilename = {self.path('lagent.log')}\nlevel = DEBUG\n")
        agent_pidfile = self.path("lagent.pid")
        self.assertEqual(self.run_tool([LAGENT, "start", "-c", agent_conf, "-p", agent_pidfile]).returncode, 0)
        agent_pid = int(read_text(agent_pidfile))

        for tool, conf, pidfile, pid in ((LAGENT, agent_conf, agent_pidfile, agent_pid),
                                         (LMASTER, master_conf, master_pidfile, master_pid)):
            status = self.run_tool([tool, "status", "-c", conf, "-p", pidfile])
            self.assertEqual(status.returncode, 0)
            self.assertIn(f"is running (pid {pid})", status.stdout)
            # A second start is refused while the first one runs.
            again = self.run_tool([tool, "start", "-c", conf, "-p", pidfile])
            self.assertEqual(again.returncode, 1)
            self.assertIn(f"already running (pid {pid}", again.stderr)

        # The agent connects and lmaster hears it; reload re-arms its timers.
        wait_for(lambda: "agent testnode" in read_text(self.path("lmaster.log")), what="the agent to connect")
        self.assertEqual(self.run_tool([LAGENT, "reload", "-c", agent_conf, "-p", agent_pidfile]).returncode, 0)
        wait_for(lambda: "SIGHUP: configuration re-read" in read_text(self.path("lagent.log")), what="the reload")
        self.assertTrue(alive(agent_pid))

        for tool, conf, pidfile, pid in ((LAGENT, agent_conf, agent_pidfile, agent_pid),
                                         (LMASTER, master_conf, master_pidfile, master_pid)):
            stopped = self.run_tool([tool, "stop", "-c", conf, "-p", pidfile])
            self.assertEqual(stopped.returncode, 0, stopped.stderr)
            self.assertFalse(alive(pid), "stop returns only once the process is gone")
            self.assertFalse(os.path.exists(pidfile))
            self.assertEqual(self.run_tool([tool, "status", "-c", conf, "-p", pidfile]).returncode, 3)
            # Stopping what is stopped succeeds (LSB); reloading it does not.
            self.assertEqual(self.run_tool([tool, "stop", "-c", conf, "-p", pidfile]).returncode, 0)
            self.assertEqual(self.run_tool([tool, "reload", "-c", conf, "-p", pidfile]).returncode, 7)
        self.assertIn("lagent stopped", read_text(self.path("lagent.log")))
        self.assertIn("lmaster stopped", read_text(self.path("lmaster.log")))

    def test_stale_pidfile_does_not_block_a_start(self):
        gone = subprocess.Popen(["true"])
        gone.wait()
        pidfile = self.write("lmaster.pid", f"{gone.pid}\n")
        conf = self.daemon_configs()
        self.assertEqual(self.run_tool([LMASTER, "status", "-c", conf, "-p", pidfile]).returncode, 3)
        started = self.run_tool([LMASTER, "start", "-c", conf, "-p", pidfile])
        self.assertEqual(started.returncode, 0, started.stderr)
        pid = int(read_text(pidfile))
        self.assertNotEqual(pid, gone.pid)
        self.assertEqual(self.run_tool([LMASTER, "restart", "-c", conf, "-p", pidfile]).returncode, 0)
        new_pid = int(read_text(pidfile))
        self.assertNotEqual(new_pid, pid)
        self.assertFalse(alive(pid))
        self.assertEqual(self.run_tool([LMASTER, "stop", "-c", conf, "-p", pidfile]).returncode, 0)
        self.assertFalse(alive(new_pid))

    def test_config_errors_exit_78_and_name_file_line_section_key(self):
        bad_agent = self.write("lagent.conf", "[lmaster]\nhost = 127.0.0.1\n[sensor:CPUPercent]\nintervall = 1\n")
        for verb in ("run", "start"):
            result = self.run_tool([LAGENT, verb, "-c", bad_agent, "-p", self.path("lagent.pid")])
            self.assertEqual(result.returncode, EX_CONFIG)
            self.assertIn(f"{bad_agent}:4: [sensor:CPUPercent] intervall: unknown key", result.stderr)
        unknown = self.write("unknown.conf", "[sensor:CPUPrecent]\ntime_interval = 1\n")
        result = self.run_tool([LAGENT, "run", "-c", unknown, "-p", self.path("lagent.pid")])
        self.assertEqual(result.returncode, EX_CONFIG)
        self.assertIn("unknown sensor 'CPUPrecent'", result.stderr)
        bad_master = self.write("lmaster.conf", "[lmaster]\nincoming data port = many\n")
        result = self.run_tool([LMASTER, "start", "-c", bad_master, "-p", self.path("lmaster.pid")])
        self.assertEqual(result.returncode, EX_CONFIG)
        self.assertIn(f"{bad_master}:2: [lmaster] incoming data port: bad value 'many'", result.stderr)
        missing = self.run_tool([LMASTER, "run", "-c", self.path("nope.conf"), "-p", self.path("x.pid")])
        self.assertEqual(missing.returncode, EX_CONFIG)
        self.assertIn("nope.conf: cannot read configuration", missing.stderr)
        self.assertFalse(os.path.exists(self.path("lmaster.pid")))

    def test_a_daemon_that_cannot_listen_says_why(self):
        first = self.daemon_configs()
        self.assertEqual(self.run_tool([LMASTER, "start", "-c", first, "-p", self.path("a.pid")]).returncode, 0)
        port = wait_for(lambda: self.listening_port(self.path("lmaster.log")), what="lmaster's log line")
        second = self.write("second.conf", self.master_config(port=port).replace("data.h5", "other.h5"))
        result = self.run_tool([LMASTER, "start", "-c", second, "-p", self.path("b.pid")])
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"cannot listen on tcp://127.0.0.1:{port}", result.stderr)
        self.assertEqual(self.run_tool([LMASTER, "stop", "-p", self.path("a.pid")]).returncode, 0)

    def test_probe_prints_one_json_line_per_sensor(self):
        result = self.run_tool([LAGENT, "probe", "VirtualMemory", "CPUPercent", "--interval", "0.2",
                                "--proc-root", os.path.join(FIXTURES, "node-exporter", "proc"), "--host", "n1"])
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        self.assertEqual([line["sensor"] for line in lines], ["VirtualMemory", "CPUPercent"])
        self.assertEqual(list(lines[0].keys()), ["host", "sensor", "time", "job", "metrics"])
        self.assertEqual(lines[0]["host"], "n1")
        self.assertEqual(lines[0]["job"], 0)
        # psutil 5.9.4 on the same capture:
        self.assertEqual(lines[0]["metrics"]["total"], 3831959552)
        self.assertEqual(lines[0]["metrics"]["available"], 416122880)
        self.assertEqual(lines[0]["metrics"]["percent"], 89.1)
        self.assertEqual(sorted(lines[1]["metrics"], key=int), [str(i) for i in range(8)])
        unknown = self.run_tool([LAGENT, "probe", "NoSuchSensor"])
        self.assertEqual(unknown.returncode, EX_CONFIG)
        self.assertIn("unknown sensor 'NoSuchSensor'", unknown.stderr)

    def test_sensors_lists_descriptions_options_and_metrics(self):
        result = self.run_tool([LAGENT, "sensors"])
        self.assertEqual(result.returncode, 0)
        for text in ("[sensor:CPUPercent]", "[sensor:VirtualMemory]", "[sensor:CPUTimes]", "time_interval",
                     "available", "bytes", "counter"):
            self.assertIn(text, result.stdout)


if __name__ == "__main__":
    unittest.main()
