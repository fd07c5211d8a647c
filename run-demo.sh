#!/bin/sh
# Installs what fructosa needs (and h5dump, h5py to read what it wrote), builds it, and runs an
# lmaster and an lagent on this machine: the agent samples CPUPercent, VirtualMemory and
# CPUTimes every second; the master prints each sample and appends it to data/fructosa.h5.
# Ctrl-C stops both (agent first, so nothing it holds is lost).
set -eu
cd "$(dirname "$0")"
.ci/install-deps --demo
# The same configuration as run-tests.sh (tests included), so that either script after the
# other compiles only what it adds; the demo builds only the two programs it runs.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFRUCTOSA_BUILD_TESTS=ON >/dev/null
cmake --build build -j2 --target lagent lmaster

mkdir -p data
cat > data/lmaster.conf <<'CONF'
[lmaster]
host = 127.0.0.1
incoming data port = 7888
# spools of outputs that fall behind: data/spool/<output> (relative to this file)
data_dir = .
[stdout]
[hdf5]
# relative to this file: data/fructosa.h5
path = fructosa.h5
flush_interval = 2
CONF
cat > data/lagent.conf <<'CONF'
[lmaster]
host = 127.0.0.1
incoming data port = 7888
[lagent]
# batches lmaster has not acknowledged yet: data/lagent-spool (relative to this file)
spool_dir = lagent-spool
[sensor:CPUPercent]
time_interval = 1
[sensor:VirtualMemory]
time_interval = 1
[sensor:CPUTimes]
time_interval = 1
CONF

# Both run in their own session so that Ctrl-C reaches only this script, which then stops
# them in order by PID.
setsid build/lmaster/lmaster run -c data/lmaster.conf -p data/lmaster.pid &
master=$!
setsid build/lagent/lagent run -c data/lagent.conf -p data/lagent.pid &
agent=$!
stop() {
  trap - INT TERM EXIT
  kill -TERM "$agent" 2>/dev/null && wait "$agent" || true
  kill -TERM "$master" 2>/dev/null && wait "$master" || true
  echo "samples are in $(pwd)/data/fructosa.h5 (try: h5dump -H data/fructosa.h5)"
}
trap stop INT TERM EXIT
echo "lmaster (pid $master) and lagent (pid $agent) running; Ctrl-C stops them"
wait "$master"
