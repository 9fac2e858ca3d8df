"""The `mma` schedule (CUDA, sm_80+, 1..32 rows): tensor-core split-K.

A block of W warps owns 16 output columns; warp w takes a contiguous range of
K chunks (a quantization group, or 32 k of a dense weight), and each chunk is
one or more `mma.sync.m16n8k16` (f32 accumulate):

    A (16 x 16): 16 columns x 16 k of the weight - for quantized weights the
                 integers q themselves, exact in bf16/f16 (never s*q+b rounded);
    B (16 x 8):  the same 16 k of 8 rows of x;
    C (16 x 8):  f32, per chunk; then acc += scale * C + bias * sum(x over the group)

so the affine dequantisation is applied per group in f32, after exact integer
products: y = sum_g s_g * sum_k q_k x_k + b_g * sum_k x_k. Lane (g, t) of a warp
loads words of columns n0+g and n0+g+8 covering a quarter of the group; the
k order inside a chunk is free (A and B use the same one), and is chosen so
that a packed word unpacks into register pairs with two bit operations
(nibbles j and j+4 of a word form one bf16x2/f16x2 pair).

The W warps' partial sums are added in warp order through shared memory, and
warp 0 runs the program's epilogue (bias, SwiGLU, residual, ...) through the
generic element rendering. A row's value depends only on its own x row, the
fixed K split and the fixed order, so row invariance holds for 1..32 rows.

Accepted: bf16 or f16 activations; a single projection, SwiGLU's gate and up,
or (opt-in, see fused_mma) weights concatenated into one accumulator, all of
one format: 4-bit, 8-bit, or (opt-in, see dense_mma) dense weights of the
activation dtype with K a multiple of 32. Other specs use `simd_splitk`.
"""

from __future__ import annotations

import os

from ..codegen.ast import Barrier, Decl, If, KernelDef, Raw
from ..spec import ProjectionSpec
from .lower import LowerError, _Lowering, _Scope
from .poly import Poly

WARPS = 8  # K split per block of 16 columns
COLUMNS = 16  # one m16 tile of output columns per block
UNROLL = 1  # chunk-loop unrolling: 1 measured fastest on the H200 (1, 4 and 8 tried)


def mma_unroll() -> int:
    """MLX_METILE_CUDA_MMA_UNROLL overrides UNROLL for tuning runs."""
    value = os.environ.get("MLX_METILE_CUDA_MMA_UNROLL", str(UNROLL))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"MLX_METILE_CUDA_MMA_UNROLL: expected a positive integer, got {value!r}")
    return int(value)


def mma_warps() -> int:
    """MLX_METILE_CUDA_MMA_WARPS (1, 2, 4, 8 or 16) overrides WARPS for tuning runs;
    the K split is part of a row's sum order, so rows stay invariant per setting."""
    value = os.environ.get("MLX_METILE_CUDA_MMA_WARPS", str(WARPS))
    if value not in ("1", "2", "4", "8", "16"):
        raise ValueError(f"MLX_METILE_CUDA_MMA_WARPS: expected 1, 2, 4, 8 or 16, got {value!r}")
    return int(value)


def mma_supported(spec: ProjectionSpec) -> bool:
    if spec.act_dtype not in ("bf16", "f16"):
        return False
    if len(spec.weights) != 1 and spec.epilogue != "swiglu" and not fused_mma():
        return False  # several weights concatenated into one accumulator (opt-in, see fused_mma)
    formats = {(w.bits, w.group_size, w.dtype if not w.quantized else "") for w in spec.weights}
    if len(formats) != 1:
        return False
    for w in spec.weights:
        if w.quantized and w.bits not in (4, 8):
            return False
        if not w.quantized and (w.dtype != spec.act_dtype or spec.k_divisor % 32 or not dense_mma()):
            return False
    return True


def dense_mma() -> bool:
    """Dense weights take the tensor-core schedule only with MLX_METILE_CUDA_MMA_DENSE=1:
    on the H200 it lost to split-K at 1-4 rows (0.65-0.8x stock against 0.9-1.0x)
    and won at 8-32 (bench/results/h200-sweep-*), and one spec keeps one
    schedule for all of 1..32 rows so that its rows stay invariant."""
    return os.environ.get("MLX_METILE_CUDA_MMA_DENSE", "0") == "1"


def mma_pipeline() -> bool:
    """MLX_METILE_CUDA_MMA_PIPELINE=1: each chunk's weight loads are issued one
    chunk ahead (register double-buffering). A tuning knob, written after the
    session's GPU time ran out: compiled in the tests, not yet run or timed."""
    return os.environ.get("MLX_METILE_CUDA_MMA_PIPELINE", "0") == "1"


def fused_mma() -> bool:
    """Several weights concatenated into one accumulator (fused q/k/v) take the
    tensor-core schedule only with MLX_METILE_CUDA_MMA_FUSED=1: written after the
    session's GPU time ran out, it has not run on a GPU yet."""
    return os.environ.get("MLX_METILE_CUDA_MMA_FUSED", "0") == "1"


def chunk_k(spec: ProjectionSpec) -> int:
    """k per chunk (one scale per column): the group, or 32 for dense weights."""
    w = spec.weights[0]
    return w.group_size if w.quantized else 32


class MMALowering(_Lowering):
    def __init__(self, program, schedule, divisors, vector_buffers, spec: ProjectionSpec):
        super().__init__(program, schedule, divisors, vector_buffers)
        self.spec = spec
        self.pipeline = mma_pipeline()
        # (variable, type, zero, load expression, column set-up lines) of each prefetched load
        self.prefetched: list[tuple[str, str, str, str, list[str]]] = []

    def lower(self) -> KernelDef:
        s, spec = self.s, self.spec
        body: list = []
        root = _Scope(body)
        order = self.prologue(body, root)
        nacc = len(order)
        if nacc != (2 if spec.epilogue == "swiglu" else 1):
            raise LowerError(f"{self.p.name}: unexpected accumulators for the mma schedule")
        rt = s.BM // 8  # row tiles of 8
        act = spec.act_dtype
        mma = "metile_mma_bf16" if act == "bf16" else "metile_mma_f16"
        wf = spec.weights[0]
        ck = chunk_k(spec)
        self.use_helper("cuda_mma")
        lines = [
            "const int warp = threadIdx.x >> 5;",
            "const int g = (threadIdx.x & 31) >> 2;",
            "const int t = threadIdx.x & 3;",
            f"const int chunks = K / {ck};",
            f"const int per_warp = (chunks + {s.SG - 1}) / {s.SG};",
            "const int c_begin = warp * per_warp;",
            "const int c_end = min(chunks, c_begin + per_warp);",
        ]
        for j in range(nacc):
            lines.append(f"float part{j}[{rt}][4] = {{}};")
        lines.append(f"#pragma unroll {mma_unroll()}")
        lines.append("for (int ch = c_begin; ch < c_end; ++ch) {")
        body_lines: list[str] = []
        # x: 8 values (16 bytes) per word-slice of this lane's quarter, per row tile
        quarter = ck // 4  # k per lane per chunk
        words_per_lane = quarter * (wf.bits or 32) // 32 if wf.quantized else 0
        body_lines.append(f"const int kq = ch * {ck} + t * {quarter};")
        slices = quarter // 8  # 8-k slices (16 bytes of x) per lane per chunk
        for r in range(rt):
            body_lines.append(f"const int xrow{r} = pid1 * {s.BM} + {8 * r} + g;")
            body_lines.append(f"const bool xok{r} = xrow{r} < M;")
            for sl in range(slices):
                body_lines.append(
                    f"const uint4 xv{r}_{sl} = xok{r} ? *reinterpret_cast<const uint4*>(x + xrow{r} * K + kq + {8 * sl}) "
                    ": make_uint4(0u, 0u, 0u, 0u);"
                )
        for j in range(nacc):
            # the weights feeding accumulator j: SwiGLU's gate or up, one projection, or a concatenation
            members = [j] if spec.epilogue == "swiglu" or len(spec.weights) == 1 else list(range(len(spec.weights)))
            body_lines += self.chunk_products(j, members, spec.weights[members[0]], rt, slices, words_per_lane, mma)
        if self.prefetched:  # the first chunk's weights, loaded before the loop
            loop_at = lines.index(f"#pragma unroll {mma_unroll()}")
            pre = [f"{typ} {name};" for name, typ, _, _, _ in self.prefetched]
            for name, _, zero, load, setup in self.prefetched:
                pre.append("{")
                pre += setup
                pre.append(f"  const int kq = c_begin * {ck} + t * {quarter};")
                pre.append(f"  {name} = c_begin < c_end ? ({load}) : {zero};")
                pre.append("}")
            lines[loop_at:loop_at] = pre
        lines += ["  " + ln for ln in body_lines]
        lines.append("}")
        body.append(Raw(lines))

        # warps' partial sums, added in warp order; warp 0 finishes
        body.append(Decl("f32", "red", None, dims=(s.SG, nacc, rt, 4, 32), shared=True))
        store = []
        for j in range(nacc):
            for r in range(rt):
                for e in range(4):
                    store.append(f"red[warp][{j}][{r}][{e}][threadIdx.x & 31] = part{j}[{r}][{e}];")
        body.append(Raw(store))
        body.append(Barrier())
        finish = If("warp == 0")
        fscope = _Scope(finish.body, root, fence=True)
        sums = []
        for j in range(nacc):
            sums.append(f"float fin{j}[{rt}][4];")
            for r in range(rt):
                for e in range(4):
                    terms = " + ".join(f"red[{w}][{j}][{r}][{e}][threadIdx.x & 31]" for w in range(1, s.SG))
                    sums.append(
                        f"fin{j}[{r}][{e}] = "
                        + " + ".join([f"red[0][{j}][{r}][{e}][threadIdx.x & 31]"] + ([terms] if terms else []))
                        + ";"
                    )
        finish.body.append(Raw(sums))
        for r in range(rt):
            for e in range(4):
                row = Poly.sym("t") * 2 + (8 * r + (e & 1))
                col = Poly.sym("g") + 8 * (e >> 1)
                self.render_stores(finish.body, fscope, row, col, lambda j, r=r, e=e: f"fin{j}[{r}][{e}]")
        body.append(finish)
        return self.kernel(body)

    def chunk_products(
        self, j: int, members: list[int], w, rt: int, slices: int, words_per_lane: int, mma: str
    ) -> list[str]:
        """One chunk of accumulator j: loads, unpacking, MMAs and the group's scale.
        Several members (a concatenation) share the format; each lane loads from
        the member its column belongs to."""
        out: list[str] = [f"{{  // weight {j}" if len(members) == 1 else f"{{  // weights {members}"]
        cols = ("n0a", "n0b")
        out.append(f"  const int n0a = pid0 * {COLUMNS} + g, n0b = n0a + 8;")
        if len(members) == 1:
            n = f"N{j}"
            out.append(f"  const bool oka = n0a < {n}, okb = n0b < {n};")
        else:
            for half, col in zip(("a", "b"), cols):
                base = "0"
                for i in members:
                    out.append(f"  const int {col}_{i} = {col} - ({base});")
                    out.append(f"  const bool ok{half}_{i} = {col}_{i} >= 0 && {col}_{i} < N{i};")
                    base = f"{base} + N{i}"

        def select(half: str, col: str, expr, zero: str) -> str:
            if len(members) == 1:
                return f"ok{half} ? {expr(members[0], col)} : {zero}"
            chain = zero
            for i in reversed(members):
                chain = f"(ok{half}_{i} ? {expr(i, f'{col}_{i}')} : {chain})"
            return chain

        setup = list(out[1:])
        ck = chunk_k(self.spec)

        def weight_load(name: str, typ: str, load: str, zero: str) -> None:
            if not self.pipeline:
                out.append(f"  const {typ} {name} = {load};")
                return
            ahead = f"w{j}{name}_n"  # this chunk's value, loaded one iteration earlier
            out.append(f"  const {typ} {name} = {ahead};")
            out.append(
                f"  {{ const int kq = (ch + 1) * {ck} + t * {ck // 4}; {ahead} = ch + 1 < c_end ? ({load}) : {zero}; }}"
            )
            self.prefetched.append((ahead, typ, zero, load, setup))

        out.append(f"  float c[{rt}][4] = {{}};")
        if w.quantized:
            words_row = f"(K / {32 // w.bits})"
            # the lane's words are consecutive and aligned to their count: 4, 8 or 16-byte loads
            vec = {1: ("unsigned", 1), 2: ("uint2", 2), 4: ("uint4", 4), 8: ("uint4", 4)}[words_per_lane]
            for half, col in zip(("a", "b"), cols):
                for v0 in range(0, words_per_lane, vec[1]):
                    zero = {"unsigned": "0u", "uint2": "make_uint2(0u, 0u)", "uint4": "make_uint4(0u, 0u, 0u, 0u)"}

                    def load(i, local, v0=v0):
                        at = f"w{i} + {local} * {words_row} + kq / {32 // w.bits} + {v0}"
                        return f"*reinterpret_cast<const {vec[0]}*>({at})"

                    weight_load(f"w{half}v{v0}", vec[0], select(half, col, load, zero[vec[0]]), zero[vec[0]])
                    for i in range(vec[1]):
                        comp = "" if vec[1] == 1 else "." + "xyzw"[i]
                        out.append(f"  const unsigned w{half}{v0 + i} = w{half}v{v0}{comp};")
            # per word: int4 -> 8 k (2 MMAs of 4 slots per row); int8 -> 4 k (1 MMA)
            k_per_word = 32 // w.bits
            for i in range(words_per_lane):
                sl, off = divmod(i * k_per_word, 8)  # which 16-byte x slice, and where in it
                pairs = 4 if w.bits == 4 else 2
                for p in range(0, pairs, 2):
                    # A regs: (row g, slots 2t..), (row g+8, slots 2t..), (row g, slots 2t+8..), (row g+8, ...)
                    a = [f"metile_q{w.bits}_{self.spec.act_dtype}(w{h}{i}, {q})" for q in (p, p + 1) for h in "ab"]
                    bs = []
                    for r in range(rt):
                        bs.append(self.x_pairs(r, sl, off, w.bits, p))
                    for r in range(rt):
                        b0, b1 = bs[r]
                        out.append(f"  {mma}(c[{r}], {a[0]}, {a[1]}, {a[2]}, {a[3]}, {b0}, {b1});")
            groups = f"(K / {w.group_size})"
            sdt = "__bfloat162float" if w.dtype == "bf16" else ("__half2float" if w.dtype == "f16" else "")
            for half, col in zip(("a", "b"), cols):
                for name in ("scales", "biases"):

                    def param(i, local, name=name):
                        return f"{sdt}({name}{i}[{local} * {groups} + ch])"

                    out.append(f"  const float {name[0]}{half} = {select(half, col, param, '0.0f')};")
            # sum of x over the group for rows 2t, 2t+1 of each tile
            for r in range(rt):
                terms = []
                for sl in range(slices):
                    for q in range(4):
                        terms.append(f"metile_pair_sum_{self.spec.act_dtype}(xv{r}_{sl}.{'xyzw'[q]})")
                out.append(f"  float xs{r} = {' + '.join(terms)};")
                out.append(f"  xs{r} += __shfl_xor_sync(0xffffffffu, xs{r}, 1);")
                out.append(f"  xs{r} += __shfl_xor_sync(0xffffffffu, xs{r}, 2);")
                out.append(f"  const float xs{r}_0 = __shfl_sync(0xffffffffu, xs{r}, 8 * t);")
                out.append(f"  const float xs{r}_1 = __shfl_sync(0xffffffffu, xs{r}, 8 * t + 4);")
                for e in range(4):
                    half = "a" if e < 2 else "b"
                    out.append(
                        f"  part{j}[{r}][{e}] = fmaf(s{half}, c[{r}][{e}], fmaf(b{half}, xs{r}_{e & 1}, part{j}[{r}][{e}]));"
                    )
        else:
            for half, col in zip(("a", "b"), cols):

                def dense(i, local):
                    return f"*reinterpret_cast<const uint4*>(w{i} + {local} * K + kq)"

                zero4 = "make_uint4(0u, 0u, 0u, 0u)"
                weight_load(f"w{half}", "uint4", select(half, col, dense, zero4), zero4)
            # 8 consecutive k per lane: slots (2t, 2t+1) and (2t+8, 2t+9) take pairs 0,1 then 2,3
            for p0, p1 in (("x", "y"), ("z", "w")):
                for r in range(rt):
                    out.append(f"  {mma}(c[{r}], wa.{p0}, wb.{p0}, wa.{p1}, wb.{p1}, xv{r}_0.{p0}, xv{r}_0.{p1});")
            for r in range(rt):
                for e in range(4):
                    out.append(f"  part{j}[{r}][{e}] += c[{r}][{e}];")
        out.append("}")
        return out

    def x_pairs(self, r: int, sl: int, off: int, bits: int, p: int) -> tuple[str, str]:
        """B registers for pair slots p, p+1 of a word whose k start at `off`
        inside x slice `sl`: the x values at the same k the A pairs hold."""
        v = f"xv{r}_{sl}"
        comps = "xyzw"
        # a pair holds the values `gap` apart in the word (nibbles q, q+4; bytes q, q+2):
        # x[off + q] and x[off + q + gap], both low or both high halves of their u32
        gap = 4 if bits == 4 else 2

        def pair(q: int) -> str:
            lo, hi = comps[(off + q) // 2], comps[(off + q + gap) // 2]
            sel = "0x5410" if q % 2 == 0 else "0x7632"
            return f"__byte_perm({v}.{lo}, {v}.{hi}, {sel})"

        return pair(p), pair(p + 1)


def lower_mma(program, schedule, divisors, vector_buffers, spec: ProjectionSpec) -> KernelDef:
    if not mma_supported(spec):
        raise LowerError(f"{program.name}: not supported by the mma schedule")
    return MMALowering(program, schedule, divisors, vector_buffers, spec).lower()
