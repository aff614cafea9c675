#!/usr/bin/env bash
# The analyzer's speed beside heaptrack_print's, measured side by side in one
# run on one core: `cumemtrace report` on a synthetic trace of EVENTS lines
# (analyzer/tools/make_synthetic_trace.py: alloc/free pairs, stacks,
# segments, marks) against `heaptrack_print` on the trace heaptrack records
# of a C program making as many malloc/free calls
# (analyzer/tools/heaptrack_workload.c). Runs alternate, medians are shown;
# the CPU column (user+sys) is the comparison, wall time moves with whatever
# else the machine runs.
#   scripts/bench_analyzer.sh [BUILD_DIR]    (scripts/bench.sh calls it)
#   BENCH_ANALYZER_EVENTS=3000000 BENCH_RUNS=5 BENCH_CPU=0
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-${CUMEMTRACE_BENCH_BUILD_DIR:-$root/build-bench}}
events=${BENCH_ANALYZER_EVENTS:-3000000}
runs=${BENCH_RUNS:-5}
cpu=${BENCH_CPU:-0}
cli=$build/bin/cumemtrace

if [[ ! -x $cli ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"$(nproc)" --target cumemtrace >/dev/null
fi
for tool in heaptrack heaptrack_print taskset cc python3; do
  command -v "$tool" >/dev/null || { echo "bench_analyzer: $tool is needed" >&2; exit 2; }
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 "$root/analyzer/tools/make_synthetic_trace.py" "$events" "$scratch/synthetic.jsonl"
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

# Prints "wall user+sys" seconds of one run of the command, pinned to one core.
time_once() {
  /usr/bin/time -f '%e %U %S' -o "$scratch/time" taskset -c "$cpu" "$@" >/dev/null 2>"$scratch/stderr" ||
    { cat "$scratch/stderr" >&2; exit 1; }
  awk '{printf "%s %.3f\n", $1, $2 + $3}' "$scratch/time"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

ours=() theirs=()
time_once "$cli" report "$scratch/synthetic.jsonl" >/dev/null  # warm the page cache
time_once heaptrack_print "$heaptrack_file" >/dev/null
for ((i = 0; i < runs; i++)); do
  ours+=("$(time_once "$cli" report "$scratch/synthetic.jsonl")")
  theirs+=("$(time_once heaptrack_print "$heaptrack_file")")
done
ours_wall=$(printf '%s\n' "${ours[@]}" | cut -d' ' -f1 | median)
ours_cpu=$(printf '%s\n' "${ours[@]}" | cut -d' ' -f2 | median)
theirs_wall=$(printf '%s\n' "${theirs[@]}" | cut -d' ' -f1 | median)
theirs_cpu=$(printf '%s\n' "${theirs[@]}" | cut -d' ' -f2 | median)
rate() { awk -v n="$1" -v s="$2" 'BEGIN {printf "%.2f", (s > 0) ? n / s / 1e6 : 0}'; }

echo
echo "analyzer speed: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), one core (taskset -c $cpu), $runs runs each, medians"
printf '| %-62s | %14s | %14s |\n' "measurement" "M events/s" "M events/s cpu"
printf '|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..64})" "$(printf -- '-%.0s' {1..16})" "$(printf -- '-%.0s' {1..16})"
printf '| %-62s | %14s | %14s |\n' \
  "cumemtrace report, synthetic trace ($trace_events events, $(($(stat -c %s "$scratch/synthetic.jsonl") >> 20)) MiB)" \
  "$(rate "$trace_events" "$ours_wall")" "$(rate "$trace_events" "$ours_cpu")"
printf '| %-62s | %14s | %14s |\n' "heaptrack_print, heaptrack trace ($heaptrack_events malloc/free events)" \
  "$(rate "$heaptrack_events" "$theirs_wall")" "$(rate "$heaptrack_events" "$theirs_cpu")"
printf '| %-62s | %14s | %14s |\n' "cumemtrace / heaptrack_print, per event" \
  "$(awk -v a="$trace_events" -v b="$ours_wall" -v c="$heaptrack_events" -v d="$theirs_wall" 'BEGIN {printf "%.2fx", (a / b) / (c / d)}')" \
  "$(awk -v a="$trace_events" -v b="$ours_cpu" -v c="$heaptrack_events" -v d="$theirs_cpu" 'BEGIN {printf "%.2fx", (a / b) / (c / d)}')"
# How the synthetic lines were decoded (analyzer/src/line_shapes.h), untimed.
"$cli" -v report "$scratch/synthetic.jsonl" 2>"$scratch/verbose" >/dev/null
shaped=$(sed -n 's/.*: \([0-9]*\) of \([0-9]*\) lines decoded through a known line shape.*/\1 of \2/p' "$scratch/verbose")
echo "lines decoded through a known line shape (the rest by simdjson): ${shaped:-unknown}"
echo "timed (CPU seconds user+sys, median of $runs runs of each, alternating):"
echo "  taskset -c $cpu $cli report SYNTHETIC.jsonl        ($trace_events lines, every one an event)"
echo "  taskset -c $cpu heaptrack_print WORKLOAD.${heaptrack_file##*.}   ($heaptrack_events '+'/'-' lines: malloc and free calls)"
echo "  medians in seconds: cumemtrace report ${ours_cpu} cpu (${ours_wall} wall), heaptrack_print ${theirs_cpu} cpu (${theirs_wall} wall)"
echo "command: BENCH_ANALYZER_EVENTS=$events BENCH_RUNS=$runs BENCH_CPU=$cpu scripts/bench_analyzer.sh"
