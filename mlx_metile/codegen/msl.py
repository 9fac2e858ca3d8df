"""Metal Shading Language dialect (simdgroup kernels)."""

from __future__ import annotations

from .ast import KernelDef
from .cstyle import CStyleRenderer

# An explicit xor butterfly rather than metal::simd_sum, whose summation order
# Metal does not specify: the tiled schedule reproduces this exact tree, so a
# row's bits are the same whichever schedule computed it.
SIMD_SUM = """inline float metile_simd_sum(float v) {
  for (ushort offset = 16; offset > 0; offset >>= 1) v += metal::simd_shuffle_xor(v, offset);
  return v;
}"""


class MSLRenderer(CStyleRenderer):
    target = "msl"
    # 16-byte vectors travel as uint4 (float4 for f32) and are reinterpreted per element
    types = {**CStyleRenderer.types, "vu32": "uint4", "vbf16": "uint4", "vf16": "uint4", "vf32": "float4"}
    calls = {
        **CStyleRenderer.calls,
        "fma": "metal::fma({0}, {1}, {2})",
        "exp": "metal::precise::exp({0})",
        "tanh": "metal::precise::tanh({0})",
        "max": "metal::max({0}, {1})",
        "min": "metal::min({0}, {1})",
        "simd_sum": "metile_simd_sum({0})",
        "lane": "metile_lane",
        "tid": "int(metile_tid)",
        "simdgroup": "metile_simdgroup",
        "program_id0": "int(metile_tgid.x)",
        "program_id1": "int(metile_tgid.y)",
        "bits_as_f32": "as_type<float>({0})",
        "vget_u32": "{0}[{1}]",
        "vget_f32": "{0}[{1}]",
        "vget_bf16": "as_type<bfloat2>({0}[{1} / 2])[{1} % 2]",
        "vget_f16": "as_type<half2>({0}[{1} / 2])[{1} % 2]",
    }

    def vector_helpers(self) -> list[str]:
        out = []
        for dt in self.vectors:
            t, v = self.types[dt], self.types["v" + dt]
            out.append(
                f"inline {v} metile_vload_{dt}(const device {t}* p, int offset, bool ok) {{\n"
                f"  return ok ? *(const device {v}*)(p + offset) : {v}(0);\n}}"
            )
        return out

    def ptr(self, t: str) -> str:
        return f"const device {t}*"

    def prelude(self) -> list[str]:
        return ["#include <metal_stdlib>", "using namespace metal;", SIMD_SUM]

    def signature(self, k: KernelDef) -> str:
        params = []
        for i, p in enumerate(k.params):
            if p.kind == "buffer":
                const = "" if p.output else "const "
                params.append(f"device {const}{self.types[p.dtype]}* {p.name} [[buffer({i})]]")
            else:
                params.append(f"constant int& {p.name} [[buffer({i})]]")
        params += [
            "uint3 metile_tgid [[threadgroup_position_in_grid]]",
            "uint metile_lane [[thread_index_in_simdgroup]]",
            "uint metile_simdgroup [[simdgroup_index_in_threadgroup]]",
            "uint metile_tid [[thread_index_in_threadgroup]]",
        ]
        joined = ",\n    ".join(params)
        return f"[[max_total_threads_per_threadgroup({k.threads_per_group})]]\nkernel void {k.name}(\n    {joined})"
