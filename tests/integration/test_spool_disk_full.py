"""lagent with a full disk under its spool (crashfs with a capacity, docs/durability.md): it starts,
keeps the batches the disk refuses in memory, and lmaster gets every reading, in order, once.
A full /var on a compute node must not mean no monitoring of it."""
import os
import time
import unittest

import crashfs
import read_hdf5
from fructosa_test import free_port, FructosaTestCase, read_text, wait_for, LAGENT, LMASTER

INTERVAL_NS = 100_000_000
SECOND_NS = 1_000_000_000


@unittest.skipUnless(*crashfs.available())
class SpoolDiskFullTest(FructosaTestCase):
    def run_agent_on_full_disk(self, capacity, wait_for_log):
        mount = self.path("mnt")
        os.mkdir(mount)
        fs = crashfs.mount(self.path("disk"), mount, capacity=capacity)
        self.addCleanup(fs.unmount)
        port = free_port()
        config = self.write("lagent.conf", self.agent_config(port, ["VirtualMemory"], interval=0.1).replace(
            f"spool_dir = {self.path('lagent-spool')}", f"spool_dir = {mount}/spool"))
        agent = self.spawn("lagent", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])
        started_ns = time.time_ns()
        # lmaster is away: batches pile up until the small disk is full, then in memory.
        wait_for(lambda: wait_for_log in read_text(self.path("lagent.err")) or agent.poll() is not None,
                 timeout=60, what=f"lagent to log {wait_for_log!r}")
        self.assertIsNone(agent.poll(), read_text(self.path("lagent.err")))
        wait_for(lambda: time.time_ns() > started_ns + 2 * SECOND_NS, what="more readings")

        master_config = self.write("lmaster.conf", self.master_config("", port=port))
        master = self.spawn("lmaster", [LMASTER, "run", "-c", master_config, "-p", self.path("lmaster.pid")])
        caught_up_ns = time.time_ns() + SECOND_NS
        wait_for(lambda: self.stored_after(caught_up_ns) or agent.poll() is not None, timeout=60,
                 what="lmaster to have lagent's readings")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))
        times = read_hdf5.read_file(self.path("data.h5"))["testnode"]["VirtualMemory"]["time"]
        self.assertEqual(len(times), len(set(times)), "a reading stored twice")
        # Every reading from the first to the last, none missing.
        self.assertEqual(len(times), (max(times) - min(times)) // INTERVAL_NS + 1,
                         "readings missing:\n" + read_text(self.path("lagent.err")))
        self.assertLessEqual(min(times), started_ns + SECOND_NS)
        return read_text(self.path("lagent.err"))

    def stored_after(self, when_ns):
        try:
            times = read_hdf5.read_file(self.path("data.h5"), swmr=True)["testnode"]["VirtualMemory"]["time"]
        except (OSError, KeyError):
            return False
        return bool(times) and max(times) >= when_ns

    def test_batches_the_full_disk_refuses_wait_in_memory(self):
        log = self.run_agent_on_full_disk(48 * 1024, "batches are kept in memory until the disk takes them")
        self.assertIn("No space left on device", log)

    def test_a_spool_dir_unusable_at_start_gives_a_spool_in_memory(self):
        log = self.run_agent_on_full_disk(0, "the spool is in memory only")
        self.assertIn("No space left on device", log)


if __name__ == "__main__":
    unittest.main()
