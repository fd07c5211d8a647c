"""A carbon pickle receiver for tests: accepts connections on 127.0.0.1 (ephemeral port),
reads 4-byte big-endian length-prefixed pickle frames of [(path, (timestamp, value)), ...]
and records every point. Runs in a thread of the test process."""
import pickle
import socket
import struct
import threading


class PickleSink:
    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        self.points = []  # (path, timestamp, value) in arrival order
        self.frames = 0
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    @staticmethod
    def _read(connection, size):
        data = b""
        while len(data) < size:
            chunk = connection.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def _serve(self, connection):
        with connection:
            while True:
                header = self._read(connection, 4)
                if header is None:
                    return
                frame = self._read(connection, struct.unpack(">I", header)[0])
                if frame is None:
                    return
                batch = pickle.loads(frame)
                with self.lock:
                    self.frames += 1
                    self.points.extend((path, ts, value) for path, (ts, value) in batch)

    def snapshot(self):
        with self.lock:
            return list(self.points)

    def close(self):
        self.server.close()
