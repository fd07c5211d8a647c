#!/bin/sh
# Installs what fructosa needs, builds it with its tests, and runs the whole suite (GoogleTest
# unit tests and integration tests that start real lagent/lmaster processes on loopback).
set -eu
cd "$(dirname "$0")"
.ci/install-deps --tests
# The same configuration as run-demo.sh, which has built lagent and lmaster if it ran first.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFRUCTOSA_BUILD_TESTS=ON >/dev/null
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2
