"""Power cuts under lmaster (docs/durability.md): its journal and HDF5 files on crashfs, a FUSE
filesystem that drops at a "cut" everything not made durable (file data and directory entries).

An agent whose every sample is known (tests/tools/counting_agent) sends as fast as lmaster
acknowledges; at a random moment (rotation and compaction included: files rotate every 256 KiB)
the power goes. lmaster is killed, the filesystem remounted with what survived, lmaster started
again; the agent, which lost nothing, resends what was not acknowledged. Then: every batch the
agent made is in the HDF5 files exactly once, every acknowledged one included, and every file is
readable by h5py. `FRUCTOSA_POWER_CUTS=N` runs N seeded cuts (bench/power_cuts.sh: a long run)."""
import os
import random
import re
import signal
import subprocess
import sys
import unittest

import read_hdf5
import crashfs
from fructosa_test import FructosaTestCase, LMASTER, free_port, read_text, wait_for

COUNTING_AGENT = os.environ.get("COUNTING_AGENT", "counting_agent")
SAMPLES_PER_BATCH = 20
CUTS = int(os.environ.get("FRUCTOSA_POWER_CUTS", "3"))
FIRST_SEED = int(os.environ.get("FRUCTOSA_POWER_CUT_SEED", "1"))


def acknowledged(path):
    acks = [int(n) for n in re.findall(r"^ack (\d+)$", read_text(path), re.M)]
    return max(acks) if acks else 0


@unittest.skipUnless(*crashfs.available())
class PowerCutTest(FructosaTestCase):
    def start_master(self, port, name):
        config = self.write("lmaster.conf", (
            f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {port}\n"
            f"data_dir = {self.mount}/data\n"
            f"[hdf5]\npath = {self.mount}/data/fructosa.h5\nflush_interval = 0.2\n"
            f"rotate_size = 262144\nrotate_age = 0\n"))
        process = self.spawn(name, [LMASTER, "run", "-c", config, "-p", self.path(name + ".pid")])
        wait_for(lambda: "listening on" in read_text(self.path(name + ".err")) or process.poll() is not None,
                 what=f"{name} to listen")
        self.assertIsNone(process.poll(), read_text(self.path(name + ".err")))
        return process

    def one_cut(self, seed):
        rng = random.Random(seed)
        self.mount = self.path(f"mnt{seed}")
        backing = self.path(f"disk{seed}")
        os.mkdir(self.mount)
        fs = crashfs.mount(backing, self.mount)
        self.addCleanup(lambda: fs.unmount())
        port = free_port()
        master = self.start_master(port, f"lmaster{seed}a")
        agent = self.spawn(f"agent{seed}", [COUNTING_AGENT, f"tcp://127.0.0.1:{port}", "cutnode",
                                            str(SAMPLES_PER_BATCH)])
        # Some hundreds of batches acknowledged, so that files rotate and compaction runs.
        target = rng.randint(50, 600)
        wait_for(lambda: acknowledged(self.path(f"agent{seed}.out")) >= target or agent.poll() is not None,
                 timeout=120, what=f"{target} batches acknowledged")
        self.assertIsNone(agent.poll(), read_text(self.path(f"agent{seed}.err")))
        acked_before_cut = acknowledged(self.path(f"agent{seed}.out"))
        fs.cut(seed if seed % 2 else None)  # odd seeds also keep a seeded part of what was pending
        master.send_signal(signal.SIGKILL)
        master.wait(timeout=30)
        fs.unmount()
        fs = crashfs.mount(backing, self.mount)  # what survived the cut

        master = self.start_master(port, f"lmaster{seed}b")
        wait_for(lambda: acknowledged(self.path(f"agent{seed}.out")) > acked_before_cut + 20,
                 timeout=120, what="the agent to be heard again")
        self.assertEqual(self.stop(agent, timeout=120), 0, read_text(self.path(f"agent{seed}.err")))
        made = int(re.search(r"^made (\d+)$", read_text(self.path(f"agent{seed}.out")), re.M).group(1))
        self.assertEqual(self.stop(master, timeout=120), 0, read_text(self.path(f"lmaster{seed}b.err")))
        fs.unmount()

        # What is on the disk now: the backing directory.
        rows = []
        files = read_hdf5.series_files(os.path.join(backing, "data", "fructosa.h5"))
        self.assertTrue(files)
        for path in files:
            data = read_hdf5.read_file(path)  # every file readable
            table = data.get("cutnode", {}).get("PowerCut")
            if table:
                rows += zip((int(b) for b in table["columns"]["batch"]["values"]),
                            (int(i) for i in table["columns"]["index"]["values"]))
        counts = {}
        for row in rows:
            counts[row] = counts.get(row, 0) + 1
        twice = [row for row, n in counts.items() if n > 1]
        missing = [(b, i) for b in range(1, made + 1) for i in range(SAMPLES_PER_BATCH) if (b, i) not in counts]
        lost_acknowledged = [row for row in missing if row[0] <= acked_before_cut]
        print(f"seed {seed}: cut after {acked_before_cut} acknowledged batches; {made} made; {len(files)} files; "
              f"{len(rows)} rows; missing {len(missing)}, of them acknowledged {len(lost_acknowledged)}; "
              f"twice {len(twice)}", file=sys.stderr)
        self.assertEqual(lost_acknowledged[:5], [], "acknowledged samples lost in the power cut")
        self.assertEqual(missing[:5], [], "samples the agent sent again never stored")
        self.assertEqual(twice[:5], [], "samples stored twice")
        return made, acked_before_cut

    def test_nothing_acknowledged_is_lost_and_nothing_stored_twice(self):
        tally = []
        for seed in range(FIRST_SEED, FIRST_SEED + CUTS):
            with self.subTest(seed=seed):
                tally.append(self.one_cut(seed))
        print(f"power cuts: {len(tally)}, batches made {sum(m for m, _ in tally)}, acknowledged before the cuts "
              f"{sum(a for _, a in tally)}; all stored once", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
