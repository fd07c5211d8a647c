"""A carbon pickle receiver for tests: accepts connections on 127.0.0.1 (an ephemeral port, or
the one given: a sink started again on the same port is carbon coming back), reads 4-byte
big-endian length-prefixed pickle frames of [(path, (timestamp, value)), ...] and records every
point. Runs in threads of the test process."""
import pickle
import socket
import struct
import threading
import time


class PickleSink:
    def __init__(self, port=0):
        self.server = socket.socket()
        # A restarted sink binds the port its predecessor's closed connections still hold.
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", port))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        self.points = []  # (path, timestamp, value) in arrival order
        self.arrivals = []  # time.monotonic() of each point's arrival
        self.frames = 0
        self.accepted = 0  # connections
        self.lock = threading.Lock()
        self.connections = set()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                if self.closed:
                    connection.close()
                    return
                self.accepted += 1
                self.connections.add(connection)
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    @staticmethod
    def _read(connection, size):
        data = b""
        while len(data) < size:
            try:
                chunk = connection.recv(size - len(data))
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def _serve(self, connection):
        with connection:
            while True:
                header = self._read(connection, 4)
                if header is None:
                    break
                frame = self._read(connection, struct.unpack(">I", header)[0])
                if frame is None:
                    break
                batch = pickle.loads(frame)
                with self.lock:
                    if self.closed:
                        break
                    self.frames += 1
                    self.points.extend((path, ts, value) for path, (ts, value) in batch)
                    self.arrivals.extend([time.monotonic()] * len(batch))
        with self.lock:
            self.connections.discard(connection)

    def snapshot(self):
        with self.lock:
            return list(self.points)

    def close(self):
        self.server.close()

    def stop(self, lose_last_seconds=0.0):
        """Carbon going away: no more connections, the open ones closed. lose_last_seconds > 0
        is a crash: the points that arrived in those last seconds are forgotten, as a
        carbon-cache loses what it had received but not yet written to whisper."""
        with self.lock:
            self.closed = True
            connections = list(self.connections)
            if lose_last_seconds > 0:
                since = time.monotonic() - lose_last_seconds
                kept = [i for i, at in enumerate(self.arrivals) if at < since]
                self.points = [self.points[i] for i in kept]
                self.arrivals = [self.arrivals[i] for i in kept]
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread: close() alone does not
        except OSError:
            pass
        self.server.close()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
