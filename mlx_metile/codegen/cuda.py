"""CUDA dialect: warp shuffles for the SIMD-group reduction, cuda_fp16 /
cuda_bf16 conversions (round to nearest even), extern "C" entry points whose
arguments come in the order MLX's precompiled CUDA kernels pass them:
inputs, outputs, then scalars."""

from __future__ import annotations

from .ast import AsyncCopy, KernelDef, Mma, SharedBytes, View
from .cstyle import CStyleRenderer

WARP_SUM = """__device__ __forceinline__ float metile_warp_sum(float v) {
  // xor butterfly: every lane ends with the same sum, in a fixed order
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}"""


# Helpers of the tensor-core schedules (lower/mma*.py); CUDA only.
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
// The packed integers as bf16x2 / f16x2 pairs for the MMA's A operand, offset by
// a constant (Q_OFFSET in lower/mma.py): nibbles q and q+4 (bytes q and q+2) of
// w are OR-ed into the mantissa of 128 (bf16) or 1024 (f16), so a pair is 128 + q
// (1024 + q), exact. One LOP3 with both constants (the compiler would split
// (a & m) | c into two); the offset comes back out once per group, in f32:
// s * sum((o + q) x) + (b - o s) * sum(x) = s * sum(q x) + b * sum(x).
__device__ __forceinline__ unsigned metile_and_or(unsigned a, unsigned mask, unsigned magic) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(magic));
  return d;
}
__device__ __forceinline__ unsigned metile_q4_bf16(unsigned w, int q) {
  return metile_and_or(w >> (4 * q), 0x000F000Fu, 0x43004300u);
}
__device__ __forceinline__ unsigned metile_q4_f16(unsigned w, int q) {
  return metile_and_or(w >> (4 * q), 0x000F000Fu, 0x64006400u);
}
__device__ __forceinline__ unsigned metile_q8_f16(unsigned w, int q) {
  return metile_and_or(w >> (8 * q), 0x00FF00FFu, 0x64006400u);
}
// bytes q and q+2 of w, exact and without offset (128 + q does not fit bf16's mantissa)
__device__ __forceinline__ unsigned metile_q8_bf16(unsigned w, int q) {
  const float lo = __uint_as_float(0x4B000000u | ((w >> (8 * q)) & 0xFFu)) - 8388608.0f;
  const float hi = __uint_as_float(0x4B000000u | ((w >> (8 * q + 16)) & 0xFFu)) - 8388608.0f;
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}"""


# RMSNorm fused into the tensor-core schedule (lower/mma.py, spec.norm_eps), bf16: a
# 16-byte x slice times the norm weight's, each product rounded once to bf16 (the MMA's B operand),
# and the slice's squares added to its row's sum by two MMAs of x with itself - A's rows g are the
# lane's B registers, its rows g + 8 zero - so C[g][g] (lane (g, g / 2), element g % 2) gathers row g.
NORM_HELPERS = """__device__ __forceinline__ unsigned metile_norm_pair_bf16(unsigned x, unsigned g) {
  const float lo = __uint_as_float(x << 16) * __uint_as_float(g << 16);
  const float hi = __uint_as_float(x & 0xFFFF0000u) * __uint_as_float(g & 0xFFFF0000u);
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ uint4 metile_norm_bf16(uint4 x, uint4 g, float* sq) {
  metile_mma_bf16(sq, x.x, 0u, x.y, 0u, x.x, x.y);
  metile_mma_bf16(sq, x.z, 0u, x.w, 0u, x.z, x.w);
  return make_uint4(metile_norm_pair_bf16(x.x, g.x), metile_norm_pair_bf16(x.y, g.y), metile_norm_pair_bf16(x.z, g.z),
                    metile_norm_pair_bf16(x.w, g.w));
}"""


# Asynchronous global -> shared copies (sm_80+) of the staged tensor-core schedule
# (lower/mma_staged.py): `ok` false copies nothing and zero-fills the destination.
CP_ASYNC_HELPERS = """__device__ __forceinline__ void metile_cp16(void* dst, const void* src, bool ok) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
template <int N>
__device__ __forceinline__ void metile_cp_small(void* dst, const void* src, bool ok) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(d), "l"(src), "n"(N), "r"(ok ? N : 0) : "memory");
}
__device__ __forceinline__ void metile_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void metile_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }"""

# 8-bit values with bf16 activations nibble by nibble (MLX_METILE_CUDA_MMA_Q8SPLIT=1): bf16
# cannot hold 128 + q for a byte, but holds 128 + l for its low nibble and 2048 + 16 h for its
# high one (bf16's step at 2048 is 16), so two MMAs into one accumulator sum (2176 + q) x -
# two cheap unpackings instead of an exact conversion through f32 per pair.
Q8_SPLIT_HELPERS = """__device__ __forceinline__ unsigned metile_q8lo_bf16(unsigned w, int q) {
  return metile_and_or(w >> (8 * q), 0x000F000Fu, 0x43004300u);
}
__device__ __forceinline__ unsigned metile_q8hi_bf16(unsigned w, int q) {
  return metile_and_or(w >> (8 * q + 4), 0x000F000Fu, 0x45004500u);
}"""

# MLX's microscaling modes in the tensor-core kernel (lower/mma.py): codes as exact bf16x2 / f16x2
# A pairs (the affine integers' pairs: nibbles q and q+4, bytes q and q+2), scale bytes as f32.
# e2m1 magnitudes through byte tables (bf16: low and high bytes; f16: high bytes, the low ones
# are zero), the sign bit moved to bit 15 of each half. e4m3 through f32, exactly: its 7 bits
# under f32's exponent bias less 7 (subnormals: twice that, less 2**-6), 0x7F / 0xFF NaN.
# e8m0: 2**(byte - 127) as f32 bits, byte 0 2**-127 (a subnormal), 255 inf - as mx.dequantize.
MICROSCALING_HELPERS = """__device__ __forceinline__ unsigned metile_e2m1_bf16(unsigned w, int q) {
  const unsigned v = w >> (4 * q), m = v & 0x00070007u, sel = m | (m >> 8);
  const unsigned lo = __byte_perm(0xC0800000u, 0xC0804000u, sel);
  const unsigned hi = __byte_perm(0x3F3F3F00u, 0x40404040u, sel << 4);
  return lo | hi | ((v & 0x00080008u) << 12);
}
__device__ __forceinline__ unsigned metile_e2m1_f16(unsigned w, int q) {
  const unsigned v = w >> (4 * q), m = v & 0x00070007u;
  return __byte_perm(0x3E3C3800u, 0x46444240u, (m << 4) | (m >> 4)) | ((v & 0x00080008u) << 12);
}
__device__ __forceinline__ float metile_e4m3_f32(unsigned c) {
  const unsigned mag = c & 0x7Fu;
  const float normal = __uint_as_float((mag << 20) + 0x3C000000u);
  const float m = mag < 8u ? fmaf(2.0f, normal, -0.015625f) : normal;
  const float s = (c & 0x80u) ? -m : m;
  return mag == 0x7Fu ? __uint_as_float(0x7FC00000u) : s;
}
__device__ __forceinline__ float metile_e8m0_f32(unsigned b) { return __uint_as_float(b ? b << 23 : 0x00400000u); }
__device__ __forceinline__ unsigned metile_pair_bf16(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ unsigned metile_pair_f16(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ unsigned metile_e4m3_bf16(unsigned w, int q) {
  return metile_pair_bf16(metile_e4m3_f32(w >> (8 * q)), metile_e4m3_f32(w >> (8 * q + 16)));
}
__device__ __forceinline__ unsigned metile_e4m3_f16(unsigned w, int q) {
  return metile_pair_f16(metile_e4m3_f32(w >> (8 * q)), metile_e4m3_f32(w >> (8 * q + 16)));
}
// a pair times a scale pair: exact where the products are representable (nvfp4's are)
__device__ __forceinline__ unsigned metile_mul_bf16x2(unsigned a, unsigned b) {
  const __nv_bfloat162 r =
      __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const unsigned*>(&r);
}
__device__ __forceinline__ unsigned metile_mul_f16x2(unsigned a, unsigned b) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const unsigned*>(&r);
}"""

# Two 2, 3, 5 or 6-bit values (masked, lower/mma.py low_pair) as an exact bf16x2 / f16x2 pair:
# OR-ed into the mantissas of 128 (bf16) or 1024 (f16), the base taken back off by one exact
# subtraction (no offset left for the f32 scaling to cancel).
LOWBIT_HELPERS = """__device__ __forceinline__ unsigned metile_qpair_bf16(unsigned lo, unsigned hi) {
  const unsigned v = lo | (hi << 16) | 0x43004300u, o = 0x43004300u;
  const __nv_bfloat162 r =
      __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&v), *reinterpret_cast<const __nv_bfloat162*>(&o));
  return *reinterpret_cast<const unsigned*>(&r);
}
__device__ __forceinline__ unsigned metile_qpair_f16(unsigned lo, unsigned hi) {
  const unsigned v = lo | (hi << 16) | 0x64006400u, o = 0x64006400u;
  const __half2 r = __hsub2(*reinterpret_cast<const __half2*>(&v), *reinterpret_cast<const __half2*>(&o));
  return *reinterpret_cast<const unsigned*>(&r);
}"""

# Rows of x holding an Inf or a NaN in the affine tensor-core kernels (lower/mma.py, exact_rows):
# there the factored sums s * sum(q x) + b * sum(x) give inf - inf, or inf * 0 where q = 0. An
# output that is not finite is recomputed here - each weight dequantized, fmaf(s, q, b) in f32 (zero
# only where s * q + b is), before its product with x, in k order - so that it is NaN, +Inf or
# -Inf as the sum over the dequantized weights is. Not inlined: rare rows, one copy of the loop.
EXACT_ROW_HELPERS = """__device__ __forceinline__ float metile_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float metile_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float metile_f32(float v) { return v; }
__device__ __forceinline__ bool metile_nonfinite(float v) {
  return (__float_as_uint(v) & 0x7F800000u) == 0x7F800000u;
}
template <int BITS, typename X, typename S>
__device__ __noinline__ float metile_affine_dot(const X* x, const unsigned* w, const S* s, const S* b, int row, int col,
                                                int K, int group) {
  const X* xr = x + static_cast<size_t>(row) * K;
  const unsigned* wr = w + static_cast<size_t>(col) * K * BITS / 32;
  const S* sr = s + static_cast<size_t>(col) * (K / group);
  const S* br = b + static_cast<size_t>(col) * (K / group);
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) {
    const unsigned bit = static_cast<unsigned>(k) * BITS, at = bit >> 5, sh = bit & 31u;
    unsigned q = wr[at] >> sh;
    if (sh + BITS > 32u) q |= wr[at + 1] << (32u - sh);  // a value straddling two words
    q &= (1u << BITS) - 1u;
    const float wk = fmaf(metile_f32(sr[k / group]), static_cast<float>(q), metile_f32(br[k / group]));
    acc = fmaf(metile_f32(xr[k]), wk, acc);
  }
  return acc;
}"""

LOCAL_HELPERS = {
    "cuda_exact_rows": EXACT_ROW_HELPERS,
    "cuda_lowbit": LOWBIT_HELPERS,
    "cuda_mma": MMA_HELPERS,
    "cuda_microscaling": MICROSCALING_HELPERS,
    "cuda_cp_async": CP_ASYNC_HELPERS,
    "cuda_q8split": Q8_SPLIT_HELPERS,
    "cuda_norm": NORM_HELPERS,
}


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
        "thread_x": "threadIdx.x",
        "min_i32": "min({0}, {1})",
        "max_i32": "max({0}, {1})",
        "rsqrt": "rsqrtf({0})",
        "byte_perm": "__byte_perm({0}, {1}, {2})",
        "bits_as_f32": "__uint_as_float({0})",
        "bits_as_f16": "__ushort_as_half({0})",
        # the tensor-core schedules' helpers (MMA_HELPERS, Q8_SPLIT_HELPERS, NORM_HELPERS)
        "q4_bf16": "metile_q4_bf16({0}, {1})",
        "q4_f16": "metile_q4_f16({0}, {1})",
        "q8_bf16": "metile_q8_bf16({0}, {1})",
        "q8_f16": "metile_q8_f16({0}, {1})",
        "q8lo_bf16": "metile_q8lo_bf16({0}, {1})",
        "q8hi_bf16": "metile_q8hi_bf16({0}, {1})",
        "norm_bf16": "metile_norm_bf16({0}, {1}, {2})",
        # LOWBIT_HELPERS
        "qpair_bf16": "metile_qpair_bf16({0}, {1})",
        "qpair_f16": "metile_qpair_f16({0}, {1})",
        # (lo, hi, n): bits n.. of the 64-bit hi:lo, n < 32 (lower/mma.py stream)
        "funnel_r": "__funnelshift_r({0}, {1}, {2})",
        # EXACT_ROW_HELPERS
        "nonfinite": "metile_nonfinite({0})",
        "affine_dot": "metile_affine_dot<{0}>({1}, {2}, {3}, {4}, {5}, {6}, {7}, {8})",
        # MICROSCALING_HELPERS
        "e2m1_bf16": "metile_e2m1_bf16({0}, {1})",
        "e2m1_f16": "metile_e2m1_f16({0}, {1})",
        "e4m3_bf16": "metile_e4m3_bf16({0}, {1})",
        "e4m3_f16": "metile_e4m3_f16({0}, {1})",
        "e4m3_f32": "metile_e4m3_f32({0})",
        "e8m0_f32": "metile_e8m0_f32({0})",
        "pair_bf16": "metile_pair_bf16({0}, {0})",
        "pair_f16": "metile_pair_f16({0}, {0})",
        "mul_bf16x2": "metile_mul_bf16x2({0}, {1})",
        "mul_f16x2": "metile_mul_f16x2({0}, {1})",
    }
    zeros = {
        **CStyleRenderer.zeros,
        "bits32x2": "make_uint2(0u, 0u)",
        "bits32x4": "make_uint4(0u, 0u, 0u, 0u)",
        "u8": "(unsigned char)0",
    }
    simd_barrier = "__syncwarp()"

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

    # -- warp-level statements ------------------------------------------------------------
    def mma(self, s: Mma) -> str:
        if s.dtype not in ("bf16", "f16") or len(s.a) != 4 or len(s.b) != 2:
            raise ValueError(f"mma.sync m16n8k16 takes bf16 / f16 operands, 4 A and 2 B registers: {s}")
        args = ", ".join(self.expr(x) for x in (s.c, *s.a, *s.b))
        return f"metile_mma_{s.dtype}({args});"

    def async_copy(self, s: AsyncCopy) -> str:
        args = f"{self.expr(s.dst)}, {self.expr(s.src)}, {self.expr(s.pred)}"
        if s.size == 16:
            return f"metile_cp16({args});"
        if s.size not in (4, 8):
            raise ValueError(f"cp.async copies 4, 8 or 16 bytes, not {s.size}")
        return f"metile_cp_small<{s.size}>({args});"

    def async_commit(self) -> str:
        return "metile_cp_commit();"

    def async_wait(self, pending: int) -> str:
        return f"metile_cp_wait<{pending}>();"

    def shared_bytes(self, s: SharedBytes) -> str:
        if s.size is None:  # sized at launch (dynamic shared memory)
            return f"extern __shared__ __align__({s.align}) unsigned char {s.name}[];"
        return f"__shared__ __align__({s.align}) unsigned char {s.name}[{s.size}];"

    def view(self, s: View) -> str:
        dims = "".join(f"[{d}]" for d in s.dims)
        t = self.types[s.elem]
        return f"{t} (*const {s.name}){dims} = reinterpret_cast<{t} (*){dims}>({self.expr(s.base)});"

    def helpers(self, names: list[str]) -> list[str]:
        generic = [n for n in names if n not in LOCAL_HELPERS]
        out = [h.replace("inline float", "__device__ __forceinline__ float") for h in super().helpers(generic)]
        return out + [LOCAL_HELPERS[n] for n in LOCAL_HELPERS if n in names]

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
        bounds = f"{k.threads_per_group}, {k.min_groups}" if k.min_groups else f"{k.threads_per_group}"
        return f'extern "C" __global__ void __launch_bounds__({bounds}) {k.name}(\n    {joined})'
