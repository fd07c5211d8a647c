#!/usr/bin/python3
"""Prints HDF5 files written by lmaster's HDF5 output as JSON, for tests and for people.

Usage: /usr/bin/python3 read_hdf5.py [--swmr] [--series] PATH
  (Debian's h5py is only visible to /usr/bin/python3)

PATH is a file or the configured `path` (a symbolic link to the file being written).
--swmr     open as a SWMR reader: works while lmaster writes the file, and on a file a killed
           lmaster left open (plain readers refuse both); retries the open for up to 10 s,
           since it fails while lmaster briefly reopens the file without SWMR.
--series   read every file of PATH's series (<stem>-<UTC time>[-N].h5 next to PATH), oldest
           first, and print {"<file name>": <file>, ...}.

Output for one file, either layout (per_host: /<host>/<sensor>; per_sensor: /<sensor> with a
`host` column, split here by host):
        {"<host>": {"<sensor>": {"time": [ns, ...], "job": [...],
          "jobs": [job ids from the attribute],
          "columns": {"<key>": {"values": [float or null for NaN, ...],
                                "unit": "...", "kind": "...", "description": "..."}},
          "labels": {"<key>": ["text", ...]}}}}
Real names come from the attributes (group attributes host and sensor, dataset attribute key),
not from the escaped link names. The job index /.jobs is no table (read_job_index reads it). Every table is read as lmaster writes it: len(time) rows of
each dataset (a dataset may be a flush ahead of `time` while lmaster writes).
"""
import json
import math
import os
import re
import sys
import time

import h5py
import numpy

JOB_INDEX = ".jobs"  # the job index's link at the root (docs/hdf5.md): never a table or host


def text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def attribute(obj, name, default=""):
    return text(obj.attrs[name]) if name in obj.attrs else default


def jobs_attribute(obj):
    if "jobs" not in obj.attrs or isinstance(obj.attrs["jobs"], h5py.Empty):
        return []
    return [int(j) for j in obj.attrs["jobs"]]


def rows_of(dataset, count, swmr):
    if swmr:
        dataset.refresh()
    return dataset[:count]


def is_per_sensor_table(group):
    """A per_sensor layout table: its rows name their host in a `host` dataset."""
    return isinstance(group.get("host"), h5py.Dataset) and "time" in group


def read_table(group, swmr=False, host=None):
    """One table group; `time` first, then len(time) rows of everything else. A per_sensor
    table gives the rows of `host` only (all rows when host is None)."""
    time_dataset = group["time"]
    if swmr:
        time_dataset.refresh()
    count = time_dataset.shape[0]
    rows = range(count)
    if host is not None and is_per_sensor_table(group):
        hosts = [text(h) for h in rows_of(group["host"], count, swmr)]
        rows = [i for i, h in enumerate(hosts) if h == host]

    def pick(values):
        values = list(values)
        return [values[i] for i in rows]

    table = {"time": pick(int(t) for t in time_dataset[:count]),
             "job": pick(int(j) for j in rows_of(group["job"], count, swmr)) if "job" in group else [],
             "jobs": jobs_attribute(group),
             "columns": {}, "labels": {}}
    if is_per_sensor_table(group):
        present = set(table["job"])
        table["jobs"] = [j for j in table["jobs"] if j in present]
    for link, dataset in group.items():
        if link in ("time", "job", "host") or not isinstance(dataset, h5py.Dataset):
            continue
        key = attribute(dataset, "key", link)
        table["columns"][key] = {
            "values": pick(None if math.isnan(v) else float(v) for v in rows_of(dataset, count, swmr)),
            "unit": attribute(dataset, "unit"),
            "kind": attribute(dataset, "kind"),
            "description": attribute(dataset, "description"),
        }
    if isinstance(group.get("labels"), h5py.Group):
        for link, dataset in group["labels"].items():
            table["labels"][attribute(dataset, "key", link)] = pick(
                text(v) for v in rows_of(dataset, count, swmr))
    return table


def table_hosts(group, swmr=False):
    """The hosts with rows in a per_sensor table, in order of first appearance."""
    time_dataset = group["time"]
    if swmr:
        time_dataset.refresh()
    hosts = [text(h) for h in rows_of(group["host"], time_dataset.shape[0], swmr)]
    return list(dict.fromkeys(hosts))


def open_file(path, swmr=False, timeout=10.0):
    """h5py.File, read-only. With swmr, retries while lmaster has the file open without SWMR
    (it does so for a moment to add tables, columns and attributes)."""
    if not swmr:
        return h5py.File(path, "r")
    deadline = time.monotonic() + timeout
    while True:
        try:
            return h5py.File(path, "r", swmr=True)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


# lmaster's agent.<host>.* keys, a row per agent (lmaster/outputs/hdf5_output.cpp): the master's
# view of each agent, not the agent's own data. read_file() leaves them out of the hosts' tables
# (the oracles of what an agent sent); host_tables() and h5py read them.
AGENTS_TABLE = "lmaster_agents"


def read_open_file(f, swmr=False):
    result = {}
    for host_link, host_group in f.items():
        if not isinstance(host_group, h5py.Group) or host_link == JOB_INDEX:
            continue
        if "time" in host_group:  # a per_sensor table
            sensor = attribute(host_group, "sensor", host_link)
            if sensor == AGENTS_TABLE:
                continue
            for host in table_hosts(host_group, swmr):
                result.setdefault(host, {})[sensor] = read_table(host_group, swmr, host)
            continue
        for sensor_link, group in host_group.items():
            if not isinstance(group, h5py.Group) or "time" not in group:
                continue
            host = attribute(group, "host", attribute(host_group, "host", host_link))
            sensor = attribute(group, "sensor", sensor_link)
            if sensor == AGENTS_TABLE:
                continue
            result.setdefault(host, {})[sensor] = read_table(group, swmr)
    return result


class Column(numpy.ndarray):
    """One host's rows of a dataset, with the dataset's attributes (`attrs`)."""


class HostTable:
    """A host's rows of a per_sensor table, read like a per_host table group (h5py.Group):
    `keys()`, `table[link]` (a Column: `[:]`, `[-1]`, `.attrs`) and `attrs`."""

    def __init__(self, group, host):
        rows = numpy.nonzero(group["host"][:] == host.encode())[0]
        self.attrs = dict(group.attrs)
        self.attrs["host"] = host
        self._columns = {}
        for link, dataset in group.items():
            if isinstance(dataset, h5py.Dataset) and link != "host":
                column = numpy.asarray(dataset[:])[rows].view(Column)
                column.attrs = dict(dataset.attrs)
                self._columns[link] = column

    def keys(self):
        return self._columns.keys()

    def __contains__(self, link):
        return link in self._columns

    def __getitem__(self, link):
        return self._columns[link]


def hosts(f):
    """The hosts in an open closed file, either layout."""
    found = []
    for link, group in f.items():
        if not isinstance(group, h5py.Group) or link == JOB_INDEX:
            continue
        if is_per_sensor_table(group):
            found.extend(text(h) for h in group["host"][:])
        else:
            found.append(attribute(group, "host", link))
    return list(dict.fromkeys(found))


def host_tables(f, host):
    """{sensor link: table} of `host` in an open closed file, either layout: h5py groups
    (per_host) or HostTables (per_sensor), read alike."""
    if not any(is_per_sensor_table(g) for g in f.values() if isinstance(g, h5py.Group)):
        return f[host]
    return {link: HostTable(group, host) for link, group in f.items()
            if isinstance(group, h5py.Group) and is_per_sensor_table(group)
            and host.encode() in set(group["host"][:])}


def read_job_index(f):
    """The job index of an open file as {"complete": 0|1, "rows": [{"job", "host", "first",
    "last", "rows", "sensors": {sensor: {"first", "last", "rows", "metrics": {key: {"count",
    "max", "sum", "last", "growth"}}, "labels": {key: text}}}}]}, or None without one. Sensors
    without rows in a row are left out of it."""
    if not isinstance(f.get(JOB_INDEX), h5py.Group):
        return None
    index = f[JOB_INDEX]
    rows = [{"job": int(job), "host": text(host), "first": int(first), "last": int(last),
             "rows": int(count), "sensors": {}}
            for job, host, first, last, count in zip(index["job"][:], index["host"][:], index["first"][:],
                                                     index["last"][:], index["rows"][:])]
    for sensor_group in index.values():
        if not isinstance(sensor_group, h5py.Group):
            continue
        metrics = {attribute(g, "key", link): {name: g[name][:] for name in ("count", "max", "sum", "last", "growth")}
                   for link, g in sensor_group.get("metrics", {}).items()}
        labels = {attribute(d, "key", link): d[:] for link, d in sensor_group.get("labels", {}).items()}
        for i, row in enumerate(rows):
            if sensor_group["rows"][i] == 0:
                continue
            row["sensors"][attribute(sensor_group, "sensor")] = {
                "first": int(sensor_group["first"][i]), "last": int(sensor_group["last"][i]),
                "rows": int(sensor_group["rows"][i]),
                "metrics": {key: {name: None if math.isnan(v[i]) else float(v[i]) for name, v in stats.items()}
                            for key, stats in metrics.items()},
                "labels": {key: text(values[i]) for key, values in labels.items()}}
    return {"complete": int(index.attrs["complete"]), "rows": rows}


def read_file(path, swmr=False):
    with open_file(path, swmr) as f:
        return read_open_file(f, swmr)


def series_files(path):
    """The files of the series whose symbolic link is `path`, oldest first."""
    directory = os.path.dirname(os.path.abspath(path))
    stem, extension = os.path.splitext(os.path.basename(path))
    pattern = re.compile(re.escape(stem) + r"-(\d{8}T\d{6}Z)(?:-(\d+))?" +
                         re.escape(extension or ".h5") + "$")
    found = []
    for name in os.listdir(directory):
        match = pattern.match(name)
        full = os.path.join(directory, name)
        if match and os.path.isfile(full) and not os.path.islink(full):
            found.append(((match.group(1), int(match.group(2) or 0)), full))
    return [full for _, full in sorted(found)]


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    swmr = "--swmr" in argv
    if len(args) != 1:
        print("usage: read_hdf5.py [--swmr] [--series] PATH", file=sys.stderr)
        return 2
    try:
        if "--series" in argv:
            data = {os.path.basename(p): read_file(p, swmr) for p in series_files(args[0])}
        else:
            data = read_file(args[0], swmr)
    except OSError as error:
        print(f"read_hdf5.py: {args[0]}: {error}", file=sys.stderr)
        return 1
    json.dump(data, sys.stdout, indent=1, sort_keys=True, allow_nan=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
