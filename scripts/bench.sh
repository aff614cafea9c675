#!/usr/bin/env bash
# Benchmarks: the time cumemtrace adds to each intercepted call (stacks off
# and on) and stack capture alone. Each row is measured side by side, in this
# run, against its baseline; figures are medians of several runs. Builds in Release into
# build-bench/ (CUMEMTRACE_BENCH_BUILD_DIR).
#   scripts/bench.sh            BENCH_PAIRS=1000000 BENCH_RUNS=5 by default;
#   BENCH_LATENCY_PAIRS=20000, BENCH_MALLOC_LATENCY_US=30, BENCH_FREE_LATENCY_US=20
#   for the whole-run comparison with realistic driver latency
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

# ns per pair of `program PAIRS`; the first argument says how: "bare" (no
# cumemtrace) or "MODE/STACKS" under `cumemtrace run` (CUMEMTRACE_POOL=MODE,
# CUMEMTRACE_STACKS=STACKS; the trace is kept as $scratch/MODE-STACKS.jsonl).
# Extra VAR=value words go to the environment. The callers interleave the
# variants so that drift in the machine's speed hits all alike.
run_once() {
  local how=$1 n=$2
  shift 2
  if [[ $how == bare ]]; then
    env "$@" "$program" "$n" | cut -d' ' -f1
  else
    local mode=${how%/*} stacks=${how#*/}
    rm -f "$scratch/$mode-$stacks.jsonl"
    env "$@" CUMEMTRACE_POOL="$mode" CUMEMTRACE_STACKS="$stacks" \
      CUMEMTRACE_OUTPUT="$scratch/$mode-$stacks.jsonl" \
      "$build/bin/cumemtrace" run -- "$program" "$n" 2>/dev/null | cut -d' ' -f1
  fi
}
variants=(passthrough/0 passthrough/32 caching/0 caching/32)
declare -A samples=()
bare=() unw=() gcc=()
for ((i = 0; i < runs; i++)); do
  bare+=("$(run_once bare "$pairs")")
  for v in "${variants[@]}"; do samples[$v]+="$(run_once "$v" "$pairs") "; done
  read -r unw_ns gcc_ns frames < <("$build/tests/apps/bench_unwind")
  unw+=("$unw_ns") gcc+=("$gcc_ns")
done
bare_ns=$(printf '%s\n' "${bare[@]}" | median)
variant_ns() { printf '%s\n' ${samples[$1]} | median; }
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
  printf '| %-64s | %9.1f ns | %9.1f ns | %9.1f ns |\n' "$1" "$2" "$3" \
    "$(awk -v a="$3" -v b="$2" 'BEGIN {print a - b}')"
}
rule() { printf -- '-%.0s' $(seq "$1"); }
printf '| %-64s | %12s | %12s | %12s |\n' "measurement (per cudaMalloc+cudaFree pair)" "baseline" "cumemtrace" "added"
printf '|%s|%s|%s|%s|\n' "$(rule 66)" "$(rule 14)" "$(rule 14)" "$(rule 14)"
row "passthrough, stacks off" "$bare_ns" "$(variant_ns passthrough/0)"
row "passthrough, stacks on (depth 32)" "$bare_ns" "$(variant_ns passthrough/32)"
row "caching pool, stacks off" "$bare_ns" "$(variant_ns caching/0)"
row "caching pool, stacks on (depth 32)" "$bare_ns" "$(variant_ns caching/32)"
printf '| %-64s | %12s | %12s | %12s |\n' "trace bytes per event, passthrough, stacks off / on" "" \
  "$(bytes_per_event "$scratch/passthrough-0.jsonl") / $(bytes_per_event "$scratch/passthrough-32.jsonl")" ""
echo
echo "Stack capture alone, $frames frames (why the preload uses libunwind):"
echo
printf '| %-64s | %12s |\n' "unwinder" "per capture"
printf '|%s|%s|\n' "$(rule 66)" "$(rule 14)"
printf '| %-64s | %9.1f ns |\n' "unw_backtrace (libunwind, opened RTLD_LOCAL)" "$unw_ns"
printf '| %-64s | %9.1f ns |\n' "_Unwind_Backtrace (libgcc)" "$gcc_ns"

# A whole run with realistic driver latency (cudaMalloc tens of µs,
# cudaFree synchronising and slow too, as on a real GPU): the program alone
# against the same program under cumemtrace, whose caching pool serves
# repeated requests without the driver. Fewer pairs: each costs ~50 µs bare.
latency=(SIMCUDA_MALLOC_LATENCY_US="${BENCH_MALLOC_LATENCY_US:-30}"
         SIMCUDA_FREE_LATENCY_US="${BENCH_FREE_LATENCY_US:-20}")
latency_pairs=${BENCH_LATENCY_PAIRS:-20000}
slow_bare=() slow_passthrough=() slow_caching=()
for ((i = 0; i < runs; i++)); do
  slow_bare+=("$(run_once bare "$latency_pairs" "${latency[@]}")")
  slow_passthrough+=("$(run_once passthrough/32 "$latency_pairs" "${latency[@]}")")
  slow_caching+=("$(run_once caching/32 "$latency_pairs" "${latency[@]}")")
done
slow_bare_ns=$(printf '%s\n' "${slow_bare[@]}" | median)
slow_passthrough_ns=$(printf '%s\n' "${slow_passthrough[@]}" | median)
slow_caching_ns=$(printf '%s\n' "${slow_caching[@]}" | median)
echo
echo "Whole run, $latency_pairs cudaMalloc+cudaFree pairs with ${latency[*]}"
echo "(per pair; baseline: the program without cumemtrace):"
echo
printf '| %-64s | %12s | %12s | %12s |\n' "measurement" "baseline" "cumemtrace" "added"
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..66})" "$(printf -- '-%.0s' {1..14})" \
  "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..14})"
row "realistic latency, passthrough (stacks on)" "$slow_bare_ns" "$slow_passthrough_ns"
row "realistic latency, caching pool (stacks on)" "$slow_bare_ns" "$slow_caching_ns"
printf '| %-64s | %12s | %12s | %12s |\n' "realistic latency, whole-run speed-up with the caching pool" "" \
  "$(awk -v a="$slow_bare_ns" -v b="$slow_caching_ns" 'BEGIN {printf "%.1fx", a / b}')" ""

# The caching pool alone (Google Benchmark, simulated upstream without
# device work): a cached alloc+free pair on 1 and 8 threads, the miss path,
# a churning working set. Medians of BENCH_RUNS repetitions.
echo
echo "Caching pool, per alloc+free pair (medians of $runs repetitions). With 8 threads Google"
echo "Benchmark divides the wall time by the pairs of all threads: the figure is the process's wall"
echo "time per pair (1/throughput), so linear scaling is 1/min(8, CPUs) of the 1-thread figure, and"
echo "a flat figure means no gain but no lock convoy either. This machine has $(nproc) CPUs:"
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
echo "command: BENCH_PAIRS=$pairs BENCH_RUNS=$runs BENCH_LATENCY_PAIRS=$latency_pairs scripts/bench.sh"

# The analyzer against heaptrack_print, its own table (scripts/bench_analyzer.sh).
"$root/scripts/bench_analyzer.sh" "$build"
