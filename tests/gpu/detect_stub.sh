#!/usr/bin/env bash
# gpu_present must not mistake the toolkit's stub driver or the simulated
# device for a GPU (ctest gpu.detect_stub_is_no_gpu):
#   detect_stub.sh GPU_PRESENT STUB_LIBCUDA_SO SIM_LIBRARY_DIR
set -uo pipefail
gpu_present=$1 stub=$2 sim=$3
dir=$(mktemp -d) && trap 'rm -rf "$dir"' EXIT
ln -s "$stub" "$dir/libcuda.so.1"
fail=0
expect() {  # expect CODE TEXT -- ENV...
  local code=$1 text=$2; shift 3
  local out rc
  out=$(env "$@" "$gpu_present" "${extra[@]}")
  rc=$?
  if [[ $rc != "$code" || $out != *"$text"* ]]; then
    echo "FAIL: $* gpu_present ${extra[*]} -> $rc '$out' (expected $code '$text')"
    fail=1
  else
    echo "ok: $* -> $rc '$out'"
  fi
}
extra=()
expect 77 "stub library" -- LD_LIBRARY_PATH="$dir"
expect 77 "only the simulated device" -- LD_LIBRARY_PATH="$sim"
extra=(--allow-sim)
expect 0 "GPU: SimCUDA Device (simulated), 1 device(s)" -- LD_LIBRARY_PATH="$sim"
exit $fail
