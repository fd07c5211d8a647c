"""Live reconfiguration of lagent (SIGHUP): added sensors start, removed ones stop, changed
intervals re-arm, and an unchanged sensor keeps its timer: no reading is lost around the reload."""
import json
import os
import signal
import subprocess
import time
import unittest

from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT, HERE, stdout_counts

STEP = 200_000_000  # ns


class ReloadTest(FructosaTestCase):
    def test_reload_keeps_unchanged_sensors_and_applies_changes(self):
        master, port = self.start_master()
        before = {"VirtualMemory": 0.2, "CPUTimes": 0.2, "SwapMemory": 0.2}
        after = {"VirtualMemory": 0.2, "CPUTimes": 0.4, "CPUStats": 0.2}

        def config(sensors):
            # lagent's own sensor counts the readings it had to skip when the machine was busy.
            text = self.agent_config(port, []) + "[sensor:lagent]\ntime_interval = 0.2\n"
            for name, interval in sensors.items():
                text += f"[sensor:{name}]\ntime_interval = {interval}\n"
            return self.write("lagent.conf", text)

        agent = self.spawn("lagent", [LAGENT, "run", "-c", config(before), "-p", self.path("lagent.pid")])
        counts = lambda: stdout_counts(read_text(self.path("lmaster.out")))
        wait_for(lambda: all(counts().get(s, 0) >= 8 for s in before), timeout=60, what="8 samples of each sensor")

        config(after)
        at_reload = counts()
        reloaded_ns = time.time_ns()
        agent.send_signal(signal.SIGHUP)
        wait_for(lambda: "SIGHUP: configuration re-read" in read_text(self.path("lagent.err")), what="the reload")
        # Kept: VirtualMemory and lagent's own sensor; new: CPUTimes (re-armed) and CPUStats.
        self.assertIn("2 sensor(s) kept running, 2 started or re-armed", read_text(self.path("lagent.err")))
        wait_for(lambda: counts().get("CPUStats", 0) >= 8 and counts()["CPUTimes"] >= at_reload["CPUTimes"] + 5,
                 timeout=60, what="samples after the reload")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        dump = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "read_hdf5.py"), self.path("data.h5")],
                              capture_output=True, text=True, check=True)
        node = json.loads(dump.stdout)["testnode"]
        # The unchanged sensor kept its timer: around the reload, every 0.2 s step is there once,
        # except readings lagent itself reports as skipped because this shared machine was busy
        # (a remade sensor would lose readings that no counter shows).
        times = node["VirtualMemory"]["time"]
        near = [t for t in times if abs(t - reloaded_ns) <= 1_000_000_000]
        self.assertGreaterEqual(len(near), 6, near)
        steps = [b - a for a, b in zip(near, near[1:])]
        self.assertTrue(all(step > 0 and step % STEP == 0 for step in steps), near)
        missing = sum(step // STEP - 1 for step in steps)
        skipped = max(v for v in node["lagent"]["columns"]["VirtualMemory.missed"]["values"] if v is not None)
        self.assertLessEqual(missing, skipped, near)
        # The re-armed one reads every 0.4 s after the reload.
        later = [t for t in node["CPUTimes"]["time"] if t > reloaded_ns + 500_000_000]
        self.assertTrue(later and all(t % (2 * STEP) == 0 for t in later), later)
        # The removed one stopped; the added one started.
        self.assertFalse([t for t in node["SwapMemory"]["time"] if t > reloaded_ns + 500_000_000])
        self.assertTrue(all(t > reloaded_ns - STEP for t in node["CPUStats"]["time"]))


if __name__ == "__main__":
    unittest.main()
