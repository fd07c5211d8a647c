"""Helpers shared by the benchmark scripts of bench/ (imported from the script's directory)."""
import signal
import socket
import subprocess
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


def stop_processes(processes, timeout=30):
    """SIGTERM to each process still running (by its PID, newest first), then wait; SIGKILL to
    one that does not stop within `timeout` s."""
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
