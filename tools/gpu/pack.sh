#!/usr/bin/env bash
# Builds the GPU build dir .gpu/build HERE (a machine with nvcc but maybe no GPU), ready to be
# carried to a GPU machine and run there with tools/gpu/run.sh.
#   * meson setup -Dcuda=enabled -Dgpu_archs=90, release (sm_90 code + PTX: the H200), the CPU
#     code for x86-64-v3 (AVX2 + FMA: any GPU host of this decade, not just this machine)
#   * copies the system's libtbb.so.12 into .gpu/build/lib/ (the GPU machine has no TBB)
#   * keeps .gpu/build under 64 MiB (what a GPU run can carry): no static CUDA libraries are
#     copied; if the build outgrows LIMIT_MB, object files move out to .gpu/objects (same paths,
#     same times) and come back at the next pack's start, so that it rebuilds only what changed
#     (a full build takes ~40 minutes on 2 cores). Carry `.gpu/build` to the GPU machine.
# Usage: tools/gpu/pack.sh [extra meson options...]   (JOBS=N sets ninja's parallelism)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=.gpu/build
STASH=.gpu/objects
LIMIT_MB=${LIMIT_MB:-60}

# Object files the last pack moved out: back where ninja expects them (mv keeps their times,
# so what did not change is not rebuilt).
if [ -d "$STASH" ]; then
  (cd "$STASH" && find . -name '*.o' -print0) | while IFS= read -r -d '' f; do
    mkdir -p "$BUILD/$(dirname "$f")"
    mv -f "$STASH/$f" "$BUILD/$f"
  done
  rm -rf "$STASH"
fi

if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dcuda=enabled -Dgpu_archs=90 -Dcpu_arch=x86-64-v3 --buildtype=release "$@"
else
  # --reconfigure, not `meson configure`: it also knows options added since the last setup.
  meson setup --reconfigure "$BUILD" -Dcuda=enabled -Dgpu_archs=90 -Dcpu_arch=x86-64-v3 --buildtype=release "$@" >/dev/null
fi
# -k 0: a target that fails to build (someone's work in progress) must not keep the others
# from being built and run; the failure is reported at the end.
build_ok=1
ninja -C "$BUILD" -t cleandead >/dev/null 2>&1 || true  # outputs of targets that no longer exist
ninja -C "$BUILD" -j"${JOBS:-2}" -k 0 || build_ok=0
if [ ! -f "$BUILD/liblivefuse.so" ]; then
  echo "pack.sh: liblivefuse.so did not build; nothing to pack" >&2
  exit 1
fi

mkdir -p "$BUILD/lib"
# Not `ldconfig -p | awk '... exit'`: awk leaving early makes ldconfig die of SIGPIPE, which
# pipefail turns into a failed pack now and then.
tbb=$(ldconfig -p | awk '$1 == "libtbb.so.12" && !found { print $NF; found = 1 }')
if [ -z "$tbb" ]; then
  echo "pack.sh: libtbb.so.12 not found by ldconfig -p" >&2
  exit 1
fi
cp -L "$tbb" "$BUILD/lib/libtbb.so.12"

size_mb() { du -sm "$BUILD" | cut -f1; }
# Meson's CMake probe leaves ~9 MiB of scratch under meson-private (a trace, preprocessed
# sources, a sanity-check binary): nothing reads it after configuring (a reconfigure makes it
# again), and a GPU run carries 64 MiB in all -- a base library for an A/B included.
rm -rf "$BUILD/meson-private/__CMake_compiler_info__" "$BUILD/meson-private/sanitycheckcuda.exe"
if [ "$(size_mb)" -gt "$LIMIT_MB" ]; then
  echo "pack.sh: $BUILD is $(size_mb) MiB (> $LIMIT_MB); moving object files to $STASH" >&2
  (cd "$BUILD" && find . -name '*.o' -print0) | while IFS= read -r -d '' f; do
    mkdir -p "$STASH/$(dirname "$f")"
    mv -f "$BUILD/$f" "$STASH/$f"
  done
fi
if [ "$(size_mb)" -gt "$LIMIT_MB" ]; then
  echo "pack.sh: $BUILD is still $(size_mb) MiB (> $LIMIT_MB MiB); largest files:" >&2
  find "$BUILD" -type f -printf '%s %p\n' | sort -rn | head -10 >&2
  exit 1
fi
if [ "$build_ok" = 0 ]; then
  echo "pack.sh: WARNING: some targets failed to build (see above); packing what did build" >&2
fi
echo "pack.sh: $BUILD ready ($(size_mb) MiB): $(find "$BUILD/tests" -maxdepth 1 -type f -name 'test_*' | wc -l) test binaries"
