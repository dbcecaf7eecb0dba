#!/usr/bin/env bash
# Run THERE: builds and runs tools/gpu/lab/f32_emulation.cu (BERT's f32 GEMMs: SIMT against
# BF16x9 emulation and TF32 on cuBLASLt). Session 51.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p /tmp/f32_emulation
nvcc -O3 -std=c++20 -arch=sm_90 -lineinfo -I. -Iruntime/include -Ikernels -Itools/gpu/lab tools/gpu/lab/f32_emulation.cu -lcublasLt -o /tmp/f32_emulation/f32_emulation && \
  timeout -k 5 120 /tmp/f32_emulation/f32_emulation
