#!/usr/bin/env bash
# Configures and builds cumemtrace (set-up first, when something is missing).
#   scripts/build.sh [TARGET...]     default: everything
# Environment: CUMEMTRACE_BUILD_DIR (default build/), CI=true turns warnings
# into errors (and compiles the test executables with -g1).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CUMEMTRACE_BUILD_DIR:-$root/build}

"$root/scripts/setup.sh" >&2
# nvcc is usually not on a fresh shell's PATH; FindCUDAToolkit looks for it.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

werror=OFF
# CI builds from scratch, and nobody debugs its test executables: they get
# line tables only, which takes a quarter less time to compile and changes
# neither the code nor the warnings (cmake/BuildSpeed.cmake).
speed=()
if [[ ${CI:-} == true ]]; then
  werror=ON
  speed=(-DCUMEMTRACE_TEST_COMPILE_OPTIONS=-g1 -DCUMEMTRACE_CCACHE=OFF)
fi
if [[ ! -f $build/CMakeCache.txt ]] || [[ $werror == ON ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCUMEMTRACE_WERROR=$werror "${speed[@]}" >&2
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}" >&2
