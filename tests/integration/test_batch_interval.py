"""[lagent] batch_interval: a round's readings wait in memory and leave with later rounds' as one
batch (fewer wake-ups of lagent's network thread and of lmaster, docs/performance.md). Nothing is
lost on the way: every reading arrives once, on its own aligned time, and what waits when lagent
is stopped leaves before it exits.
"""
import json
import time

import read_hdf5
from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT

INTERVAL_NS = 200_000_000


class BatchIntervalTest(FructosaTestCase):
    def agent_batches(self):
        """Batches lmaster has received from testnode (agents.json, written every second)."""
        try:
            with open(self.path("lmaster-data/agents.json")) as f:
                return json.load(f)["agents"]["testnode"]["batches"]
        except (OSError, ValueError, KeyError):
            return None

    def stored_times(self):
        return sorted(t for path in read_hdf5.series_files(self.path("data.h5"))
                      for t in read_hdf5.read_file(path).get("testnode", {}).get("VirtualMemory", {}).get("time", []))

    def test_rounds_leave_together_and_every_reading_arrives_once(self):
        master, port = self.start_master()
        config = self.agent_config(port, ["VirtualMemory"], extra="batch_interval = 1\n")
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])
        wait_for(lambda: (self.agent_batches() or 0) >= 4, timeout=60, what="4 batches from the agent")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        stopped_ns = time.time_ns()
        batches = self.agent_batches()
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        times = self.stored_times()
        self.assertEqual(len(times), len(set(times)), "a reading arrived twice")
        self.assertEqual([b - a for a, b in zip(times, times[1:])], [INTERVAL_NS] * (len(times) - 1),
                         "a reading is missing")
        # What waited in memory when lagent was stopped left before it exited.
        self.assertGreater(times[-1], stopped_ns - 3 * INTERVAL_NS - 1_000_000_000)
        # Rounds every 0.2 s, a batch at most every 1 s: 6 rounds per batch (the lagent sensor's
        # rounds ride along). Without batch_interval there would be one batch per round.
        self.assertGreaterEqual(len(times), 15)
        self.assertLessEqual(batches, len(times) / 3, f"{batches} batches for {len(times)} readings")


if __name__ == "__main__":
    import unittest
    unittest.main()
