"""Every sensor at once, configured as FrUCToSA's sample lagent.conf does (time_interval only)."""
import re
import unittest

import h5py

import read_hdf5

from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT

# FrUCToSA's sample configuration: its keys, every psutil sensor with only time_interval.
FRUCTOSA_SENSORS = [
    "CPUPercent", "VirtualMemory", "CPUTimes", "CPUTimesPercent", "CPUCount", "CPUStats", "CPUFreq",
    "SwapMemory", "DiskPartitions", "DiskUsage", "DiskIOCounters", "NetIOCounters", "NetConnections",
    "NetIFAddrs", "NetIFStats", "SensorsTemperatures", "SensorsFans", "SensorsBattery", "BootTime", "Users",
]


class AllSensorsTest(FructosaTestCase):
    def test_lagent_sensors_lists_all_twenty_of_fructosa(self):
        listed = re.findall(r"^\[sensor:(\w+)\]", self.run_tool([LAGENT, "sensors"]).stdout, re.M)
        self.assertEqual(sorted(set(FRUCTOSA_SENSORS) - set(listed)), [])

    def test_fructosa_sample_config_runs_every_sensor(self):
        master, port = self.start_master()
        config = (f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\n"
                  f"[lagent]\nhost = testnode\nspool_dir = {self.path('lagent-spool')}\n"
                  f"[logging]\nfilename = {self.path('lagent.log')}\nlevel = INFO\nmaxBytes = 1000000\nbackupCount = 2\n")
        for sensor in FRUCTOSA_SENSORS:
            config += f"\n[sensor:{sensor}]\ntime_interval = 0.5\n"
        config += "\n[sensor:lagent]\ntime_interval = 0.5\n"
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config), "-p", self.path("lagent.pid")])
        self.wait_for_health(agent, reads=4)
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        log = read_text(self.path("lagent.log"))
        self.assertNotIn("failed:", log, "no sensor may fail; missing hardware is 'unavailable'")
        self.assertNotIn("error", log.lower())
        unavailable = re.findall(r"sensor (\w+) unavailable: (.+)", log)
        names = [name for name, _ in unavailable]
        self.assertEqual(len(names), len(set(names)), f"each unavailable sensor is reported once: {unavailable}")
        with h5py.File(self.path("data.h5"), "r") as f:
            node = read_hdf5.host_tables(f, "testnode")
            stored = set(node.keys())
            health = node["lagent"]
            for sensor in FRUCTOSA_SENSORS:
                if sensor in names:
                    self.assertNotIn(sensor, stored, f"{sensor} was unavailable yet stored data")
                    self.assertEqual(health[f"{sensor}.success"][-1], 0.0)
                else:
                    self.assertIn(sensor, stored, f"{sensor}: neither data nor an 'unavailable' line")
                    self.assertEqual(health[f"{sensor}.success"][-1], 1.0, sensor)
                    self.assertGreaterEqual(len(node[sensor]["time"]), 3, sensor)

    def wait_for_health(self, agent, reads):
        """Waits until lagent's own health sample says every sensor was read `reads` times."""
        def enough():
            if agent.poll() is not None:
                raise AssertionError("lagent exited:\n" + read_text(self.path("lagent.err")))
            text = read_text(self.path("lmaster.out"))
            complete = text[:text.rfind("\n") + 1]  # lmaster may be writing the last line
            counts = re.findall(r"testnode lagent job=0 (.*)", complete)
            if not counts:
                return False
            last = dict(item.split("=", 1) for item in counts[-1].split())
            return all(float(last.get(f"{s}.reads", "0")) >= reads for s in FRUCTOSA_SENSORS)
        wait_for(enough, timeout=60, what=f"{reads} reads of every sensor")

if __name__ == "__main__":
    unittest.main()
