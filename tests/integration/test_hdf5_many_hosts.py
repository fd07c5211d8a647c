"""lmaster's per_host HDF5 layout with more datasets than it keeps open ([hdf5]
datasets_kept_open, 16,384 by default; 1000 here, with 12 agents of master_load: ~2,900
datasets): each table's datasets are opened, written and closed at every flush. h5py reads the
file while lmaster writes it (SWMR: complete rows in every table), and the closed file holds every
acknowledged point once, every table's datasets as long as its `time`."""
import json
import math
import os
import re
import signal
import subprocess
import unittest

import h5py

import read_hdf5
from fructosa_test import FructosaTestCase, read_text, wait_for

MASTER_LOAD = os.environ.get("MASTER_LOAD", "master_load")
AGENTS = 12
KEPT_OPEN = 1000
METRICS = 200  # values per agent and batch, in ~17 tables of master_load's sensors
PREFIX = "node"


class Hdf5ManyHostsTest(FructosaTestCase):
    def check_rows(self, data, where):
        """Every table of the agents: each column and label as long as `time`."""
        for host, tables in data.items():
            if not host.startswith(PREFIX):
                continue
            for sensor, table in tables.items():
                rows = len(table["time"])
                self.assertEqual(len(table["job"]), rows, f"{where} {host}/{sensor}")
                for key, column in table["columns"].items():
                    self.assertEqual(len(column["values"]), rows, f"{where} {host}/{sensor}/{key}")
                for key, values in table["labels"].items():
                    self.assertEqual(len(values), rows, f"{where} {host}/{sensor} label {key}")

    def test_many_hosts_are_written_complete_with_their_datasets_closed_between_flushes(self):
        master, port = self.start_master(f"layout = per_host\ndatasets_kept_open = {KEPT_OPEN}\n")
        link = self.path("data.h5")
        load = subprocess.Popen(
            [MASTER_LOAD, "--endpoint", f"tcp://127.0.0.1:{port}", "--agents", str(AGENTS), "--metrics", str(METRICS),
             "--interval", "1", "--warmup", "1", "--seconds", "8", "--drain", "30", "--host-prefix", PREFIX],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: load.poll() is None and (load.kill(), load.wait(timeout=30)))

        # While lmaster writes: SWMR readers see complete rows (they retry while lmaster has the
        # file open without SWMR to add tables). A few hosts' tables are read each time, the
        # host groups of all.
        seen = {"reads": 0}

        def read_while_running():
            if master.poll() is not None:
                raise AssertionError("lmaster exited:\n" + read_text(self.path("lmaster.err")))
            try:
                with read_hdf5.open_file(link, swmr=True) as f:
                    hosts = sorted(h for h in f.keys() if h.startswith(PREFIX))
                    picked = hosts[:: max(1, len(hosts) // 3)]
                    data = {h: {sensor: read_hdf5.read_table(group, swmr=True)
                                for sensor, group in f[h].items() if "time" in group} for h in picked}
            except (OSError, KeyError):
                return False
            self.check_rows(data, "while written")
            if any(table["time"] for tables in data.values() for table in tables.values()):
                seen["reads"] += 1
            return seen["reads"] >= 2 and len(hosts) == AGENTS

        out, err = load.communicate(timeout=300)
        self.assertEqual(load.returncode, 0, err)
        summary = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(summary["unacked_at_end"], 0, summary)
        acked = summary["points_acked"]
        self.assertGreater(acked, 0)
        self.assertEqual(self.stop(master, timeout=300), 0, read_text(self.path("lmaster.err"))[-3000:])

        log = read_text(self.path("lmaster.err"))
        behind = re.search(r"output hdf5: stopping with (\d+) points undelivered", log)
        undelivered = int(behind.group(1)) if behind else 0
        files = read_hdf5.series_files(link)
        self.assertEqual(len(files), 1, files)
        with h5py.File(files[0], "r") as f:  # closed: a plain reader opens it
            self.assertEqual(f.attrs["layout"], "per_host")
            datasets = []
            f.visititems(lambda name, obj: datasets.append(name) if isinstance(obj, h5py.Dataset) else None)
            self.assertGreater(len(datasets), KEPT_OPEN, "more datasets than lmaster keeps open")
        data = read_hdf5.read_file(files[0])
        self.check_rows(data, files[0])
        hosts = sorted(h for h in data if h.startswith(PREFIX))
        self.assertEqual(len(hosts), AGENTS)
        stored = 0
        for host in hosts:
            for sensor, table in data[host].items():
                if sensor == "lmaster_agents":  # lmaster's own rows about the agent
                    continue
                self.assertEqual(len(set(table["time"])), len(table["time"]), f"{host}/{sensor}: a row twice")
                stored += sum(1 for column in table["columns"].values() for v in column["values"]
                              if v is not None and not math.isnan(v))
        # Every acknowledged point is in the file once (or, when the output was behind at the
        # stop, still in lmaster's journal).
        self.assertEqual(stored + undelivered, acked, f"{undelivered} undelivered at the stop")


if __name__ == "__main__":
    unittest.main()
