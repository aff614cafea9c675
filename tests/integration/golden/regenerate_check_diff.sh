#!/usr/bin/env bash
# Rewrites expected/<case>.out for the check and diff golden tests from the
# current build, through ctest (so with the same command lines). Run it only
# after a deliberate change, then read the diff before committing:
#   tests/integration/golden/regenerate_check_diff.sh build && git diff tests/integration/golden
set -euo pipefail
build=$(realpath "${1:?usage: regenerate_check_diff.sh BUILD_DIR}")
here=$(cd "$(dirname "$0")" && pwd)
ctest --test-dir "$build" -R "^golden_(check|diff)_" >/dev/null 2>&1 || true
for actual in "$build"/tests/integration/golden_actual/{check,diff}_*.out; do
  [[ -e $actual ]] || continue
  cp "$actual" "$here/expected/$(basename "$actual")"
  echo "regenerated expected/$(basename "$actual")"
done
