#!/usr/bin/env bash
# Rewrites expected/ from the current `cumemtrace report`, for every case in
# cases.txt. Run it only after a deliberate change to the report, then read
# the diff before committing:
#   tests/integration/golden/regenerate.sh build/bin/cumemtrace && git diff tests/integration/golden
# (make_traces.py rewrites the generated traces; run it first if you changed it.)
set -euo pipefail
cli=$(realpath "${1:?usage: regenerate.sh PATH/TO/cumemtrace}")
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/traces"
grep -E '^[A-Za-z0-9_]+:' "$here/cases.txt" | while IFS=: read -r case_name traces; do
  read -r -a trace_list <<<"$traces"
  "$cli" report "${trace_list[@]}" > "$here/expected/$case_name.text"
  "$cli" report "${trace_list[@]}" --format json > "$here/expected/$case_name.json"
  echo "regenerated expected/$case_name.text and expected/$case_name.json"
done
