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
  bench_unwind simcuda_runtime simcuda_driver pool_bench pool_replay_harness >/dev/null

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

# The caching pool alone (Google Benchmark, simulated upstream without
# device work): a cached alloc+free pair on 1 and 8 threads, the miss path,
# a churning working set. Medians of BENCH_RUNS repetitions.
echo
echo "Caching pool, per alloc+free pair (medians of $runs repetitions; wall time with 8 threads is"
echo "per thread, so flat wall time from 1 to 8 threads means linear scaling):"
echo
printf '| %-58s | %12s | %12s |\n' "benchmark" "wall time" "CPU time"
printf '|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..60})" "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..14})"
"$build/bin/pool_bench" --benchmark_repetitions="$runs" --benchmark_report_aggregates_only=true \
    --benchmark_format=csv 2>/dev/null |
  awk -F, '$1 ~ /_median"$/ {gsub(/"/, "", $1); sub(/_median$/, "", $1);
           printf "| %-58s | %9.1f ns | %9.1f ns |\n", $1, $3, $4}'

# Memory: PyTorch's snapshots replayed through the pool with PyTorch's own
# policy (the baseline, which reproduces PyTorch's recorded peaks), our
# default, and expandable segments. Peaks in MiB.
snapshots=${CUMEMTRACE_TORCH_SNAPSHOTS:-$root/../shared/traces/torch}
if compgen -G "$snapshots/*.pickle" >/dev/null; then
  mkdir -p "$scratch/torch"
  for p in "$snapshots"/*.pickle; do
    "$build/bin/cumemtrace" import-torch "$p" -o "$scratch/torch/$(basename "${p%.pickle}").jsonl" >/dev/null 2>&1
  done
  echo
  echo "Caching pool, peak reserved memory replaying PyTorch snapshots from $snapshots (MiB; r/a ="
  echo "peak reserved / peak allocated, r/trace = peak reserved / PyTorch's recorded peak reserved):"
  echo
  "$build/bin/pool_replay_harness" --conf pytorch --conf "" --conf expandable_segments:true "$scratch"/torch/*.jsonl
else
  echo
  echo "(no PyTorch snapshots in $snapshots: set CUMEMTRACE_TORCH_SNAPSHOTS for the pool's memory table)"
fi

echo
echo "command: BENCH_PAIRS=$pairs BENCH_RUNS=$runs scripts/bench.sh"
