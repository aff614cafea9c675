#!/usr/bin/env bash
# Runs the bundled demo (a toy training loop with a slow leak) under
# cumemtrace and prints the report. On a machine without a GPU it runs on the
# simulated CUDA device from tests/sim; with a GPU, on the real one.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CUMEMTRACE_BUILD_DIR:-$root/build}

"$root/scripts/setup.sh"
mkdir -p "$build/demo"
log=$build/demo/build.log
echo "demo: building cumemtrace (log: $log)"
if ! "$root/scripts/build.sh" cumemtrace cumemtrace_preload demo_training_loop \
    simcuda_runtime simcuda_driver >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "demo: the build failed; the whole log is $log" >&2
  exit 1
fi

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "demo: running on the real GPU: $(nvidia-smi -L | head -1)"
else
  echo "demo: no GPU found; running on the simulated CUDA device (tests/sim)"
  export LD_LIBRARY_PATH=$build/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

trace=$build/demo/demo-trace.jsonl
rm -f "$trace"  # traces are created exclusively: never over an older one
"$build/bin/cumemtrace" run --output "$trace" -- "$build/tests/apps/demo_training_loop" 20
echo
"$build/bin/cumemtrace" report "$trace"
echo
echo "demo: 'cumemtrace report --format json $trace' gives the same as JSON"

# The same in Python, as most training loops are: a script that reaches CUDA
# through ctypes (as a framework's allocator does). Its stacks carry the
# script's own lines, merged with the native frames.
python=$(command -v python3 || true)
if [[ -z $python ]]; then
  echo "demo: no python3 on the PATH; the Python part is skipped"
  exit 0
fi
echo
echo "demo: now a Python training loop ($("$python" -c 'import sys; print(sys.version.split()[0])')," \
  "tests/apps/demo_train.py)"
py_trace=$build/demo/demo-python-trace.jsonl
rm -f "$py_trace"
"$build/bin/cumemtrace" run --output "$py_trace" -- "$python" "$root/tests/apps/demo_train.py" 20
echo
"$build/bin/cumemtrace" report "$py_trace"
