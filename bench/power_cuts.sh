#!/bin/sh
# Many power cuts under lmaster (tests/integration/test_power_cut.py, docs/durability.md): each
# seed runs an agent at full rate against lmaster with its journal and HDF5 files on crashfs,
# cuts the power at a random moment (odd seeds: a seeded part of the pending writes survives),
# restarts, and checks that every batch is stored exactly once. Prints a line per cut and the tally.
#   bench/power_cuts.sh [CUTS [FIRST_SEED]]     (default 100 cuts from seed 1; about 3 s each)
# Needs the build with tests (build/) and root (FUSE).
set -eu
cd "$(dirname "$0")/.."
cuts=${1:-100}
first=${2:-1}
build=$(pwd)/build
[ -x "$build/tests/crashfs" ] || { echo "build the tests first: ./run-tests.sh or cmake --build build" >&2; exit 2; }
cd tests/integration
LMASTER=$build/lmaster/lmaster LAGENT=$build/lagent/lagent CRASHFS=$build/tests/crashfs \
  COUNTING_AGENT=$build/tests/counting_agent \
  PYTHONDONTWRITEBYTECODE=1 FRUCTOSA_POWER_CUTS=$cuts FRUCTOSA_POWER_CUT_SEED=$first \
  /usr/bin/python3 -m unittest -v test_power_cut 2>&1 | grep -E '^(seed|power cuts|FAIL|ERROR|OK|Ran)|Error'
