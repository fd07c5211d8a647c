"""Debian's real Prometheus (2.42) for integration tests: on 127.0.0.1 at a free port, with the
remote_write receiver on, its storage and configuration in the test's directory, stopped by PID.
Also the naming rules of common/prometheus_name.h written again in Python, as the oracle the
tests check lmaster's names against.
"""
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from fructosa_test import free_port, read_text, wait_for

PROMETHEUS = os.environ.get("PROMETHEUS", "/usr/bin/prometheus")

UNIT_SUFFIXES = {"bytes": "_bytes", "seconds": "_seconds", "celsius": "_celsius", "joules": "_joules",
                 "watts": "_watts", "volts": "_volts", "amperes": "_amperes", "percent": "_percent",
                 "MHz": "_megahertz", "rpm": "_rpm", "milliseconds": "_milliseconds",
                 "Mbit/s": "_megabits_per_second", "timestamp": "_timestamp_seconds"}


def kept(text):
    return "".join(c if (c.isascii() and c.isalnum()) or c == "_" else "_" for c in text)


def sensor_part(sensor):
    """CamelCase words and acronyms to snake_case, as prometheus_sensor_part."""
    out = ""
    for i, c in enumerate(sensor):
        if c.isascii() and c.isupper():
            after_word = i > 0 and (sensor[i - 1].islower() or sensor[i - 1].isdigit())
            ends_acronym = (i > 0 and sensor[i - 1].isupper() and i + 1 < len(sensor)
                            and sensor[i + 1].isascii() and sensor[i + 1].islower())
            if (after_word or ends_acronym) and out and not out.endswith("_"):
                out += "_"
            out += c.lower()
        else:
            out += kept(c)
    return out


def metric_name(sensor, key, unit, kind):
    name = "fructosa_" + sensor_part(sensor) + ("_" + kept(key) if key else "")
    suffix = UNIT_SUFFIXES.get(unit, "")
    if suffix and not name.endswith(suffix):
        name += suffix
    if kind == "counter" and not name.endswith("_total"):
        name += "_total"
    return name


def label_name(text):
    name = ("_" if text[:1].isdigit() else "") + kept(text)
    return "label_" + name if name.startswith("__") or name in ("host", "job_id") else name


def series_labels(host, job, key, labels):
    """The labels (without __name__) of a point: host, job_id, and the item labels of its key."""
    result = {"host": host}
    if job:
        result["job_id"] = str(job)
    items = sorted(((k.rsplit(".", 1), v) for k, v in labels.items() if "." in k[1:]),
                   key=lambda item: -len(item[0][0]))
    for (item, name), value in items:
        if key.startswith(item + ".") and value and name and label_name(name) not in result:
            result[label_name(name)] = value
    return result


class PrometheusServer:
    """prometheus on 127.0.0.1:<free port>, storage under `directory`; `scrape` adds scrape jobs
    {name: "host:port"} every 0.5 s."""

    def __init__(self, test, directory, scrape=None):
        self.test = test
        self.dir = directory
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.write_url = self.url + "/api/v1/write"
        self.process = None
        self.starts = 0
        config = "global:\n  scrape_interval: 500ms\n  evaluation_interval: 500ms\n"
        if scrape:
            config += "scrape_configs:\n"
            for job, target in scrape.items():
                config += f"  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            f.write(config)
        test.addCleanup(self.kill)

    def log(self):
        return read_text(os.path.join(self.dir, f"prometheus{self.starts}.err"))

    def start(self):
        self.starts += 1
        err = open(os.path.join(self.dir, f"prometheus{self.starts}.err"), "w")
        self.test.addCleanup(err.close)
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={os.path.join(self.dir, 'prometheus.yml')}",
             f"--storage.tsdb.path={os.path.join(self.dir, 'data')}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-remote-write-receiver",
             "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)

        def ready():
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited with {self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as reply:
                    return reply.status == 200
            except (urllib.error.URLError, ConnectionError, OSError):
                return False
        wait_for(ready, timeout=30, what="prometheus to be ready")
        return self

    def stop(self):
        """SIGTERM by PID; Prometheus flushes its head to the WAL and exits."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)

    def kill(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def api(self, path, **params):
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as reply:
            answer = json.load(reply)
        if answer.get("status") != "success":
            raise AssertionError(f"{path} {params}: {answer}")
        return answer["data"]

    def query(self, promql, **params):
        return self.api("query", query=promql, **params)

    def query_range(self, promql, start, end, step):
        return self.api("query_range", query=promql, start=start, end=end, step=step)

    def raw_samples(self, selector, window="1h"):
        """{(name, frozenset(labels without __name__)): {time_ms: value}} of every stored sample of
        the series `selector` matches (a range selector at now returns the raw samples)."""
        data = self.query(f"{selector}[{window}]")
        result = {}
        for series in data["result"]:
            labels = dict(series["metric"])
            name = labels.pop("__name__")
            points = result.setdefault((name, frozenset(labels.items())), {})
            for stamp, value in series["values"]:
                points[round(float(stamp) * 1000)] = float(value)
        return result
