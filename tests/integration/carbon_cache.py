"""A private carbon-cache (Debian's graphite-carbon) on 127.0.0.1 for integration tests, and
reading back what it stored with python3-whisper (visible to /usr/bin/python3 only).

Ports are chosen free by binding port 0 first; the same ports are kept across a restart, like a
real carbon coming back. Every process is started and stopped by its PID.
"""
import os
import signal
import socket
import subprocess

import whisper

from fructosa_test import free_port, read_text, wait_for  # free_port: also imported from here

CARBON_CACHE = "/usr/bin/carbon-cache"


class CarbonCache:
    """carbon-cache with its configuration, whisper files and log under `directory`; every metric
    stored at `retention`, unless `schemas` gives the whole storage-schemas.conf."""

    def __init__(self, test, directory, retention="1s:1h", schemas=None):
        self.test = test
        self.dir = directory
        self.storage = os.path.join(directory, "storage")
        self.whisper_dir = os.path.join(self.storage, "whisper")
        os.makedirs(self.whisper_dir, exist_ok=True)
        self.pickle_port = free_port()
        self.line_port = free_port()
        self.query_port = free_port()
        self.process = None
        self.starts = 0
        with open(os.path.join(directory, "storage-schemas.conf"), "w") as f:
            f.write(schemas if schemas is not None else f"[everything]\npattern = .*\nretentions = {retention}\n")
        self.config = os.path.join(directory, "carbon.conf")
        with open(self.config, "w") as f:
            # USER empty: no setuid. ENABLE_TAGS off: it would POST every new name to port 80.
            # No rate limits: a test creates dozens of whisper files at once, and carbon drops
            # the points of a metric whose file it may not create yet.
            f.write(f"""[cache]
STORAGE_DIR = {self.storage}/
LOCAL_DATA_DIR = {self.whisper_dir}/
CONF_DIR = {directory}/
LOG_DIR = {directory}/
PID_DIR = {directory}/
USER =
ENABLE_TAGS = False
MAX_CACHE_SIZE = inf
MAX_UPDATES_PER_SECOND = inf
MAX_CREATES_PER_MINUTE = inf
LINE_RECEIVER_INTERFACE = 127.0.0.1
LINE_RECEIVER_PORT = {self.line_port}
PICKLE_RECEIVER_INTERFACE = 127.0.0.1
PICKLE_RECEIVER_PORT = {self.pickle_port}
CACHE_QUERY_INTERFACE = 127.0.0.1
CACHE_QUERY_PORT = {self.query_port}
ENABLE_UDP_LISTENER = False
LOG_LISTENER_CONNECTIONS = True
""")

    def start(self):
        """Starts carbon-cache in the foreground and waits until both receivers accept."""
        self.starts += 1
        name = f"carbon{self.starts}"
        self.log = os.path.join(self.dir, name + ".log")
        log = open(self.log, "w")
        self.test.addCleanup(log.close)
        self.process = subprocess.Popen(
            [CARBON_CACHE, f"--config={self.config}", "--nodaemon", "--logfile=-",
             f"--pidfile={os.path.join(self.dir, 'carbon.pid')}", "start"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.test.addCleanup(self._kill)
        wait_for(lambda: self._accepting() or self._exited(), timeout=30, what="carbon-cache to listen")

    def stop(self):
        """SIGTERM by PID, then waits for the exit."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def kill(self):
        """SIGKILL by PID (a crash: what carbon had not written yet is lost), then waits."""
        self.process.kill()
        code = self.process.wait(timeout=30)
        pidfile = os.path.join(self.dir, "carbon.pid")
        if os.path.exists(pidfile):
            os.unlink(pidfile)
        return code

    def _kill(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def _exited(self):
        if self.process.poll() is not None:
            raise AssertionError(f"carbon-cache exited with {self.process.returncode}:\n{read_text(self.log)}")
        return False

    def _accepting(self):
        for port in (self.pickle_port, self.line_port):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
        return True

    def whisper_path(self, metric):
        return os.path.join(self.whisper_dir, *metric.split(".")) + ".wsp"

    def stored(self, metric, since):
        """{timestamp: value} of what whisper holds for `metric` from `since` (epoch s) on."""
        path = self.whisper_path(metric)
        if not os.path.exists(path):
            return {}
        try:
            (start, _end, step), values = whisper.fetch(path, since)
        except whisper.CorruptWhisperFile:  # being created right now
            return {}
        return {start + i * step: value for i, value in enumerate(values) if value is not None}

    def metrics(self):
        """Every metric name that has a whisper file."""
        names = []
        for root, _dirs, files in os.walk(self.whisper_dir):
            for name in files:
                if name.endswith(".wsp"):
                    relative = os.path.relpath(os.path.join(root, name[:-4]), self.whisper_dir)
                    names.append(relative.replace(os.sep, "."))
        return sorted(names)
