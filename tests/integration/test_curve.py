"""CURVE between lagent and lmaster (docs/security.md): `lmaster keygen`, an allow-listed agent
delivers, an agent with an unknown key and an agent without CURVE deliver nothing and are logged
with their address; a key speaks only for the hosts it covers (its name, or its `hosts =` line)."""
import os
import re
import shutil
import stat
import unittest

from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT, LMASTER


def key_of(path, name="public-key"):
    with open(path) as f:
        for line in f:
            if line.startswith(name):
                return line.split("=", 1)[1].strip()
    raise AssertionError(f"no {name} in {path}")


def samples_of(text, host):
    """lmaster's [stdout] lines are '<time> <host> <sensor> ...'."""
    return sum(1 for line in text.splitlines() if len(line.split()) >= 3 and line.split()[1] == host)


class CurveTest(FructosaTestCase):
    def keygen(self, name, *extra):
        return self.run_tool([LMASTER, "keygen", "--out", self.path("keys"), "--name", name, *extra])

    def master_conf(self, curve_keys):
        return self.write("lmaster.conf",
                          "[lmaster]\nhost = 127.0.0.1\nincoming data port = 0\n"
                          f"data_dir = {self.path('lmaster-data')}\n{curve_keys}[stdout]\n")

    def start_agent(self, name, link):
        config = self.write(f"{name}.conf",
                            f"[lmaster]\nhost = 127.0.0.1\nincoming data port = {self.port}\n{link}"
                            f"[lagent]\nhost = {name}\nspool_dir = {self.path('spool-' + name)}\n"
                            "[sensor:VirtualMemory]\ntime_interval = 0.2\n")
        return self.spawn(name, [LAGENT, "run", "-c", config, "-p", self.path(f"{name}.pid")])

    def start_curve_master(self):
        config = self.master_conf("curve = true\ncurve_secret_key_file = keys/lmaster.key\n"
                                  "curve_allowed_keys_dir = agents\n")
        master = self.spawn("lmaster", [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        self.port = wait_for(lambda: self.listening_port(self.path("lmaster.err")) or self.exited(master),
                             what="lmaster to listen")
        return master

    def test_keygen_writes_a_key_pair_with_its_modes(self):
        old_umask = os.umask(0o077)  # .pub stays world-readable whatever the umask
        try:
            result = self.keygen("node01")
        finally:
            os.umask(old_umask)
        self.assertEqual(result.returncode, 0, result.stderr)
        secret, public = self.path("keys/node01.key"), self.path("keys/node01.pub")
        self.assertIn(secret, result.stdout)
        self.assertEqual(stat.S_IMODE(os.stat(secret).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(public).st_mode), 0o644)
        self.assertEqual(key_of(secret), key_of(public))
        self.assertEqual(len(key_of(public)), 40)
        self.assertEqual(len(key_of(secret, "secret-key")), 40)
        self.assertNotIn("secret-key", read_text(public))
        # Never replaced by accident.
        again = self.keygen("node01")
        self.assertEqual(again.returncode, 1)
        self.assertIn(f"{secret} exists already", again.stderr)
        first = key_of(public)
        self.assertEqual(key_of(secret), first)
        forced = self.keygen("node01", "--force")
        self.assertEqual(forced.returncode, 0, forced.stderr)
        self.assertNotEqual(key_of(public), first)
        self.assertEqual(key_of(secret), key_of(public))
        self.assertEqual(stat.S_IMODE(os.stat(secret).st_mode), 0o600)

    def test_only_allowed_agents_deliver_and_refusals_name_the_peer(self):
        for name in ("lmaster", "nodeA", "nodeB"):
            result = self.keygen(name)
            self.assertEqual(result.returncode, 0, result.stderr)
        os.mkdir(self.path("agents"))
        shutil.copy(self.path("keys/nodeA.pub"), self.path("agents/nodeA.pub"))
        config = self.master_conf("curve = true\ncurve_secret_key_file = keys/lmaster.key\n"
                                  "curve_allowed_keys_dir = agents\n")
        master = self.spawn("lmaster", [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        self.port = wait_for(lambda: self.listening_port(self.path("lmaster.err")) or self.exited(master),
                             what="lmaster to listen")
        log = lambda: read_text(self.path("lmaster.err"))
        self.assertIn("CURVE on: lmaster public key " + key_of(self.path("keys/lmaster.pub")), log())
        self.assertIn(f"CURVE allow-list {self.path('agents')}: 1 agent key(s)", log())

        server = "curve_server_public_key_file = keys/lmaster.pub\n"
        agent_a = self.start_agent("nodeA", server + "curve_secret_key_file = keys/nodeA.key\n")
        # nodeB knows the master's key itself (curve_server_key), but its own key is not allowed.
        agent_b = self.start_agent("nodeB", f"curve_server_key = {key_of(self.path('keys/lmaster.pub'))}\n"
                                            "curve_secret_key_file = keys/nodeB.key\n")
        agent_c = self.start_agent("nodeC", "")  # no CURVE at all

        out = lambda: read_text(self.path("lmaster.out"))
        wait_for(lambda: samples_of(out(), "nodeA") >= 10 or agent_a.poll() is not None, timeout=60,
                 what="10 samples from the allowed agent")
        key_b = key_of(self.path("keys/nodeB.pub"))
        wait_for(lambda: f"CURVE: refused an agent at 127.0.0.1: its public key {key_b} is not in the allow-list "
                         f"{self.path('agents')}" in log(), what="nodeB's refusal in lmaster's log")
        # Named by its address when lmaster can still read it; a refused connection may be closed
        # before that (seen under AddressSanitizer), and the line says so. When lmaster's greeting
        # reaches nodeC before nodeC sent its mechanism, libzmq closes without sending it (seen in
        # CI's sanitized run): lmaster then sees a connection closed during the handshake.
        peer = r"(127\.0\.0\.1(:\d+)?|an address lmaster could not read \(the connection closed at once\))"
        wait_for(lambda: re.search(rf"CURVE: refused a peer at {peer}: it does not use CURVE", log())
                 or re.search(rf"CURVE: a peer at {peer} closed the connection before the handshake finished "
                              r"\([^)]*\): an lagent without curve_server_key", log()),
                 what="nodeC's refusal in lmaster's log")
        wait_for(lambda: "the handshake failed: does lmaster use CURVE" in read_text(self.path("nodeC.err")),
                 what="nodeC's own account of the refusal")
        key_a = key_of(self.path("keys/nodeA.pub"))
        self.assertIn(f"CURVE: agent at 127.0.0.1 let in (key {key_a} from nodeA.pub)", log())
        # nodeB and nodeC started with nodeA: had they been let in, their samples would be here.
        self.assertEqual(samples_of(out(), "nodeB"), 0)
        self.assertEqual(samples_of(out(), "nodeC"), 0)
        # A refused agent retrying every few seconds is logged once a minute, not at every try.
        self.assertEqual(log().count(f"its public key {key_b} is not in"), 1, log())

        for agent in (agent_a, agent_b, agent_c):
            self.assertEqual(self.stop(agent), 0)
        self.assertEqual(self.stop(master), 0, log())
        self.assertEqual(samples_of(out(), "nodeB") + samples_of(out(), "nodeC"), 0)

    def test_a_key_added_to_the_allow_list_counts_without_restarting_lmaster(self):
        for name in ("lmaster", "late"):
            self.assertEqual(self.keygen(name).returncode, 0)
        os.mkdir(self.path("agents"))
        config = self.master_conf("curve = true\ncurve_secret_key_file = keys/lmaster.key\n"
                                  "curve_allowed_keys_dir = agents\n")
        master = self.spawn("lmaster", [LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        self.port = wait_for(lambda: self.listening_port(self.path("lmaster.err")) or self.exited(master),
                             what="lmaster to listen")
        agent = self.start_agent("late", "curve_server_public_key_file = keys/lmaster.pub\n"
                                         "curve_secret_key_file = keys/late.key\n")
        log = lambda: read_text(self.path("lmaster.err"))
        wait_for(lambda: "CURVE: refused an agent at 127.0.0.1" in log(), what="the refusal")
        # The agent says why it was refused, and tries again by itself (5 s, backing off).
        wait_for(lambda: "refused this agent: its public key is not in lmaster's curve_allowed_keys_dir"
                 in read_text(self.path("late.err")), what="the agent's own log line")
        shutil.copy(self.path("keys/late.pub"), self.path("agents/late.pub"))
        out = lambda: read_text(self.path("lmaster.out"))
        wait_for(lambda: samples_of(out(), "late") >= 3 or agent.poll() is not None, timeout=60,
                 what="samples once the key is allowed")
        self.assertIn(f"CURVE allow-list {self.path('agents')}: 1 agent key(s)", log())
        self.assertIn("accepted this agent", read_text(self.path("late.err")))
        self.assertEqual(self.stop(agent), 0)
        self.assertEqual(self.stop(master), 0)

    def test_a_key_speaks_only_for_the_hosts_it_covers(self):
        for name in ("lmaster", "node01"):
            self.assertEqual(self.keygen(name).returncode, 0)
        # A key shared by a group of nodes names them in its .pub file.
        result = self.keygen("rack1", "--hosts", "node0*")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("\nhosts = node0*\n", read_text(self.path("keys/rack1.pub")))
        self.assertNotIn("hosts", read_text(self.path("keys/rack1.key")))
        os.mkdir(self.path("agents"))
        for name in ("node01", "rack1"):
            shutil.copy(self.path(f"keys/{name}.pub"), self.path(f"agents/{name}.pub"))
        master = self.start_curve_master()

        # node02 holds node01's key; node01 and node05 are who their keys say; gpu1 is not node0*.
        server = "curve_server_public_key_file = keys/lmaster.pub\n"
        agents = {name: self.start_agent(name, server + f"curve_secret_key_file = keys/{key}.key\n")
                  for name, key in (("node02", "node01"), ("node01", "node01"), ("node05", "rack1"),
                                    ("gpu1", "rack1"))}
        log = lambda: read_text(self.path("lmaster.err"))
        out = lambda: read_text(self.path("lmaster.out"))
        wait_for(lambda: (samples_of(out(), "node01") >= 10 and samples_of(out(), "node05") >= 10)
                 or any(agent.poll() is not None for agent in agents.values()), timeout=60,
                 what="10 samples from each agent its key covers")
        wait_for(lambda: "refused a hello from 127.0.0.1 as host node02: its CURVE key node01 speaks for host node01 "
                         "only" in log() and "as host gpu1: its CURVE key rack1 speaks for hosts = node0* only" in log(),
                 what="the refusals in lmaster's log")
        # The refused agents are told why (and keep their readings for later).
        for name, why in (("node02", "its CURVE key node01 speaks for host node01 only"),
                          ("gpu1", "its CURVE key rack1 speaks for hosts = node0* only")):
            wait_for(lambda: f"lmaster refuses this agent as host {name}: {why}" in read_text(self.path(f"{name}.err")),
                     what=f"{name}'s own log line")
        # They started with the others: had lmaster taken their batches, their samples would be here.
        self.assertEqual(samples_of(out(), "node02"), 0)
        self.assertEqual(samples_of(out(), "gpu1"), 0)
        # Nor did they take node01's place: no second connection line for node01, and lmaster's own
        # sensor knows the accepted agents only.
        self.assertEqual(log().count("agent node01 (session"), 1, log())
        self.assertNotIn("agent node02 (session", log())
        self.assertNotIn("agent gpu1 (session", log())
        # A refused agent retrying is logged once a minute, not at every try.
        self.assertEqual(log().count("as host node02:"), 1, log())

        for agent in agents.values():
            self.assertEqual(self.stop(agent), 0)
        self.assertEqual(self.stop(master), 0, log())
        self.assertEqual(samples_of(out(), "node02") + samples_of(out(), "gpu1"), 0)
        self.assertNotIn(".node02.", out())

    def test_unusable_keys_are_configuration_errors_naming_file_and_key(self):
        self.assertEqual(self.keygen("lmaster").returncode, 0)
        os.mkdir(self.path("agents"))
        # A .pub where the key pair is needed.
        config = self.master_conf("curve = true\ncurve_secret_key_file = keys/lmaster.pub\n"
                                  "curve_allowed_keys_dir = agents\n")
        result = self.run_tool([LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        self.assertEqual(result.returncode, 78, result.stderr)
        self.assertIn(f"{config}:6: [lmaster] curve_secret_key_file: {self.path('keys/lmaster.pub')}: holds no "
                      "secret-key", result.stderr)
        config = self.master_conf("curve = true\ncurve_secret_key_file = keys/lmaster.key\n"
                                  "curve_allowed_keys_dir = no-such-dir\n")
        result = self.run_tool([LMASTER, "run", "-c", config, "-p", self.path("lmaster.pid")])
        self.assertEqual(result.returncode, 78, result.stderr)
        self.assertIn(f"[lmaster] curve_allowed_keys_dir: {self.path('no-such-dir')} is not a directory",
                      result.stderr)
        # The agent: a malformed key file, named with its line.
        self.write("bad.key", "public-key = too short\n")
        config = self.write("agent.conf", "[lmaster]\ncurve_server_public_key_file = bad.key\n"
                                          "curve_secret_key_file = bad.key\n")
        result = self.run_tool([LAGENT, "run", "-c", config, "-p", self.path("lagent.pid")])
        self.assertEqual(result.returncode, 78, result.stderr)
        self.assertIn(f"{config}:2: [lmaster] curve_server_public_key_file: {self.path('bad.key')}:1: public-key "
                      "is not a CURVE key", result.stderr)


if __name__ == "__main__":
    unittest.main()
