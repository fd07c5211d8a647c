"""`lmaster ctl interval`: lmaster tells an agent to read a sensor faster for a while (over the
agents' link), and the agent goes back to its configured interval afterwards."""
import datetime
import unittest

from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT, LMASTER


def stamps(text, sensor):
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[1] == "testnode" and fields[2] == sensor:
            when = datetime.datetime.strptime(fields[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
            found.append(round(when.timestamp() * 1000))
    return found


class ControlTest(FructosaTestCase):
    def ctl(self, *args):
        return self.run_tool([LMASTER, "ctl", *args, "-c", self.path("lmaster.conf")])

    def test_an_agent_reads_faster_for_a_while_then_as_configured(self):
        master, port = self.start_master()
        config = self.agent_config(port, ["VirtualMemory", "CPUTimes"], interval=0.5)
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])
        out = lambda: read_text(self.path("lmaster.out"))
        wait_for(lambda: len(stamps(out(), "VirtualMemory")) >= 3, timeout=30, what="samples at 0.5 s")

        refused = self.ctl("interval", "VirtualMemory", "0.1", "--for", "2", "--host", "nosuch")
        self.assertEqual(refused.returncode, 1, refused.stdout + refused.stderr)
        self.assertIn("not connected: nosuch", refused.stdout)
        bad = self.ctl("interval", "VirtualMemory", "0.001")
        self.assertEqual(bad.returncode, 1)
        self.assertIn("refused", bad.stdout)

        asked = self.ctl("interval", "VirtualMemory", "0.1", "--for", "2", "--host", "testnode")
        self.assertEqual(asked.returncode, 0, asked.stdout + asked.stderr)
        self.assertIn("asked: testnode", asked.stdout)
        wait_for(lambda: "reading VirtualMemory every 0.5 s again" in read_text(self.path("lagent.err")), timeout=30,
                 what="the agent going back to 0.5 s")
        def after_fast_run():
            times = stamps(out(), "VirtualMemory")
            steps = [b - a for a, b in zip(times, times[1:])]
            return 100 in steps and len(steps) - 1 - steps[::-1].index(100) >= 3
        wait_for(after_fast_run, timeout=30, what="three readings after the fast ones")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

        times = stamps(out(), "VirtualMemory")
        steps = [b - a for a, b in zip(times, times[1:])]
        # 0.5 s, then about 2 s of 0.1 s readings, then 0.5 s again.
        self.assertEqual(steps[0], 500, steps)
        self.assertGreaterEqual(steps.count(100), 10, steps)
        # After the fast run: the switch falls on the next aligned instant, then 0.5 s steps.
        last_fast = len(steps) - 1 - steps[::-1].index(100)
        self.assertEqual(steps[last_fast + 2:], [500] * (len(steps) - last_fast - 2), steps)
        self.assertTrue(all(t % 100 == 0 for t in times), times)
        # The other sensor kept its interval.
        other = stamps(out(), "CPUTimes")
        self.assertTrue(all(b - a == 500 for a, b in zip(other, other[1:])), other)
        self.assertIn("asks for VirtualMemory every 0.1 s for 2 s", read_text(self.path("lagent.err")))


if __name__ == "__main__":
    unittest.main()
