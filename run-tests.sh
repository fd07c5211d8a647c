#!/bin/sh
# Installs what fructosa needs, builds it with its tests, and runs the whole suite (GoogleTest
# unit tests and integration tests that start real lagent/lmaster processes on loopback).
set -eu
cd "$(dirname "$0")"
.ci/install-deps --tests
# One compiler per core, as memory allows (2 GiB each: the largest files take 0.6 GiB, more
# sanitized, and linking the test program more still);
# FRUCTOSA_JOBS overrides. 2 on a 2-core machine.
jobs=${FRUCTOSA_JOBS:-$(.ci/jobs)}
# The same configuration as run-demo.sh, which has built lagent and lmaster if it ran first.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFRUCTOSA_BUILD_TESTS=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
