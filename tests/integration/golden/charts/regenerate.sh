#!/usr/bin/env bash
# Rewrites expected/ here from the current `cumemtrace timeline`, `export` and
# HTML report. Run it only after a deliberate change, then read the diff:
#   tests/integration/golden/charts/regenerate.sh BUILD_DIR && git diff tests/integration/golden/charts
set -euo pipefail
build=$(realpath "${1:?usage: regenerate.sh BUILD_DIR}")
cli=$build/bin/cumemtrace
here=$(cd "$(dirname "$0")" && pwd)
# The cases are those of charts_golden.cmake: "NAME|DIR|TRACE|ARGS...".
grep -o '^  "[^"]*"' "$here/charts_golden.cmake" | tr -d '" ' | while IFS='|' read -r name dir trace args; do
  IFS='|' read -r -a extra <<< "$args"
  (cd "$here/$dir" && "$cli" "${extra[0]}" "$trace" "${extra[@]:1}" -o "$here/expected/$name")
  echo "regenerated expected/$name"
done
CUMEMTRACE_UPDATE_GOLDEN=1 "$build/bin/html_integration_tests" --gtest_filter='*HtmlGolden*' >/dev/null
echo "regenerated expected/*.html.outline"
