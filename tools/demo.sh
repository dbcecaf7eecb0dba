#!/usr/bin/env bash
# Installs, builds and runs the demo (on the GPU when there is one, else on the CPU). Only the
# demo and the library are built -- tests and benchmarks wait for ./tools/test.sh -- so the
# first run reaches the demo in minutes. Arguments go to the demo (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
# No GPU here: the demo runs on the CPU, so its build leaves the CUDA backend out (fifteen nvcc
# compiles, about a minute of a 2-core machine's first run), in a folder of its own so that
# ./tools/test.sh's full build in build/ is not reconfigured. LIVEFUSE_BUILD_DIR overrides.
if ! nvidia-smi -L >/dev/null 2>&1; then
  export LIVEFUSE_BUILD_DIR=${LIVEFUSE_BUILD_DIR:-build-cpu}
  export LIVEFUSE_MESON_ARGS="-Dcuda=disabled ${LIVEFUSE_MESON_ARGS:-}"
fi
# livefuse-inspect too: the demo's last line names it.
./tools/setup.sh examples/livefuse-demo tools/inspect/livefuse-inspect
BUILD=${LIVEFUSE_BUILD_DIR:-build}
exec "$BUILD/examples/livefuse-demo" "$@"
