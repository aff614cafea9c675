#!/usr/bin/env bash
# Benchmarks: the time cumemtrace adds to each intercepted call (stacks off
# and on) and stack capture alone. Each row is measured side by side, in this
# run, against its baseline; figures are medians of several runs. Builds in Release into
# build-bench/ (CUMEMTRACE_BENCH_BUILD_DIR).
#   scripts/bench.sh            BENCH_PAIRS=1000000 BENCH_RUNS=5 by default
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CUMEMTRACE_BENCH_BUILD_DIR:-$root/build-bench}
pairs=${BENCH_PAIRS:-1000000}
runs=${BENCH_RUNS:-5}

"$root/scripts/setup.sh" >&2
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target cumemtrace cumemtrace_preload bench_malloc_free \
  bench_unwind simcuda_runtime simcuda_driver >/dev/null

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export LD_LIBRARY_PATH=$build/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
program=$build/tests/apps/bench_malloc_free

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# One traced run: ns per pair. $1 = CUMEMTRACE_STACKS; the trace is kept as $scratch/stacks-$1.jsonl.
traced_run() {
  rm -f "$scratch/stacks-$1.jsonl"
  CUMEMTRACE_STACKS=$1 CUMEMTRACE_OUTPUT="$scratch/stacks-$1.jsonl" \
    "$build/bin/cumemtrace" run -- "$program" "$pairs" 2>/dev/null | cut -d' ' -f1
}

bare=() stacks_off=() stacks_on=() unw=() gcc=()
for ((i = 0; i < runs; i++)); do
  # Interleave the variants so that drift in the machine's speed hits all alike.
  bare+=("$("$program" "$pairs" | cut -d' ' -f1)")
  stacks_off+=("$(traced_run 0)")
  stacks_on+=("$(traced_run 32)")
  read -r unw_ns gcc_ns frames < <("$build/tests/apps/bench_unwind")
  unw+=("$unw_ns") gcc+=("$gcc_ns")
done
bare_ns=$(printf '%s\n' "${bare[@]}" | median)
off_ns=$(printf '%s\n' "${stacks_off[@]}" | median)
on_ns=$(printf '%s\n' "${stacks_on[@]}" | median)
unw_ns=$(printf '%s\n' "${unw[@]}" | median)
gcc_ns=$(printf '%s\n' "${gcc[@]}" | median)
bytes_per_event() {
  awk -v b="$(stat -c %s "$1")" -v e="$(wc -l <"$1")" 'BEGIN {printf "%.1f", b / e}'
}

echo "cumemtrace benchmarks: $(nproc) cores, $(uname -m), $(date -u +%Y-%m-%d), $runs runs each, medians"
echo "loop: $pairs cudaMalloc/cudaFree pairs of irregular sizes (512 B .. 100 KB) from two call sites,"
echo "simulated device without latency; 'per call' is half the added time of a pair"
echo
row() {  # measurement, baseline ns, traced ns
  printf '| %-60s | %9.1f ns | %9.1f ns | %9.1f ns | %9.1f ns |\n' "$1" "$2" "$3" \
    "$(awk -v a="$3" -v b="$2" 'BEGIN {print a - b}')" "$(awk -v a="$3" -v b="$2" 'BEGIN {print (a - b) / 2}')"
}
rule() { printf -- '-%.0s' $(seq "$1"); }
printf '| %-60s | %12s | %12s | %12s | %12s |\n' "measurement" "baseline" "cumemtrace" "added" "per call"
printf '|%s|%s|%s|%s|%s|\n' "$(rule 62)" "$(rule 14)" "$(rule 14)" "$(rule 14)" "$(rule 14)"
row "cudaMalloc+cudaFree pair, passthrough, stacks off" "$bare_ns" "$off_ns"
row "cudaMalloc+cudaFree pair, passthrough, stacks on (depth 32)" "$bare_ns" "$on_ns"
printf '| %-60s | %12s | %12s | %12s | %12s |\n' "trace bytes per event, stacks off / on" "" \
  "$(bytes_per_event "$scratch/stacks-0.jsonl") / $(bytes_per_event "$scratch/stacks-32.jsonl")" "" ""
echo
echo "Stack capture alone, $frames frames (why the preload uses libunwind):"
echo
printf '| %-60s | %12s |\n' "unwinder" "per capture"
printf '|%s|%s|\n' "$(rule 62)" "$(rule 14)"
printf '| %-60s | %9.1f ns |\n' "unw_backtrace (libunwind, opened RTLD_LOCAL)" "$unw_ns"
printf '| %-60s | %9.1f ns |\n' "_Unwind_Backtrace (libgcc)" "$gcc_ns"
echo
echo "command: BENCH_PAIRS=$pairs BENCH_RUNS=$runs scripts/bench.sh"
