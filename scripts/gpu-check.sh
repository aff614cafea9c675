#!/usr/bin/env bash
# Validates cumemtrace on a real NVIDIA GPU (issue 7), in one command:
# builds what it needs, runs every check, prints one line per check
#   PASS name: figures  |  FAIL name: why  |  SKIP name: why
# and writes every trace, report and log under one folder. About ten minutes
# on an H100; exit 0 when nothing failed, 1 when a check failed, 2 when
# nothing could be built, 77 when there is no GPU (ctest's skip code).
#
#   scripts/gpu-check.sh
#
# Environment:
#   GPU_CHECK_OUT / OUT    the folder (default ./gpu-check-out); GPU_CHECK_OUT wins
#   CUMEMTRACE_BUILD_DIR   an existing build tree to use as is (no configure, no
#                          build); default: configure and build <out>/build
#   GPU_CHECK_DEBS         folder of Debian packages (.deb) to unpack when build
#                          dependencies are missing (default .gpu-deps, filled
#                          by scripts/gpu-deps.sh on a Debian machine)
#   GPU_CHECK_FORCE_DEBS=1 use the .deb files even where the machine has the
#                          dependencies (to test that path on a Debian machine)
#   GPU_CHECK_SIM=1        run against the simulated device (tests/sim) instead:
#                          what CI runs (ctest gpu.check_on_sim); the frameworks skip
#   GPU_CHECK_ONLY=REGEX   run only the checks whose name matches
#   GPU_CHECK_STEPS=N      training steps of the PyTorch runs (default 300)
#   GPU_CHECK_BUDGET_S=S   checks not started after S seconds are skipped, and
#                          every program is stopped at S + 60 s (default 480: a
#                          10-minute device call still returns with its results)
#   GPU_CHECK_SUMMARY=FILE also append each line to FILE as it is printed (a
#                          device's $OUT, so a call cut short still reports)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${GPU_CHECK_OUT:-${OUT:-$PWD/gpu-check-out}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
sim=${GPU_CHECK_SIM:-0}
only=${GPU_CHECK_ONLY:-.}
steps=${GPU_CHECK_STEPS:-300}
budget=${GPU_CHECK_BUDGET_S:-480}
gpu_dir=$root/tests/gpu
summary=$out/summary.txt
: >"$summary"
failed=0

say() {
  echo "$*" | tee -a "$summary"
  if [[ -n ${GPU_CHECK_SUMMARY:-} ]]; then echo "$*" >>"$GPU_CHECK_SUMMARY"; fi
}
# Seconds a program may run: at most CAP, and never past the budget's end.
limit() {
  local left=$((budget + 60 - SECONDS))
  ((left < 10)) && left=10
  echo $((left < $1 ? left : $1))
}
pass() { say "PASS $1: $2"; }
fail() { say "FAIL $1: $2"; failed=1; }
skip() { say "SKIP $1: $2"; }
# Whether to run the check NAME: selected, and time left.
wanted() {
  [[ $1 =~ $only ]] || return 1
  if ((SECONDS > budget)); then
    skip "$1" "the time budget (GPU_CHECK_BUDGET_S=$budget s) is spent"
    return 1
  fi
}
# The last line of a file (a program's complaint), past cumemtrace's own
# closing "trace written to" line.
last_line() { grep -v '^cumemtrace: trace written' "$1" 2>/dev/null | tail -n 1 | cut -c1-600; }
# A verdict's lines, joined (cumemtrace check prints one per limit).
verdict_lines() { tail -n 8 "$1" 2>/dev/null | sed 's/^ *//; s/  */ /g' | paste -sd ';' - | cut -c1-900; }

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# --- the machine ----------------------------------------------------------
say "gpu-check: $(date -u +%FT%TZ) on $(hostname), output in $out"
if [[ $sim == 1 ]]; then
  say "gpu-check: the SIMULATED device (GPU_CHECK_SIM=1): routes and checkers only"
elif command -v nvidia-smi >/dev/null; then
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1)
  cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)
  say "gpu-check: GPU ${gpu:-unknown}; driver's CUDA ${cuda:-unknown}; nvcc $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
else
  say "gpu-check: nvidia-smi not found"
fi

# --- build ----------------------------------------------------------------
# Debian packages behind each dependency the build looks for (CMakeLists.txt,
# preload/ and analyzer/): header, library or pkg-config module.
deps_prefix=""
missing_dependencies() {
  local inc=(/usr/include /usr/include/x86_64-linux-gnu /usr/local/include) lib=(/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib)
  if [[ -n $deps_prefix ]]; then
    inc+=("$deps_prefix/usr/include" "$deps_prefix/usr/include/x86_64-linux-gnu")
    lib+=("$deps_prefix/usr/lib/x86_64-linux-gnu")
  fi
  has() {
    local kind=$1 name=$2 d
    local dirs=("${inc[@]}")
    [[ $kind == lib ]] && dirs=("${lib[@]}")
    for d in "${dirs[@]}"; do compgen -G "$d/$name" >/dev/null && return 0; done
    return 1
  }
  local missing=()
  has inc simdjson.h && has lib 'libsimdjson.so' || missing+=(libsimdjson-dev)
  has inc nlohmann/json.hpp || missing+=(nlohmann-json3-dev)
  has inc spdlog/spdlog.h && has lib 'libspdlog.so' && has lib 'libfmt.so' || missing+=(libspdlog-dev libfmt-dev)
  has inc CLI/CLI.hpp || missing+=(libcli11-dev)
  has inc zstd.h && has lib libzstd.a || missing+=(libzstd-dev)
  has inc libunwind.h && has lib 'pkgconfig/libunwind.pc' || missing+=(libunwind-dev)
  echo "${missing[*]}"
}

# Unpacks the carried .deb files into a private prefix (never into /) and
# points pkg-config files there.
unpack_debs() {
  local debs=$1
  deps_prefix=$out/deps
  rm -rf "$deps_prefix" && mkdir -p "$deps_prefix"
  local deb
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$deps_prefix" || return 1; done
  # libunwind-dev's own unwind.h: from a -I directory it would hide the
  # compiler's (GCC's _Unwind_* API, which preload/stacks/unwinder.cpp uses);
  # in /usr/include/<arch> it comes after the compiler's and does no harm.
  rm -f "$deps_prefix/usr/include/x86_64-linux-gnu/unwind.h"
  local pc
  for pc in "$deps_prefix"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$deps_prefix"/usr/share/pkgconfig/*.pc; do
    [[ -f $pc ]] && sed -i "s|^prefix=/usr\$|prefix=$deps_prefix/usr|" "$pc"
  done
  export PKG_CONFIG_PATH=$deps_prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$deps_prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
}

build_cumemtrace() {
  local tool
  for tool in cmake c++ nvcc python3; do
    command -v "$tool" >/dev/null || { fail build "no $tool on PATH"; return 1; }
  done
  local missing debs=${GPU_CHECK_DEBS:-$root/.gpu-deps}
  missing=$(missing_dependencies)
  if [[ -n $missing || ${GPU_CHECK_FORCE_DEBS:-0} == 1 ]] && compgen -G "$debs/*.deb" >/dev/null; then
    command -v dpkg-deb >/dev/null || { fail build "missing Debian packages: $missing, and no dpkg-deb to unpack $debs"; return 1; }
    unpack_debs "$debs" || { fail build "cannot unpack the packages in $debs"; return 1; }
    missing=$(missing_dependencies)
  fi
  if [[ -n $missing ]]; then
    fail build "missing Debian packages: $missing (run scripts/gpu-deps.sh on a Debian 12 machine and carry .gpu-deps)"
    return 1
  fi
  local generator=() started=$SECONDS
  command -v ninja >/dev/null && generator=(-G Ninja)
  if ! cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCUMEMTRACE_GPU_PROGRAMS_ONLY=ON -DCUMEMTRACE_BUILD_TESTS=OFF \
      ${deps_prefix:+-DCMAKE_PREFIX_PATH=$deps_prefix/usr} >"$out/build.log" 2>&1 ||
     ! cmake --build "$build" -j"$(nproc)" --target gpu_check_programs >>"$out/build.log" 2>&1; then
    fail build "see $out/build.log: $(grep -m1 -E 'error|Error' "$out/build.log" | cut -c1-300)"
    return 1
  fi
  pass build "preload, CLI and programs in $((SECONDS - started)) s${deps_prefix:+ (dependencies from carried .deb files)}"
}

if [[ -n ${CUMEMTRACE_BUILD_DIR:-} ]]; then
  build=$CUMEMTRACE_BUILD_DIR
  unset CUMEMTRACE_BUILD_DIR  # the scripts' variable, not an option of the traced programs
else
  build=$out/build
  build_cumemtrace || { say "gpu-check: nothing to run without a build"; exit 2; }
fi
cli=$build/bin/cumemtrace
apps=$build/tests/apps
programs=$build/tests/gpu
for f in "$cli" "$build/lib/libcumemtrace.so" "$programs/gpu_present"; do
  [[ -x $f || -f $f ]] || { fail build "$f missing: build the target gpu_check_programs"; exit 2; }
done

# libunwind is dlopened by the preload by its SONAME: a machine without it
# gets the carried copy, and nothing else, on the library path.
if [[ $sim != 1 ]] && ! ldconfig -p 2>/dev/null | grep -q 'libunwind\.so\.8 '; then
  unwind=$(compgen -G "$out/deps/usr/lib/x86_64-linux-gnu/libunwind.so.8*" | head -n 1)
  if [[ -n $unwind ]]; then
    mkdir -p "$out/runtime-libs" && ln -sf "$unwind" "$out/runtime-libs/libunwind.so.8"
    export LD_LIBRARY_PATH=$out/runtime-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  else
    say "gpu-check: libunwind.so.8 not found: traces will have no call stacks"
  fi
fi

# The programs of tests/apps link the toolkit's shared runtime, as users'
# programs do: where the loader does not know it, the toolkit's own copy.
if [[ $sim != 1 ]] && ! ldconfig -p 2>/dev/null | grep -q 'libcudart\.so\.13 '; then
  toolkit=$(dirname "$(dirname "$(command -v nvcc)")")
  cudart=$(compgen -G "$toolkit/lib64/libcudart.so.13*" || compgen -G "$toolkit/targets/x86_64-linux/lib/libcudart.so.13*")
  if [[ -n $cudart ]]; then
    export LD_LIBRARY_PATH=$(dirname "$(head -n 1 <<<"$cudart")")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  else
    say "gpu-check: libcudart.so.13 not found: the tests/apps programs cannot start"
  fi
fi

# --- the device -----------------------------------------------------------
if [[ $sim == 1 ]]; then
  export LD_LIBRARY_PATH=$build/sim SIMCUDA_DEVICE_MEMORY=16GiB SIMCUDA_DEVICE_COUNT=1
  present=$("$programs/gpu_present" --allow-sim)
else
  present=$("$programs/gpu_present")
fi
present_rc=$?
say "gpu-check: $present"
if ((present_rc != 0)); then
  say "gpu-check: no GPU here; set GPU_CHECK_SIM=1 to check against the simulated device"
  exit 77
fi

# A check's folder, emptied of an earlier run's files.
fresh() { rm -rf "$1" && mkdir -p "$1"; }
# traced DIR [cumemtrace run options...] -- COMMAND...: runs the command under
# `cumemtrace run` writing DIR/trace.jsonl, its output in DIR/stdout, stderr.
traced() {
  local dir=$1; shift
  mkdir -p "$dir"
  # The preload never overwrites a trace (it would trace nothing): start clean.
  rm -f "$dir/trace.jsonl"
  local options=()
  while [[ $1 != -- ]]; do options+=("$1"); shift; done
  shift
  timeout "$(limit 300)" "$cli" run -o "$dir/trace.jsonl" "${options[@]}" -- "$@" >"$dir/stdout" 2>"$dir/stderr"
}
report() {  # report DIR: report.json (and the text report) of DIR/trace.jsonl
  "$cli" report --format json -o "$1/report.json" "$1/trace.jsonl" 2>>"$1/stderr" &&
    "$cli" report -o "$1/report.txt" "$1/trace.jsonl" 2>>"$1/stderr"
}
# shellcheck disable=SC2317  # called through verdict
checker() { python3 "$gpu_dir/gpu_checks.py" "$@"; }
# verdict NAME LOGFILE COMMAND...: PASS/FAIL from a checker's exit code and line.
verdict() {
  local name=$1 log=$2; shift 2
  "$@" >"$log" 2>&1
  local rc=$?
  if ((rc == 0)); then pass "$name" "$(verdict_lines "$log")"; else fail "$name" "$(verdict_lines "$log")"; fi
  return $rc
}

# --- routes: each trace exact against the program's own manifest ------------
# bare_then_traced NAME DIR PROGRAM FILE... [-- ARG...]: PROGRAM FILE... ARG...
# untraced (each FILE in DIR, prefixed bare-), then under cumemtrace with the
# passthrough pool, so every call is its own segment and the manifest says
# the whole trace. False, after a FAIL line, when either run fails.
bare_then_traced() {
  local name=$1 d=$2 program=$3; shift 3
  local files=()
  while (($#)) && [[ $1 != -- ]]; do files+=("$1"); shift; done
  (($#)) && shift
  # Untraced first: each program checks every CUDA result itself, so a
  # failure here is a difference between the real driver and the sim.
  if ! timeout "$(limit 120)" "$program" "${files[@]/#/$d/bare-}" "$@" >"$d/bare.stdout" 2>&1; then
    fail "$name" "the program fails without cumemtrace: $(last_line "$d/bare.stdout")"
    return 1
  fi
  if ! traced "$d" --pool passthrough -- "$program" "${files[@]/#/$d/}" "$@"; then
    fail "$name" "the program failed under cumemtrace: $(last_line "$d/stderr")"
    return 1
  fi
}

# route_check NAME PROGRAM: a route program of tests/apps and its manifest.
route_check() {
  local name=$1 program=$2
  wanted "$name" || return 0
  local d=$out/$name
  [[ -x $program ]] || { fail "$name" "$program was not built"; return; }
  fresh "$d"
  bare_then_traced "$name" "$d" "$program" manifest.jsonl || return
  verdict "$name" "$d/check.log" checker routes --manifest "$d/manifest.jsonl" --trace "$d/trace.jsonl"
}

# The nvcc-built program: static runtime (on the sim: the sim's runtime as an
# archive, tests/apps/route_static_runtime), then shared.
gpu_routes_check() {
  local name=$1 program=$2; shift 2
  wanted "$name" || return 0
  local d=$out/$name
  [[ -x $program ]] || { fail "$name" "$program was not built"; return; }
  fresh "$d"
  bare_then_traced "$name" "$d" "$program" manifest.jsonl samples.json || return
  verdict "$name" "$d/check.log" checker routes --manifest "$d/manifest.jsonl" --trace "$d/trace.jsonl" \
    --program-output "$d/stdout" "$@" || return
  verdict "$name.samples" "$d/samples.log" checker samples --samples "$d/samples.json" \
    --trace "$d/trace.jsonl" --key allocated --ours alloc --min-samples 3 || return
  report "$d" && verdict "$name.cumemtrace_check" "$d/limits.log" \
    "$cli" check --max-leaked-count 1 --max-leaked-bytes 3MiB --max-ooms 0 "$d/trace.jsonl"
}

if [[ $sim == 1 ]]; then
  route_check routes.static_runtime "$apps/route_static_runtime"
  gpu_routes_check routes.nvcc_shared "$programs/gpu_routes_host"
else
  gpu_routes_check routes.nvcc_static "$programs/gpu_routes_static" --static-runtime
  gpu_routes_check routes.nvcc_shared "$programs/gpu_routes_shared"
fi
for app in route_runtime route_driver route_stream_ordered route_vmm route_framework route_entry_points; do
  route_check "routes.${app#route_}" "$apps/$app"
done
# Sixteen threads: totals (the per-thread order is the integration test's).
if wanted routes.threads; then
  d=$out/routes.threads
  fresh "$d"
  if traced "$d" --pool passthrough -- "$apps/route_threads" "$d/manifest.jsonl" 2; then
    verdict routes.threads "$d/check.log" python3 - "$d/manifest.jsonl" "$d/trace.jsonl" <<'EOF'
import json, sys
manifest = [json.loads(l) for l in open(sys.argv[1])]
trace = [json.loads(l) for l in open(sys.argv[2])]
def key(e): return (e["ev"], e["api"], e["ptr"], e["size"], e.get("tid"))
want = sorted(key(m) for m in manifest if m["ev"] in ("alloc", "free"))
got = sorted(key(e) for e in trace if e.get("ev") in ("alloc", "free"))
end = trace[-1]
if want != got or end.get("dropped") != 0:
    print(f"{len(want)} allocs and frees done, {len(got)} recorded; end {json.dumps(end)}")
    sys.exit(1)
print(f"{len(got)} allocs and frees from {len({k[4] for k in got})} threads, each once")
EOF
  else
    fail routes.threads "the program failed under cumemtrace: $(last_line "$d/stderr")"
  fi
fi

# --- the sim against the real device -----------------------------------------
# Programs of tests/apps that ask the device the facts the sim's model rests
# on (tests/sim/README.md): on a GPU each reports where the sim differs, for
# the sim to be corrected (issue 7, item 5). The page probe fills the device.
probe_check() {
  local name=$1 program=$2
  wanted "$name" || return 0
  local d=$out/$name
  fresh "$d"
  if ! timeout "$(limit 120)" "$program" >"$d/stdout" 2>&1; then
    fail "$name" "the probe failed: $(last_line "$d/stdout")"
    return
  fi
  local differences facts
  differences=$(sed -n 's/^differences from the sim: //p' "$d/stdout")
  facts=$(grep -v '^differences' "$d/stdout" | paste -sd ';' - | cut -c1-1500)
  if [[ $differences == 0 ]]; then
    pass "$name" "no difference from the sim: $facts"
  else
    fail "$name" "${differences:-?} differences from the sim: $facts"
  fi
}
probe_check sim.page_model "$apps/sim_page_probe"
probe_check sim.driver_facts "$apps/sim_driver_probe"

# What each call of the sim's cost table (tests/sim/costs, SIMCUDA_COSTS)
# costs the host on this device: sim_cost_probe times them and writes the
# table, measured, to $out/sim_costs_measured.json. The shipped h100 table
# holds published A100 figures until then: a session with an H100 commits
# that file as tests/sim/costs/h100.json, keeping the device, driver and
# date the probe wrote into it. (On the sim the figures are the sim's own.)
cost_probe_check() {
  local name=sim.costs
  wanted "$name" || return 0
  local d=$out/$name
  fresh "$d"
  if ! timeout "$(limit 120)" "$apps/sim_cost_probe" "$out/sim_costs_measured.json" >"$d/stdout" 2>&1; then
    fail "$name" "the probe failed: $(last_line "$d/stdout")"
    return
  fi
  pass "$name" "$(tail -n 1 "$d/stdout" | cut -c1-1500)"
}
cost_probe_check

# --- CUDA graphs (issue 31) ----------------------------------------------------
# tests/apps/graph_capture (nvcc): captures with memory nodes, relaunches over
# stamped buffers, the capture modes' rules; it checks itself (every stamp
# intact, CUDA's answers). Bare, then under each pool with its trace checked
# against what it did (tests/apps/check_graph_trace.cmake: graphs, launches,
# memory nodes and the device's graph memory, the sim's figures: a GPU that
# reserves graph memory differently fails here, to be told to the sim).
graphs_check() {
  local name=graphs.capture program=$apps/graph_capture
  wanted "$name" || return 0
  local d=$out/$name
  [[ -x $program ]] || { fail "$name" "$program was not built"; return; }
  fresh "$d"
  if ! timeout "$(limit 120)" "$program" >"$d/bare.stdout" 2>&1; then
    fail "$name" "the program fails without cumemtrace: $(last_line "$d/bare.stdout")"
    return
  fi
  local pool
  for pool in caching passthrough; do
    if ! timeout "$(limit 120)" cmake -DAPP="$program" -DCUMEMTRACE="$cli" -DPRELOAD="$build/lib/libcumemtrace.so" \
        -DSIM_DIR="$LD_LIBRARY_PATH" -DPOOL=$pool -DOUT="$d/trace.$pool.jsonl" \
        -P "$root/tests/apps/check_graph_trace.cmake" >"$d/$pool.log" 2>&1; then
      fail "$name.$pool" "$(last_line "$d/$pool.log")"
    else
      pass "$name.$pool" "every stamp intact; the trace's graphs, launches and graph memory as the program made them"
    fi
  done
}
graphs_check

# --- PyTorch ----------------------------------------------------------------
torch_checks() {
  local t=$out/torch train=$gpu_dir/torch_train.py
  fresh "$t"
  local run_args=(--steps "$steps")
  # PyTorch's own runs, before and after the traced ones: the baseline of
  # step time (twice, to see the noise) and of memory.
  timeout "$(limit 300)" python3 "$train" --samples "$t/base1.json" "${run_args[@]}" >"$t/base1.log" 2>&1 ||
    { fail torch.baseline "$(last_line "$t/base1.log")"; return; }
  pass torch.baseline "$(last_line "$t/base1.log")"

  if wanted torch.default; then
    if traced "$t/default" -- python3 "$train" --samples "$t/default/samples.json" "${run_args[@]}"; then
      report "$t/default"
      "$cli" timeline --points 500 -o "$t/default/timeline.csv" "$t/default/trace.jsonl" 2>>"$t/default/stderr"
      verdict torch.default.reserved "$t/default/check.log" checker samples --samples "$t/default/samples.json" \
        --trace "$t/default/trace.jsonl" --key reserved --ours alloc --api cudaMalloc --min-samples "$steps"
    else
      fail torch.default "$(last_line "$t/default/stderr")"
    fi
    if traced "$t/passthrough" --pool passthrough -- python3 "$train" --samples "$t/passthrough/samples.json" "${run_args[@]}"; then
      verdict torch.passthrough.reserved "$t/passthrough/check.log" checker samples \
        --samples "$t/passthrough/samples.json" --trace "$t/passthrough/trace.jsonl" --key reserved \
        --ours segment --api cudaMalloc --min-samples "$steps"
    else
      fail torch.passthrough "$(last_line "$t/passthrough/stderr")"
    fi
  fi

  if wanted torch.tensors; then
    if traced "$t/tensors" --torch-tensors -- python3 "$train" --samples "$t/tensors/samples.json" "${run_args[@]}"; then
      report "$t/tensors"
      # PyTorch keeps no statistics without its cache: its accounting is the
      # default run's, tensor by tensor the bytes requested (memory_allocated()
      # also counts the unsplit tails of the caching allocator's blocks).
      verdict torch.tensors.allocated "$t/tensors/check.log" checker samples --samples "$t/base1.json" \
        --trace "$t/tensors/trace.jsonl" --key requested --ours alloc --api cudaMalloc \
        --tolerance 0.001 --min-samples "$steps"
      verdict torch.tensors.peak_reserved "$t/tensors/peak.log" checker peak-reserved \
        --samples "$t/base1.json" --report "$t/tensors/report.json" --goal 1.0
      verdict torch.tensors.step_time "$t/tensors/time.log" checker time --base "$t/base1.json" \
        --traced "$t/tensors/samples.json" --goal 0.10
    else
      fail torch.tensors "$(last_line "$t/tensors/stderr")"
    fi
  fi

  if wanted torch.expandable; then
    # PyTorch's memory_reserved() is its own mappings: the segments its
    # cuMemMap made, not the pool's ("pool": true, which also says cuMemMap
    # when a library beside PyTorch allocates through the pool's expandable
    # range: the 128 MiB that failed this check on 2026-11-27).
    # PyTorch >= 2.9 reads PYTORCH_ALLOC_CONF, older ones PYTORCH_CUDA_ALLOC_CONF.
    if PYTORCH_ALLOC_CONF=expandable_segments:True PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True traced "$t/expandable" -- \
        python3 "$train" --samples "$t/expandable/samples.json" "${run_args[@]}"; then
      report "$t/expandable"
      verdict torch.expandable.reserved "$t/expandable/check.log" checker samples \
        --samples "$t/expandable/samples.json" --trace "$t/expandable/trace.jsonl" --key reserved \
        --ours segment --api cuMemMap --min-samples "$steps"
    else
      fail torch.expandable "$(last_line "$t/expandable/stderr")"
    fi
  fi

  if wanted torch.async; then
    # PyTorch's memory_allocated() is then the driver pool's used memory
    # (cudaMemPoolAttrUsedMemCurrent of the device's default pool): each live
    # allocation at its size rounded up to 512 bytes. Passthrough: the
    # driver's pool serves every request, so both must agree. Caching: what
    # the program reads must still be what it reads bare (issue 30, item 4:
    # the pool adjusts the attributes, pool/glue/mempool_view.h, or PyTorch's
    # calls step aside), so PyTorch's own figure of that run must equal the
    # trace's stream-ordered allocations too; and our allocated equals the
    # passthrough run's memory_allocated() step by step.
    local pool
    for pool in passthrough caching; do
      if ! PYTORCH_ALLOC_CONF=backend:cudaMallocAsync PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
          traced "$t/async-$pool" --pool "$pool" -- python3 "$train" --samples "$t/async-$pool/samples.json" "${run_args[@]}"; then
        fail "torch.async.$pool" "$(last_line "$t/async-$pool/stderr")"
        continue
      fi
      report "$t/async-$pool"
      local theirs=$t/async-$pool/samples.json
      [[ $pool == caching && -f $t/async-passthrough/samples.json ]] && theirs=$t/async-passthrough/samples.json
      verdict "torch.async.$pool" "$t/async-$pool/check.log" checker samples \
        --samples "$theirs" --trace "$t/async-$pool/trace.jsonl" --key allocated \
        --ours alloc --api cudaMallocAsync --round 512 --tolerance 0 --min-samples "$steps" \
        --expect allocator_backend=cudaMallocAsync
      if [[ $pool == caching ]]; then
        verdict torch.async.caching.pytorch_statistic "$t/async-$pool/pool.log" checker samples \
          --samples "$t/async-$pool/samples.json" --trace "$t/async-$pool/trace.jsonl" --key allocated \
          --ours alloc --api cudaMallocAsync --round 512 --tolerance 0 --min-samples "$steps"
      fi
    done
  fi

  if wanted torch.ipc; then
    # torch.multiprocessing shares CUDA tensors by IPC handle (issue 18).
    # Default: PyTorch's caching allocator gets the driver's memory (the pool
    # steps aside), so sharing works as bare. With the pool serving PyTorch
    # too (step-aside off) a handle of pool memory is either exact or
    # refused; never a neighbour's bytes.
    local mode
    for mode in default pool; do
      local step_aside=auto
      [[ $mode == pool ]] && step_aside=off
      fresh "$t/ipc-$mode"
      if CUMEMTRACE_POOL_STEP_ASIDE=$step_aside traced "$t/ipc-$mode" -- python3 "$gpu_dir/torch_sharing.py" ipc; then
        local line
        line=$(grep '^ipc:' "$t/ipc-$mode/stdout" | tail -1)
        if [[ $mode == default && $line == "ipc: ok" ]] ||
            [[ $mode == pool && ($line == "ipc: ok" || $line == "ipc: refused"*) ]]; then
          pass "torch.ipc.$mode" "$line"
        else
          fail "torch.ipc.$mode" "${line:-no result line}"
        fi
      else
        fail "torch.ipc.$mode" "$(last_line "$t/ipc-$mode/stdout") $(last_line "$t/ipc-$mode/stderr")"
      fi
    done
  fi

  if wanted torch.empty_cache; then
    # empty_cache() under cumemtrace lowers nvidia-smi's figure as bare does.
    fresh "$t/empty_cache"
    if timeout "$(limit 300)" python3 "$gpu_dir/torch_sharing.py" empty_cache >"$t/empty_cache/bare.log" 2>&1 &&
        traced "$t/empty_cache" -- python3 "$gpu_dir/torch_sharing.py" empty_cache; then
      verdict torch.empty_cache "$t/empty_cache/check.log" python3 - "$t/empty_cache/bare.log" \
        "$t/empty_cache/stdout" <<'PYEOF'
import re, sys
def drop(path):
    m = re.search(r"empty_cache: before=(\d+) after=(\d+)", open(path).read())
    return int(m.group(1)) - int(m.group(2))
bare, ours = drop(sys.argv[1]), drop(sys.argv[2])
print(f"nvidia-smi drop at empty_cache(): bare {bare} MiB, under cumemtrace {ours} MiB")
sys.exit(0 if bare > 0 and ours >= 0.9 * bare else 1)
PYEOF
    else
      fail torch.empty_cache "$(last_line "$t/empty_cache/bare.log") $(last_line "$t/empty_cache/stderr")"
    fi
  fi

  # A training step captured with torch.cuda.graph (issue 31), replayed: the
  # same loss and weights bare and traced, with PyTorch's allocator and with
  # every tensor through our pool (--torch-tensors; PyTorch may refuse to
  # capture there: a skip), and the report's graphs section has the replays.
  local graph_mode
  for graph_mode in default tensors; do
    wanted "torch.graphs.$graph_mode" || continue
    local g=$t/graphs-$graph_mode
    fresh "$g"
    local -a graph_env=() graph_run=()
    if [[ $graph_mode == tensors ]]; then graph_env=(PYTORCH_NO_CUDA_MEMORY_CACHING=1); graph_run=(--torch-tensors); fi
    env "${graph_env[@]}" timeout "$(limit 300)" python3 "$gpu_dir/torch_graphs.py" 20 >"$g/bare.log" 2>&1
    local bare_rc=$?
    if ((bare_rc == 77)); then skip "torch.graphs.$graph_mode" "$(last_line "$g/bare.log")"; continue; fi
    if ((bare_rc != 0)); then fail "torch.graphs.$graph_mode" "bare: $(last_line "$g/bare.log")"; continue; fi
    if ! traced "$g" "${graph_run[@]}" -- python3 "$gpu_dir/torch_graphs.py" 20; then
      fail "torch.graphs.$graph_mode" "$(last_line "$g/stdout") $(last_line "$g/stderr")"
      continue
    fi
    report "$g"
    verdict "torch.graphs.$graph_mode" "$g/check.log" python3 - "$g/bare.log" "$g/stdout" "$g/report.json" <<'PYEOF'
import json, sys
bare = [l for l in open(sys.argv[1]) if l.startswith("torch_graphs:")]
ours = [l for l in open(sys.argv[2]) if l.startswith("torch_graphs:")]
graphs = json.load(open(sys.argv[3])).get("graphs", {})
print(f"bare: {bare[-1].strip() if bare else None}; traced: {ours[-1].strip() if ours else None}; "
      f"graph launches in the report: {graphs.get('launches')}")
sys.exit(0 if bare and ours and bare[-1] == ours[-1] and (graphs.get("launches") or 0) >= 20 else 1)
PYEOF
  done

  if wanted torch.leak; then
    # The planted leak by its Python line (our Python frames: no perf map,
    # default depth), and the model's lines among the sites at the peak.
    if traced "$t/leak" --torch-tensors -- \
        python3 "$train" --samples "$t/leak/samples.json" --steps 100 --leak; then
      report "$t/leak" && verdict torch.leak "$t/leak/check.log" checker growth \
        --report "$t/leak/report.json" --function compute_loss --python-file torch_train.py
      verdict torch.python_lines "$t/leak/lines.log" checker python-lines --report "$t/leak/report.json" \
        --python-file torch_train.py --function forward --function compute_loss --function main
    else
      fail torch.leak "$(last_line "$t/leak/stderr")"
    fi
  fi

  if wanted torch.python_overhead; then
    # Step time with Python frames on (the default) against off, same pool
    # (--torch-tensors), and PyTorch's own _record_memory_history(stacks=
    # "python") untraced: what the Python lines cost either way.
    if traced "$t/pyoff" --torch-tensors --python off -- \
          python3 "$train" --samples "$t/pyoff/samples.json" "${run_args[@]}" &&
        traced "$t/pyon" --torch-tensors -- python3 "$train" --samples "$t/pyon/samples.json" "${run_args[@]}" &&
        timeout "$(limit 300)" python3 "$train" --samples "$t/history.json" --record-history "${run_args[@]}" \
          >"$t/history.log" 2>&1; then
      verdict torch.python_overhead "$t/pyon.log" checker time --base "$t/pyoff/samples.json" \
        --traced "$t/pyon/samples.json" --goal 0.05
      verdict torch.python_overhead.vs_record_history "$t/history-vs.log" checker time \
        --base "$t/history.json" --traced "$t/pyon/samples.json" --goal 0.10
    else
      fail torch.python_overhead "a run did not complete: $(last_line "$t/history.log")"
    fi
  fi

  if wanted torch.oom; then
    if traced "$t/oom" -- python3 "$train" --samples "$t/oom/samples.json" --steps 20 --oom; then
      report "$t/oom" && verdict torch.oom "$t/oom/check.log" checker oom --report "$t/oom/report.json" \
        --samples "$t/oom/samples.json"
    else
      fail torch.oom "$(last_line "$t/oom/stderr")"
    fi
  fi

  if wanted torch.overhead; then
    timeout "$(limit 300)" python3 "$train" --samples "$t/base2.json" "${run_args[@]}" >"$t/base2.log" 2>&1 ||
      { fail torch.overhead "second baseline: $(last_line "$t/base2.log")"; return; }
    # A second traced run next to the second baseline: the machine drifts
    # over the minutes between the first pair (runs differ by up to 3%).
    if [[ -f $t/default/samples.json ]] &&
        traced "$t/default2" -- python3 "$train" --samples "$t/default2/samples.json" "${run_args[@]}"; then
      verdict torch.overhead "$t/overhead.log" checker time --base "$t/base1.json" --base "$t/base2.json" \
        --traced "$t/default/samples.json" --traced "$t/default2/samples.json" --goal 0.02
    else
      skip torch.overhead "a traced default run did not complete"
    fi
  fi
}

if ! wanted torch; then
  :
elif [[ $sim == 1 ]]; then
  skip torch "the simulated device runs no framework"
elif ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  skip torch "python3 has no PyTorch with CUDA"
else
  torch_checks
fi

# --- PyTorch: cost per tensor --------------------------------------------------
# Figures: what cumemtrace adds per tensor in a framework process (hundreds
# of shared libraries, Python frames), where step times are too noisy to say.
alloc_cost() {
  local d=$out/torch.alloc_cost loop=$gpu_dir/torch_alloc_loop.py
  fresh "$d"
  if ! timeout "$(limit 120)" python3 "$loop" --out "$d/bare.json" >"$d/bare.log" 2>&1; then
    fail torch.alloc_cost "untraced: $(last_line "$d/bare.log")"
    return
  fi
  local run
  for run in nostacks stacks; do
    local options=(--torch-tensors)
    [[ $run == nostacks ]] && options+=(--stacks 0)
    if ! traced "$d/$run" "${options[@]}" -- python3 "$loop" --out "$d/$run.json"; then
      fail torch.alloc_cost "$run: $(last_line "$d/$run/stderr")"
      return
    fi
  done
  ns() { python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["ns_per_tensor"]))' "$1"; }
  local bare nostacks stacks
  bare=$(ns "$d/bare.json") nostacks=$(ns "$d/nostacks.json") stacks=$(ns "$d/stacks.json")
  say "INFO torch.alloc_cost: per tensor (torch.empty and free, 16 Python frames deep): PyTorch's caching" \
    "allocator $bare ns; cumemtrace's pool (--torch-tensors) $nostacks ns without call stacks, $stacks ns" \
    "with 32-frame stacks: $((stacks - nostacks)) ns per stack"
}
if [[ $sim != 1 ]] && wanted torch.alloc_cost &&
    python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  alloc_cost
fi

# --- CuPy and JAX -------------------------------------------------------------
framework_check() {
  local name=$1 framework=$2; shift 2
  wanted "$name" || return 0
  if [[ $sim == 1 ]]; then skip "$name" "the simulated device runs no framework"; return; fi
  local d=$out/$name
  fresh "$d"
  traced "$d" -- python3 "$gpu_dir/framework_alloc.py" "$framework" --samples "$d/samples.json"
  local rc=$?
  if ((rc == 77)); then skip "$name" "$(last_line "$d/stdout")"; return; fi
  if ((rc != 0)); then fail "$name" "$(last_line "$d/stderr")"; return; fi
  report "$d"
  # Each keeps three 3 MiB arrays to the end.
  verdict "$name" "$d/check.log" checker samples --samples "$d/samples.json" --trace "$d/trace.jsonl" \
    --min-samples 6 --min-bytes $((9 << 20)) "$@"
}
# CuPy's pool holds what it got from the runtime; XLA's allocator holds at
# least what its buffers use.
XLA_PYTHON_CLIENT_PREALLOCATE=false framework_check jax jax --key allocated --ours alloc --relation ge
framework_check cupy cupy --key reserved --ours alloc --relation ge

# --- the folder ---------------------------------------------------------------
# Everything but the traces and the build: small enough to bring back.
tar -C "$out" --exclude='trace.jsonl' --exclude='./build' --exclude='./deps' --exclude='./results.tar.gz' \
  -czf "$out/results.tar.gz" . 2>/dev/null
say "gpu-check: $(grep -c '^PASS' "$summary") passed, $(grep -c '^FAIL' "$summary") failed, $(grep -c '^SKIP' "$summary") skipped; $out/summary.txt, $out/results.tar.gz"
exit $failed
