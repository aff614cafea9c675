#!/usr/bin/env bash
# Step time where it is decided (issue 30): the pool's workloads as training
# loops whose host runs ahead of a busy simulated device
# (tests/apps/workload_device.h: BENCH_HOST_US of host work per allocation,
# device work around each buffer taking SIMCUDA_ASYNC_LATENCY_US each), under
# the preload's pool with this build's default and with PyTorch's policy
# (segment_policy:pytorch,expandable_segments:false), the sim charging host
# time from a cost table (SIMCUDA_COSTS). Runs of the two alternate; each
# row gives the medians over runs of the steady state's median and p90 step
# (the steps after the first quarter), their ratios, and per steady-state
# step the host's waits for the device that were not the program's own, and
# the driver's cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease calls
# (the sim's counters, deterministic where the figure is 0), and peak
# reserved / peak live from the trace.
#   scripts/bench_steps.sh [--values FILE] [BUILD_DIR]   (scripts/bench.sh calls it)
#   BENCH_STEP_RUNS=3 BENCH_HOST_US=150 BENCH_DEVICE_US=20 BENCH_COSTS=h100
#   BENCH_STEP_WORKLOADS="seeds_transformer padded_buckets ..." (default: all seven)
#   BENCH_STEP_CANDIDATE=CONF: the setting compared with PyTorch's policy (default: none, the
#   pool's default); BENCH_STEP_CANDIDATE=segment_policy:pytorch,expandable_segments:false
#   compares the baseline with itself, which shows how far apart two runs of one setting are.
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
runs=${BENCH_STEP_RUNS:-3}
host_us=${BENCH_HOST_US:-150}
device_us=${BENCH_DEVICE_US:-20}
costs=${BENCH_COSTS:-h100}
cli=$build/bin/cumemtrace
apps=$build/tests/apps
if [[ ! -x $cli || ! -x $apps/varlen_workloads ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"$(nproc)" --target cumemtrace cumemtrace_preload simcuda_runtime simcuda_driver \
    seeds_transformer varlen_workloads >/dev/null
fi
export LD_LIBRARY_PATH=$build/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
B=${build#"$root"/}

if [[ -n ${BENCH_STEP_WORKLOADS:-} ]]; then
  read -r -a workloads <<<"$BENCH_STEP_WORKLOADS"
else
  mapfile -t workloads < <("$apps/varlen_workloads" --list)
  workloads=(seeds_transformer "${workloads[@]}")
fi
pytorch_conf=segment_policy:pytorch,expandable_segments:false
candidate=${BENCH_STEP_CANDIDATE:-}

# run WORKLOAD CONF OUT: one busy run under the preload; its output in OUT,
# its trace in OUT.jsonl.
run() {
  local w=$1 conf=$2 out=$3 prog
  if [[ $w == seeds_transformer ]]; then prog=("$apps/seeds_transformer" --host-us "$host_us")
  else prog=("$apps/varlen_workloads" --shape "$w" --host-us "$host_us"); fi
  local vars=(SIMCUDA_COSTS="$costs" SIMCUDA_ASYNC_LATENCY_US="$device_us" CUMEMTRACE_STACKS=0)
  [[ -n $conf ]] && vars+=(CUMEMTRACE_POOL_CONF="$conf")
  env -u CUMEMTRACE_POOL -u CUMEMTRACE_POOL_CONF "${vars[@]}" \
    "$cli" run --output "$out.jsonl" -- "${prog[@]}" >"$out" 2>"$out.err" ||
    { echo "bench_steps: $w failed under the pool (${conf:-default}): $(tail -1 "$out.err")" >&2; exit 1; }
  grep -q ' failed_mallocs=0 ' "$out" || { echo "bench_steps: $w: failed allocations (${conf:-default})" >&2; exit 1; }
}
# field NAME FILE: the steady_state line's NAME=value.
field() { awk -v k="$1" '$1 == "steady_state" { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) print kv[2] } }' "$2"; }
per_step() { calc 'n / s' n="$(field "$1" "$2")" s="$(field steps "$2")" | xargs printf '%.1f'; }
reserved_over_live() { "$cli" report "$1" --format json | jq -r '.peak_reserved / .peak_allocated' | xargs printf '%.3f'; }

rows=()
for w in "${workloads[@]}"; do
  for ((r = 0; r < runs; ++r)); do
    run "$w" "$pytorch_conf" "$scratch/$w.pytorch.$r"
    run "$w" "$candidate" "$scratch/$w.default.$r"
  done
  declare -A m=()
  for c in pytorch default; do
    for k in median_ms p90_ms; do
      m[$c.$k]=$(for ((r = 0; r < runs; ++r)); do field "$k" "$scratch/$w.$c.$r"; done | median)
    done
    last=$scratch/$w.$c.$((runs - 1))
    m[$c.counts]="$(per_step waits "$last") / $(per_step create "$last") / $(per_step map "$last") / $(per_step unmap "$last") / $(per_step release "$last")"
    m[$c.faults]=$(field faults "$last")
    m[$c.reserved]=$(reserved_over_live "$last.jsonl")
  done
  median_ratio=$(calc 'a / b' a="${m[default.median_ms]}" b="${m[pytorch.median_ms]}" | xargs printf '%.3f')
  p90_ratio=$(calc 'a / b' a="${m[default.p90_ms]}" b="${m[pytorch.p90_ms]}" | xargs printf '%.3f')
  goal=$(awk -v a="$median_ratio" -v b="$p90_ratio" -v r="${m[default.reserved]}" \
    'BEGIN {print (a <= 1.03 && b <= 1.10 ? "met" : "NOT met") " (time); " (r <= 1.05 ? "met" : "NOT met") " (reserved)"}')
  rows+=("$w"$'\t'"${m[pytorch.median_ms]} / ${m[pytorch.p90_ms]} ms; ${m[pytorch.counts]}; ${m[pytorch.reserved]}"$'\t'"${m[default.median_ms]} / ${m[default.p90_ms]} ms; ${m[default.counts]}; ${m[default.reserved]}"$'\t'"$median_ratio / $p90_ratio"$'\t'"$goal")
  if [[ -n $values_file ]]; then
    echo "steps.$w.pytorch ${m[pytorch.median_ms]} / ${m[pytorch.p90_ms]} ms; ${m[pytorch.counts]}; ${m[pytorch.reserved]}" >>"$values_file"
    echo "steps.$w.default ${m[default.median_ms]} / ${m[default.p90_ms]} ms; ${m[default.counts]}; ${m[default.reserved]}" >>"$values_file"
    echo "steps.$w.ratio $median_ratio / $p90_ratio" >>"$values_file"
    echo "steps.$w.goal $goal" >>"$values_file"
  fi
  if [[ ${m[default.faults]} != 0 || ${m[pytorch.faults]} != 0 ]]; then
    echo "bench_steps: $w: device faults under the pool" >&2
    exit 1
  fi
  unset m
done

[[ -n $values_file ]] && exit 0
echo "Step time on a busy simulated device: $(machine_line)"
echo "$host_us us of host work per allocation, $device_us us of device work per touch (two per buffer), SIMCUDA_COSTS=$costs;"
echo "medians of $runs alternating runs of the steady state's median / p90 step; per steady-state step: the pool's"
echo "waits for the device / cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease; then peak reserved / peak live."
echo
{
  printf 'workload\tPyTorch policy (%s)\t%s\tratio: median / p90\tgoal: <= 1.03 / 1.10, reserved <= 1.05\n' "$pytorch_conf" "${candidate:-default}"
  printf '%s\n' "${rows[@]}"
} | column -t -s $'\t'
echo
echo "command: ${candidate:+BENCH_STEP_CANDIDATE=$candidate }BENCH_STEP_RUNS=$runs BENCH_HOST_US=$host_us BENCH_DEVICE_US=$device_us BENCH_COSTS=$costs scripts/bench_steps.sh $B"
