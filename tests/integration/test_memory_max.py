"""[lmaster] memory_max (lmaster/memory_guard.h): over it, lmaster turns new batches away instead
of growing; the agent keeps them in its spool, does not fail over (heartbeats are answered),
and once a master takes batches again every one of them arrives, exactly once.

The bound here (1 MiB) is under any lmaster's memory: the first master turns everything away
for as long as it runs. A second master on the same port, without the bound, then gets it all.
The hold's end within one run (memory falling under 90 % of the bound, the agents asked to
resend) is tested in tests/unit/memory_guard_test.cpp.
"""
import signal
import time
from datetime import datetime, timezone

import read_hdf5
from fructosa_test import FructosaTestCase, free_port, read_text, spooled_batches, wait_for, LAGENT, LMASTER

INTERVAL_NS = 200_000_000


class MemoryMaxTest(FructosaTestCase):
    def start_master_on(self, port, name, extra=""):
        config = self.write(name + ".conf", self.master_config(port=port, extra="[stdout]\n").replace(
            "[lmaster]\n", f"[lmaster]\n{extra}"))
        master = self.spawn(name, [LMASTER, "run", "-c", config, "-p", self.path(name + ".pid")])
        wait_for(lambda: self.listening_port(self.path(name + ".err")) or self.exited(master), what=f"{name} to listen")
        return master

    def test_over_memory_max_batches_wait_in_the_agent_and_all_arrive_later(self):
        port = free_port()
        held = self.start_master_on(port, "lmaster1", "memory_max = 1048576\nstats_interval = 0.5\n")
        spool = self.path("lagent-spool")
        config = self.agent_config(port, ["VirtualMemory"],
                                   extra="heartbeat_interval = 0.5\nmax_unacked_batches = 5\n")
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])
        started_ns = time.time_ns()
        wait_for(lambda: "more than [lmaster] memory_max" in read_text(self.path("lmaster1.err")),
                 what="lmaster to say it is over memory_max")
        # 3 s of readings wait in the agent's spool; heartbeats are answered (failover_after: 2 s).
        wait_for(lambda: spooled_batches(spool) >= 15, what="15 batches in the agent's spool")
        self.assertEqual([l for l in read_text(self.path("lmaster1.out")).splitlines() if " testnode " in l], [])
        self.assertNotIn("has said nothing", read_text(self.path("lagent.err")), "the agent failed over")
        self.assertEqual(self.stop(held), 0, read_text(self.path("lmaster1.err")))
        own = [l for l in read_text(self.path("lmaster1.out")).splitlines() if " lmaster " in l]
        self.assertTrue(own, "lmaster's own samples go on while it holds")
        self.assertIn("memory.holding=1", own[-1])
        self.assertRegex(own[-1], r"memory\.turned_away=[1-9]")

        # A master without the bound takes what the agent kept: every reading, once.
        free = self.start_master_on(port, "lmaster2")
        stop_ns = time.time_ns()
        wait_for(lambda: spooled_batches(spool) == 0 or
                 any(" testnode VirtualMemory " in l and int(self.sample_time(l)) > stop_ns
                     for l in read_text(self.path("lmaster2.out")).splitlines()[-50:]),
                 what="the agent to catch up")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(free), 0, read_text(self.path("lmaster2.err")))
        vm = read_hdf5.read_file(self.path("data.h5"))["testnode"]["VirtualMemory"]["time"]
        self.assertEqual(len(vm), len(set(vm)), "a reading arrived twice")
        during = sorted(t for t in vm if t < stop_ns)
        self.assertGreaterEqual(len(during), 15)
        # No gap: one reading every 0.2 s from the first the agent took.
        self.assertEqual([b - a for a, b in zip(during, during[1:])], [INTERVAL_NS] * (len(during) - 1))
        self.assertLess(during[0] - started_ns, 2 * INTERVAL_NS + 1_000_000_000)

    @staticmethod
    def sample_time(line):
        """The ns timestamp of an lmaster stdout line (ISO time with milliseconds, UTC)."""
        stamp = line.split()[0]
        moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
        return int(moment.timestamp() * 1e9)

    def test_a_reload_that_lifts_memory_max_makes_the_agent_resend_what_was_turned_away(self):
        port = free_port()
        master = self.start_master_on(port, "lmaster", "memory_max = 1048576\n")
        spool = self.path("lagent-spool")
        config = self.agent_config(port, ["VirtualMemory"],
                                   extra="heartbeat_interval = 0.5\nmax_unacked_batches = 5\n")
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])
        wait_for(lambda: spooled_batches(spool) >= 10, what="10 batches in the agent's spool")
        self.assertEqual([l for l in read_text(self.path("lmaster.out")).splitlines() if " testnode " in l], [])
        self.write("lmaster.conf", read_text(self.path("lmaster.conf")).replace("memory_max = 1048576\n", ""))
        lifted_ns = time.time_ns()
        master.send_signal(signal.SIGHUP)
        wait_for(lambda: "taking batches again" in read_text(self.path("lmaster.err")), what="the hold to end")

        def caught_up():
            lines = [l for l in read_text(self.path("lmaster.out")).splitlines() if " testnode VirtualMemory " in l]
            return lines and max(self.sample_time(l) for l in lines) > lifted_ns + 1_000_000_000
        wait_for(caught_up, what="readings taken after the reload")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))
        self.assertIn("asking agent testnode for a resync", read_text(self.path("lmaster.err")))
        self.assertNotIn("has said nothing", read_text(self.path("lagent.err")))
        # SIGHUP also starts a new HDF5 file: the readings are in the series' two files.
        vm = sorted(t for path in read_hdf5.series_files(self.path("data.h5"))
                    for t in read_hdf5.read_file(path).get("testnode", {}).get("VirtualMemory", {}).get("time", []))
        self.assertEqual(len(vm), len(set(vm)), "a reading arrived twice")
        self.assertEqual([b - a for a, b in zip(vm, vm[1:])], [INTERVAL_NS] * (len(vm) - 1), "a reading is missing")
        # The readings of the hold (the 10 batches waited for, less the agent's own first one).
        self.assertGreaterEqual(sum(t < lifted_ns for t in vm), 8, "the readings turned away arrived")
