"""lmaster's HDF5 output with real processes: h5py reading while lmaster writes (SWMR), new
timestamped files on `lmaster reload` and SIGHUP, and kill -9 with h5py and h5dump afterwards;
each in both layouts (per_host, per_sensor)."""
import os
import re
import signal
import subprocess
import unittest

import h5py

import read_hdf5
from fructosa_test import (FructosaTestCase, read_text, wait_for, LAGENT, LMASTER, proc_with_fixture_mounts,
                           stdout_counts)

INTERVAL_NS = 200_000_000
# DiskPartitions brings labels (from a fixture mount table: proc_with_fixture_mounts, so that a
# machine without partitions of its own has them); chunk = 16 gives every table several chunks
# while the readers read (and compressed chunks when a file is closed).
SENSORS = ["VirtualMemory", "CPUPercent", "DiskPartitions"]
HDF5_KEYS = "chunk = 16\nlayout = {layout}\n"


def h5dump_lengths(path):
    """{dataset path: rows} from `h5dump -H`, or None when h5dump cannot open the file."""
    result = subprocess.run(["h5dump", "-H", path], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        return None
    stack, lengths = [], {}
    for line in result.stdout.splitlines():
        stripped = line.strip()
        opened = re.match(r'(GROUP|DATASET|ATTRIBUTE) "(.*)" \{$', stripped)
        if opened:
            stack.append(opened.groups())
        elif stripped.endswith("{"):
            stack.append(("other", ""))
        elif stripped == "}":
            stack.pop()
        else:
            space = re.match(r"DATASPACE\s+SIMPLE \{ \( (\d+) \)", stripped)
            if space and stack and stack[-1][0] == "DATASET":
                names = [name for kind, name in stack if kind in ("GROUP", "DATASET")][1:]
                lengths["/" + "/".join(names)] = int(space.group(1))
    return lengths


def h5dump_integers(path, dataset):
    result = subprocess.run(["h5dump", "-y", "-w", "0", "-d", dataset, path],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    data = result.stdout.split("DATA {", 1)[1].split("}", 1)[0]
    return [int(v) for v in data.replace(",", " ").split()]


class Hdf5Test(FructosaTestCase):
    LAYOUT = "per_host"

    def hdf5_keys(self):
        return HDF5_KEYS.format(layout=self.LAYOUT)

    def table_path(self, sensor):
        """The table of testnode's `sensor` in this layout."""
        return f"testnode/{sensor}" if self.LAYOUT == "per_host" else sensor

    def start_agent(self, port):
        config = self.agent_config(port, SENSORS, extra=f"proc_root = {proc_with_fixture_mounts(self.dir)}\n")
        return self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                     "-p", self.path("lagent.pid")])

    def check_table(self, table, sensor, where):
        """What a reader may rely on at any moment: complete rows on the agent's time grid."""
        times = table["time"]
        steps = [b - a for a, b in zip(times, times[1:])]
        self.assertTrue(all(t % INTERVAL_NS == 0 for t in times), f"{where} {sensor}")
        self.assertTrue(all(s > 0 and s % INTERVAL_NS == 0 for s in steps), f"{where} {sensor} {steps}")
        self.assertEqual(len(table["job"]), len(times))
        for key, column in table["columns"].items():
            self.assertEqual(len(column["values"]), len(times), f"{where} {sensor} {key}")
        for key, values in table["labels"].items():
            self.assertEqual(len(values), len(times), f"{where} {sensor} {key}")
        if sensor == "VirtualMemory":
            total = table["columns"]["total"]["values"]
            self.assertEqual(len(set(total)), 1, f"{where}: total memory is constant")
            self.assertEqual(table["columns"]["total"]["unit"], "bytes")
        if sensor == "DiskPartitions" and times:
            # The fixture's partitions (tests/fixtures/partitions), without its pseudo and memory
            # file systems; /scratch is read-only.
            device_labels = sorted(k for k in table["labels"] if k.endswith(".device"))
            self.assertEqual(device_labels, ["/.device", "/boot/efi.device", "/scratch.device"], where)
            self.assertEqual(set(table["labels"]["/.device"]), {"/dev/sda2"}, where)
            self.assertEqual(set(table["columns"]["/scratch.readonly"]["values"]), {1}, where)

    def read_while_running(self, link, kept, stats):
        """Rows per sensor seen by a reader that opens the file anew and by one that keeps it
        open (refreshing); None while the file is between states (lmaster briefly reopens it
        without SWMR to add tables, columns or attributes: readers retry)."""
        try:
            data = read_hdf5.read_file(link, swmr=True)
            stats["fresh"] += 1
        except (OSError, KeyError) as error:
            stats["retried"] += 1
            stats["last_error"] = str(error)
            return None
        node = data.get("testnode", {})
        for sensor, table in node.items():
            self.check_table(table, sensor, "fresh reader")
        if kept is not None:
            try:
                table = read_hdf5.read_table(kept[self.table_path("VirtualMemory")], swmr=True,
                                             host="testnode")
                self.check_table(table, "VirtualMemory", "kept-open reader")
                stats["kept_rows"] = max(stats["kept_rows"], len(table["time"]))
            except (OSError, KeyError) as error:
                stats["kept_retried"] += 1
                stats["last_error"] = str(error)
        return {sensor: len(node.get(sensor, {}).get("time", [])) for sensor in SENSORS}

    def test_readers_see_rows_while_lmaster_writes_and_reload_starts_new_files(self):
        master, port = self.start_master(self.hdf5_keys() + "[stdout]\n")
        agent = self.start_agent(port)
        link = self.path("data.h5")
        first = os.path.realpath(link)
        self.assertRegex(os.path.basename(first), r"^data-\d{8}T\d{6}Z(-\d+)?\.h5$")
        stats = {"fresh": 0, "retried": 0, "kept_retried": 0, "kept_rows": 0, "last_error": ""}

        def has_rows(count, file_path=None):
            def check():
                if agent.poll() is not None or master.poll() is not None:
                    raise AssertionError("a process exited:\n" + read_text(self.path("lmaster.err")))
                if file_path and os.path.realpath(link) != file_path:
                    return False
                rows = self.read_while_running(link, kept, stats)
                return rows and all(n >= count for n in rows.values())
            return check

        kept = None
        wait_for(has_rows(1), timeout=30, what="the first rows of every sensor")
        kept = read_hdf5.open_file(link, swmr=True)  # keeps the file open from here on
        self.addCleanup(kept.close)
        # 25 rows at 0.2 s: chunks of 16 rows fill while both readers read.
        wait_for(has_rows(25), timeout=30, what="25 rows of every sensor, read during the run")
        self.assertGreater(stats["kept_rows"], 16, stats)

        self.assertEqual(self.run_tool([LMASTER, "reload", "-c", self.path("lmaster.conf"),
                                                    "-p", self.path("lmaster.pid")]).returncode, 0)
        second = wait_for(lambda: os.path.realpath(link) != first and os.path.realpath(link),
                          what="the link to move to a new file after `lmaster reload`")
        wait_for(has_rows(5, second), timeout=30, what="rows in the second file")
        os.kill(master.pid, signal.SIGHUP)
        third = wait_for(lambda: os.path.realpath(link) not in (first, second) and os.path.realpath(link),
                         what="the link to move to a new file after SIGHUP")
        wait_for(has_rows(5, third), timeout=30, what="rows in the third file")
        kept.close()
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))
        # The readers may have had to retry now and then (while lmaster added tables), not for long.
        self.assertGreater(stats["fresh"], 5, stats)

        files = read_hdf5.series_files(link)
        self.assertEqual(files, [first, second, third])
        log = read_text(self.path("lmaster.err"))
        for path in files:
            self.assertIn(f"hdf5: writing {path}", log)
        # Closed files are plain HDF5, compressed: h5py without SWMR and h5dump read them.
        contents = [read_hdf5.read_file(path) for path in files]
        with h5py.File(files[0], "r") as f:
            total = f[self.table_path("VirtualMemory") + "/total"]
            self.assertEqual(total.compression, "gzip")
            self.assertTrue(total.shuffle)
        for path in files:
            self.assertIsNotNone(h5dump_lengths(path), path)
        printed = stdout_counts(read_text(self.path("lmaster.out")))
        for sensor in SENSORS:
            parts = [c["testnode"][sensor]["time"] for c in contents]
            for where, part in zip(files, parts):
                self.assertGreater(len(part), 0, f"{where} {sensor}")
            for earlier, later in zip(parts, parts[1:]):
                self.assertLess(earlier[-1], later[0], f"{sensor}: files in time order")
            times = [t for part in parts for t in part]
            # Every sample lmaster received is in exactly one file.
            self.assertEqual(len(times), printed[sensor], sensor)
            self.assertEqual(len(set(times)), len(times), sensor)
            for c, path in zip(contents, files):
                self.check_table(c["testnode"][sensor], sensor, path)
        # The jobs attribute lists the node itself.
        self.assertEqual(contents[0]["testnode"]["VirtualMemory"]["jobs"], [0])
        with h5py.File(files[0], "r") as f:
            self.assertEqual(list(f.attrs["jobs"]), [0])
            if self.LAYOUT == "per_host":
                self.assertEqual(f["testnode"].attrs["host"], "testnode")
            else:
                self.assertEqual(set(f[self.table_path("VirtualMemory") + "/host"][:]), {b"testnode"})
            self.assertEqual(f.attrs["format"], "fructosa lmaster HDF5 output")
            self.assertEqual(f.attrs["layout"], self.LAYOUT)

    def test_kill_9_keeps_every_flushed_row_and_the_next_start_repairs_the_file(self):
        master, port = self.start_master(self.hdf5_keys())
        agent = self.start_agent(port)
        link = self.path("data.h5")
        killed = os.path.realpath(link)

        def rows_seen():
            try:
                data = read_hdf5.read_file(link, swmr=True)
            except (OSError, KeyError):
                return None
            node = data.get("testnode", {})
            if all(len(node.get(s, {}).get("time", [])) >= 20 for s in SENSORS):
                return node
            return None

        before = wait_for(rows_seen, timeout=30, what="20 flushed rows of every sensor")
        os.kill(master.pid, signal.SIGKILL)
        master.wait(timeout=30)
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))

        # A SWMR reader reads the file as the killed writer left it.
        after = read_hdf5.read_file(killed, swmr=True)["testnode"]
        for sensor in SENSORS:
            self.check_table(after[sensor], sensor, "after kill -9")
            seen = before[sensor]
            count = len(seen["time"])
            self.assertGreaterEqual(len(after[sensor]["time"]), count, sensor)
            # Every row a reader saw before the kill is there, unchanged.
            self.assertEqual(after[sensor]["time"][:count], seen["time"], sensor)
            for key, column in seen["columns"].items():
                self.assertEqual(after[sensor]["columns"][key]["values"][:count], column["values"],
                                 f"{sensor} {key}")
        # Plain readers refuse it while its superblock says a writer has it open.
        self.assertIsNone(h5dump_lengths(killed))
        with self.assertRaises(OSError):
            h5py.File(killed, "r")

        # The next start repairs it (and writes a new file).
        config = self.write("lmaster2.conf", self.master_config(self.hdf5_keys()))
        second = self.spawn("lmaster2", [LMASTER, "run", "-c", config, "-p", self.path("lmaster2.pid")])
        wait_for(lambda: self.listening_port(self.path("lmaster2.err")) or self.exited(second),
                 what="the second lmaster to listen")
        self.assertEqual(self.stop(second), 0, read_text(self.path("lmaster2.err")))
        self.assertIn(f"hdf5: {killed} was left open by a writer that stopped without closing it: "
                      "repaired", read_text(self.path("lmaster2.err")))
        self.assertNotEqual(os.path.realpath(link), killed)

        lengths = h5dump_lengths(killed)
        self.assertIsNotNone(lengths, "h5dump reads the repaired file")
        repaired = read_hdf5.read_file(killed)["testnode"]  # h5py without SWMR
        for sensor in SENSORS:
            table_lengths = {path: n for path, n in lengths.items()
                             if path.startswith(f"/{self.table_path(sensor)}/")}
            self.assertEqual(set(table_lengths.values()), {len(after[sensor]["time"])},
                             f"{sensor}: every dataset of the table as long as its time: {table_lengths}")
            self.assertEqual(h5dump_integers(killed, f"/{self.table_path(sensor)}/time"), after[sensor]["time"])
            self.assertEqual(repaired[sensor]["time"], after[sensor]["time"])
            self.assertEqual(repaired[sensor]["columns"], after[sensor]["columns"])
            self.assertEqual(repaired[sensor]["labels"], after[sensor]["labels"])
            self.assertEqual(repaired[sensor]["jobs"], [0])


class Hdf5PerSensorTest(Hdf5Test):
    """The same with layout = per_sensor: a table per sensor, the host a column."""
    LAYOUT = "per_sensor"


if __name__ == "__main__":
    unittest.main()
