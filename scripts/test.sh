#!/usr/bin/env bash
# Builds everything and runs the whole test suite with ctest.
#   scripts/test.sh [CTEST ARGS...]     e.g. scripts/test.sh -R sim_
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CUMEMTRACE_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
# The scripts' own CUMEMTRACE_* settings are not the preload's options: the
# tests check that the preload warns about none, so they do not get them.
env -u CUMEMTRACE_BUILD_DIR -u CUMEMTRACE_FUZZ_SECONDS -u CUMEMTRACE_FUZZ_BUILD_DIR \
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 600 "$@"
# The reader's fuzzer, time-boxed (CUMEMTRACE_FUZZ_SECONDS, default 60; 0
# skips): a crash it finds fails the run.
"$root/scripts/fuzz.sh"
