"""Live cross-check of the network sensors against psutil on this machine, and `lagent probe`
on the network fixtures.

Exact: the set of NICs, isup/duplex/speed/mtu/flags, address counts and addresses (as sets).
Bracketed by a psutil read before and one after lagent's: the I/O counters (exactly, as they
only grow) and the connection counts (widened by 2, as sockets come and go meanwhile). On the
live system lagent counts sockets over NETLINK_SOCK_DIAG while psutil reads /proc/net: the
comparison checks that both list the same sockets.
"""
import json
import os
import socket
import unittest

import psutil

from fructosa_test import FIXTURES, FructosaTestCase, LAGENT

KINDS = ("inet", "inet4", "inet6", "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6", "unix", "all")
PROTOS = {"tcp4": (socket.AF_INET, socket.SOCK_STREAM), "tcp6": (socket.AF_INET6, socket.SOCK_STREAM),
          "udp4": (socket.AF_INET, socket.SOCK_DGRAM), "udp6": (socket.AF_INET6, socket.SOCK_DGRAM)}
KIND_PROTOS = {"inet": ("tcp4", "tcp6", "udp4", "udp6"), "inet4": ("tcp4", "udp4"), "inet6": ("tcp6", "udp6"),
               "tcp": ("tcp4", "tcp6"), "tcp4": ("tcp4",), "tcp6": ("tcp6",), "udp": ("udp4", "udp6"),
               "udp4": ("udp4",), "udp6": ("udp6",), "unix": ("unix",),
               "all": ("tcp4", "tcp6", "udp4", "udp6", "unix")}
TCP_STATES = ("ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT", "CLOSE",
              "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING")
FAMILIES = {socket.AF_INET: "AF_INET", socket.AF_INET6: "AF_INET6", psutil.AF_LINK: "AF_PACKET"}


def key_component(name):
    """common/metric.h key_component(): dots and control characters become '_'."""
    return "".join("_" if c == "." or ord(c) < 0x20 or ord(c) == 0x7F else c for c in name)


class PsutilNetTest(FructosaTestCase):
    def probe(self, sensors, *options, proc=None, sys_root=None):
        args = [LAGENT, "probe", *sensors, *self.probe_without_jobs()]
        for option in options:
            args += ["-o", option]
        if proc:
            args += ["--proc-root", proc]
        if sys_root:
            args += ["--sys-root", sys_root]
        result = self.run_tool(args)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        return {line["sensor"]: (line["metrics"], line.get("labels", {})) for line in lines}

    def open_sockets(self):
        """Sockets of every kind, so that the counts compared are not all zero."""
        sockets = []
        self.addCleanup(lambda: [s.close() for s in sockets])
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            try:
                listener = socket.socket(family, socket.SOCK_STREAM)
                listener.bind((host, 0))
            except OSError:  # no IPv6 here
                continue
            listener.listen(64)
            sockets.append(listener)
            # 40 connections: 80 lines, so /proc/net/tcp* takes several reads (the sensor's
            # end-of-file rule for seq_file is exercised).
            for _ in range(40):
                sockets.append(socket.create_connection(listener.getsockname()[:2]))
                sockets.append(listener.accept()[0])
            # Closed by the client only (FIN_WAIT2 and CLOSE_WAIT), and by both (TIME_WAIT).
            for close_server in (False, True):
                client = socket.create_connection(listener.getsockname()[:2])
                server = listener.accept()[0]
                client.close()
                if close_server:
                    server.close()
                else:
                    sockets.append(server)
            # Bound, neither listening nor connected: /proc/net/tcp (psutil) does not list them,
            # and lagent's netlink dump must not either (no TCP_BOUND_INACTIVE). 4 of them, more
            # than the tolerance below.
            for _ in range(4):
                bound = socket.socket(family, socket.SOCK_STREAM)
                bound.bind((host, 0))
                sockets.append(bound)
            udp = socket.socket(family, socket.SOCK_DGRAM)
            udp.bind((host, 0))
            sockets.append(udp)
            connected = socket.socket(family, socket.SOCK_DGRAM)
            connected.connect(udp.getsockname()[:2])
            sockets.append(connected)
        sockets += socket.socketpair()
        sockets += socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)

    def test_if_stats_match_psutil_exactly(self):
        metrics, labels = self.probe(["NetIFStats"])["NetIFStats"]
        expected, expected_labels = {}, {}
        for nic, stats in psutil.net_if_stats().items():
            key = key_component(nic)
            expected.update({f"{key}.isup": int(stats.isup), f"{key}.duplex": int(stats.duplex),
                             f"{key}.speed": stats.speed, f"{key}.mtu": stats.mtu})
            expected_labels[f"{key}.flags"] = stats.flags
        self.assertEqual(metrics, expected)
        self.assertEqual(labels, expected_labels)

    def test_if_addrs_match_psutil_exactly(self):
        metrics, labels = self.probe(["NetIFAddrs"])["NetIFAddrs"]
        expected = {}
        expected_addresses = set()
        for nic, addresses in psutil.net_if_addrs().items():
            key = key_component(nic)
            for family in FAMILIES.values():
                expected[f"{key}.{family}"] = 0
            for address in addresses:
                family = FAMILIES[address.family]
                expected[f"{key}.{family}"] += 1
                expected_addresses.add((key, family, address.address, address.netmask, address.broadcast, address.ptp))
        self.assertEqual(metrics, expected)
        reported = set()
        for name, count in metrics.items():
            for i in range(count):
                base = f"{name}.{i}."
                nic, family = name.rsplit(".", 1)
                reported.add((nic, family, labels[base + "address"], labels.get(base + "netmask"),
                              labels.get(base + "broadcast"), labels.get(base + "ptp")))
        self.assertEqual(reported, expected_addresses)

    def test_io_counters_lie_between_two_psutil_reads(self):
        # Counters only grow: psutil read before lagent and psutil read after bracket lagent's
        # values exactly (no tolerance needed; traffic in between only widens the bracket).
        totals_before = psutil.net_io_counters()._asdict()
        nics_before = psutil.net_io_counters(pernic=True)
        probed = self.probe(["NetIOCounters"])["NetIOCounters"][0]
        pernic = self.probe(["NetIOCounters"], "pernic=true", "exclude=lo")["NetIOCounters"][0]
        totals_after = psutil.net_io_counters()._asdict()
        nics_after = psutil.net_io_counters(pernic=True)
        self.assertEqual({key.rsplit(".", 1)[0] for key in pernic},
                         {key_component(n) for n in nics_after if n != "lo"})
        self.assertEqual(set(probed), set(totals_after))
        for field, value in totals_after.items():
            self.assertTrue(totals_before[field] <= probed[field] <= value,
                            f"total {field}: {totals_before[field]} <= {probed[field]} <= {value}")
        for nic, counters in nics_after.items():
            if nic == "lo":
                continue
            for field, value in counters._asdict().items():
                before, got = getattr(nics_before[nic], field), pernic[f"{key_component(nic)}.{field}"]
                self.assertTrue(before <= got <= value, f"{nic} {field}: {before} <= {got} <= {value}")
        # The bracket is narrow here (little traffic), so lo being left out is visible too:
        if totals_after["packets_recv"] - totals_before["packets_recv"] < nics_before["lo"].packets_recv:
            self.assertLess(sum(v for k, v in pernic.items() if k.endswith(".packets_recv")), probed["packets_recv"])

    def expected_connections(self, kind):
        connections = psutil.net_connections(kind)
        expected = {"count": 0}
        for proto in KIND_PROTOS[kind]:
            if proto == "unix":
                # psutil counts a UNIX socket once per descriptor when it sees the owners and
                # merges look-alikes when it does not (see net_connections.cpp): the sensor
                # counts the sockets listed, as this line count does.
                with open("/proc/net/unix") as f:
                    count = sum(1 for line in f.readlines()[1:] if len(line.split()) >= 7)
            else:
                family, type_ = PROTOS[proto]
                count = sum(1 for c in connections if c.family == family and c.type == type_)
            expected[f"{proto}.count"] = count
            expected["count"] += count
        if "tcp4" in KIND_PROTOS[kind] or "tcp6" in KIND_PROTOS[kind]:
            for state in TCP_STATES:
                expected[f"tcp.{state}"] = sum(1 for c in connections if c.type == socket.SOCK_STREAM and
                                               c.family != socket.AF_UNIX and c.status == state)
        return expected

    def test_connection_counts_match_psutil(self):
        self.open_sockets()
        for kind in KINDS:
            with self.subTest(kind=kind):
                before = self.expected_connections(kind)
                metrics = self.probe(["NetConnections"], f"kind={kind}")["NetConnections"][0]
                after = self.expected_connections(kind)
                self.assertEqual(set(metrics), set(after))
                # Tolerance: other tests (lmaster/lagent on loopback ports) open and close
                # sockets meanwhile. lagent's count must lie within psutil's before/after range,
                # widened by 2 for sockets that came and went between the reads.
                for key, value in after.items():
                    low, high = min(before[key], value) - 2, max(before[key], value) + 2
                    self.assertTrue(low <= metrics[key] <= high,
                                    f"{key}: lagent {metrics[key]}, psutil {before[key]} then {value}")
                if kind in ("inet4", "tcp4"):
                    # This test's own IPv4 listener and connection are there.
                    self.assertGreaterEqual(metrics["tcp.LISTEN"], 1)
                    self.assertGreaterEqual(metrics["tcp.ESTABLISHED"], 80)

    def test_probe_on_the_fixtures(self):
        proc = os.path.join(FIXTURES, "net", "proc")
        sys_root = os.path.join(FIXTURES, "node-exporter", "sys")
        probed = self.probe(["NetIOCounters", "NetConnections", "NetIFStats"], proc=proc, sys_root=sys_root)
        # psutil 5.9.4 with PROCFS_PATH at the fixture: net_io_counters().bytes_recv and
        # len(net_connections("inet")).
        self.assertEqual(probed["NetIOCounters"][0]["bytes_recv"], 157980537285)
        self.assertEqual(probed["NetConnections"][0]["count"], 17)
        self.assertEqual(probed["NetConnections"][0]["tcp.LISTEN"], 4)
        # node_exporter's e2e-output.txt: eth0 speed 1.25e8 bytes/s, mtu 1500.
        self.assertEqual(probed["NetIFStats"][0]["eth0.speed"], 1000)
        self.assertEqual(probed["NetIFStats"][0]["eth0.mtu"], 1500)
        self.assertEqual(probed["NetIFStats"][1]["bond0.flags"], "up,broadcast,running,promisc,allmulti,multicast")


if __name__ == "__main__":
    unittest.main()
