"""CUDA dialect: warp shuffles for the SIMD-group reduction, cuda_fp16 /
cuda_bf16 conversions (round to nearest even), extern "C" entry points whose
arguments come in the order MLX's precompiled CUDA kernels pass them:
inputs, outputs, then scalars."""

from __future__ import annotations

from .ast import KernelDef
from .cstyle import CStyleRenderer

WARP_SUM = """__device__ __forceinline__ float metile_warp_sum(float v) {
  // xor butterfly: every lane ends with the same sum, in a fixed order
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}"""


# Helpers of the tensor-core schedule (lower_mma.py); CUDA only.
MMA_HELPERS = """__device__ __forceinline__ void metile_mma_bf16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void metile_mma_f16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                               unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// nibbles q and q+4 of w as a bf16x2 / f16x2 pair of exact integers: the nibble is
// OR-ed into the mantissa of 128 (bf16) or 1024 (f16), which is then subtracted
__device__ __forceinline__ unsigned metile_q4_bf16(unsigned w, int q) {
  const unsigned v = ((w >> (4 * q)) & 0x000F000Fu) | 0x43004300u;
  __nv_bfloat162 h = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&v), __floats2bfloat162_rn(128.0f, 128.0f));
  return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ unsigned metile_q4_f16(unsigned w, int q) {
  const unsigned v = ((w >> (4 * q)) & 0x000F000Fu) | 0x64006400u;
  __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&v), __floats2half2_rn(1024.0f, 1024.0f));
  return *reinterpret_cast<const unsigned*>(&h);
}
// bytes q and q+2 of w (8-bit values: bf16 holds them exactly, but 128 + q does not fit its mantissa)
__device__ __forceinline__ unsigned metile_q8_bf16(unsigned w, int q) {
  const float lo = __uint_as_float(0x4B000000u | ((w >> (8 * q)) & 0xFFu)) - 8388608.0f;
  const float hi = __uint_as_float(0x4B000000u | ((w >> (8 * q + 16)) & 0xFFu)) - 8388608.0f;
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ unsigned metile_q8_f16(unsigned w, int q) {
  const unsigned v = ((w >> (8 * q)) & 0x00FF00FFu) | 0x64006400u;
  __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&v), __floats2half2_rn(1024.0f, 1024.0f));
  return *reinterpret_cast<const unsigned*>(&h);
}"""


class CUDARenderer(CStyleRenderer):
    target = "cuda"
    types = {**CStyleRenderer.types, "f16": "__half", "bf16": "__nv_bfloat16", "u32": "unsigned int"}
    align16 = "__align__(16)"
    shared_space = "__shared__"
    barrier = "__syncthreads()"
    fn_prefix = "__device__ __forceinline__ "
    calls = {
        **CStyleRenderer.calls,
        "fma": "fmaf({0}, {1}, {2})",
        # 2**23 + x as float bits, minus 2**23: exact for x < 2**23, and two
        # full-rate instructions instead of a quarter-rate I2F
        "u2f_small": "(__uint_as_float(0x4B000000u | ({0})) - 8388608.0f)",
        "exp": "expf({0})",
        "tanh": "tanhf({0})",
        "max": "fmaxf({0}, {1})",
        "min": "fminf({0}, {1})",
        "simd_sum": "metile_warp_sum({0})",
        "lane": "(int)(threadIdx.x & 31)",
        "tid": "(int)threadIdx.x",
        "simdgroup": "(int)(threadIdx.x >> 5)",
        "program_id0": "(int)blockIdx.x",
        "program_id1": "(int)blockIdx.y",
    }

    def convert(self, to: str, src: str, x: str) -> str:
        if to == src:
            return x
        to_float = {"bf16": f"__bfloat162float({x})", "f16": f"__half2float({x})"}
        if to == "f32":
            return to_float.get(src, f"((float)({x}))")
        as_float = x if src == "f32" else to_float.get(src, f"((float)({x}))")
        if to == "bf16":
            return f"__float2bfloat16({as_float})"
        if to == "f16":
            return f"__float2half({as_float})"
        return f"(({self.types[to]})({x}))"

    def prelude(self) -> list[str]:
        return ["#include <cuda_fp16.h>", "#include <cuda_bf16.h>", WARP_SUM]

    def helpers(self, names: list[str]) -> list[str]:
        generic = [n for n in names if n != "cuda_mma"]
        out = [h.replace("inline float", "__device__ __forceinline__ float") for h in super().helpers(generic)]
        return out + ([MMA_HELPERS] if "cuda_mma" in names else [])

    def signature(self, k: KernelDef) -> str:
        inputs = [p for p in k.params if p.kind == "buffer" and not p.output]
        outputs = [p for p in k.params if p.kind == "buffer" and p.output]
        scalars = [p for p in k.params if p.kind == "scalar"]
        if [p.name for p in k.params] != [p.name for p in inputs + outputs + scalars]:
            raise ValueError(f"{k.name}: CUDA entry points take inputs, then outputs, then scalars")
        params = [f"const {self.types[p.dtype]}* __restrict__ {p.name}" for p in inputs]
        params += [f"{self.types[p.dtype]}* __restrict__ {p.name}" for p in outputs]
        params += [f"int {p.name}" for p in scalars]
        joined = ",\n    ".join(params)
        return f'extern "C" __global__ void __launch_bounds__({k.threads_per_group}) {k.name}(\n    {joined})'
