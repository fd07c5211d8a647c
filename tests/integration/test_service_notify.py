"""Readiness for systemd (Type=notify): the sd_notify datagrams lagent and lmaster send on
$NOTIFY_SOCKET, seen through a unix datagram socket the test binds; and log lines written for the
journal when $JOURNAL_STREAM names stderr."""
import os
import signal
import socket
import subprocess

from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT, LMASTER
# Functions only: importing the test class would run its tests here too.
from test_agent_spool import free_port, spooled_batches


class NotifySocket:
    """What a service manager listens on: every datagram received, as a list of {key: value}."""

    def __init__(self, path):
        self.path = path
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(path)
        self.socket.setblocking(False)
        self.messages = []

    def receive(self):
        while True:
            try:
                data = self.socket.recv(4096)
            except BlockingIOError:
                return self.messages
            self.messages.append(dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line))

    def find(self, key, value=None, after=0):
        """Index of the first message from `after` on with KEY (=value), or None."""
        for index, message in enumerate(self.receive()[after:], after):
            if key in message and (value is None or message[key] == value):
                return index
        return None

    def wait(self, key, value=None, after=0, what=None):
        """Index of the first message from `after` on with KEY (=value), waiting for it."""
        found = []

        def arrived():
            index = self.find(key, value, after)
            if index is not None:
                found.append(index)
            return index is not None

        wait_for(arrived, what=what or f"{key}={value} on NOTIFY_SOCKET")
        return found[-1]

    def close(self):
        self.socket.close()


class ServiceNotifyTest(FructosaTestCase):
    def notify_socket(self, name):
        notify = NotifySocket(self.path(name))
        self.addCleanup(notify.close)
        return notify

    def start(self, name, args, notify, extra_env=None):
        env = dict(os.environ, NOTIFY_SOCKET=notify.path, **(extra_env or {}))
        err = open(self.path(name + ".err"), "w")
        self.addCleanup(err.close)
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env)
        self._processes.append(process)
        return process

    def start_master(self, notify, port=0):
        config = self.write("lmaster.conf", self.master_config(port=port))
        return self.start("lmaster", [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")], notify)

    def test_lmaster_is_ready_once_bound(self):
        notify = self.notify_socket("lmaster.notify")
        master = self.start_master(notify)
        ready = notify.wait("READY", "1", what="lmaster's READY=1")
        # When READY=1 arrives the port is bound: its log line is out, and it accepts connections.
        port = self.listening_port(self.path("lmaster.err"))
        self.assertIsNotNone(port, read_text(self.path("lmaster.err")))
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
        self.assertEqual(notify.messages[ready].get("STATUS"), "running")
        self.assertEqual(self.stop(master), 0)

    def test_lagent_is_ready_before_lmaster_exists(self):
        # READY=1 once sampling and spooling, whether or not lmaster answers: a node must finish
        # booting while its master is down. STATUS= says whether lmaster has answered.
        port = free_port()
        agent_notify = self.notify_socket("lagent.notify")
        config = self.write("lagent.conf", self.agent_config(port, ["VirtualMemory"], interval=0.1,
                                                             extra="heartbeat_interval = 0.2\n"))
        agent = self.start("lagent", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")], agent_notify)
        ready = agent_notify.wait("READY", "1", what="lagent's READY=1 with no lmaster anywhere")
        waiting = agent_notify.wait("STATUS", f"waiting for lmaster at tcp://127.0.0.1:{port}; readings are spooled",
                                    after=ready, what="lagent's STATUS= waiting for lmaster")
        # Running without lmaster: readings are taken and spooled (ten batches, each sent and
        # unanswered, heartbeats in between), and the status stays "waiting".
        wait_for(lambda: spooled_batches(self.path("lagent-spool")) >= 10, what="lagent to spool ten batches")
        self.assertIsNone(agent.poll(), read_text(self.path("lagent.err")))
        self.assertIsNone(agent_notify.find("STATUS", after=waiting + 1), agent_notify.messages)

        master_notify = self.notify_socket("lmaster.notify")
        self.start_master(master_notify, port=port)
        master_notify.wait("READY", "1", what="lmaster's READY=1")
        agent_notify.wait("STATUS", f"sending to lmaster at tcp://127.0.0.1:{port}", after=waiting + 1,
                          what="lagent's STATUS= once lmaster answers")
        self.assertEqual(sum("READY" in m for m in agent_notify.receive()), 1, agent_notify.messages)

        # Reload: RELOADING=1 (with MONOTONIC_USEC), then READY=1 again once re-read; the link is
        # unchanged, so its status stays "sending to".
        count = len(agent_notify.receive())
        agent.send_signal(signal.SIGHUP)
        reloading = agent_notify.wait("RELOADING", "1", after=count, what="RELOADING=1")
        self.assertTrue(agent_notify.messages[reloading]["MONOTONIC_USEC"].isdigit())
        reloaded = agent_notify.wait("READY", "1", after=reloading + 1, what="READY=1 after the reload")
        self.assertEqual(agent_notify.messages[reloaded].get("STATUS"), f"sending to lmaster at tcp://127.0.0.1:{port}")

        # Stop: STOPPING=1 before the agent exits.
        count = len(agent_notify.receive())
        self.assertEqual(self.stop(agent), 0)
        self.assertIsNotNone(agent_notify.find("STOPPING", "1", after=count), agent_notify.messages)

    def test_lagent_reload_before_lmaster_answers(self):
        # `systemctl reload` works while lmaster is down: RELOADING=1, then READY=1, still waiting.
        port = free_port()
        notify = self.notify_socket("lagent.notify")
        config = self.write("lagent.conf", self.agent_config(port, ["VirtualMemory"], interval=0.1))
        agent = self.start("lagent", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")], notify)
        ready = notify.wait("READY", "1", what="lagent's READY=1")
        notify.wait("STATUS", after=ready + 1, what="lagent's STATUS= after READY=1")
        agent.send_signal(signal.SIGHUP)
        reloading = notify.wait("RELOADING", "1", after=ready + 1, what="RELOADING=1")
        reloaded = notify.wait("READY", "1", after=reloading + 1, what="READY=1 after the reload")
        self.assertEqual(notify.messages[reloaded].get("STATUS"),
                         f"waiting for lmaster at tcp://127.0.0.1:{port}; readings are spooled")
        self.assertEqual(self.stop(agent), 0)

    def test_without_notify_socket_nothing_changes(self):
        # `lagent run` outside systemd: no NOTIFY_SOCKET, readiness costs nothing and warns nothing.
        config = self.write("lagent.conf", self.agent_config(free_port(), ["VirtualMemory"]))
        agent = self.spawn("lagent", [LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])
        wait_for(lambda: "started as testnode" in read_text(self.path("lagent.err")), what="lagent to start")
        self.assertEqual(self.stop(agent), 0)
        self.assertNotIn("NOTIFY_SOCKET", read_text(self.path("lagent.err")))

    def test_log_lines_for_the_journal_carry_a_priority_and_no_timestamp(self):
        # journald sets JOURNAL_STREAM=<dev>:<ino> of the stream it gives as stderr.
        err_path = self.path("lmaster.err")
        notify = self.notify_socket("lmaster.notify")
        open(err_path, "w").close()
        status = os.stat(err_path)
        config = self.write("lmaster.conf", self.master_config())
        master = self.start("lmaster", [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")], notify,
                            extra_env={"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"})
        notify.wait("READY", "1", what="lmaster's READY=1")
        self.assertEqual(self.stop(master), 0)
        lines = read_text(err_path).splitlines()
        listening = [line for line in lines if "listening on" in line]
        self.assertEqual(len(listening), 1, lines)
        self.assertRegex(listening[0], r"^<6>info: lmaster \S+ listening on tcp://127\.0\.0\.1:\d+")
        self.assertTrue(all(line.startswith("<") for line in lines if line), lines)
