#!/usr/bin/env bash
# Installs, builds and runs the demo (on the GPU when there is one, else on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/setup.sh
BUILD=${LIVEFUSE_BUILD_DIR:-build}
exec "$BUILD/examples/livefuse-demo" "$@"
