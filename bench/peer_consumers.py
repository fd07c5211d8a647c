"""The peers' consumers in agent_overhead.py and os_noise.py: a Graphite sink that counts what
collectd's write_graphite sends, and a scraper that GETs node_exporter's /metrics every second as
Prometheus would. Both are threads of the benchmark script."""
import gzip
import http.client
import selectors
import socket
import threading
import time


class GraphiteSink(threading.Thread):
    """Accepts collectd's write_graphite connections on 127.0.0.1 and counts the lines."""

    def __init__(self):
        super().__init__(daemon=True)
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen()
        self.server.setblocking(False)
        self.port = self.server.getsockname()[1]
        self.lines = 0
        self.stopping = False

    def run(self):
        selector = selectors.DefaultSelector()
        selector.register(self.server, selectors.EVENT_READ)
        while not self.stopping:
            for key, _ in selector.select(timeout=0.2):
                if key.fileobj is self.server:
                    connection, _ = self.server.accept()
                    connection.setblocking(False)
                    selector.register(connection, selectors.EVENT_READ)
                    continue
                data = key.fileobj.recv(1 << 16)
                if not data:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
                self.lines += data.count(b"\n")
        for key in list(selector.get_map().values()):
            key.fileobj.close()

    def stop(self):
        self.stopping = True
        self.join(timeout=5)


class Scraper(threading.Thread):
    """GETs node_exporter's /metrics once per second (on whole seconds), as Prometheus would."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.done = []  # monotonic end time of each successful scrape
        self.series = 0
        self.errors = []
        self.stopping = threading.Event()

    def run(self):
        next_at = time.monotonic()
        while not self.stopping.is_set():
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
                response = connection.getresponse()
                body = response.read()
                connection.close()
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}")
                if response.getheader("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                self.series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
                self.done.append(time.monotonic())
            except (OSError, RuntimeError, http.client.HTTPException) as error:
                self.errors.append(str(error))
            next_at += 1.0
            self.stopping.wait(max(0.0, next_at - time.monotonic()))

    def stop(self):
        self.stopping.set()
        self.join(timeout=15)
