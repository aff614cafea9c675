#!/usr/bin/env bash
# Installs what cumemtrace needs to build and test, from Debian's archive.
# Safe to run any number of times: it installs only packages that are missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  ccache                 # compiles once what several builds share (cmake/BuildSpeed.cmake)
  libunwind-dev          # native call stacks (preload)
  libspdlog-dev          # analyzer logging
  nlohmann-json3-dev     # analyzer JSON output
  libsimdjson-dev        # fast trace reading (analyzer)
  libcli11-dev           # analyzer command line
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev       # scripts/bench.sh
  libzstd-dev zstd       # .jsonl.zst traces
  libdw-dev              # report --symbolize: file:line from DWARF (elfutils)
  jq                     # scripts/pool-quality.sh reads replay --format json
  clang libclang-rt-dev  # libFuzzer for the reader's fuzz test (the runtime is only
                         # a Recommends of clang, and we install without those)
  heaptrack              # scripts/bench.sh's baseline (heaptrack_print, per-call cost)
  time                   # /usr/bin/time: scripts/bench_analyzer.sh's CPU time and peak RSS
  valgrind               # scripts/bench.sh's instruction counts (callgrind) of the Python loop
  chromium               # the HTML report's browser tests (headless)
  libpng-dev             # reading those tests' screenshots
  libpython3-dev         # tests/apps/python_embed: a program that embeds CPython
  python3-pandas         # README's pandas recipe, proved by a test (Debian's /usr/bin/python3)
  python3-numba          # Numba's driver test suite on the sim (tests/integration/numba)
  python3-pytest         # the pytest plugin (preload/python) and its tests (tests/integration/pytest)
  python3-setuptools     # `pip install ./preload/python`, offline (no build isolation)
  python3-venv python3-pip  # the plugin's install test: a venv that sees Debian's pytest
  python3-pytest-xdist   # the plugin under `pytest -n N`: one trace per worker
  tmux                   # `cumemtrace top`'s terminal test (capture-pane)
  nodejs                 # tests/js: playwright-core, speedscope and DuckDB (npm registry)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
# Debian's nodejs leaves npm to a package of its own; NodeSource's nodejs
# carries it (and conflicts with Debian's npm), so npm only where missing.
command -v npm >/dev/null || missing+=(npm)

if ((${#missing[@]} == 0)); then
  echo "setup: all build dependencies are installed"
else
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 2; }
    sudo=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The JavaScript clients the tests drive (tests/js/package.json, versions
# pinned by its package-lock.json): reinstalled only when the lock changed.
js=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/js" && pwd)
if ! cmp -s "$js/package-lock.json" "$js/node_modules/.package-lock.json.installed" 2>/dev/null; then
  echo "setup: installing tests/js's npm packages"
  # Only tests need them: without the registry the build goes on, and the
  # clients.* tests skip with a reason (or fail, in CI).
  if (cd "$js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
    cp "$js/package-lock.json" "$js/node_modules/.package-lock.json.installed"
  else
    echo "setup: warning: npm ci in tests/js failed; the clients.* tests will not run" >&2
  fi
fi

if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: warning: the CUDA toolkit (nvcc) was not found; install it or put its bin/ on PATH" >&2
  exit 2
fi
