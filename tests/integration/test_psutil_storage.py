"""Live cross-check of the storage sensors (SwapMemory, DiskPartitions, DiskUsage,
DiskIOCounters) against Debian's psutil 5.9.4 on this machine: `lagent probe` between two
psutil reads. What does not move is compared exactly; what moves must lie between the two
psutil reads (counters only grow), with the slack stated where it is used."""
import fnmatch
import json
import os
import subprocess
import unittest

import psutil

from fructosa_test import FructosaTestCase, LAGENT

MiB = 1024 * 1024
# DiskUsage used/free: other processes (builds) write to the same disks between the reads;
# besides lying between psutil's reads before and after, allow this much for ext4's
# delayed allocation and reservations settling while we read.
USAGE_SLACK = 64 * MiB
# SwapMemory used/free: swap in use can move between reads on a busy node.
SWAP_SLACK = 16 * MiB


def key_component(name):
    """common/metric.h key_component(): dots and control characters become '_'."""
    return "".join("_" if c == "." or ord(c) < 0x20 or ord(c) == 0x7F else c for c in name)


class PsutilStorageTest(FructosaTestCase):
    def probe(self, sensor, *options, expect_rc=0):
        args = [LAGENT, "probe", sensor, *self.probe_without_jobs()]
        for option in options:
            args += ["-o", option]
        result = subprocess.run(args, capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, expect_rc, result.stderr)
        if expect_rc != 0:
            return result
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        self.assertEqual(len(lines), 1, result.stdout)
        self.assertEqual(lines[0]["sensor"], sensor)
        return lines[0]

    def assertBetween(self, value, a, b, slack=0, what=""):
        low, high = min(a, b) - slack, max(a, b) + slack
        self.assertTrue(low <= value <= high, f"{what}: {value} not in [{low}, {high}]")

    def test_swap_memory(self):
        before = psutil.swap_memory()
        metrics = self.probe("SwapMemory")["metrics"]
        after = psutil.swap_memory()
        self.assertEqual(list(metrics), ["total", "used", "free", "percent", "sin", "sout"])
        self.assertEqual(metrics["total"], before.total)
        self.assertEqual(metrics["total"], after.total)
        self.assertBetween(metrics["used"], before.used, after.used, SWAP_SLACK, "used")
        self.assertBetween(metrics["free"], before.free, after.free, SWAP_SLACK, "free")
        self.assertEqual(metrics["used"] + metrics["free"], metrics["total"])
        self.assertEqual(metrics["percent"], psutil._common.usage_percent(metrics["used"], metrics["total"], 1))
        # Counters: exactly between the two reads.
        self.assertBetween(metrics["sin"], before.sin, after.sin, 0, "sin")
        self.assertBetween(metrics["sout"], before.sout, after.sout, 0, "sout")
        if before.total == 0:  # no swap here: psutil's zeros, not "unavailable"
            self.assertEqual((metrics["used"], metrics["free"], metrics["percent"]), (0, 0, 0))

    def check_partitions(self, all_):
        for attempt in range(3):  # the mount table may change under us: read it again
            before = psutil.disk_partitions(all=all_)
            line = self.probe("DiskPartitions", f"all={str(all_).lower()}")
            after = psutil.disk_partitions(all=all_)
            if before == after:
                break
        self.assertEqual(before, after, "the mount table kept changing")
        metrics, labels = line["metrics"], line.get("labels", {})
        self.assertEqual(metrics["count"], len(before))
        # The sensor describes the last entry per mount point (the visible one).
        last = {key_component(p.mountpoint): p for p in before}
        reported = {key.rsplit(".", 1)[0] for key in labels}
        self.assertEqual(reported, set(last))
        self.assertEqual({labels[f"{mp}.device"] for mp in last}, {p.device for p in last.values()})
        for mp, p in last.items():
            self.assertEqual(labels[f"{mp}.device"], p.device, mp)
            self.assertEqual(labels[f"{mp}.fstype"], p.fstype, mp)
            self.assertEqual(labels[f"{mp}.opts"], p.opts, mp)
            self.assertEqual(metrics[f"{mp}.readonly"], int("ro" in p.opts.split(",")), mp)
            self.assertEqual(metrics.get(f"{mp}.maxfile"), p.maxfile, mp)
            self.assertEqual(metrics.get(f"{mp}.maxpath"), p.maxpath, mp)
        self.assertEqual(len(metrics), 1 + sum(3 - (p.maxfile is None) - (p.maxpath is None) for p in last.values()))

    def test_disk_partitions_physical(self):
        self.check_partitions(False)

    def test_disk_partitions_all(self):
        self.check_partitions(True)

    def test_disk_usage(self):
        paths = ["/", self.dir] + [p for p in ("/dev/shm", "/proc") if os.path.isdir(p)]
        before = {p: psutil.disk_usage(p) for p in paths}
        metrics = self.probe("DiskUsage", "path=" + ",".join(paths))["metrics"]
        after = {p: psutil.disk_usage(p) for p in paths}
        self.assertEqual(len(metrics), 4 * len(paths))
        for path in paths:
            key = key_component(path)
            self.assertEqual(metrics[f"{key}.total"], before[path].total, path)
            self.assertEqual(metrics[f"{key}.total"], after[path].total, path)
            used, free = metrics[f"{key}.used"], metrics[f"{key}.free"]
            self.assertBetween(used, before[path].used, after[path].used, USAGE_SLACK, f"{path} used")
            self.assertBetween(free, before[path].free, after[path].free, USAGE_SLACK, f"{path} free")
            # psutil's formula on our own numbers, and close to psutil's own percent.
            self.assertEqual(metrics[f"{key}.percent"], psutil._common.usage_percent(used, used + free, 1))
            self.assertBetween(metrics[f"{key}.percent"], before[path].percent, after[path].percent, 0.2, f"{path} %")

    def test_disk_usage_one_path(self):
        # One path: FrUCToSA's keys, without the path component; the path as a label.
        before = psutil.disk_usage(self.dir)
        line = self.probe("DiskUsage", f"path={self.dir}")
        self.assertEqual(sorted(line["metrics"]), ["free", "percent", "total", "used"])
        self.assertEqual(line["metrics"]["total"], before.total)
        self.assertEqual(line["labels"], {"path": self.dir})

    def test_disk_usage_bad_paths(self):
        missing = os.path.join(self.dir, "no-such-dir")
        line = self.probe("DiskUsage", f"path=/,{missing}")
        self.assertIn("/.total", line["metrics"])
        self.assertFalse(any(key.startswith(key_component(missing)) for key in line["metrics"]))
        self.assertEqual(line["labels"], {f"{key_component(missing)}.error": f"statvfs({missing}): No such file or directory"})
        result = self.probe("DiskUsage", f"path={missing}", expect_rc=1)
        self.assertIn(f"DiskUsage: unavailable: statvfs({missing}): No such file or directory", result.stderr)

    def check_io(self, metrics, before, after, prefix=""):
        for field in before._fields:
            self.assertBetween(metrics[prefix + field], getattr(before, field), getattr(after, field), 0, prefix + field)

    def test_disk_io_counters_totals(self):
        psutil.disk_io_counters.cache_clear()
        before = psutil.disk_io_counters()
        metrics = self.probe("DiskIOCounters")["metrics"]
        after = psutil.disk_io_counters()
        self.assertEqual(list(metrics), list(before._fields))
        self.check_io(metrics, before, after)

    def test_disk_io_counters_perdisk(self):
        psutil.disk_io_counters.cache_clear()
        before = psutil.disk_io_counters(perdisk=True)
        metrics = self.probe("DiskIOCounters", "perdisk=true")["metrics"]
        after = psutil.disk_io_counters(perdisk=True)
        self.assertEqual(set(before), set(after), "disks came or went during the test")
        disks = {key.rsplit(".", 1)[0] for key in metrics}
        self.assertEqual(disks, {key_component(d) for d in before})
        self.assertEqual(len(metrics), 9 * len(before))
        for disk in before:
            self.check_io(metrics, before[disk], after[disk], key_component(disk) + ".")

    def test_disk_io_counters_include_exclude(self):
        names = list(psutil.disk_io_counters(perdisk=True))
        include, exclude = ["*[0-9]", "v*"], ["loop*"]
        expected = {key_component(d) for d in names
                    if any(fnmatch.fnmatchcase(d, p) for p in include) and not any(fnmatch.fnmatchcase(d, p) for p in exclude)}
        options = ["perdisk=true", "include=" + ",".join(include), "exclude=" + ",".join(exclude)]
        if not expected:
            result = self.probe("DiskIOCounters", *options, expect_rc=1)
            self.assertIn("no disk that include/exclude select", result.stderr)
            return
        metrics = self.probe("DiskIOCounters", *options)["metrics"]
        self.assertEqual({key.rsplit(".", 1)[0] for key in metrics}, expected)


if __name__ == "__main__":
    unittest.main()
