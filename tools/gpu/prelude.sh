# Sourced first by the GPU scripts (run THERE): `. "$(dirname "$0")/prelude.sh" [NAME]`.
# Goes to the repo root, sets B (the carried build), the library path (env.sh) and the kernel
# cache; with NAME, also a fresh results folder D=/tmp/NAME and REAL_OUT (the device tool's
# $OUT, where the scripts put their archive).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
B=.gpu/build
. tools/gpu/env.sh
export LIVEFUSE_CACHE_DIR=/tmp/lf-kcache PYTHONUNBUFFERED=1
if [ -n "${1:-}" ]; then
  REAL_OUT=${OUT:-$PWD/gpu-out}
  D=/tmp/$1
  rm -rf "$D"; mkdir -p "$D" "$REAL_OUT"
fi
