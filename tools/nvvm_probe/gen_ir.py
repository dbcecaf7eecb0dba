#!/usr/bin/env python3
"""NVVM IR (LLVM 7 text, NVVM IR 2.0) of a pointwise kernel shaped like the fusion bench's
nvrtc kernel 1: N f32 elements a thread, one 16-byte load and store, x+0.01 then G times
(*x, gelu), then *x; gelu is the same erfc-based formula as kernels/device/lf_math.cuh.
Usage: gen_ir.py N G [--extern-gelu] > k.ll
  nvvm_probe k.ll            IR -> libNVVM -> PTX -> nvJitLink -> cubin (no NVRTC at all)
  lto_probe lib.cu k.ll      with --extern-gelu: the kernel calls lf_op_gelu_f, compiled once from
                             C++ by NVRTC (-dlto) into a library; libNVVM -gen-lto + nvJitLink -lto
                             inline it per kernel (op semantics stay in C++)"""
import sys
args=[a for a in sys.argv[1:] if not a.startswith('--')]
N=int(args[0]) if len(args)>0 else 4
G=int(args[1]) if len(args)>1 else 2
EXTERN='--extern-gelu' in sys.argv
o=[]
o.append('target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"')
o.append('target triple = "nvptx64-nvidia-cuda"')
o.append('declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()')
o.append('declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()')
o.append('declare float @llvm.fma.f32(float, float, float)')
o.append('declare float @llvm.fabs.f32(float)')
o.append('declare float @llvm.minnum.f32(float, float)')
GELU = '''define internal float @gelu(float %x) alwaysinline {
  %a = call float @llvm.fabs.f32(float %x)
  %z = fmul float %a, 0x3FE6A09E60000000
  %zc = call float @llvm.minnum.f32(float %z, float 10.0)
  %d = call float @llvm.fma.f32(float 0.5, float %zc, float 1.0)
  %t = call float asm "rcp.approx.ftz.f32 $0, $1;", "=f,f"(float %d)
  %g1 = call float @llvm.fma.f32(float 0x3FBB6E6A20000000, float %t, float 0xBFE8B8E2A0000000)
  %g2 = call float @llvm.fma.f32(float %g1, float %t, float 0x400097EB80000000)
  %g3 = call float @llvm.fma.f32(float %g2, float %t, float 0xC00411E860000000)
  %g4 = call float @llvm.fma.f32(float %g3, float %t, float 0x3FF31E3D80000000)
  %g5 = call float @llvm.fma.f32(float %g4, float %t, float 0xBFD4F4DF60000000)
  %g6 = call float @llvm.fma.f32(float %g5, float %t, float 0x3FE42FC9C0000000)
  %g7 = call float @llvm.fma.f32(float %g6, float %t, float 0x3FF6ED9FE0000000)
  %g8 = call float @llvm.fma.f32(float %g7, float %t, float 0xC00699A8E0000000)
  %nz = fsub float -0.0, %z
  %nzz = fmul float %nz, %z
  %e = call float @llvm.fma.f32(float %nzz, float 0x3FF7154760000000, float %g8)
  %p = call float asm "ex2.approx.ftz.f32 $0, $1;", "=f,f"(float %e)
  %h = fmul float %t, %p
  %om = fsub float 1.0, %h
  %neg = fcmp olt float %x, 0.0
  %phi = select i1 %neg, float %h, float %om
  %r = fmul float %x, %phi
  ret float %r
}'''
o.append('declare float @lf_op_gelu_f(float)' if EXTERN else GELU)
o.append('define void @k(<%d x float> addrspace(1)* %%in, <%d x float> addrspace(1)* %%out, i32 %%n) {' % (N,N))
o.append('''  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %b256 = mul i32 %bid, 256
  %i = add i32 %b256, %tid
  %ok = icmp slt i32 %i, %n
  br i1 %ok, label %body, label %done
body:''')
o.append('  %%ip = getelementptr <%d x float>, <%d x float> addrspace(1)* %%in, i32 %%i' % (N,N))
o.append('  %%v = load <%d x float>, <%d x float> addrspace(1)* %%ip, align 16' % (N,N))
cur='undef'
for e in range(N):
    o.append(f'  %x{e} = extractelement <{N} x float> %v, i32 {e}')
    o.append(f'  %a{e} = fadd float %x{e}, 0x3F847AE140000000')
    prev=f'%a{e}'
    for g in range(G):
        o.append(f'  %m{e}_{g} = fmul float {prev}, %x{e}')
        o.append(f'  %q{e}_{g} = call float @{"lf_op_gelu_f" if EXTERN else "gelu"}(float %m{e}_{g})')
        prev=f'%q{e}_{g}'
    o.append(f'  %y{e} = fmul float {prev}, %x{e}')
    o.append(f'  %w{e} = insertelement <{N} x float> {cur}, float %y{e}, i32 {e}')
    cur=f'%w{e}'
o.append('  %%op = getelementptr <%d x float>, <%d x float> addrspace(1)* %%out, i32 %%i' % (N,N))
o.append('  store <%d x float> %s, <%d x float> addrspace(1)* %%op, align 16' % (N,cur,N))
o.append('  br label %done\ndone:\n  ret void\n}')
sig = 'void (<%d x float> addrspace(1)*, <%d x float> addrspace(1)*, i32)*' % (N, N)
# nvJitLink -lto drops kernels nothing marks used; the non-LTO path ignores this.
o.append('@llvm.used = appending global [1 x i8*] [i8* bitcast (%s @k to i8*)], section "llvm.metadata"' % sig)
o.append('!nvvm.annotations = !{!0}')
o.append('!0 = !{void (<%d x float> addrspace(1)*, <%d x float> addrspace(1)*, i32)* @k, !"kernel", i32 1}' % (N,N))
o.append('!nvvmir.version = !{!1}\n!1 = !{i32 2, i32 0}')
print('\n'.join(o))
