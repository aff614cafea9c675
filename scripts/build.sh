#!/usr/bin/env bash
# Configures and builds cumemtrace (set-up first, when something is missing).
#   scripts/build.sh [TARGET...]     default: everything
# Environment: CUMEMTRACE_BUILD_DIR (default build/), CI=true turns warnings
# into errors (and compiles with -g1: line tables and function names, enough
# for every backtrace and symbolisation the tests check, and about 30% less
# compile time than -g on the analyzer's template-heavy files, measured on
# render/report_json.cpp: 11.4 s against 15.6 s).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CUMEMTRACE_BUILD_DIR:-$root/build}

"$root/scripts/setup.sh" >&2
# nvcc is usually not on a fresh shell's PATH; FindCUDAToolkit looks for it.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

werror=OFF
# CI builds from scratch, and nobody debugs or times its test executables:
# they get line tables only and no optimization, a third less time than -O1
# on a unity batch of analyzer_unit_tests (26.8 s, 18.0 s; 2026-11-29), and
# -O1 was a third less than -O2 -g. The code they test (the libraries, the
# CLI, the simulated device, the test programs) keeps -O2, as users build
# it. Not -Og: GCC 12 warns there of <regex>'s std::function members as maybe
# uninitialised, an error where warnings are (cmake/BuildSpeed.cmake).
speed=()
if [[ ${CI:-} == true ]]; then
  werror=ON
  speed=("-DCUMEMTRACE_TEST_COMPILE_OPTIONS=-O0;-g1" -DCUMEMTRACE_CCACHE=OFF
         "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
fi
if [[ ! -f $build/CMakeCache.txt ]] || [[ $werror == ON ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCUMEMTRACE_WERROR=$werror "${speed[@]}" >&2
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}" >&2
