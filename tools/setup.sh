#!/usr/bin/env bash
# Installs what livefuse needs from Debian (when missing) and builds it into ./build.
#   ./tools/setup.sh                          everything (library, tools, examples, tests, benchmarks)
#   ./tools/setup.sh examples/livefuse-demo   only the named ninja targets and what they need
# CUDA is used when the toolkit is installed (nvcc on PATH or in /usr/local/cuda/bin);
# a machine without a GPU still builds it: kernels then run on the CPU, NVRTC still compiles.
# With CI=true the build treats warnings as errors, so a new warning fails CI instead of
# scrolling past.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(meson ninja-build pkg-config python3 g++ libtbb-dev libboost-dev doctest-dev libdlpack-dev nlohmann-json3-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
BUILD=${LIVEFUSE_BUILD_DIR:-build}
werror=false
[ "${CI:-}" = "true" ] && werror=true
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" --buildtype=release -Dwerror=$werror ${LIVEFUSE_MESON_ARGS:-}
elif [ "$werror" = true ]; then
  # A build dir configured earlier without it (a developer's, or a cached CI one).
  meson configure "$BUILD" -Dwerror=true
fi
ninja -C "$BUILD" -j"$(nproc)" "$@"
