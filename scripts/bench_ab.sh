#!/usr/bin/env bash
# A/B of two builds of libcumemtrace.so on the hook loop of scripts/bench.sh
# (bench_malloc_free: cudaMalloc/cudaFree pairs of irregular sizes, two call
# sites, the simulated device without latency): time added per call in each
# pool mode, stacks off and on, runs interleaved (bare, A, B, ... in every
# round), medians. For a change to the hot path: build the library before
# and after it, then
#   scripts/bench_ab.sh BUILD_DIR OLD.so NEW.so
# BUILD_DIR holds the simulated device and the loop program (any build type;
# the libraries are what is compared). Knobs: BENCH_PAIRS=1000000,
# BENCH_WARMUP_PAIRS=20000, BENCH_RUNS=7.
# e.g. the library of commit X:
#   git worktree add /tmp/x X && cmake -S /tmp/x -B /tmp/x/b -G Ninja -DCMAKE_BUILD_TYPE=Release &&
#   cmake --build /tmp/x/b --target cumemtrace_preload   # -> /tmp/x/b/lib/libcumemtrace.so
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/bench_lib.sh"
if [[ $# -ne 3 ]]; then
  echo "usage: scripts/bench_ab.sh BUILD_DIR OLD_LIBCUMEMTRACE.so NEW_LIBCUMEMTRACE.so" >&2
  exit 2
fi
build=$1 old=$2 new=$3
loop=$build/tests/apps/bench_malloc_free
for f in "$loop" "$build/sim/libcudart.so.13" "$old" "$new"; do
  [[ -f $f ]] || { echo "bench_ab: $f not found" >&2; exit 2; }
done
pairs=${BENCH_PAIRS:-1000000} warm_up=${BENCH_WARMUP_PAIRS:-20000} runs=${BENCH_RUNS:-7}
export LD_LIBRARY_PATH=$build/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

ns_per_pair() { grep -E '^[0-9.]+ [0-9]+ [0-9]+$' | cut -d' ' -f1; }
# run LIBRARY MODE STACKS: ns per pair under LIBRARY; checks that its trace
# holds every allocation (a trace that could not be written would make the
# library look free).
run() {
  local trace=$scratch/t.jsonl ns allocs
  rm -f "$trace"
  ns=$(env CUMEMTRACE_POOL="$2" CUMEMTRACE_STACKS="$3" CUMEMTRACE_OUTPUT="$trace" LD_PRELOAD="$1" \
    "$loop" "$pairs" "$warm_up" 2>/dev/null | ns_per_pair)
  allocs=$(grep -c '^{"ev":"alloc"' "$trace" || true)
  ((allocs == pairs + warm_up)) ||
    { echo "bench_ab: $1 ($2, stacks $3) traced $allocs allocations, not $((pairs + warm_up))" >&2; exit 1; }
  echo "$ns"
}

variants=(passthrough/0 passthrough/32 caching/0 caching/32)
declare -A samples=()
for ((i = 0; i < runs; i++)); do
  samples[bare]+="$("$loop" "$pairs" "$warm_up" | ns_per_pair) "
  for v in "${variants[@]}"; do
    for side in old new; do
      lib=$old
      [[ $side == new ]] && lib=$new
      samples[$side/$v]+="$(run "$lib" "${v%/*}" "${v#*/}") "
    done
  done
done
med() { printf '%s\n' ${samples[$1]} | median; }
bare=$(med bare)
echo "bench_ab: $(machine_line)"
echo "$pairs pairs after $warm_up untimed, medians of $runs interleaved rounds; bare $(printf '%.0f' "$bare") ns/pair"
echo "old: $old"
echo "new: $new"
printf '| %-15s | %-14s | %-14s | %-10s |\n' "pool/stacks" "old ns/call" "new ns/call" "new - old"
printf '|-%s-|-%s-|-%s-|-%s-|\n' "---------------" "--------------" "--------------" "----------"
for v in "${variants[@]}"; do
  o=$(calc '(t - b) / 2' t="$(med "old/$v")" b="$bare")
  n=$(calc '(t - b) / 2' t="$(med "new/$v")" b="$bare")
  printf '| %-15s | %+14.0f | %+14.0f | %+10.0f |\n' "$v" "$o" "$n" "$(calc 'n - o' n="$n" o="$o")"
done
