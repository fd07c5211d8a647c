"""Helpers shared by the benchmark scripts of bench/ (imported from the script's directory)."""
import socket
import time


def wait_for(condition, timeout, what):
    """condition()'s first true result, polled every 50 ms; RuntimeError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def read_text(path):
    """The file's text, or "" when it does not exist (yet)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def free_port():
    """A port the kernel has just given out on 127.0.0.1, for programs that cannot bind port 0
    and say which they got (carbon-c-relay, node_exporter, collectd's sink)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
