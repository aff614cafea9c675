#!/usr/bin/env bash
# The analyzer's figures, measured side by side in one run on one core:
#  - speed: `cumemtrace report` on a synthetic trace of EVENTS lines
#    (analyzer/tools/make_synthetic_trace.py: alloc/free pairs, stacks,
#    segments, marks) against `heaptrack_print` on the trace heaptrack records
#    of a C program making as many malloc/free calls
#    (analyzer/tools/heaptrack_workload.c). Runs alternate, medians are shown;
#    the CPU column (user+sys) is the comparison, wall time moves with
#    whatever else the machine runs. Peak RSS of both comes from the same runs;
#  - the per-event bookkeeping alone (tests/bench/analysis_bench.cpp:
#    Analysis::consume on events decoded in memory), on a smaller trace;
#  - `cumemtrace export` to the formats other tools read (folded stacks, a
#    PyTorch snapshot pickle, Perfetto) on the same synthetic trace, in the
#    same alternating runs: their events/s beside report's (issue 19 wants
#    folded and torch-snapshot at no less than half of report's), and their
#    peak RSS, which stays bounded by the live set and the stacks;
#  - peak RSS of `cumemtrace report` on a trace of RSS_EVENTS lines.
#   scripts/bench_analyzer.sh [--values FILE] [BUILD_DIR]   (scripts/bench.sh calls it)
#   BENCH_ANALYZER_EVENTS=3000000 BENCH_RSS_EVENTS=10000000 BENCH_CONSUME_EVENTS=300000
#   BENCH_RUNS=5 BENCH_CPU=0
# --values FILE: no table; writes "NAME VALUE" lines to FILE for bench.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/bench_lib.sh"
values_file=
if [[ ${1:-} == --values ]]; then
  values_file=$2
  shift 2
fi
build=${1:-${CUMEMTRACE_BENCH_BUILD_DIR:-$root/build-bench}}
events=${BENCH_ANALYZER_EVENTS:-3000000}
rss_events=${BENCH_RSS_EVENTS:-10000000}
consume_events=${BENCH_CONSUME_EVENTS:-300000}
runs=${BENCH_RUNS:-5}
cpu=${BENCH_CPU:-0}
cli=$build/bin/cumemtrace

if [[ ! -x $cli || ! -x $build/bin/analysis_bench ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"$(nproc)" --target cumemtrace analysis_bench >/dev/null
fi
for tool in heaptrack heaptrack_print taskset cc python3 /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench_analyzer: $tool is needed (scripts/setup.sh)" >&2; exit 2; }
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
synthetic() { python3 "$root/analyzer/tools/make_synthetic_trace.py" "$1" "$2"; }
synthetic "$events" "$scratch/synthetic.jsonl"
cc -O2 -o "$scratch/workload" "$root/analyzer/tools/heaptrack_workload.c"
heaptrack -o "$scratch/workload" "$scratch/workload" "$events" >/dev/null 2>&1
heaptrack_file=$(ls "$scratch"/workload.zst "$scratch"/workload.gz 2>/dev/null | head -1 || true)
[[ -n $heaptrack_file ]] || { echo "bench_analyzer: heaptrack wrote no trace" >&2; exit 2; }
# Its own count of allocation events: "+" (malloc) and "-" (free) lines.
case $heaptrack_file in
  *.zst) decompress=(zstd -dc) ;;
  *) decompress=(gzip -dc) ;;
esac
heaptrack_events=$("${decompress[@]}" "$heaptrack_file" | grep -c '^[+-] ')
trace_events=$(wc -l <"$scratch/synthetic.jsonl")
((heaptrack_events >= events * 9 / 10)) ||
  { echo "bench_analyzer: heaptrack recorded $heaptrack_events of $events calls" >&2; exit 1; }

# Prints "wall user+sys max-RSS-KiB" of one run of the command, pinned to one core.
time_once() {
  /usr/bin/time -f '%e %U %S %M' -o "$scratch/time" taskset -c "$cpu" "$@" >/dev/null 2>"$scratch/stderr" ||
    { cat "$scratch/stderr" >&2; exit 1; }
  awk '{printf "%s %.3f %s\n", $1, $2 + $3, $4}' "$scratch/time"
}
column() { cut -d' ' -f"$1" | median; }

ours=() theirs=()
export_formats=(folded torch-snapshot perfetto)
declare -A exported=()
time_once "$cli" report "$scratch/synthetic.jsonl" >/dev/null  # warm the page cache
time_once heaptrack_print "$heaptrack_file" >/dev/null
for ((i = 0; i < runs; i++)); do
  ours+=("$(time_once "$cli" report "$scratch/synthetic.jsonl")")
  theirs+=("$(time_once heaptrack_print "$heaptrack_file")")
  for format in "${export_formats[@]}"; do
    exported[$format]+="$(time_once "$cli" export "$scratch/synthetic.jsonl" --format "$format")"$'\n'
  done
done
ours_wall=$(printf '%s\n' "${ours[@]}" | column 1)
ours_cpu=$(printf '%s\n' "${ours[@]}" | column 2)
ours_rss=$(printf '%s\n' "${ours[@]}" | column 3)
theirs_wall=$(printf '%s\n' "${theirs[@]}" | column 1)
theirs_cpu=$(printf '%s\n' "${theirs[@]}" | column 2)
theirs_rss=$(printf '%s\n' "${theirs[@]}" | column 3)
rate() { calc '(s > 0) ? n / s / 1e6 : 0' n="$1" s="$2" | xargs printf '%.2f'; }
declare -A export_cpu=() export_rss=()
for format in "${export_formats[@]}"; do
  export_cpu[$format]=$(printf '%s' "${exported[$format]}" | column 2)
  export_rss[$format]=$(printf '%s' "${exported[$format]}" | column 3)
done
# How the synthetic lines were decoded (analyzer/read/line_shapes.h), untimed.
"$cli" -v report "$scratch/synthetic.jsonl" 2>"$scratch/verbose" >/dev/null
shaped=$(sed -n 's/.*: \([0-9]*\) of \([0-9]*\) lines decoded through a known line shape.*/\1 of \2/p' "$scratch/verbose")
rm -f "$scratch/synthetic.jsonl" "$scratch/workload".*

# Analysis::consume alone (Google Benchmark, CPU time): ns per event (the
# median, or the one run when BENCH_RUNS=1 gives no aggregates).
synthetic "$consume_events" "$scratch/consume.jsonl"
consume_ns=$(taskset -c "$cpu" "$build/bin/analysis_bench" "$scratch/consume.jsonl" \
    --benchmark_repetitions="$runs" --benchmark_report_aggregates_only=true --benchmark_format=csv 2>/dev/null |
  awk -F, '$1 ~ /^"BM_/ && $1 !~ /_(mean|stddev|cv)"$/ {printf "%.1f", 1e9 / $7}')
rm -f "$scratch/consume.jsonl"

# Peak RSS of `report` on a big trace (one run: it moves little between runs).
synthetic "$rss_events" "$scratch/big.jsonl"
big_events=$(wc -l <"$scratch/big.jsonl")
big_mib=$(($(stat -c %s "$scratch/big.jsonl") >> 20))
read -r _ big_cpu big_rss < <(time_once "$cli" report "$scratch/big.jsonl")
rm -f "$scratch/big.jsonl"

kib_to_mib() { calc 'k / 1024' k="$1" | xargs printf '%.1f'; }
ratio() { calc '(a / b) / (c / d)' a="$1" b="$2" c="$3" d="$4" | xargs printf '%.2f'; }
if [[ -n $values_file ]]; then
  cat >"$values_file" <<VALUES
events $trace_events
heaptrack_events $heaptrack_events
ours_meps_cpu $(rate "$trace_events" "$ours_cpu")
theirs_meps_cpu $(rate "$heaptrack_events" "$theirs_cpu")
ours_meps_wall $(rate "$trace_events" "$ours_wall")
theirs_meps_wall $(rate "$heaptrack_events" "$theirs_wall")
speedup_cpu $(ratio "$trace_events" "$ours_cpu" "$heaptrack_events" "$theirs_cpu")
ours_rss_mib $(kib_to_mib "$ours_rss")
theirs_rss_mib $(kib_to_mib "$theirs_rss")
shaped ${shaped:-unknown}
consume_ns $consume_ns
consume_events $consume_events
big_events $big_events
big_mib $big_mib
big_rss_mib $(kib_to_mib "$big_rss")
big_meps_cpu $(rate "$big_events" "$big_cpu")
VALUES
  for format in "${export_formats[@]}"; do
    key=${format//-/_}
    cat >>"$values_file" <<VALUES
export_${key}_meps_cpu $(rate "$trace_events" "${export_cpu[$format]}")
export_${key}_vs_report $(calc '(e > 0) ? r / e : 0' r="$ours_cpu" e="${export_cpu[$format]}" | xargs printf '%.2f')
export_${key}_rss_mib $(kib_to_mib "${export_rss[$format]}")
VALUES
  done
  exit 0
fi

echo
echo "analyzer: $(machine_line)"
echo "one core (taskset -c $cpu), $runs runs each, alternating, medians"
printf '| %-62s | %14s | %14s | %10s |\n' "measurement" "M events/s" "M events/s cpu" "peak RSS"
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..64})" "$(printf -- '-%.0s' {1..16})" "$(printf -- '-%.0s' {1..16})" \
  "$(printf -- '-%.0s' {1..12})"
printf '| %-62s | %14s | %14s | %6s MiB |\n' \
  "cumemtrace report, synthetic trace ($trace_events events)" \
  "$(rate "$trace_events" "$ours_wall")" "$(rate "$trace_events" "$ours_cpu")" "$(kib_to_mib "$ours_rss")"
printf '| %-62s | %14s | %14s | %6s MiB |\n' "heaptrack_print, heaptrack trace ($heaptrack_events malloc/free events)" \
  "$(rate "$heaptrack_events" "$theirs_wall")" "$(rate "$heaptrack_events" "$theirs_cpu")" "$(kib_to_mib "$theirs_rss")"
printf '| %-62s | %13sx | %13sx | %10s |\n' "cumemtrace / heaptrack_print, per event" \
  "$(ratio "$trace_events" "$ours_wall" "$heaptrack_events" "$theirs_wall")" \
  "$(ratio "$trace_events" "$ours_cpu" "$heaptrack_events" "$theirs_cpu")" ""
printf '| %-62s | %14s | %14s | %10s |\n' "Analysis::consume alone (analysis_bench), ns per event" "" "$consume_ns ns" ""
for format in "${export_formats[@]}"; do
  printf '| %-62s | %14s | %14s | %6s MiB |\n' "cumemtrace export --format $format (x report's speed)" \
    "" "$(rate "$trace_events" "${export_cpu[$format]}") ($(calc '(e > 0) ? r / e : 0' r="$ours_cpu" e="${export_cpu[$format]}" |
      xargs printf '%.2f')x)" "$(kib_to_mib "${export_rss[$format]}")"
done
printf '| %-62s | %14s | %14s | %6s MiB |\n' "cumemtrace report, synthetic trace ($big_events events, $big_mib MiB)" \
  "" "$(rate "$big_events" "$big_cpu")" "$(kib_to_mib "$big_rss")"
echo "lines decoded through a known line shape (the rest by simdjson): ${shaped:-unknown}"
echo "timed: /usr/bin/time -f '%e %U %S %M' taskset -c $cpu $cli report SYNTHETIC.jsonl"
echo "       /usr/bin/time -f '%e %U %S %M' taskset -c $cpu $cli export SYNTHETIC.jsonl --format FORMAT"
echo "       /usr/bin/time -f '%e %U %S %M' taskset -c $cpu heaptrack_print WORKLOAD.${heaptrack_file##*.}"
echo "       taskset -c $cpu $build/bin/analysis_bench SYNTHETIC-$consume_events.jsonl --benchmark_repetitions=$runs"
echo "  medians in seconds: cumemtrace report ${ours_cpu} cpu (${ours_wall} wall), heaptrack_print ${theirs_cpu} cpu (${theirs_wall} wall)"
echo "command: BENCH_ANALYZER_EVENTS=$events BENCH_RSS_EVENTS=$rss_events BENCH_CONSUME_EVENTS=$consume_events" \
  "BENCH_RUNS=$runs BENCH_CPU=$cpu scripts/bench_analyzer.sh"
