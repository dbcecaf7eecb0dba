#!/usr/bin/env bash
# The test suites under sanitizers, CPU-only (CI machines have no GPU), one build dir each:
#   build-asan  AddressSanitizer + UndefinedBehaviorSanitizer, every suite, TBB on every core
#   build-tsan  ThreadSanitizer, every suite, the CPU kernels on one TBB thread (see below)
# Any report fails its suite (ASan/UBSan halt_on_error; TSan's exit code 66), and a failed suite
# fails this script. Run it after tools/setup.sh (which installs the packages).
# Usage: tools/sanitize.sh [asan] [tsan]   (both when none is named)
#
# [ Note -- TBB under ThreadSanitizer ]
# Debian's libtbb is not built with TSan, so TSan cannot see the synchronisation in TBB's work
# hand-off and reports the tiles of every parallel kernel as races (hundreds in the ops, planner
# and bert suites). Suppressions cannot take those out without hiding real races: a `race:`
# suppression matches any frame of either stack, and every kernel body runs under TBB's frames,
# so `race:libtbb` would also hide a race between a kernel and the program, the monitor or the
# planner. Instead the TSan run sets LIVEFUSE_CPU_THREADS=1: TBB runs each kernel on the thread
# that called it (no hand-off, no noise), and every livefuse thread -- the program's threads,
# the monitor, the planner, the report writer -- stays fully visible to TSan. What that run
# cannot see, the parallel kernels' own tiling, runs on every core in the ASan+UBSan build, where
# an out-of-bounds tile is a report and the suites compare the values against references.
#
# Sizes: optimisation -O1 with line tables only (-g1): about half the compile time of
# debugoptimized, and stacks still name file:line. Assertions stay on. Only the library, the
# test binaries and the programs the suites run are built (no benchmarks, no CUDA).
set -uo pipefail
cd "$(dirname "$0")/.."

kinds=("$@")
((${#kinds[@]})) || kinds=(asan tsan)

common=(-Dcuda=disabled -Dbenchmarks=false -Db_lundef=false -Doptimization=1 -Ddebug=false
        -Db_ndebug=false -Dcpp_args=-g1)
# Under a sanitizer an iteration of the inspect suite's demo takes ~100 ms (3000 by default).
export LF_DEMO_ITERS=${LF_DEMO_ITERS:-300}
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
# TSan goes on after a report, so one run lists every race of a suite; the process still exits
# with 66 at the end, which fails the suite.
export TSAN_OPTIONS="halt_on_error=0:exitcode=66:second_deadlock_stack=1:${TSAN_OPTIONS:-}"

failed=0
for kind in "${kinds[@]}"; do
  case "$kind" in
    # GCC 12's -Wmaybe-uninitialized misfires inside libstdc++'s <regex> under ASan (test_lto):
    # ten pages of warnings about std::function in a build that is otherwise clean.
    asan) san=address,undefined; run_env=(); extra=(-Dcpp_args=-Wno-maybe-uninitialized) ;;
    tsan) san=thread; run_env=(LIVEFUSE_CPU_THREADS=1); extra=() ;;
    *) echo "sanitize: unknown kind '$kind' (asan or tsan)" >&2; exit 2 ;;
  esac
  dir=build-$kind
  # A log left by an earlier run must not count for this one (tools/test_summary.py reads it).
  rm -f "$dir"/meson-logs/testlog.*
  t0=$(date +%s)
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" -Db_sanitize="$san" "${common[@]}" "${extra[@]}" ||
      { echo "sanitize: $kind: meson setup failed" >&2; failed=1; continue; }
  fi
  if ! ninja -C "$dir" -j"$(nproc)"; then
    echo "sanitize: $kind: build failed" >&2
    failed=1
    continue
  fi
  t1=$(date +%s)
  env "${run_env[@]}" meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 2
  rc=$?
  t2=$(date +%s)
  echo "sanitize: $kind: build $((t1 - t0)) s, tests $((t2 - t1)) s, meson test rc $rc"
  ((rc)) && failed=1
done
exit $failed
