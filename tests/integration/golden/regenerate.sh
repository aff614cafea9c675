#!/usr/bin/env bash
# Rewrites expected/ from the current `cumemtrace report`. Run it only after a
# deliberate change to the report, then read the diff before committing:
#   tests/integration/golden/regenerate.sh build/bin/cumemtrace && git diff tests/integration/golden
set -euo pipefail
cli=$(realpath "${1:?usage: regenerate.sh PATH/TO/cumemtrace}")
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/traces"
for trace in *.jsonl; do
  case_name=${trace%.jsonl}
  "$cli" report "$trace" > "$here/expected/$case_name.text"
  "$cli" report "$trace" --format json > "$here/expected/$case_name.json"
  echo "regenerated expected/$case_name.text and expected/$case_name.json"
done
