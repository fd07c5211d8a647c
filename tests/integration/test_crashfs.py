"""crashfs, the power-cut filesystem of the tests (tests/tools/crashfs, docs/durability.md),
through a real mount with real system calls: what survives a cut is what was made durable the
way POSIX requires (fsync of the file for its data, fsync of its directory for its name).
"""
import errno
import itertools
import os
import unittest

import crashfs
from fructosa_test import FructosaTestCase

try:
    import h5py
    import numpy
except ImportError:  # Debian's python3-h5py (.ci/install-deps --tests)
    h5py = None


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path, data, sync=False, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def tree(root):
    """{relative path: contents, or "<dir>"} of everything under `root`."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(directory, name), root)] = "<dir>"
        for name in files:
            found[os.path.relpath(os.path.join(directory, name), root)] = read(os.path.join(directory, name))
    return found


class CrashFsTest(FructosaTestCase):

    @classmethod
    def setUpClass(cls):
        ok, reason = crashfs.available()
        if not ok:
            raise unittest.SkipTest(reason)

    def setUp(self):
        super().setUp()
        self.backing = self.path("backing")
        self.mnt = self.path("mnt")
        os.mkdir(self.mnt)
        self.fs = self.mount()
        self.runs = itertools.count()

    def mount(self, capacity=None):
        """crashfs on self.mnt, unmounted at the test's end (before its directory is removed)."""
        fs = crashfs.mount(self.backing, self.mnt, capacity=capacity)
        self.addCleanup(fs.unmount)
        return fs

    def at(self, name):
        return os.path.join(self.mnt, name)

    def cut_and_remount(self, seed=None):
        self.fs.cut(seed)
        self.assertEqual(self.fs.unmount(), 0, self.fs.log())
        self.fs = self.mount()

    def durable(self, name, data):
        """A file as a careful program leaves it: written, fsynced, its directory fsynced."""
        write(self.at(name), data, sync=True)
        fsync_path(os.path.dirname(self.at(name)))

    def test_unsynced_writes_are_gone_after_a_cut(self):
        self.durable("kept", b"synced")
        write(self.at("kept"), b"overwritten, never synced")
        write(self.at("new"), b"never synced")
        os.mkdir(self.at("newdir"))
        self.assertEqual(self.fs.stats()["dirty_files"], 2)
        self.cut_and_remount()
        self.assertEqual(tree(self.mnt), {"kept": b"synced"})

    def test_fsynced_file_and_directory_are_kept(self):
        os.mkdir(self.at("data"))
        fsync_path(self.mnt)
        self.durable("data/a", b"a" * 100000)
        self.cut_and_remount()
        self.assertEqual(tree(self.mnt), {"data": "<dir>", "data/a": b"a" * 100000})

    def test_new_file_fsynced_without_its_directory_is_gone(self):
        write(self.at("orphan"), b"data", sync=True)
        self.cut_and_remount()
        self.assertEqual(tree(self.mnt), {})

    def test_replacing_by_rename_needs_the_directory_fsync(self):
        for sync_directory, expected in ((False, b"old"), (True, b"new")):
            with self.subTest(sync_directory=sync_directory):
                self.durable("state", b"old")
                write(self.at("state.tmp"), b"new", sync=True)
                os.rename(self.at("state.tmp"), self.at("state"))
                if sync_directory:
                    fsync_path(self.mnt)
                self.assertEqual(read(self.at("state")), b"new")
                self.cut_and_remount()
                self.assertEqual(tree(self.mnt), {"state": expected})

    def test_unlink_not_made_durable_comes_back(self):
        self.durable("victim", b"still here")
        os.unlink(self.at("victim"))
        self.assertFalse(os.path.exists(self.at("victim")))
        self.cut_and_remount()
        self.assertEqual(tree(self.mnt), {"victim": b"still here"})

    def test_o_sync_writes_are_durable_when_they_return(self):
        self.durable("journal", b"")
        write(self.at("journal"), b"record 1\n", flags=os.O_WRONLY | os.O_APPEND | os.O_SYNC)
        write(self.at("journal"), b"record 2\n", flags=os.O_WRONLY | os.O_APPEND | os.O_DSYNC)
        self.cut_and_remount()
        self.assertEqual(read(self.at("journal")), b"record 1\nrecord 2\n")

    def test_clean_unmount_keeps_everything(self):
        os.makedirs(self.at("a/b"))
        write(self.at("a/b/f"), b"never synced")
        os.symlink("b/f", self.at("a/link"))
        self.assertEqual(self.fs.unmount(), 0, self.fs.log())
        self.fs = self.mount()
        self.assertEqual(tree(self.mnt), {"a": "<dir>", "a/b": "<dir>", "a/b/f": b"never synced", "a/link": b"never synced"})
        self.assertEqual(os.readlink(self.at("a/link")), "b/f")

    def test_every_call_fails_with_eio_after_a_cut(self):
        self.durable("f", b"data")
        fd = os.open(self.at("f"), os.O_RDWR)
        self.fs.cut()
        calls = {
            "write": lambda: os.write(fd, b"x"),
            "read": lambda: os.pread(fd, 4, 0),
            "fsync": lambda: os.fsync(fd),
            "stat": lambda: os.stat(self.at("f")),
            "open": lambda: os.open(self.at("g"), os.O_WRONLY | os.O_CREAT, 0o644),
            "listdir": lambda: os.listdir(self.mnt),
            "mkdir": lambda: os.mkdir(self.at("d")),
        }
        for name, call in calls.items():
            with self.subTest(call=name):
                with self.assertRaises(OSError) as raised:
                    call()
                self.assertEqual(raised.exception.errno, errno.EIO)
        try:
            os.close(fd)  # the descriptor is gone either way; close reports the dead disk
        except OSError as error:
            self.assertEqual(error.errno, errno.EIO)
        self.assertEqual(self.fs.unmount(), 0, self.fs.log())
        self.fs = self.mount()
        self.assertEqual(tree(self.mnt), {"f": b"data"})

    def test_unlinked_file_stays_usable_while_open(self):
        fd = os.open(self.at("tmp"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.unlink(self.at("tmp"))
            os.write(fd, b"abc")
            os.fchmod(fd, 0o640)
            os.ftruncate(fd, 2)
            self.assertEqual(os.fstat(fd).st_nlink, 0)
            self.assertEqual(os.pread(fd, 10, 0), b"ab")
            os.fsync(fd)
        finally:
            os.close(fd)
        self.assertEqual(os.listdir(self.mnt), [])

    def test_enospc_at_capacity(self):
        self.assertEqual(self.fs.unmount(), 0)
        self.fs = self.mount(capacity=65536)
        fd = os.open(self.at("big"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"x" * 60000)
            with self.assertRaises(OSError) as raised:
                os.write(fd, b"y" * 8192)
            self.assertEqual(raised.exception.errno, errno.ENOSPC)
            with self.assertRaises(OSError) as raised:
                os.ftruncate(fd, 70000)
            self.assertEqual(raised.exception.errno, errno.ENOSPC)
            st = os.statvfs(self.mnt)
            self.assertEqual(st.f_blocks * st.f_frsize, 65536)
            self.assertEqual(st.f_bavail * st.f_frsize, (65536 - 60000) // 4096 * 4096)
            self.fs.set_capacity(None)
            os.write(fd, b"y" * 8192)
        finally:
            os.close(fd)
        self.assertEqual(os.stat(self.at("big")).st_size, 68192)

    def test_fail_fsync_reports_eio_and_keeps_nothing(self):
        write(self.at("f"), b"data")
        self.fs.fail_fsync(True)
        for path in (self.at("f"), self.mnt):
            with self.assertRaises(OSError) as raised:
                fsync_path(path)
            self.assertEqual(raised.exception.errno, errno.EIO)
        self.fs.fail_fsync(False)
        self.cut_and_remount()
        self.assertEqual(tree(self.mnt), {})

    def seeded_outcome(self, seed):
        """The same run on a fresh backing directory, cut with `seed`: what the disk kept."""
        run = next(self.runs)
        backing = self.path(f"backing-{run}")
        mnt = self.path(f"mnt-{run}")
        os.mkdir(mnt)
        fs = crashfs.mount(backing, mnt)
        self.addCleanup(fs.unmount)
        write(os.path.join(mnt, "log"), b"o" * 32768, sync=True)
        fsync_path(mnt)
        write(os.path.join(mnt, "log"), b"n" * 40960, flags=os.O_WRONLY)
        for i in range(8):
            os.mkdir(os.path.join(mnt, f"d{i}"))
        fs.cut(seed)
        self.assertEqual(fs.unmount(), 0, fs.log())
        return tree(backing)

    def test_seeded_cut_is_repeatable(self):
        outcomes = {}
        for seed in (1, 2, 3, 4, 5, 6):
            outcome = self.seeded_outcome(seed)
            self.assertEqual(outcome, self.seeded_outcome(seed), f"seed {seed}")
            kept = sorted(name for name in outcome if name.startswith("d"))
            self.assertEqual(kept, [f"d{i}" for i in range(len(kept))], "not a prefix of the mkdirs")
            self.assertIn(len(outcome["log"]), (32768, 40960))
            outcomes[seed] = outcome
        self.assertGreater(len({repr(sorted(outcome.items())) for outcome in outcomes.values()}), 1)

    @unittest.skipIf(h5py is None, "needs Debian's h5py (python3-h5py)")
    def test_hdf5_file_closed_and_fsynced_survives(self):
        path = self.at("samples.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("values", data=numpy.arange(10000, dtype="f8"), chunks=(1000,))
            f.attrs["host"] = "node1"
        fsync_path(path)
        fsync_path(self.mnt)
        with h5py.File(self.at("unsynced.h5"), "w") as f:
            f.create_dataset("values", data=numpy.arange(10))
        self.cut_and_remount()
        with h5py.File(path, "r") as f:
            self.assertEqual(f.attrs["host"], "node1")
            self.assertTrue((f["values"][:] == numpy.arange(10000, dtype="f8")).all())
        self.assertFalse(os.path.exists(self.at("unsynced.h5")))


if __name__ == "__main__":
    unittest.main()
