"""An agent with several masters ([lmaster] host = a, b) moves to the next when the one it
sends to falls silent, and what the first one never acknowledged reaches the second: every
reading arrives (at least once, in one of them)."""
import datetime
import re
import unittest

from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT, LMASTER

STEP_MS = 200


def stamps(text):
    """Milliseconds of testnode's VirtualMemory lines in lmaster [stdout] output."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[1] == "testnode" and fields[2] == "VirtualMemory":
            when = datetime.datetime.strptime(fields[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
            found.append(round(when.timestamp() * 1000))
    return found


class FailoverTest(FructosaTestCase):
    def start_named_master(self, name):
        config = self.write(f"{name}.conf", f"[lmaster]\nhost = 127.0.0.1\nincoming data port = 0\n"
                                            f"data_dir = {self.path(name + '-data')}\n[stdout]\n")
        process = self.spawn(name, [LMASTER, "run", "-c", config, "-p", self.path(f"{name}.pid")])
        port = wait_for(lambda: self.listening_port(self.path(f"{name}.err")) or
                        (process.poll() is not None and self.fail(read_text(self.path(f"{name}.err")))),
                        what=f"{name} to listen")
        return process, port

    def test_the_agent_moves_to_the_next_master_and_loses_nothing(self):
        first, first_port = self.start_named_master("first")
        second, second_port = self.start_named_master("second")
        config = self.agent_config(0, ["VirtualMemory"], extra="heartbeat_interval = 0.5\n").replace(
            "host = 127.0.0.1\nincoming data port = 0\n",
            f"host = 127.0.0.1:{first_port}, 127.0.0.1:{second_port}\n", 1)
        agent = self.spawn("lagent", [LAGENT, "run", "-c", self.write("lagent.conf", config),
                                      "-p", self.path("lagent.pid")])
        wait_for(lambda: len(stamps(read_text(self.path("first.out")))) >= 5, timeout=30, what="samples at the first master")
        self.assertEqual(stamps(read_text(self.path("second.out"))), [])

        self.assertEqual(self.stop(first), 0, read_text(self.path("first.err")))
        wait_for(lambda: len(stamps(read_text(self.path("second.out")))) >= 10, timeout=30,
                 what="samples at the second master")
        self.assertRegex(read_text(self.path("lagent.err")),
                         rf"lmaster tcp://127.0.0.1:{first_port} has said nothing for \d+ s: sending to "
                         rf"tcp://127.0.0.1:{second_port} instead")
        self.assertEqual(self.stop(agent), 0, read_text(self.path("lagent.err")))
        self.assertEqual(self.stop(second), 0, read_text(self.path("second.err")))

        got = sorted(set(stamps(read_text(self.path("first.out"))) + stamps(read_text(self.path("second.out")))))
        steps = [b - a for a, b in zip(got, got[1:])]
        self.assertEqual(steps, [STEP_MS] * len(steps), got)
        self.assertGreaterEqual(len(got), 15)


if __name__ == "__main__":
    unittest.main()
