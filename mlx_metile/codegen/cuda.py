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
        return [h.replace("inline float", "__device__ __forceinline__ float") for h in super().helpers(names)]

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
