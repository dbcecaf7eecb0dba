# Sourced first by the GPU scripts (run THERE): `. "$(dirname "$0")/prelude.sh" [NAME]`.
# Goes to the repo root, sets B (the carried build), the library path (env.sh) and the kernel
# cache; with NAME, also a fresh results folder D=/tmp/NAME and REAL_OUT (the device tool's
# $OUT, where the scripts put their archive).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
B=.gpu/build
. tools/gpu/env.sh
export LIVEFUSE_CACHE_DIR=/tmp/lf-kcache PYTHONUNBUFFERED=1
# One GPT-2 small f16 decode process as issue 20 measures it (random weights, prompt 32, 256 new
# tokens, 4 runs); the caller adds --cache and --json.
GPT2_DECODE=("$B/tools/generate/livefuse-generate" --random 1 --preset gpt2 --dtype f16 --device cuda
             --prompt-len 32 --steps 256 --runs 4 --quiet)
if [ -n "${1:-}" ]; then
  REAL_OUT=${OUT:-$PWD/gpu-out}
  D=/tmp/$1
  rm -rf "$D"; mkdir -p "$D" "$REAL_OUT"
fi
