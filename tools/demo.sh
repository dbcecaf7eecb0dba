#!/usr/bin/env bash
# Installs, builds and runs the demo (on the GPU when there is one, else on the CPU). Only the
# demo and the library are built -- tests and benchmarks wait for ./tools/test.sh -- so the
# first run reaches the demo in minutes. Arguments go to the demo (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
# livefuse-inspect too: the demo's last line names it.
./tools/setup.sh examples/livefuse-demo tools/inspect/livefuse-inspect
BUILD=${LIVEFUSE_BUILD_DIR:-build}
exec "$BUILD/examples/livefuse-demo" "$@"
