#!/usr/bin/env bash
# Run THERE (device tool), after preparing the earlier gemv here:
#   mkdir -p tools/gpu/lab/old/kernels/cuda && for f in gemv.cu gemv.hpp gemv_kernel.cuh; do
#     git show REV:kernels/cuda/$f > tools/gpu/lab/old/kernels/cuda/$f; done   (no .cuh before effb457)
# Builds gemv_ab against the tree's kernels/cuda/gemv.cu (new, -DGATED) and the old one, runs both
# at AB_ROWS rows (default 1), and compares their outputs byte for byte.
set -e
cd "$(dirname "$0")/../../.."
F="-std=c++20 -arch=sm_90 -O3 -Iruntime/include"
L=tools/gpu/lab
nvcc $F -I. -DGATED $L/gemv_ab.cu kernels/cuda/gemv.cu kernels/cuda/launch_record.cpp -o "$OUT/ab_new" &
nvcc $F -I$L/old -I. $L/gemv_ab.cu $L/old/kernels/cuda/gemv.cu kernels/cuda/launch_record.cpp -o "$OUT/ab_old" &
wait
for r in ${AB_ROWS:-1}; do
  "$OUT/ab_old" old "$OUT/old_r$r" "$r"
  "$OUT/ab_new" new "$OUT/new_r$r" "$r"
  for m in gpt2 llama; do
    cmp "$OUT/old_r${r}_$m.bin" "$OUT/new_r${r}_$m.bin" && echo "rows $r $m: old and new outputs identical"
  done
done
