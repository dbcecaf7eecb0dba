#!/usr/bin/env bash
# Installs, builds and runs the whole test suite. The last line sums the doctest counts of
# every suite: "doctest: N passed, N failed, N skipped". CUDA cases skip (and are counted as
# skipped) on machines without a GPU; NVRTC cases run everywhere the toolkit is installed.
set -uo pipefail
cd "$(dirname "$0")/.."
./tools/setup.sh || exit 1
BUILD=${LIVEFUSE_BUILD_DIR:-build}
meson test -C "$BUILD" --print-errorlogs --num-processes 2
rc=$?
python3 tools/test_summary.py "$BUILD/meson-logs/testlog.txt"
sum_rc=$?
[ $rc -ne 0 ] && exit $rc
exit $sum_rc
