#!/usr/bin/python3
"""Prints an HDF5 file written by lmaster's HDF5 output as JSON, for tests.

Usage: /usr/bin/python3 read_hdf5.py FILE   (Debian's h5py is only visible to /usr/bin/python3)

Output: {"<host>": {"<sensor>": {"time": [ns, ...], "job": [...],
          "columns": {"<key>": {"values": [float or null for NaN, ...],
                                "unit": "...", "kind": "...", "description": "..."}},
          "labels": {"<key>": ["text", ...]}}}}
Real names come from the attributes (group attributes host and sensor, dataset attribute key),
not from the escaped link names.

Until the output turns SWMR on, the file cannot be opened while lmaster holds it (HDF5 refuses:
"file is already open for write"), even with HDF5_USE_FILE_LOCKING=FALSE: stop lmaster first.
"""
import json
import math
import sys

import h5py


def text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def attribute(obj, name, default=""):
    return text(obj.attrs[name]) if name in obj.attrs else default


def read_table(group):
    table = {"time": [int(t) for t in group["time"][()]] if "time" in group else [],
             "job": [int(j) for j in group["job"][()]] if "job" in group else [],
             "columns": {}}
    for link, dataset in group.items():
        if link in ("time", "job") or not isinstance(dataset, h5py.Dataset):
            continue
        key = attribute(dataset, "key", link)
        values = [None if math.isnan(v) else float(v) for v in dataset[()]]
        table["columns"][key] = {
            "values": values,
            "unit": attribute(dataset, "unit"),
            "kind": attribute(dataset, "kind"),
            "description": attribute(dataset, "description"),
        }
    table["labels"] = {}
    if isinstance(group.get("labels"), h5py.Group):
        for link, dataset in group["labels"].items():
            table["labels"][attribute(dataset, "key", link)] = [text(v) for v in dataset[()]]
    return table


def read_file(path):
    result = {}
    with h5py.File(path, "r") as f:
        for host_link, host_group in f.items():
            if not isinstance(host_group, h5py.Group):
                continue
            for sensor_link, group in host_group.items():
                if not isinstance(group, h5py.Group):
                    continue
                host = attribute(group, "host", attribute(host_group, "host", host_link))
                sensor = attribute(group, "sensor", sensor_link)
                result.setdefault(host, {})[sensor] = read_table(group)
    return result


def main(argv):
    if len(argv) != 2:
        print("usage: read_hdf5.py FILE", file=sys.stderr)
        return 2
    try:
        data = read_file(argv[1])
    except OSError as error:
        print(f"read_hdf5.py: {argv[1]}: {error}", file=sys.stderr)
        return 1
    json.dump(data, sys.stdout, indent=1, sort_keys=True, allow_nan=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
