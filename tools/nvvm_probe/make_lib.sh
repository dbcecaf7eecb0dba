#!/usr/bin/env bash
# The op library lto_probe links kernels against: the device helpers every generated kernel
# embeds (kernels/device/lf_math.cuh, kernels/jit/lf_fused.cuh) and one extern "C" wrapper per
# op the kernel calls. Usage: tools/nvvm_probe/make_lib.sh > lib.cu
root=$(cd "$(dirname "$0")/../.." && pwd)
cat "$root/kernels/device/lf_math.cuh" "$root/kernels/jit/lf_fused.cuh"
cat <<'WRAP'
extern "C" __device__ float lf_op_gelu_f(float a) { return lf_gelu(a); }
WRAP
