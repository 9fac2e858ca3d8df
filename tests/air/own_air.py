"""A hand-written AIR module in LLVM 14's typed-pointer form (what Metal's loader takes and what our
own AIR renderer emits), assembled with LLVM 14's llvm-as: the executor's test of AIR nobody
compiled from MSL. Kernels:

- `probe`: y[3i] = (x reversed within the threadgroup, through threadgroup memory and a barrier)
  * the function constant `scale`; y[3i+1] = simd_sum(x * scale); y[3i+2] = simd_shuffle_xor(x * scale, 1),
  for i < n (a constant buffer); positions from threadgroup_position_in_grid,
  thread_position_in_threadgroup and thread_index_in_simdgroup;
- `oob`: reads x[lid + 100] (past a 64-float buffer);
- `divergent`: thread 3 returns before a barrier the others wait at;
- `needs_unknown`: calls an intrinsic the executor does not define (air.unknown_op.f32).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

DATALAYOUT = (
    "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-f32:32:32-f64:64:64-v16:16:16-v24:32:32-"
    "v32:32:32-v48:64:64-v64:64:64-v96:128:128-v128:128:128-v192:256:256-v256:256:256-v512:512:512-"
    "v1024:1024:1024-n8:16:32"
)

PROBE = r"""
@scale = internal addrspace(2) externally_initialized constant float undef, section "air.fc_initializer", align 4
@tile = internal addrspace(3) global [64 x float] undef, align 4

define void @probe(float addrspace(1)* noundef %x, float addrspace(1)* noundef %y, i32 addrspace(2)* noundef %n, <3 x i32> noundef %gid, i32 noundef %lid, i32 noundef %lane) #0 {
entry:
  %gx = extractelement <3 x i32> %gid, i64 0
  %base = mul i32 %gx, 64
  %i = add i32 %base, %lid
  %i64 = zext i32 %i to i64
  %px = getelementptr inbounds float, float addrspace(1)* %x, i64 %i64
  %v = load float, float addrspace(1)* %px, align 4
  %s = load float, float addrspace(2)* @scale, align 4
  %vs = fmul float %v, %s
  %lid64 = zext i32 %lid to i64
  %pt = getelementptr inbounds [64 x float], [64 x float] addrspace(3)* @tile, i64 0, i64 %lid64
  store float %vs, float addrspace(3)* %pt, align 4
  call void @air.wg.barrier(i32 2, i32 1)
  %r = sub i32 63, %lid
  %r64 = zext i32 %r to i64
  %pr = getelementptr inbounds [64 x float], [64 x float] addrspace(3)* @tile, i64 0, i64 %r64
  %rev = load float, float addrspace(3)* %pr, align 4
  %sum = call float @air.simd_sum.f32(float %vs)
  %sh = call float @air.simd_shuffle_xor.f32(float %vs, i16 1)
  %nv = load i32, i32 addrspace(2)* %n, align 4
  %in = icmp ult i32 %i, %nv
  br i1 %in, label %store, label %done
store:
  %o = mul i64 %i64, 3
  %py0 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o
  store float %rev, float addrspace(1)* %py0, align 4
  %o1 = add i64 %o, 1
  %py1 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o1
  store float %sum, float addrspace(1)* %py1, align 4
  %o2 = add i64 %o, 2
  %py2 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o2
  store float %sh, float addrspace(1)* %py2, align 4
  br label %done
done:
  ret void
}

define void @oob(float addrspace(1)* noundef %x, float addrspace(1)* noundef %y, i32 noundef %lid) #0 {
  %j = add i32 %lid, 100
  %j64 = zext i32 %j to i64
  %px = getelementptr inbounds float, float addrspace(1)* %x, i64 %j64
  %v = load volatile float, float addrspace(1)* %px, align 4
  %l64 = zext i32 %lid to i64
  %py = getelementptr inbounds float, float addrspace(1)* %y, i64 %l64
  store float %v, float addrspace(1)* %py, align 4
  ret void
}

define void @divergent(float addrspace(1)* noundef %y, i32 noundef %lid) #0 {
  %three = icmp eq i32 %lid, 3
  br i1 %three, label %out, label %wait
wait:
  call void @air.wg.barrier(i32 2, i32 1)
  %l64 = zext i32 %lid to i64
  %py = getelementptr inbounds float, float addrspace(1)* %y, i64 %l64
  store float 1.0, float addrspace(1)* %py, align 4
  br label %out
out:
  ret void
}

define void @needs_unknown(float addrspace(1)* noundef %y, i32 noundef %lid) #0 {
  %l64 = zext i32 %lid to i64
  %py = getelementptr inbounds float, float addrspace(1)* %y, i64 %l64
  %v = load float, float addrspace(1)* %py, align 4
  %t = call float @air.unknown_op.f32(float %v)
  store float %t, float addrspace(1)* %py, align 4
  ret void
}

declare void @air.wg.barrier(i32, i32) #1
declare float @air.simd_sum.f32(float) #1
declare float @air.simd_shuffle_xor.f32(float, i16) #1
declare float @air.unknown_op.f32(float) #1

attributes #0 = { convergent nounwind }
attributes #1 = { convergent nounwind }

!air.kernel = !{!0, !10, !20, !30}
!air.function_constants = !{!40}
!air.version = !{!41}
!air.language_version = !{!42}

!0 = !{void (float addrspace(1)*, float addrspace(1)*, i32 addrspace(2)*, <3 x i32>, i32, i32)* @probe, !1, !2, !9}
!1 = !{}
!2 = !{!3, !4, !5, !6, !7, !8}
!3 = !{i32 0, !"air.buffer", !"air.location_index", i32 0, i32 1, !"air.read", !"air.address_space", i32 1, !"air.arg_type_size", i32 4, !"air.arg_type_align_size", i32 4, !"air.arg_type_name", !"float", !"air.arg_name", !"x"}
!4 = !{i32 1, !"air.buffer", !"air.location_index", i32 1, i32 1, !"air.read_write", !"air.address_space", i32 1, !"air.arg_type_size", i32 4, !"air.arg_type_align_size", i32 4, !"air.arg_type_name", !"float", !"air.arg_name", !"y"}
!5 = !{i32 2, !"air.buffer", !"air.buffer_size", i32 4, !"air.location_index", i32 2, i32 1, !"air.read", !"air.address_space", i32 2, !"air.arg_type_size", i32 4, !"air.arg_type_align_size", i32 4, !"air.arg_type_name", !"uint", !"air.arg_name", !"n"}
!6 = !{i32 3, !"air.threadgroup_position_in_grid", !"air.arg_type_name", !"uint3", !"air.arg_name", !"gid"}
!7 = !{i32 4, !"air.thread_position_in_threadgroup", !"air.arg_type_name", !"uint", !"air.arg_name", !"lid"}
!8 = !{i32 5, !"air.thread_index_in_simdgroup", !"air.arg_type_name", !"uint", !"air.arg_name", !"lane"}
!9 = !{!"air.max_work_group_size", i32 64}
!10 = !{void (float addrspace(1)*, float addrspace(1)*, i32)* @oob, !1, !11}
!11 = !{!3, !4, !12}
!12 = !{i32 2, !"air.thread_position_in_threadgroup", !"air.arg_type_name", !"uint", !"air.arg_name", !"lid"}
!20 = !{void (float addrspace(1)*, i32)* @divergent, !1, !21}
!21 = !{!22, !23}
!22 = !{i32 0, !"air.buffer", !"air.location_index", i32 0, i32 1, !"air.read_write", !"air.address_space", i32 1, !"air.arg_type_size", i32 4, !"air.arg_type_align_size", i32 4, !"air.arg_type_name", !"float", !"air.arg_name", !"y"}
!23 = !{i32 1, !"air.thread_position_in_threadgroup", !"air.arg_type_name", !"uint", !"air.arg_name", !"lid"}
!30 = !{void (float addrspace(1)*, i32)* @needs_unknown, !1, !21}
!40 = !{float addrspace(2)* @scale, !"float", !"scale", i32 3, i1 true}
!41 = !{i32 2, i32 6, i32 0}
!42 = !{!"Metal", i32 3, i32 1, i32 0}
"""


def llvm14_as() -> str:
    """LLVM 14's llvm-as (Debian's llvm-14; scripts/test installs it)."""
    for cand in ("llvm-as-14", "/usr/lib/llvm-14/bin/llvm-as"):
        found = shutil.which(cand) or (cand if Path(cand).is_file() else None)
        if found:
            return found
    raise RuntimeError("LLVM 14's llvm-as is not installed: apt-get install llvm-14 (scripts/test does)")


def assemble(body: str = PROBE) -> bytes:
    text = f'target datalayout = "{DATALAYOUT}"\ntarget triple = "air64-apple-macosx14.0.0"\n{body}'
    done = subprocess.run([llvm14_as(), "-o", "-", "-"], input=text.encode(), capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"llvm-as-14 rejected the test module:\n{done.stderr.decode()}")
    return done.stdout


# `math`: per thread i, eight results of x[i] through AIR's pure intrinsics (conversions, integer
# clamp, float math), the SIMD group's maximum of int(x) and whether values are uniform in it.
MATH = r"""
define void @math(float addrspace(1)* noundef %x, float addrspace(1)* noundef %y, i32 noundef %i) #0 {
  %i64 = zext i32 %i to i64
  %px = getelementptr inbounds float, float addrspace(1)* %x, i64 %i64
  %v = load float, float addrspace(1)* %px, align 4
  %r0 = call float @air.fast_exp.f32(float %v)
  %a = call float @air.fabs.f32(float %v)
  %a1 = fadd float %a, 1.0
  %r1 = call float @air.rsqrt.f32(float %a1)
  %r2 = call float @air.fma.f32(float %v, float %v, float 1.0)
  %r3 = call float @air.fmax.f32(float %v, float 0.0)
  %k = fmul float %v, 1000.0
  %ki = call i32 @air.convert.s.i32.f.f32(float %k)
  %r4 = call float @air.convert.f.f32.s.i32(i32 %ki)
  %h = call half @air.convert.f.f16.f.f32(float %v)
  %r5 = call float @air.convert.f.f32.f.f16(half %h)
  %t = fmul float %v, 10.0
  %ti = call i32 @air.convert.s.i32.f.f32(float %t)
  %c = call i32 @air.clamp.s.i32(i32 %ti, i32 -3, i32 3)
  %mx = call i32 @air.simd_max.s.i32(i32 %c)
  %u = call i1 @air.is_uniform.i32(i32 %mx)
  %u2 = call i1 @air.is_uniform.i32(i32 %c)
  %uw = zext i1 %u to i32
  %uw2 = zext i1 %u2 to i32
  %us = mul i32 %uw, 100
  %us2 = mul i32 %uw2, 1000
  %ua = add i32 %us, %us2
  %cm0 = add i32 %c, %mx
  %cm = add i32 %cm0, %ua
  %r6 = call float @air.convert.f.f32.s.i32(i32 %cm)
  %r7 = call float @air.tanh.f32(float %v)
  %o = mul i64 %i64, 8
  %p0 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o
  store float %r0, float addrspace(1)* %p0, align 4
  %o1 = add i64 %o, 1
  %p1 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o1
  store float %r1, float addrspace(1)* %p1, align 4
  %o2 = add i64 %o, 2
  %p2 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o2
  store float %r2, float addrspace(1)* %p2, align 4
  %o3 = add i64 %o, 3
  %p3 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o3
  store float %r3, float addrspace(1)* %p3, align 4
  %o4 = add i64 %o, 4
  %p4 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o4
  store float %r4, float addrspace(1)* %p4, align 4
  %o5 = add i64 %o, 5
  %p5 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o5
  store float %r5, float addrspace(1)* %p5, align 4
  %o6 = add i64 %o, 6
  %p6 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o6
  store float %r6, float addrspace(1)* %p6, align 4
  %o7 = add i64 %o, 7
  %p7 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o7
  store float %r7, float addrspace(1)* %p7, align 4
  ret void
}

declare float @air.fast_exp.f32(float) #1
declare float @air.fabs.f32(float) #1
declare float @air.rsqrt.f32(float) #1
declare float @air.fma.f32(float, float, float) #1
declare float @air.fmax.f32(float, float) #1
declare i32 @air.convert.s.i32.f.f32(float) #1
declare float @air.convert.f.f32.s.i32(i32) #1
declare half @air.convert.f.f16.f.f32(float) #1
declare float @air.convert.f.f32.f.f16(half) #1
declare i32 @air.clamp.s.i32(i32, i32, i32) #1
declare i32 @air.simd_max.s.i32(i32) #1
declare i1 @air.is_uniform.i32(i32) #1
declare float @air.tanh.f32(float) #1

attributes #0 = { convergent nounwind }
attributes #1 = { nounwind }

!air.kernel = !{!0}
!0 = !{void (float addrspace(1)*, float addrspace(1)*, i32)* @math, !1, !2}
!1 = !{}
!2 = !{!3, !4, !5}
!3 = !{i32 0, !"air.buffer", !"air.location_index", i32 0, i32 1, !"air.read", !"air.address_space", i32 1, !"air.arg_type_size", i32 4, !"air.arg_type_align_size", i32 4, !"air.arg_type_name", !"float", !"air.arg_name", !"x"}
!4 = !{i32 1, !"air.buffer", !"air.location_index", i32 1, i32 1, !"air.read_write", !"air.address_space", i32 1, !"air.arg_type_size", i32 4, !"air.arg_type_align_size", i32 4, !"air.arg_type_name", !"float", !"air.arg_name", !"y"}
!5 = !{i32 2, !"air.thread_position_in_grid", !"air.arg_type_name", !"uint", !"air.arg_name", !"i"}
"""


# `misc`: y[2i] = dot((x, x, 1, 2), (2, 3, 4, 5)), y[2i+1] = ldexp(x, 3)
MISC = r"""
define void @misc(float addrspace(1)* noundef %x, float addrspace(1)* noundef %y, i32 noundef %i) #0 {
  %i64 = zext i32 %i to i64
  %px = getelementptr inbounds float, float addrspace(1)* %x, i64 %i64
  %v = load float, float addrspace(1)* %px, align 4
  %a0 = insertelement <4 x float> <float 0.0, float 0.0, float 1.0, float 2.0>, float %v, i64 0
  %a = insertelement <4 x float> %a0, float %v, i64 1
  %d = call float @air.dot.v4f32(<4 x float> %a, <4 x float> <float 2.0, float 3.0, float 4.0, float 5.0>)
  %l = call float @air.ldexp.f32(float %v, i32 3)
  %o = mul i64 %i64, 2
  %p0 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o
  store float %d, float addrspace(1)* %p0, align 4
  %o1 = add i64 %o, 1
  %p1 = getelementptr inbounds float, float addrspace(1)* %y, i64 %o1
  store float %l, float addrspace(1)* %p1, align 4
  ret void
}

declare float @air.dot.v4f32(<4 x float>, <4 x float>) #1
declare float @air.ldexp.f32(float, i32) #1

attributes #0 = { convergent nounwind }
attributes #1 = { nounwind }

!air.kernel = !{!0}
!0 = !{void (float addrspace(1)*, float addrspace(1)*, i32)* @misc, !1, !2}
!1 = !{}
!2 = !{!3, !4, !5}
!3 = !{i32 0, !"air.buffer", !"air.location_index", i32 0, i32 1, !"air.read", !"air.address_space", i32 1, !"air.arg_type_size", i32 4, !"air.arg_type_align_size", i32 4, !"air.arg_type_name", !"float", !"air.arg_name", !"x"}
!4 = !{i32 1, !"air.buffer", !"air.location_index", i32 1, i32 1, !"air.read_write", !"air.address_space", i32 1, !"air.arg_type_size", i32 4, !"air.arg_type_align_size", i32 4, !"air.arg_type_name", !"float", !"air.arg_name", !"y"}
!5 = !{i32 2, !"air.thread_position_in_grid", !"air.arg_type_name", !"uint", !"air.arg_name", !"i"}
"""
