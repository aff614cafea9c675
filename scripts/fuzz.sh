#!/usr/bin/env bash
# Fuzzes the trace reader (tests/fuzz/reader_fuzz.cpp) with libFuzzer for a
# bounded time, in its own clang build with AddressSanitizer and
# UndefinedBehaviorSanitizer (build-fuzz/; the main build is gcc). Fails when
# the fuzzer finds a crash, a sanitizer error, a hang or a batch/line
# decoding mismatch; the input that did it is kept in build-fuzz/artifacts/.
#   scripts/fuzz.sh                  CUMEMTRACE_FUZZ_SECONDS=60 by default (0 skips)
#   build-fuzz/bin/reader_fuzz build-fuzz/artifacts/crash-...   replays one input
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CUMEMTRACE_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${CUMEMTRACE_FUZZ_SECONDS:-60}
if [[ $seconds == 0 ]]; then
  echo "fuzz: skipped (CUMEMTRACE_FUZZ_SECONDS=0)"
  exit 0
fi

"$root/scripts/setup.sh" >&2
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# -O1 without NDEBUG: simdjson's development checks stay on and catch API misuse.
sanitize="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all"
# In CI, no ccache, as in build.sh: a fresh machine's cache is empty, and a
# warm one (a developer's machine running .ci/run) would time a build CI
# never gets.
ccache=()
[[ ${CI:-} == true ]] && ccache=(-DCUMEMTRACE_CCACHE=OFF)
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Fuzz "${ccache[@]}" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_C_FLAGS="-O1 -g -fno-omit-frame-pointer $sanitize" \
    -DCMAKE_CXX_FLAGS="-O1 -g -fno-omit-frame-pointer $sanitize" \
    -DCUMEMTRACE_BUILD_TESTS=OFF -DCUMEMTRACE_FUZZ=ON >&2
fi
cmake --build "$build" -j"$(nproc)" --target reader_fuzz >&2

corpus=$build/corpus          # grows from run to run; the seeds stay as they are
artifacts=$build/artifacts/
mkdir -p "$corpus" "$artifacts"
echo "fuzz: reader_fuzz for ${seconds} s" >&2
"$build/bin/reader_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -dict="$root/tests/fuzz/trace.dict" -artifact_prefix="$artifacts" -print_final_stats=1 \
  "$corpus" "$root/tests/fuzz/seeds" "$root/tests/integration/golden/traces"
