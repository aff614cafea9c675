#!/usr/bin/env bash
# Fetches, on a Debian 12 machine with apt, the Debian packages that
# scripts/gpu-check.sh unpacks on a GPU machine that lacks them (no internet
# there, and nothing is installed into its /): the analyzer's and the
# preload's build dependencies and the runtime libraries they link.
#
#   scripts/gpu-deps.sh [DIR]      default DIR: .gpu-deps (ignored by git)
#
# About 2.3 MB. Carry DIR to the GPU machine beside the checkout; gpu-check.sh
# looks in .gpu-deps, or in $GPU_CHECK_DEBS.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-$root/.gpu-deps}
packages=(
  libsimdjson-dev libsimdjson14     # trace reader (analyzer)
  libspdlog-dev libspdlog1.10       # analyzer logging
  libfmt-dev libfmt9                # spdlog's formatting
  nlohmann-json3-dev                # JSON output (header-only)
  libcli11-dev                      # command line (header-only)
  libzstd-dev                       # .zst traces (the preload links libzstd.a)
  libunwind-dev libunwind8          # call stacks: headers, and the library the preload dlopens
  liblzma-dev                       # named by libunwind's pkg-config file
)
mkdir -p "$dir"
cd "$dir"
apt-get download "${packages[@]}"
echo "gpu-deps: $(find . -name '*.deb' | wc -l) packages, $(du -sh . | cut -f1) in $dir"
