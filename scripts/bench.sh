#!/usr/bin/env bash
# Benchmarks (issue 6): one table, every row measured in this run side by
# side with its baseline (runs interleaved, medians), each with the command
# that reproduces it. Builds in Release into build-bench/
# (CUMEMTRACE_BENCH_BUILD_DIR).
#   scripts/bench.sh
# Knobs (defaults): BENCH_PAIRS=1000000 (the hook loop, timed after
#   BENCH_WARMUP_PAIRS=20000 untimed), BENCH_RUNS=5,
#   BENCH_LATENCY_PAIRS=20000, BENCH_MALLOC_LATENCY_US=30, BENCH_FREE_LATENCY_US=20
#   (the whole-run rows), BENCH_LIVE=1000000 (live allocations for the RSS
#   row), BENCH_ANALYZER_EVENTS=3000000, BENCH_RSS_EVENTS=10000000 (the
#   analyzer's rows, scripts/bench_analyzer.sh), BENCH_DEEP_PAIRS=1000,
#   BENCH_DEEP_COLD_KIB=4096 (stack capture in a big process).
# Quick: BENCH_PAIRS=100000 BENCH_RUNS=3 BENCH_LATENCY_PAIRS=2000 BENCH_LIVE=200000
#   BENCH_ANALYZER_EVENTS=300000 BENCH_RSS_EVENTS=1000000 scripts/bench.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/bench_lib.sh"
build=${CUMEMTRACE_BENCH_BUILD_DIR:-$root/build-bench}
pairs=${BENCH_PAIRS:-1000000}
export BENCH_WARMUP_PAIRS=${BENCH_WARMUP_PAIRS:-20000}
warm_up=$BENCH_WARMUP_PAIRS
runs=${BENCH_RUNS:-5}
latency_pairs=${BENCH_LATENCY_PAIRS:-20000}
malloc_latency_us=${BENCH_MALLOC_LATENCY_US:-30}
free_latency_us=${BENCH_FREE_LATENCY_US:-20}
live=${BENCH_LIVE:-1000000}
deep_pairs=${BENCH_DEEP_PAIRS:-1000}
deep_cold=${BENCH_DEEP_COLD_KIB:-4096}
export BENCH_RUNS=$runs BENCH_ANALYZER_EVENTS=${BENCH_ANALYZER_EVENTS:-3000000} \
  BENCH_RSS_EVENTS=${BENCH_RSS_EVENTS:-10000000}

"$root/scripts/setup.sh" >&2
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target cumemtrace cumemtrace_preload bench_malloc_free \
  bench_host_malloc bench_live_rss bench_unwind simcuda_runtime simcuda_driver pool_bench \
  pool_replay_harness analysis_bench bench_deep_stack seeds_transformer varlen_workloads >/dev/null

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export LD_LIBRARY_PATH=$build/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
apps=$build/tests/apps
cli=$build/bin/cumemtrace
# How the footnotes spell these (run from the repository root).
B=${build#"$root"/}
note_env="export LD_LIBRARY_PATH=$B/sim;"

# traced MODE STACKS OUT [VAR=value...] PROGRAM ARGS...: the program under
# `cumemtrace run` with pool MODE and STACKS frames, its trace written to OUT.
traced() {
  local mode=$1 stacks=$2 out=$3 vars=()
  shift 3
  while [[ $1 == *=* ]]; do vars+=("$1") && shift; done
  rm -f "$out"
  env "${vars[@]}" CUMEMTRACE_POOL="$mode" CUMEMTRACE_STACKS="$stacks" CUMEMTRACE_OUTPUT="$out" \
    "$cli" run -- "$@" 2>/dev/null
}
# The "<ns per timed pair> <pairs> <untimed pairs>" line of the loop programs
# (heaptrack adds its own lines).
ns_per_pair() { grep -E '^[0-9.]+ [0-9]+ [0-9]+$' | cut -d' ' -f1; }
# within A B GOAL: whether both figures meet the goal (at most GOAL).
within() { awk -v a="$1" -v b="$2" -v g="$3" 'BEGIN {print (a <= g && b <= g) ? "<= " g ": met" : "<= " g ": NOT met"}'; }

# One run of the loop, HOW: bare | MODE/STACKS (cumemtrace) | host (the
# malloc twin) | heaptrack | heaptrack-raw, timing N pairs after $warm_up.
# Extra VAR=value words go to the environment. Prints ns per pair.
run_loop() {
  local how=$1 n=$2
  shift 2
  case $how in
    bare) env "$@" "$apps/bench_malloc_free" "$n" "$warm_up" ;;
    host) "$apps/bench_host_malloc" "$n" "$warm_up" ;;
    heaptrack) heaptrack -o "$scratch/heaptrack" "$apps/bench_host_malloc" "$n" "$warm_up" 2>&1 ;;
    heaptrack-raw) heaptrack --raw -o "$scratch/heaptrack-raw" "$apps/bench_host_malloc" "$n" "$warm_up" 2>&1 ;;
    *+heap) how=${how%+heap}  # logs on the heap, no pending file (CUMEMTRACE_KILL_SAFE=0): the baseline of the kill-safe logs
       traced "${how%/*}" "${how#*/}" "$scratch/${how%/*}-${how#*/}-heap.jsonl" CUMEMTRACE_KILL_SAFE=0 "$@" \
         "$apps/bench_malloc_free" "$n" "$warm_up" ;;
    *+free) how=${how%+free}  # free lines with stacks of their own (CUMEMTRACE_FREE_STACKS=1)
       traced "${how%/*}" "${how#*/}" "$scratch/${how%/*}-${how#*/}-free.jsonl" CUMEMTRACE_FREE_STACKS=1 "$@" \
         "$apps/bench_malloc_free" "$n" "$warm_up" ;;
    *) traced "${how%/*}" "${how#*/}" "$scratch/${how%/*}-${how#*/}.jsonl" "$@" \
         "$apps/bench_malloc_free" "$n" "$warm_up" ;;
  esac | ns_per_pair || { echo "bench: the $how run of $n pairs failed" >&2; exit 1; }
}

# 1. Time added per intercepted call, and heaptrack's on the host twin.
variants=(passthrough/0 passthrough/32 caching/0 caching/32 passthrough/32+free caching/32+free passthrough/32+heap
  caching/32+heap bare host heaptrack heaptrack-raw)
declare -A samples=()
unw=() gcc=() walked=() remembered=()
for ((i = 0; i < runs; i++)); do
  for v in "${variants[@]}"; do samples[$v]+="$(run_loop "$v" "$pairs") "; done
  read -r unw_ns gcc_ns frames walked_ns remembered_ns < <("$apps/bench_unwind")
  unw+=("$unw_ns") gcc+=("$gcc_ns") walked+=("$walked_ns") remembered+=("$remembered_ns")
done
med() { printf '%s\n' ${samples[$1]} | median; }
unw_ns=$(printf '%s\n' "${unw[@]}" | median)
gcc_ns=$(printf '%s\n' "${gcc[@]}" | median)
walked_ns=$(printf '%s\n' "${walked[@]}" | median)
remembered_ns=$(printf '%s\n' "${remembered[@]}" | median)
# Every call was recorded: our traces and heaptrack's files hold them all.
for v in passthrough/0 passthrough/32 caching/0 caching/32 passthrough/32+free caching/32+free; do
  name=${v%+free} suffix=
  [[ $v == *+free ]] && suffix=-free
  trace=$scratch/${name%/*}-${name#*/}$suffix.jsonl
  allocs=$(grep -c '^{"ev":"alloc"' "$trace" || true)
  frees=$(grep -c '^{"ev":"free"' "$trace" || true)
  ((allocs == pairs + warm_up && frees == allocs)) ||
    { echo "bench: the $v trace holds $allocs allocs and $frees frees, not $pairs + $warm_up" >&2; exit 1; }
done
for f in "$scratch"/heaptrack.zst "$scratch"/heaptrack-raw.raw.zst; do
  calls=$(zstd -dc "$f" | grep -c '^[+-] ' || true)
  ((calls >= 2 * (pairs + warm_up))) ||
    { echo "bench: heaptrack recorded $calls calls in $f, not 2 x ($pairs + $warm_up)" >&2; exit 1; }
done
heaptrack_calls=$(zstd -dc "$scratch/heaptrack.zst" | grep -c '^[+-] ')
# Trace bytes per event (per line) of these runs, plain; zstd in part 5.
bytes_per_line() {  # FILE [DECOMPRESSOR...]
  local file=$1 lines
  shift
  lines=$( (($#)) && "$@" "$file" | wc -l || wc -l <"$file")
  calc 'b / l' b="$(stat -c %s "$file")" l="$lines" | xargs printf '%.1f'
}
plain=("$(bytes_per_line "$scratch/passthrough-32.jsonl")" "$(bytes_per_line "$scratch/caching-32.jsonl")")
added() { calc '(t - b) / 2' t="$(med "$1")" b="$(med "$2")" | xargs printf '%+.0f'; }
pair_ns() { printf '%.0f ns/pair' "$(med "$1")"; }
loop_cmd() {  # MODE STACKS [PAIRS [OUTPUT [VAR=value...]]]: the footnote of a loop row
  local n="${3:-$pairs} $warm_up" out=${4:-/tmp/t-%p.jsonl} vars=("${@:5}")
  echo "$note_env ${vars[*]}${vars[*]:+ }$B/tests/apps/bench_malloc_free $n  vs  ${vars[*]}${vars[*]:+ }CUMEMTRACE_POOL=$1" \
    "CUMEMTRACE_STACKS=$2 CUMEMTRACE_OUTPUT=$out $B/bin/cumemtrace run -- $B/tests/apps/bench_malloc_free $n"
}
for v in passthrough/0 passthrough/32 caching/0 caching/32; do
  stacks=${v#*/}
  table_row "time added per call, ${v%/*}, stacks $( ((stacks)) && echo "on (depth $stacks; frees without)" || echo off)" \
    "bare $(pair_ns bare)" "$(pair_ns "$v")" "$(added "$v" bare) ns/call" "" "$(loop_cmd "${v%/*}" "$stacks")"
done
for v in passthrough/32+free caching/32+free; do
  table_row "same, ${v%/*}, stacks on and free stacks too (CUMEMTRACE_FREE_STACKS=1: two captures per pair)" \
    "bare $(pair_ns bare)" "$(pair_ns "$v")" "$(added "$v" bare) ns/call" "" \
    "$(loop_cmd "${v%/*}" 32 "$pairs" /tmp/t-%p.jsonl CUMEMTRACE_FREE_STACKS=1)"
done
for v in passthrough/32+heap caching/32+heap; do
  table_row "same, ${v%/*}, stacks on, logs on the heap (CUMEMTRACE_KILL_SAFE=0: a SIGKILL loses the unwritten events)" \
    "kill-safe $(pair_ns "${v%+heap}")" "heap $(pair_ns "$v")" "$(added "${v%+heap}" "$v") ns/call kill-safe" "" \
    "$(loop_cmd "${v%/*}" 32 "$pairs" /tmp/t-%p.jsonl CUMEMTRACE_KILL_SAFE=0)"
done
heaptrack_cmd="$B/tests/apps/bench_host_malloc $pairs $warm_up  vs  heaptrack -o /tmp/h $B/tests/apps/bench_host_malloc $pairs $warm_up"
table_row "heaptrack: time added per malloc/free, host twin of the loop" "bare $(pair_ns host)" \
  "heaptrack $(pair_ns heaptrack)" "$(added heaptrack host) ns/call" "" "$heaptrack_cmd"
table_row "same, heaptrack --raw (records only, interprets nothing)" "bare $(pair_ns host)" \
  "heaptrack $(pair_ns heaptrack-raw)" "$(added heaptrack-raw host) ns/call" "" "${heaptrack_cmd/-o/--raw -o}"
ratio_to() {  # HEAPTRACK-VARIANT: "ours with stacks / heaptrack, passthrough / caching<TAB>goal"
  local p c
  p=$(calc '(a - b) / (h - hb)' a="$(med passthrough/32)" b="$(med bare)" h="$(med "$1")" hb="$(med host)")
  c=$(calc '(a - b) / (h - hb)' a="$(med caching/32)" b="$(med bare)" h="$(med "$1")" hb="$(med host)")
  printf '%.2f / %.2f\t%s\n' "$p" "$c" "$(within "$p" "$c" 0.3)"
}
IFS=$'\t' read -r result goal < <(ratio_to heaptrack)
table_row "ours with stacks / heaptrack, added per call: passthrough / caching" "" "" "$result" "$goal" \
  "from the rows 'passthrough, stacks on', 'caching, stacks on' and 'heaptrack' above"
IFS=$'\t' read -r result goal < <(ratio_to heaptrack-raw)
table_row "same against heaptrack --raw" "" "" "$result" "$goal" \
  "from the rows 'passthrough, stacks on', 'caching, stacks on' and 'heaptrack --raw' above"
table_row "stack capture alone, $frames frames: libgcc, libunwind" \
  "_Unwind_Backtrace $(printf '%.0f' "$gcc_ns") ns" "unw_backtrace $(printf '%.0f' "$unw_ns") ns" "" "" \
  "$B/tests/apps/bench_unwind"
table_row "same, the preload's CFI walker: walking / answered from its memo" \
  "unw_backtrace $(printf '%.0f' "$unw_ns") ns" \
  "$(printf '%.0f / %.0f' "$walked_ns" "$remembered_ns") ns" "" "" "$B/tests/apps/bench_unwind"

# 1a. Python: pairs through ctypes from a loop 20 Python frames deep
# (tests/apps/bench_python_pairs.py), passthrough: stacks off, native
# frames only (CUMEMTRACE_PYTHON=off), native + Python frames. The Python
# frames' cost is the difference of the last two; the native part's, of the
# first two.
python_bin=$(command -v python3 || true)
# The interpreter itself, not a launcher script (pyenv's shims are bash):
# callgrind below measures the process it starts.
[[ -n $python_bin ]] && python_bin=$("$python_bin" -c 'import sys; print(sys.executable)')
if [[ -n $python_bin ]]; then
  py_pairs=$((pairs / 5))
  py_run() {  # HOW: bare | off | native | python
    local out=$scratch/py.jsonl
    case $1 in
      bare) "$python_bin" "$root/tests/apps/bench_python_pairs.py" "$py_pairs" "$warm_up" 20 ;;
      off) traced passthrough 0 "$out" "$python_bin" "$root/tests/apps/bench_python_pairs.py" "$py_pairs" "$warm_up" 20 ;;
      native) traced passthrough 32 "$out" CUMEMTRACE_PYTHON=off \
        "$python_bin" "$root/tests/apps/bench_python_pairs.py" "$py_pairs" "$warm_up" 20 ;;
      python) traced passthrough 32 "$out" "$python_bin" "$root/tests/apps/bench_python_pairs.py" "$py_pairs" "$warm_up" 20 ;;
    esac | ns_per_pair || { echo "bench: the Python $1 run failed" >&2; exit 1; }
  }
  samples=()
  for ((i = 0; i < runs; i++)); do
    for v in bare off native python; do samples[py-$v]+="$(py_run "$v") "; done
  done
  grep -q '"py":true' "$scratch/py.jsonl" || { echo "bench: the Python run's trace has no Python frame" >&2; exit 1; }
  py_cmd() { echo "$note_env $1CUMEMTRACE_POOL=passthrough CUMEMTRACE_STACKS=$2 CUMEMTRACE_OUTPUT=/tmp/t-%p.jsonl $B/bin/cumemtrace run -- python3 tests/apps/bench_python_pairs.py $py_pairs $warm_up 20"; }
  table_row "Python loop 20 frames deep through ctypes ($("$python_bin" -c 'import sys; print(sys.version.split()[0])')), passthrough: stacks off / native only / native + Python" \
    "bare $(pair_ns py-bare)" "$(printf '%.0f / %.0f / %.0f ns/pair' "$(med py-off)" "$(med py-native)" "$(med py-python)")" \
    "$(added py-off py-bare) / $(added py-native py-bare) / $(added py-python py-bare) ns/call" "" \
    "$(py_cmd "" 0)  vs  $(py_cmd "CUMEMTRACE_PYTHON=off " 32)  vs  $(py_cmd "" 32)"
  py_native=$(calc 'n - o' n="$(med py-native)" o="$(med py-off)")
  py_python=$(calc 'p - n' p="$(med py-python)" n="$(med py-native)")
  # A Python loop's time moves by more than the native part's cost between
  # runs here: a difference that is not positive is noise, not a ratio.
  if awk -v n="$py_native" 'BEGIN {exit !(n > 0)}'; then
    py_ratio=$(calc 'p / n' p="$py_python" n="$py_native" | xargs printf '%.2fx')
  else
    py_ratio="n/a (native part within noise)"
  fi
  table_row "same: the Python frames' cost per capture / the native part's (one capture per pair)" "" \
    "$(printf '%.0f / %.0f ns' "$py_python" "$py_native")" "$py_ratio" "" "from the row above"
  # The same three in instructions (callgrind: the whole process, 2,000
  # against 12,000 timed pairs, the difference per pair), which this
  # machine's noise does not move.
  if command -v valgrind >/dev/null; then
    py_instructions() {  # VAR=value...: instructions per pair
      local n counts=()
      for n in 2000 12000; do
        rm -f "$scratch/py-instr.jsonl"
        counts+=("$(env "$@" CUMEMTRACE_POOL=passthrough CUMEMTRACE_OUTPUT="$scratch/py-instr.jsonl" \
          LD_PRELOAD="$build/lib/libcumemtrace.so" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
          "$python_bin" "$root/tests/apps/bench_python_pairs.py" "$n" 100 20 2>&1 |
          sed -n 's/.*Collected : \([0-9]*\).*/\1/p')")
      done
      calc '(b - a) / 10000' a="${counts[0]}" b="${counts[1]}"
    }
    i_off=$(py_instructions CUMEMTRACE_STACKS=0)
    i_native=$(py_instructions CUMEMTRACE_STACKS=32 CUMEMTRACE_PYTHON=off)
    i_python=$(py_instructions CUMEMTRACE_STACKS=32)
    i_ratio=$(calc '(p - n) / (n - o)' p="$i_python" n="$i_native" o="$i_off")
    table_row "same in instructions per pair (callgrind): stacks off / native only / native + Python" "" \
      "$(printf '%.0f / %.0f / %.0f' "$i_off" "$i_native" "$i_python")" \
      "Python frames $(calc 'p - n' p="$i_python" n="$i_native" | xargs printf '%.0f'), native part $(calc 'n - o' n="$i_native" o="$i_off" | xargs printf '%.0f'): $(printf '%.2fx' "$i_ratio")" \
      "$(within "$i_ratio" 0 1)" \
      "$note_env CUMEMTRACE_POOL=passthrough CUMEMTRACE_STACKS=32 [CUMEMTRACE_PYTHON=off] CUMEMTRACE_OUTPUT=/tmp/t.jsonl LD_PRELOAD=$B/lib/libcumemtrace.so valgrind --tool=callgrind $python_bin tests/apps/bench_python_pairs.py 12000 100 20 (and 2000)"
  else
    echo "bench: no valgrind: no instruction row for the Python loop" >&2
  fi
else
  echo "bench: no python3 on the PATH: no Python rows" >&2
fi

# 1b. Stack capture in a big process: pairs made 61 frames deep through
# distinct functions, with deep_cold KiB written between pairs (untimed), as a
# training step's work cools the caches between two tensor allocations
# (tests/apps/bench_deep_stack.cpp). Stacks on against off, same pool.
samples=()
for ((i = 0; i < runs; i++)); do
  for v in passthrough/0 passthrough/32; do
    samples[$v]+="$(traced "${v%/*}" "${v#*/}" "$scratch/deep.jsonl" "$apps/bench_deep_stack" "$deep_pairs" "$deep_cold" |
      ns_per_pair) " || { echo "bench: the $v run of bench_deep_stack failed" >&2; exit 1; }
  done
done
deep_cmd() { echo "CUMEMTRACE_POOL=passthrough CUMEMTRACE_STACKS=$1 CUMEMTRACE_OUTPUT=/tmp/t-%p.jsonl $B/bin/cumemtrace run -- $B/tests/apps/bench_deep_stack $deep_pairs $deep_cold"; }
table_row "stack capture in a big process: 61-frame stack, $deep_cold KiB written between pairs, depth 32, passthrough" \
  "stacks off $(pair_ns passthrough/0)" "stacks on $(pair_ns passthrough/32)" \
  "$(added passthrough/32 passthrough/0) ns/call" "" "$note_env $(deep_cmd 0)  vs  $(deep_cmd 32)"

# 2. The whole run with realistic driver latency (cudaMalloc tens of µs,
# cudaFree synchronising and slow too, as on a real GPU): all pairs timed.
warm_up=0
latency=(SIMCUDA_MALLOC_LATENCY_US="$malloc_latency_us" SIMCUDA_FREE_LATENCY_US="$free_latency_us")
samples=()
for ((i = 0; i < runs; i++)); do
  for v in bare passthrough/32 caching/32; do samples[$v]+="$(run_loop "$v" "$latency_pairs" "${latency[@]}") "; done
done
for v in passthrough/32 caching/32; do
  table_row "whole run, sim cudaMalloc ${malloc_latency_us} us / cudaFree ${free_latency_us} us, ${v%/*}, stacks on" \
    "bare $(pair_ns bare)" "$(pair_ns "$v")" \
    "$(calc 'b / t' b="$(med bare)" t="$(med "$v")" | xargs printf '%.2fx the speed')" "" \
    "$(loop_cmd "${v%/*}" 32 "$latency_pairs" /tmp/t-%p.jsonl "${latency[@]}")"
done

# 3. The caching pool alone (Google Benchmark, simulated upstream). With 8
# threads the figure is the process's wall time per pair (1/throughput).
# Medians (with BENCH_RUNS=1, the one run: Google Benchmark then prints no aggregates).
declare -A pool=()
while IFS=, read -r name wall cpu; do pool[$name]=$(printf '%.0f' "$wall"); done < <(
  "$build/bin/pool_bench" --benchmark_repetitions="$runs" --benchmark_report_aggregates_only=true \
      --benchmark_format=csv 2>/dev/null |
    awk -F, '$1 ~ /^"BM_/ && $1 !~ /_(mean|stddev|cv)"$/ {gsub(/"|_median|\/real_time/, "", $1); print $1 "," $3 "," $4}')
pool_cmd="$B/bin/pool_bench --benchmark_repetitions=$runs"
table_row "pool: cached alloc+free pair, 1 thread, stream-ordered / device-wide" "" \
  "${pool[BM_HitPairStreamOrdered/threads:1]} / ${pool[BM_HitPairDeviceWide/threads:1]} ns" "" "" "$pool_cmd"
table_row "same, 8 threads on $(nproc) CPUs, wall time per pair of the process" "" \
  "${pool[BM_HitPairStreamOrdered/threads:8]} / ${pool[BM_HitPairDeviceWide/threads:8]} ns" \
  "$(calc 'a / b' a="${pool[BM_HitPairStreamOrdered/threads:1]}" b="${pool[BM_HitPairStreamOrdered/threads:8]}" |
     xargs printf '%.2fx 1-thread throughput')" "" "$pool_cmd"
table_row "pool: miss path (a new segment) / working-set churn, per pair" "" \
  "${pool[BM_MissPath]} / ${pool[BM_WorkingSetChurn]} ns" "" "" "$pool_cmd"

# 4. The analyzer (scripts/bench_analyzer.sh: speed against heaptrack_print,
# Analysis::consume alone, peak RSS).
declare -A an=()
"$root/scripts/bench_analyzer.sh" --values "$scratch/analyzer" "$build"
read_values an "$scratch/analyzer"
analyzer_cmd="BENCH_ANALYZER_EVENTS=$BENCH_ANALYZER_EVENTS BENCH_RSS_EVENTS=$BENCH_RSS_EVENTS BENCH_RUNS=$runs scripts/bench_analyzer.sh"
table_row "analyzer: Analysis::consume alone, per event (CPU)" "" "${an[consume_ns]} ns" "" "" \
  "$B/bin/analysis_bench SYNTHETIC-${an[consume_events]}.jsonl (made by analyzer/tools/make_synthetic_trace.py)"
table_row "analyzer: events/s, one core, CPU time (${an[events]}-event traces)" \
  "heaptrack_print ${an[theirs_meps_cpu]} M/s" "report ${an[ours_meps_cpu]} M/s" "${an[speedup_cpu]}x per event" "" \
  "$analyzer_cmd"
table_row "analyzer: peak RSS on those traces" "heaptrack_print ${an[theirs_rss_mib]} MiB" \
  "report ${an[ours_rss_mib]} MiB" "" "" "$analyzer_cmd"
table_row "analyzer: peak RSS, report on a ${an[big_events]}-event trace (${an[big_mib]} MiB)" "" \
  "${an[big_rss_mib]} MiB" "${an[big_meps_cpu]} M events/s" "" "$analyzer_cmd"
for format in folded torch_snapshot perfetto; do
  goal=""
  [[ $format != perfetto ]] && goal=">= 0.5x report"
  table_row "analyzer: export --format ${format//_/-}, events/s, CPU time (same traces)" \
    "report ${an[ours_meps_cpu]} M/s" "${an[export_${format}_meps_cpu]} M/s, ${an[export_${format}_rss_mib]} MiB" \
    "${an[export_${format}_vs_report]}x report's speed" "$goal" "$analyzer_cmd"
done

# 5. Trace bytes per event (per line): the loop's traces with stacks, plain
# (from the timed runs, part 1) and zstd (one more run each, untimed).
warm_up=$BENCH_WARMUP_PAIRS
for mode in passthrough caching; do
  traced "$mode" 32 "$scratch/$mode.jsonl.zst" "$apps/bench_malloc_free" "$pairs" "$warm_up" >/dev/null
done
zst=("$(bytes_per_line "$scratch/passthrough.jsonl.zst" zstd -dc)" "$(bytes_per_line "$scratch/caching.jsonl.zst" zstd -dc)")
table_row "trace bytes per event, plain JSON Lines, loop with stacks: passthrough / caching" "" \
  "${plain[0]} / ${plain[1]} B" "" "$(within "${plain[@]}" 100)" "$(loop_cmd passthrough 32) (and caching); stat -c %s, wc -l"
table_row "same, zstd (CUMEMTRACE_OUTPUT=...jsonl.zst)" "" "${zst[0]} / ${zst[1]} B" "" "$(within "${zst[@]}" 12)" \
  "$(loop_cmd passthrough 32 "$pairs" /tmp/t-%p.jsonl.zst) (and caching); zstd -dc | wc -l"

# 6. The preload's resident memory per live allocation: growth of VmRSS while
# LIVE allocations are live, under cumemtrace minus bare. The sim's own
# bookkeeping per device allocation (the bare growth) is subtracted for as
# many device allocations as the traced run made: LIVE in passthrough, only
# the pool's segments (segment_alloc lines) with the caching pool.
samples=()
for ((i = 0; i < runs; i++)); do
  for v in bare passthrough/32 caching/32; do
    if [[ $v == bare ]]; then
      out=$("$apps/bench_live_rss" "$live")
    else
      out=$(traced "${v%/*}" 32 "$scratch/rss-${v%/*}.jsonl" "$apps/bench_live_rss" "$live")
    fi
    samples[$v]+="$(awk '{print $2 - $1}' <<<"$out") "
  done
done
rss_per_million() {  # MODE
  local trace=$scratch/rss-$1.jsonl segments
  (($(grep -c '^{"ev":"alloc"' "$trace") == live)) || { echo "bench: $trace lacks allocations" >&2; exit 1; }
  segments=$(grep -c '^{"ev":"segment_alloc"' "$trace" || true)
  calc '(t - b * s / n) / 1024 / (n / 1e6)' t="$(med "$1/32")" b="$(med bare)" s="$segments" n="$live" | xargs printf '%.1f'
}
table_row "preload's resident memory per million live allocations: passthrough / caching (stacks on)" \
  "sim alone $(calc 'b / 1024 / (n / 1e6)' b="$(med bare)" n="$live" | xargs printf '%.1f') MiB" \
  "$(rss_per_million passthrough) / $(rss_per_million caching) MiB" "" "" \
  "$note_env $B/tests/apps/bench_live_rss $live  vs  CUMEMTRACE_POOL=MODE CUMEMTRACE_STACKS=32 CUMEMTRACE_OUTPUT=/tmp/t-%p.jsonl $B/bin/cumemtrace run -- $B/tests/apps/bench_live_rss $live"

# 7. The pool's peak reserved memory on PyTorch's snapshots, replayed with
# PyTorch's policy (the baseline), the old default (ordinary segments:
# expandable_segments:false) and this build's default.
snapshots=${CUMEMTRACE_TORCH_SNAPSHOTS:-$root/../shared/traces/torch}
old_default=expandable_segments:false
if compgen -G "$snapshots/*.pickle" >/dev/null; then
  mkdir -p "$scratch/torch"
  for p in "$snapshots"/*.pickle; do
    "$cli" import-torch "$p" -o "$scratch/torch/$(basename "${p%.pickle}").jsonl" >/dev/null 2>&1
  done
  read -r theirs old ours worst count < <("$build/bin/pool_replay_harness" --conf pytorch --conf "$old_default" \
      --conf "" "$scratch"/torch/*.jsonl |
    awk -v old="$old_default" 'NR > 1 && $2 == "pytorch" {t[$1] = $5} NR > 1 && $2 == old {d[$1] = $5}
         NR > 1 && $2 == "(default)" {o[$1] = $5}
         END {for (k in t) {st += t[k]; sd += d[k]; so += o[k]; r = o[k] / t[k]; if (r > w) w = r; n++}
              printf "%.0f %.0f %.0f %.3f %d\n", st, sd, so, w, n}')
  table_row "pool: peak reserved, $count PyTorch snapshots replayed (sum): old default ($old_default) / default" \
    "PyTorch's policy $theirs MiB" "$old / $ours MiB" \
    "$(printf '%.3fx / %.3fx, worst one (default) %sx' "$(calc 'd / t' d="$old" t="$theirs")" \
      "$(calc 'o / t' o="$ours" t="$theirs")" "$worst")" "" \
    "$B/bin/cumemtrace import-torch SNAPSHOT.pickle -o T.jsonl; $B/bin/pool_replay_harness --conf pytorch --conf $old_default --conf '' T.jsonl..."
  # 7b. `advise` on the largest snapshot (issue 17: seconds, not minutes):
  # every candidate setting, each replayed ~15 times, on all cores.
  largest_pickle=$(ls -S "$snapshots"/*.pickle | head -1)
  largest=$scratch/torch/$(basename "${largest_pickle%.pickle}").jsonl
  advise_start=$(date +%s.%N)
  "$cli" advise "$largest" >/dev/null 2>"$scratch/advise.err"
  advise_s=$(calc 'e - s' e="$(date +%s.%N)" s="$advise_start")
  table_row "advise: the largest snapshot ($(basename "$largest" .jsonl)), every setting replayed, $(nproc) cores" \
    "" "$(printf '%.2f s' "$advise_s") ($(sed -n 's/^cumemtrace: //p' "$scratch/advise.err"))" "" "seconds, not minutes" \
    "$B/bin/cumemtrace advise T.jsonl"
else
  echo "bench: no PyTorch snapshots in $snapshots (set CUMEMTRACE_TORCH_SNAPSHOTS): no replay row" >&2
fi

# 7a. Peak reserved / peak live (issue 18: at most 1.05 with no settings) on
# the seeds' workload and the variable-length workloads, each replayed from
# its passthrough trace and run under the preload's pool on the simulated
# device: PyTorch's policy, the old default, this build's default.
mkdir -p "$scratch/workloads"
prog_of() {  # WORKLOAD: its command line, into the array prog
  if [[ $1 == seeds_transformer ]]; then prog=("$apps/seeds_transformer"); else prog=("$apps/varlen_workloads" --shape "$1"); fi
}
# under_pool CONF OUT WORKLOAD [VAR=value...]: the program under the preload's
# pool with CONF (pytorch: PyTorch's policy; "": no setting); prints its
# output line.
under_pool() {
  local conf=$1 out=$2 w=$3 vars=()
  shift 3
  case $conf in
    pytorch) vars=("CUMEMTRACE_POOL_CONF=segment_policy:pytorch,expandable_segments:false") ;;
    "") ;;
    *) vars=(CUMEMTRACE_POOL_CONF="$conf") ;;
  esac
  rm -f "$out"
  prog_of "$w"
  env -u CUMEMTRACE_POOL -u CUMEMTRACE_POOL_CONF "${vars[@]}" "$@" CUMEMTRACE_STACKS=0 \
    "$cli" run --output "$out" -- "${prog[@]}" 2>/dev/null
}
reserved_over_live() { jq -r '.peak_reserved / .peak_allocated' | xargs printf '%.3f'; }
mapfile -t workloads < <("$apps/varlen_workloads" --list)
workloads=(seeds_transformer "${workloads[@]}")
for w in "${workloads[@]}"; do
  trace=$scratch/workloads/$w.jsonl
  rm -f "$trace"
  prog_of "$w"
  CUMEMTRACE_POOL=passthrough CUMEMTRACE_STACKS=0 "$cli" run --output "$trace" -- "${prog[@]}" >/dev/null 2>&1 ||
    { echo "bench: $w failed under cumemtrace (passthrough)" >&2; exit 1; }
  replayed=() preloaded=()
  for conf in pytorch "$old_default" ""; do
    replayed+=("$("$cli" replay "$trace" --pool-conf "$conf" --format json | reserved_over_live)")
    under_pool "$conf" "$scratch/workloads/$w-pool.jsonl" "$w" | grep -q ' failed_mallocs=0 ' ||
      { echo "bench: $w failed allocations under the pool ($conf)" >&2; exit 1; }
    preloaded+=("$("$cli" report "$scratch/workloads/$w-pool.jsonl" --format json | reserved_over_live)")
  done
  table_row "pool: peak reserved / peak live, $w, old default / default (replayed; under the preload)" \
    "PyTorch's policy ${replayed[0]}; ${preloaded[0]}" \
    "${replayed[1]} / ${replayed[2]}; ${preloaded[1]} / ${preloaded[2]}" "" \
    "$(within "${replayed[2]}" "${preloaded[2]}" 1.05)" \
    "$note_env CUMEMTRACE_POOL=passthrough $B/bin/cumemtrace run --output T.jsonl -- PROG; $B/bin/cumemtrace replay T.jsonl --pool-conf {pytorch|$old_default|''} --format json  vs  CUMEMTRACE_POOL_CONF={segment_policy:pytorch,expandable_segments:false|$old_default|unset} $B/bin/cumemtrace run --output P.jsonl -- PROG; $B/bin/cumemtrace report P.jsonl --format json (PROG: $B/tests/apps/seeds_transformer, or $B/tests/apps/varlen_workloads --shape NAME)"
done
# The seeds' workload on a device of which its peak of live bytes is 97%
# (issue 18: no failed request with no settings).
seeds_live=$("$apps/seeds_transformer" | sed -n 's/.*peak_live_bytes=\([0-9]*\).*/\1/p')
capacity=$(((seeds_live * 100 + 96) / 97))  # bytes, rounded up
failed=()
for conf in pytorch "$old_default" ""; do
  failed+=("$(under_pool "$conf" "$scratch/workloads/seeds-97.jsonl" seeds_transformer SIMCUDA_DEVICE_MEMORY="$capacity" |
    sed -n 's/.*failed_mallocs=\([0-9]*\).*/\1/p')")
done
table_row "pool: seeds_transformer on a device 97% full at its peak ($capacity B): failed requests, old default / default" \
  "PyTorch's policy ${failed[0]}" "${failed[1]} / ${failed[2]}" "" \
  "$( ((failed[2] == 0)) && echo "0 with the default: met" || echo "0 with the default: NOT met")" \
  "$note_env SIMCUDA_DEVICE_MEMORY=$capacity CUMEMTRACE_POOL_CONF={segment_policy:pytorch,expandable_segments:false|$old_default|unset} $B/bin/cumemtrace run -- $B/tests/apps/seeds_transformer"

# 7b. Step time on a busy device (issue 30, scripts/bench_steps.sh): each
# workload as a training loop whose host runs ahead of the simulated device,
# under the default pool and PyTorch's policy, with the h100 cost table.
declare -A st=()
"$root/scripts/bench_steps.sh" --values "$scratch/steps" "$build"
read_values st "$scratch/steps"
steps_cmd="BENCH_STEP_RUNS=${BENCH_STEP_RUNS:-3} BENCH_HOST_US=${BENCH_HOST_US:-150} BENCH_DEVICE_US=${BENCH_DEVICE_US:-20} BENCH_COSTS=${BENCH_COSTS:-h100} scripts/bench_steps.sh"
for w in "${workloads[@]}"; do
  [[ -n ${st[steps.$w.ratio]:-} ]] || continue
  table_row "step time on a busy device, $w: median / p90 ms; per steady step pool waits / cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease; reserved / live" \
    "PyTorch's policy ${st[steps.$w.pytorch]}" "${st[steps.$w.default]}" "${st[steps.$w.ratio]}" \
    "<= 1.03 / 1.10: ${st[steps.$w.goal]}" "$steps_cmd"
done

echo
echo "cumemtrace benchmarks: $(machine_line)"
echo "Release build ($B), medians of $runs interleaved runs. Hook loop: $pairs cudaMalloc/cudaFree pairs of irregular"
echo "sizes (512 B .. 100 KB) from two call sites on the simulated device without latency, timed after $BENCH_WARMUP_PAIRS"
echo "untimed ones (one-time costs of the tools); a pair is two intercepted calls, so time added per call ="
echo "(ns per pair traced - ns per pair bare) / 2. heaptrack (Debian's): the same loop"
echo "over host malloc/free (tests/apps/bench_host_malloc.cpp), its $heaptrack_calls recorded calls checked in its file."
echo "Trace bytes per event: bytes / lines, every line an event (alloc, free, segment_*, stack, pool, ...)."
echo
print_table
echo
echo "command: ${CUMEMTRACE_TORCH_SNAPSHOTS:+CUMEMTRACE_TORCH_SNAPSHOTS=$CUMEMTRACE_TORCH_SNAPSHOTS }BENCH_PAIRS=$pairs BENCH_WARMUP_PAIRS=$BENCH_WARMUP_PAIRS BENCH_RUNS=$runs BENCH_LATENCY_PAIRS=$latency_pairs BENCH_MALLOC_LATENCY_US=$malloc_latency_us" \
  "BENCH_FREE_LATENCY_US=$free_latency_us BENCH_LIVE=$live BENCH_ANALYZER_EVENTS=$BENCH_ANALYZER_EVENTS" \
  "BENCH_RSS_EVENTS=$BENCH_RSS_EVENTS BENCH_DEEP_PAIRS=$deep_pairs BENCH_DEEP_COLD_KIB=$deep_cold scripts/bench.sh"
