#!/usr/bin/env bash
# Benchmarks. Each row is measured side by side, in this run, against its
# baseline; figures are medians of several runs. Builds in Release into
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
  simcuda_runtime simcuda_driver >/dev/null

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export LD_LIBRARY_PATH=$build/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
program=$build/tests/apps/bench_malloc_free

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

bare=() traced=()
for ((i = 0; i < runs; i++)); do
  # Alternate the two so that drift in the machine's speed hits both alike.
  bare+=("$("$program" "$pairs" | cut -d' ' -f1)")
  rm -f "$scratch"/t.jsonl
  traced+=("$(CUMEMTRACE_OUTPUT="$scratch/t.jsonl" "$build/bin/cumemtrace" run -- "$program" "$pairs" \
              2>/dev/null | cut -d' ' -f1)")
done
bare_ns=$(printf '%s\n' "${bare[@]}" | median)
traced_ns=$(printf '%s\n' "${traced[@]}" | median)
events=$(wc -l <"$scratch/t.jsonl")
bytes=$(stat -c %s "$scratch/t.jsonl")

echo "cumemtrace benchmarks: $(nproc) cores, $(uname -m), $(date -u +%Y-%m-%d), $runs runs each, medians"
echo
printf '| %-64s | %12s | %12s | %12s |\n' "measurement" "baseline" "cumemtrace" "added"
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..66})" "$(printf -- '-%.0s' {1..14})" \
  "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..14})"
printf '| %-64s | %9.1f ns | %9.1f ns | %9.1f ns |\n' \
  "cudaMalloc+cudaFree pair, sim device, no latency (passthrough)" \
  "$bare_ns" "$traced_ns" "$(awk -v a="$traced_ns" -v b="$bare_ns" 'BEGIN {print a - b}')"
printf '| %-64s | %12s | %12s | %12s |\n' "trace bytes per event (plain JSON Lines)" "" \
  "$(awk -v b="$bytes" -v e="$events" 'BEGIN {printf "%.1f", b / e}')" ""
echo
echo "command: BENCH_PAIRS=$pairs BENCH_RUNS=$runs scripts/bench.sh"

# The analyzer against heaptrack_print, its own table (scripts/bench_analyzer.sh).
"$root/scripts/bench_analyzer.sh" "$build"
