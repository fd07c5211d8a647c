"""lagent with [Graphite] and no [lmaster] sends to carbon itself, as FrUCToSA 0.3's agents did
(lagent/carbon_link.h): the names and values lmaster's Graphite output would send, and nothing
lost while carbon is away (a batch leaves the spool only once carbon has taken it). With both
sections, [Graphite] is ignored with one warning and the data goes through lmaster.
"""
import signal
import time
import unittest

import psutil

from carbon_cache import CarbonCache
from fructosa_test import spooled_batches, LAGENT, FructosaTestCase, free_port, read_text, wait_for
from pickle_sink import PickleSink

HOST = "testnode"
SECOND_NS = 1_000_000_000
INTERVAL_NS = 200_000_000
# FrUCToSA 0.3's lagent.conf for agents that send to carbon directly, as sites have it.
FRUCTOSA_TEXT = "[Graphite]\nhost = localhost\ncarbon receiver pickle port = 2004\n"


def ns(timestamp):
    """A pickled float timestamp back to the agent's ns (readings are on 0.1 s multiples)."""
    return round(timestamp * 10) * (SECOND_NS // 10)


class AgentToCarbonTest(FructosaTestCase):
    def graphite_agent(self, carbon_port, sensors, graphite=""):
        text = (f"[Graphite]\nhost = 127.0.0.1\ncarbon receiver pickle port = {carbon_port}\n{graphite}"
                f"[lagent]\nhost = {HOST}\nspool_dir = {self.path('spool')}\n")
        for sensor, interval in sensors:
            text += f"[sensor:{sensor}]\ntime_interval = {interval}\n"
        config = self.write("lagent.conf", text)
        return self.spawn("lagent", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])

    def running(self, agent):
        if agent.poll() is not None:
            raise AssertionError(f"lagent exited with {agent.returncode}:\n" + read_text(self.path("lagent.err")))
        return True

    def test_names_and_values_arrive_in_carbon(self):
        carbon = CarbonCache(self, self.path("carbon"))
        carbon.start()
        since = int(time.time()) - 2
        agent = self.graphite_agent(carbon.pickle_port, [("VirtualMemory", 1), ("CPUPercent", 1), ("BootTime", 1)],
                                    graphite="prefix = site\n")
        total = f"site.{HOST}.VirtualMemory.total"
        wanted = [total, f"site.{HOST}.CPUPercent.0", f"site.{HOST}.BootTime", f"site.{HOST}.lagent.batches_sent"]
        wait_for(lambda: self.running(agent) and all(carbon.stored(p, since) for p in wanted) and
                 len(carbon.stored(total, since)) >= 3, timeout=60, what=f"{wanted} in whisper")
        # psutil decides what is right (the same values lmaster's output would have sent).
        self.assertEqual(set(carbon.stored(total, since).values()), {float(psutil.virtual_memory().total)})
        self.assertEqual(set(carbon.stored(f"site.{HOST}.BootTime", since).values()), {psutil.boot_time()})
        self.assertTrue(all(0 <= v <= 100 for v in carbon.stored(f"site.{HOST}.CPUPercent.0", since).values()))
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        log = read_text(self.path("lagent.err"))
        self.assertIn(f"started as {HOST} -> carbon at 127.0.0.1:{carbon.pickle_port} (pickle)", log)
        self.assertIn("MetricPickleReceiver connection", read_text(carbon.log))

    def test_plaintext_goes_to_the_line_receiver(self):
        carbon = CarbonCache(self, self.path("carbon"))
        carbon.start()
        since = int(time.time()) - 2
        # The pickle port leads nowhere: plaintext must use `carbon receiver port`.
        agent = self.graphite_agent(1, [("VirtualMemory", 1)],
                                    graphite=f"protocol = plaintext\ncarbon receiver port = {carbon.line_port}\n")
        total = f"{HOST}.VirtualMemory.total"
        wait_for(lambda: self.running(agent) and len(carbon.stored(total, since)) >= 2, timeout=60,
                 what=f"{total} in whisper")
        self.assertEqual(set(carbon.stored(total, since).values()), {float(psutil.virtual_memory().total)})
        self.assertIn("MetricLineReceiver connection", read_text(carbon.log))

    def test_nothing_is_lost_while_carbon_is_away(self):
        """The sink stops, then crashes (forgetting what arrived in its last second, as carbon loses
        its unwritten cache); each time samples pile up in the spool and the sink comes back on
        the same port. Every VirtualMemory sample lagent read arrives: lagent's own count of its
        reads is the oracle."""
        port = free_port()
        sinks = [PickleSink(port)]
        self.addCleanup(lambda: sinks[-1].stop())
        spool = self.path("spool")
        agent = self.graphite_agent(port, [("VirtualMemory", 0.2), ("lagent", 0.5)],
                                    graphite="replay_window = 3\nretry_max_interval = 0.5\n")

        def points(path):
            return [(ts, value) for sink in sinks for p, ts, value in sink.snapshot() if p == path]

        vm = f"{HOST}.VirtualMemory.total"
        wait_for(lambda: self.running(agent) and len(points(vm)) >= 5, what="5 samples in the sink")
        for lose in (0.0, 1.0):
            sinks[-1].stop(lose_last_seconds=lose)
            down_ns = time.time_ns()
            records = spooled_batches(spool)
            wait_for(lambda: self.running(agent) and spooled_batches(spool) >= records + 10,
                     what="10 batches spooled while carbon is away")
            up_ns = time.time_ns()
            sinks.append(PickleSink(port))
            wait_for(lambda: self.running(agent) and any(ns(ts) >= up_ns + SECOND_NS for ts, _ in points(vm)),
                     timeout=30, what="samples taken after carbon came back")
            arrived = {ns(ts) for ts, _ in points(vm)}
            self.assertTrue(any(down_ns < t < up_ns for t in arrived), "nothing read while carbon was away arrived")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))

        arrived = sorted({ns(ts) for ts, _ in points(vm)})
        self.assertTrue(all(t % INTERVAL_NS == 0 for t in arrived))
        # At a lagent sample taken at x.5 s (between two 0.2 s readings) its VirtualMemory.reads
        # equals the VirtualMemory samples read before it, all of which must have arrived.
        reads = sorted((ns(ts), value) for ts, value in points(f"{HOST}.lagent.VirtualMemory.reads")
                       if ns(ts) % SECOND_NS == SECOND_NS // 2)
        self.assertTrue(reads)
        at, expected = reads[-1]
        self.assertGreater(at, up_ns)
        self.assertEqual(sum(1 for t in arrived if t < at), expected,
                         f"samples missing: {sorted(set(range(arrived[0], at, INTERVAL_NS)) - set(arrived))}")
        # lagent's link health: both outages were noticed and everything was sent again.
        resyncs = [value for ts, value in points(f"{HOST}.lagent.resyncs")]
        self.assertGreaterEqual(max(resyncs), 2)
        self.assertEqual(max(value for _, value in points(f"{HOST}.lagent.batches_dropped")), 0)
        log = read_text(self.path("lagent.err"))
        self.assertIn(f"lost the connection to carbon at 127.0.0.1:{port}", log)
        self.assertNotIn("error", log.lower())

    def test_with_lmaster_the_graphite_section_is_ignored_with_one_warning(self):
        sink = PickleSink()
        self.addCleanup(sink.stop)
        master, port = self.start_master()
        # queue_max_points is an lmaster key: the ignored section is not checked against lagent's table.
        config = self.write("lagent.conf", self.agent_config(port, ["VirtualMemory"]) +
                            f"[Graphite]\nhost = 127.0.0.1\ncarbon receiver pickle port = {sink.port}\n"
                            "queue_max_points = 1000\n")
        agent = self.spawn("lagent", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])
        wait_for(lambda: self.running(agent) and read_text(self.path("lmaster.out")).count(f" {HOST} VirtualMemory ") >= 5,
                 what="5 samples through lmaster")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))
        log = read_text(self.path("lagent.err"))
        warning = (f"{config}:9: [Graphite]: ignored: lagent sends to the lmaster of [lmaster]; "
                   "[Graphite] belongs in lmaster.conf")
        self.assertEqual(log.count(warning), 1, log)
        self.assertRegex(log, rf"started as {HOST} -> lmaster at tcp://127\.0\.0\.1:{port} ")
        self.assertEqual((sink.accepted, sink.snapshot()), (0, []))

    def test_fructosa_file_starts(self):
        """FrUCToSA's file as sites have it (and a spool directory of the test's own): lagent
        runs and keeps its readings for carbon at localhost:2004, whether or not one listens."""
        spool = self.path("spool")
        config = self.write("lagent.conf", FRUCTOSA_TEXT + "[sensor:CPUPercent]\ntime_interval = 1\n" +
                            f"[lagent]\nspool_dir = {spool}\n")
        agent = self.spawn("lagent", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])
        wait_for(lambda: self.running(agent) and spooled_batches(spool) >= 3, what="3 batches made")
        log = read_text(self.path("lagent.err"))
        self.assertRegex(log, r"started as \S+ -> carbon at localhost:2004 \(pickle\) with 2 sensor\(s\)")
        self.assertNotIn("[Graphite]", log)  # neither an error nor a warning
        agent.send_signal(signal.SIGTERM)
        self.assertEqual(agent.wait(timeout=30), 0, read_text(self.path("lagent.err")))


if __name__ == "__main__":
    unittest.main()
