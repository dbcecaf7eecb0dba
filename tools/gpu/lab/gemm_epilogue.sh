#!/usr/bin/env bash
# Run THERE (device tool): builds and runs tools/gpu/lab/gemm_epilogue.cu (BERT's linears as a
# tensor-core GEMM with its epilogue against cuBLASLt); JSON under $OUT.
#   GE_REPS  replays a median is taken over (default 50)
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/lab}
mkdir -p "$OUT"
nvcc -O3 -arch=sm_90a -std=c++20 -lineinfo -I. -Iruntime/include -Ikernels -Itools/gpu/lab \
  tools/gpu/lab/gemm_epilogue.cu -o "$OUT/gemm_epilogue" -lcublasLt || exit 1
timeout 200 "$OUT/gemm_epilogue" "${GE_REPS:-50}" --json "$OUT/gemm_epilogue.json"
rc=$?
rm -f "$OUT/gemm_epilogue"
exit $rc
