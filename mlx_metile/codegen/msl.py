"""Metal Shading Language dialect (simdgroup kernels)."""

from __future__ import annotations

from .ast import COOP_ROLES, CoopLoad, CoopTensor, KernelDef, NaxOp, NaxRun, SlotLoop, TensorView
from .cstyle import CStyleRenderer, RenderError

# An explicit xor butterfly rather than metal::simd_sum, whose summation order
# Metal does not specify: the tiled schedule reproduces this exact tree, so a
# row's bits are the same whichever schedule computed it.
SIMD_SUM = """inline float metile_simd_sum(float v) {
  for (ushort offset = 16; offset > 0; offset >>= 1) v += metal::simd_shuffle_xor(v, offset);
  return v;
}"""


# MetalPerformancePrimitives' tensor ops (macOS 26+): what a kernel using NAX statements includes
NAX_INCLUDES = """#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>"""
LOCAL_HELPERS = {"nax": NAX_INCLUDES}
TENSOR_SPACES = ("device", "threadgroup")
EXTENTS = "metal::dextents<int32_t, 2>"


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

    def helpers(self, names: list[str]) -> list[str]:
        generic = [n for n in names if n not in LOCAL_HELPERS]
        return [LOCAL_HELPERS[n] for n in LOCAL_HELPERS if n in names] + super().helpers(generic)

    # -- MetalPerformancePrimitives (NAX) --------------------------------------------------------
    def nax_op(self, s: NaxOp) -> str:
        flag = {True: "true", False: "false"}
        mode = "multiply_accumulate" if s.accumulate else "multiply"
        desc = (
            f"mpp::tensor_ops::matmul2d_descriptor({s.m}, {s.n}, {s.k}, {flag[s.transpose_left]}, "
            f"{flag[s.transpose_right]}, {flag[s.relaxed]}, mpp::tensor_ops::matmul2d_descriptor::mode::{mode})"
        )
        scope = f"metal::execution_simdgroups<{s.simdgroups}>" if s.simdgroups else "metal::execution_simdgroup"
        return f"constexpr auto {s.name}_desc = {desc}; mpp::tensor_ops::matmul2d<{s.name}_desc, {scope}> {s.name};"

    def coop_tensor(self, s: CoopTensor) -> str:
        if s.role not in COOP_ROLES:
            raise RenderError(f"cooperative tensor {s.name}: role {s.role!r} is not one of {COOP_ROLES}")
        t = self.type_name(s.dtype)
        if s.role == "destination":
            operands = f"decltype({s.left}), decltype({s.right})"
            return f"auto {s.name} = {s.op}.template get_destination_cooperative_tensor<{operands}, {t}>();"
        types = f"{self.type_name(s.left)}, {self.type_name(s.right)}, {t}"
        return f"auto {s.name} = {s.op}.template get_{s.role}_input_cooperative_tensor<{types}>();"

    def tensor_view(self, s: TensorView) -> str:
        if s.space not in TENSOR_SPACES:
            raise RenderError(f"tensor view {s.name}: space {s.space!r} is not one of {TENSOR_SPACES}")
        t = f"metal::tensor<{s.space} {self.type_name(s.dtype)}, {EXTENTS}, metal::tensor_inline>"
        e0, e1 = (self.expr(e) for e in s.extents)
        s0, s1 = (self.expr(e) for e in s.strides)
        return f"{t} {s.name}({self.expr(s.base)}, {EXTENTS}({e0}, {e1}), metal::array<int32_t, 2>{{{s0}, {s1}}});"

    def coop_load(self, s: CoopLoad) -> str:
        return f"{s.tensor}.load({s.view});"

    def nax_run(self, s: NaxRun) -> str:
        return f"{s.op}.run({s.left}, {s.right}, {s.destination});"

    def slot(self, tensor: str, index: str) -> str:
        return f"{tensor}[{index}]"

    def slot_loop_head(self, s: SlotLoop) -> list[str]:
        return [self.unroll_pragma, f"for (ushort {s.var} = 0; {s.var} < {s.tensor}.get_capacity(); ++{s.var}) {{"]

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
