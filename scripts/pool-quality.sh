#!/usr/bin/env bash
# The caching pool's quality on real training runs (issue 4, quality
# targets): imports each PyTorch memory snapshot listed in SOURCES.md,
# replays it through our pool (default settings, or POOL_CONF) and through
# PyTorch's policy, and prints one table against PyTorch's own peak reserved
# memory from SOURCES.md.
#   scripts/pool-quality.sh
# Environment: CUMEMTRACE_BUILD_DIR (default build/), CUMEMTRACE_TORCH_SNAPSHOTS
# (default ../shared/traces/torch beside the repository), POOL_CONF (our
# pool's settings, CUMEMTRACE_POOL_CONF syntax; default: the pool's defaults).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CUMEMTRACE_BUILD_DIR:-$root/build}
snapshots=${CUMEMTRACE_TORCH_SNAPSHOTS:-$root/../shared/traces/torch}
conf=${POOL_CONF:-}
sources=$snapshots/SOURCES.md
if [[ ! -f $sources ]]; then
  echo "pool-quality: no $sources (set CUMEMTRACE_TORCH_SNAPSHOTS to the snapshots' directory)" >&2
  exit 2
fi
command -v jq >/dev/null || { echo "pool-quality: needs jq (scripts/setup.sh installs it)" >&2; exit 2; }

CUMEMTRACE_BUILD_DIR=$build "$root/scripts/build.sh" cumemtrace
cli=$build/bin/cumemtrace
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# SOURCES.md's figures table: | file | peak reserved MiB | peak allocated MiB | ratio |
rows=$(grep -E '^\| *[A-Za-z0-9_.-]+ *\| *[0-9,]+ *\| *[0-9,]+ *\| *[0-9.]+ *\|$' "$sources" |
  awk -F'|' '{gsub(/[ ,]/, "", $2); gsub(/[ ,]/, "", $3); print $2, $3}')
[[ -n $rows ]] || { echo "pool-quality: no figures table in $sources" >&2; exit 2; }

mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }

echo "Peak reserved memory on PyTorch snapshots, replayed by cumemtrace's pool (MiB)"
echo "our pool: ${conf:-default settings}; PT-policy: our pool with PyTorch's settings; allocated: peak of"
echo "live bytes as requested; mincap: the smallest device that runs the trace / peak live bytes"
echo
printf '%-36s %10s %10s %8s %10s %10s %9s %8s\n' file PyTorch ours ours/PT PT-policy allocated ours/alloc mincap
total_torch=0 total_ours=0 total_alloc=0 worse=0
while read -r name torch_mib; do
  pickle=$snapshots/$name.pickle
  trace=$scratch/$name.jsonl
  "$cli" import-torch "$pickle" -o "$trace" 2>/dev/null
  ours=$("$cli" replay "$trace" --pool-conf "$conf" --format json)
  policy=$("$cli" replay "$trace" --pool-conf pytorch --format json)
  ours_b=$(jq .peak_reserved <<<"$ours")
  alloc_b=$(jq .peak_allocated <<<"$ours")
  policy_b=$(jq .peak_reserved <<<"$policy")
  mincap=$(jq '.min_capacity_over_peak_live // 0' <<<"$ours" | awk '{printf "%.4f", $1}')
  torch_b=$((torch_mib * 1048576))
  total_torch=$((total_torch + torch_b)) total_ours=$((total_ours + ours_b)) total_alloc=$((total_alloc + alloc_b))
  # SOURCES.md rounds to the MiB: ours is worse only beyond that.
  ((ours_b > torch_b + 524288)) && worse=$((worse + 1))
  printf '%-36s %10s %10s %8s %10s %10s %9s %8s\n' "$name" "$torch_mib.0" "$(mib "$ours_b")" \
    "$(awk -v a="$ours_b" -v b="$torch_b" 'BEGIN {printf "%.4f", a / b}')" "$(mib "$policy_b")" \
    "$(mib "$alloc_b")" "$(awk -v a="$ours_b" -v b="$alloc_b" 'BEGIN {printf "%.4f", a / b}')" "$mincap"
done <<<"$rows"
echo
printf '%-36s %10s %10s %8s %10s %10s %9s\n' overall "$(mib "$total_torch")" "$(mib "$total_ours")" \
  "$(awk -v a="$total_ours" -v b="$total_torch" 'BEGIN {printf "%.4f", a / b}')" "" "$(mib "$total_alloc")" \
  "$(awk -v a="$total_ours" -v b="$total_alloc" 'BEGIN {printf "%.4f", a / b}')"
echo
echo "targets: ours <= PyTorch's on every snapshot: $([[ $worse == 0 ]] && echo yes || echo "no ($worse worse)");" \
  "ours <= 1.05 x allocated overall: $(awk -v a="$total_ours" -v b="$total_alloc" 'BEGIN {print (a <= 1.05 * b) ? "yes" : "no"}')"
