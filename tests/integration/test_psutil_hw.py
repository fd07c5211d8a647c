"""SensorsTemperatures, SensorsFans and SensorsBattery against psutil 5.9.4.

Live: `lagent probe` on this machine and psutil.sensors_temperatures() / sensors_fans() /
sensors_battery(): a sensor is unavailable (with a reason) exactly when psutil returns {} or
None, and otherwise reports psutil's values under the keys described in sensors/hwmon.h.

Fixtures: psutil hard-codes /sys, so it reads each fixture tree bind-mounted over /sys in a
private mount namespace (as root, in a chroot too; otherwise `unshare -rm`, skipped where user
namespaces are not allowed), and
`lagent probe --sys-root TREE` must give exactly the same numbers.
"""
import json
import os
import shutil
import subprocess
import sys
import unittest

import psutil

from fructosa_test import FIXTURES, LAGENT, FructosaTestCase, private_mount_namespace

SENSORS = ("SensorsTemperatures", "SensorsFans", "SensorsBattery")

# Prints the three psutil results as JSON (run in the namespace). Without
# /sys/class/power_supply at all psutil 5.9.4 raises FileNotFoundError where it means "no
# battery": that counts as None.
PSUTIL_SCRIPT = """
import json, psutil
def battery():
    try:
        b = psutil.sensors_battery()
    except FileNotFoundError:
        return None
    return None if b is None else [b.percent, int(b.secsleft), b.power_plugged]
print(json.dumps({
    "SensorsTemperatures": {c: [list(e) for e in v] for c, v in psutil.sensors_temperatures().items()},
    "SensorsFans": {c: [list(e) for e in v] for c, v in psutil.sensors_fans().items()},
    "SensorsBattery": battery(),
}))
"""

# Live tolerances for values that move between psutil's read and lagent's (a fraction of a
# second apart): temperatures 3 degrees C (coretemp refreshes once a second in 1 degree steps),
# fan speeds 10 % or 100 rpm, battery charge 1 percentage point, a computed secsleft 25 % (it
# follows power_now, which jumps). Thresholds, keys, power_plugged and secsleft's -1/-2 are exact.
TEMPERATURE_TOLERANCE = 3.0
PERCENT_TOLERANCE = 1.0


def key_component(name):
    return "".join("_" if c == "." or ord(c) < 0x20 or ord(c) == 0x7F else c for c in name)


class Keys:
    """sensors/hwmon.h SensorKeys: an empty or repeated label gets '#<index in the chip's list>'."""

    def __init__(self):
        self.chips = {}

    def add(self, chip, label):
        chip_key = key_component(chip)
        state = self.chips.setdefault(chip_key, {"entries": 0, "used": set()})
        index = "#%d" % state["entries"]
        state["entries"] += 1
        component = key_component(label)
        if not component or component in state["used"]:
            component += index
        while component in state["used"]:
            component += index
        state["used"].add(component)
        return chip_key + "." + component


def expected_metrics(sensor, result):
    """The metrics lagent should report for psutil's `result`; None where it is unavailable."""
    if not result:
        return None
    if sensor == "SensorsBattery":
        percent, secsleft, plugged = result
        return {"percent": percent, "secsleft": secsleft,
                "power_plugged": -1 if plugged is None else int(plugged)}
    keys, metrics = Keys(), {}
    for chip, entries in result.items():
        for entry in entries:
            key = keys.add(chip, entry[0])
            metrics[key + ".current"] = entry[1]
            if sensor == "SensorsTemperatures":
                if entry[2] is not None:
                    metrics[key + ".high"] = entry[2]
                if entry[3] is not None:
                    metrics[key + ".critical"] = entry[3]
    return metrics


class PsutilHwTest(FructosaTestCase):
    def probe(self, sys_root=None):
        """{sensor: metrics} and {sensor: reason} from one `lagent probe` of the three sensors."""
        args = [LAGENT, "probe", *SENSORS] + (["--sys-root", sys_root] if sys_root else [])
        result = self.run_tool(args)
        self.assertIn(result.returncode, (0, 1), result.stderr)
        metrics = {}
        for line in result.stdout.splitlines():
            sample = json.loads(line)
            self.assertNotIn(sample["sensor"], metrics)
            metrics[sample["sensor"]] = sample["metrics"]
        unavailable = {}
        for line in result.stderr.splitlines():
            name, _, reason = line.partition(": unavailable: ")
            if reason:
                unavailable[name] = reason
        self.assertEqual(result.returncode, 1 if unavailable else 0)
        return metrics, unavailable

    def check(self, psutil_results, metrics, unavailable, close):
        for sensor in SENSORS:
            with self.subTest(sensor=sensor):
                expected = expected_metrics(sensor, psutil_results[sensor])
                if expected is None:
                    self.assertNotIn(sensor, metrics)
                    self.assertTrue(unavailable.get(sensor), f"{sensor} should say why it is unavailable")
                    continue
                self.assertNotIn(sensor, unavailable)
                got = metrics[sensor]
                self.assertEqual(sorted(got), sorted(expected))
                for key, value in expected.items():
                    close(sensor, key, got[key], value)

    @staticmethod
    def exact(test):
        def close(sensor, key, got, expected):
            test.assertEqual(got, expected, f"{sensor} {key}")
        return close

    def test_live_matches_psutil_or_is_unavailable_exactly_when_psutil_has_nothing(self):
        results = {"SensorsTemperatures": psutil.sensors_temperatures(),
                   "SensorsFans": psutil.sensors_fans(),
                   "SensorsBattery": None}
        try:
            battery = psutil.sensors_battery()
        except FileNotFoundError:  # no /sys/class/power_supply: psutil's way of saying None
            battery = None
        if battery is not None:
            results["SensorsBattery"] = [battery.percent, int(battery.secsleft), battery.power_plugged]
        metrics, unavailable = self.probe()

        def close(sensor, key, got, expected):
            where = f"{sensor} {key}"
            if sensor == "SensorsTemperatures" and key.endswith(".current"):
                self.assertAlmostEqual(got, expected, delta=TEMPERATURE_TOLERANCE, msg=where)
            elif sensor == "SensorsFans":
                self.assertAlmostEqual(got, expected, delta=max(100, 0.1 * expected), msg=where)
            elif key == "percent":
                self.assertAlmostEqual(got, expected, delta=PERCENT_TOLERANCE, msg=where)
            elif key == "secsleft" and got >= 0 and expected >= 0:
                self.assertAlmostEqual(got, expected, delta=max(60, 0.25 * expected), msg=where)
            else:
                self.assertEqual(got, expected, where)

        self.check(results, metrics, unavailable, close)

    def psutil_on_tree(self, tree):
        """psutil's three results with `tree` mounted over /sys (PYTHONHASHSEED=0: psutil's
        thermal-zone thresholds depend on it, see sensors/sensors_temperatures.cpp)."""
        result = subprocess.run(
            self.mount_namespace('mount --bind "$1" /sys && exec "$2" -c "$3"', tree, sys.executable, PSUTIL_SCRIPT),
            capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONHASHSEED="0"))
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)

    @staticmethod
    def mount_namespace(script, *args):
        """`sh -c script sh args...` where its mounts are its own: as root in a private mount
        namespace (a chroot, where user namespaces are refused, included); otherwise in a user
        namespace of its own."""
        if os.geteuid() == 0:
            return private_mount_namespace(script, *args)
        return ["unshare", "-rm", "sh", "-c", script, "sh", *args]

    def test_fixtures_match_psutil_reading_them_as_sys(self):
        if not shutil.which("unshare"):
            self.skipTest("needs unshare (util-linux)")
        probe = subprocess.run(self.mount_namespace("mount --bind /tmp /mnt"), capture_output=True, text=True,
                               timeout=30)
        if probe.returncode != 0:
            self.skipTest(f"cannot bind-mount in a mount namespace of its own here: {probe.stdout}{probe.stderr}")
        trees = [os.path.join(FIXTURES, "node-exporter", "sys")] + [
            os.path.join(FIXTURES, "hw", case, "sys")
            for case in ("thermal-only", "battery-charging", "battery-capacity", "battery-no-power",
                         "battery-none")]
        for tree in trees:
            with self.subTest(tree=os.path.relpath(tree, FIXTURES)):
                results = self.psutil_on_tree(tree)
                metrics, unavailable = self.probe(tree)
                self.check(results, metrics, unavailable, self.exact(self))
        # The capture has all three (node_exporter: node_power_supply_capacity 81; psutil 81.16...).
        results = self.psutil_on_tree(trees[0])
        self.assertEqual(len(results["SensorsTemperatures"]["coretemp"]), 10)
        self.assertEqual(int(results["SensorsBattery"][0]), 81)


if __name__ == "__main__":
    unittest.main()
