"""The `mma` schedule (CUDA, sm_80+, 1..32 rows): tensor-core split-K, weights loaded by the lanes.

A block of W warps owns T tiles of 16 output columns; warp w takes a contiguous range of K chunks
(a quantization group, or 32 k of a dense weight), and each chunk is one or more
`mma.sync.m16n8k16` (f32 accumulate) per tile:

    A (16 x 16): 16 columns x 16 k of the weight - for quantized weights the
                 integers q themselves, exact in bf16/f16 (never s*q+b rounded);
    B (16 x 8):  the same 16 k of 8 rows of x;
    C (16 x 8):  f32, per chunk; then acc += scale * C + bias * sum(x over the group)

so the affine dequantisation is applied per group in f32, after exact integer products:
y = sum_g s_g * sum_k q_k x_k + b_g * sum_k x_k. The group sums of x come from the tensor cores
too (A = ones), shared by every tile and weight. Lane (g, t) of a warp loads words of columns
n0+g and n0+g+8 covering a quarter of the group; the k order inside a chunk is free (A and B use
the same one), and is chosen so that a packed word unpacks into register pairs with two bit
operations (nibbles j and j+4 of a word form one bf16x2/f16x2 pair).

Loads: each iteration issues the loads of a batch of chunks (Schedule.batch) before their math;
with a batch of 2 or 4 on an aligned K split, each column's scales and biases for the batch come
in one 4 or 8-byte load (every warp-wide load touches one cache line per column, so a 2-byte
scale load costs as much L1 work as a weight load).

The W warps' partial sums are added in warp order through shared memory, and warp 0 runs the
program's epilogue (bias, SwiGLU, residual, ...) through the generic element rendering. A row's
value depends only on its own x row, the fixed K split and the fixed order, so row invariance
holds for 1..32 rows; batch and tiles change where loads are issued, not the order of any sum.

Microscaled weights (mxfp4, mxfp8, nvfp4; micro_math): the codes decoded into exact bf16/f16 A
pairs, C scaled per group by the e8m0 scale in f32 (mx), or nvfp4's e4m3 scale folded into the
A pairs over chunks of two groups of 16 (exact products); no biases, so no sums of x.

Affine 2, 3, 5 and 6 bits (low_pair), every group: the lane's words one bit stream, values j and
j + 4 of each 8 k one exact pair (no offset). Where a lane's quarter of a group is not whole words
(2 bits at group 32; 3 and 5 at 32 and 64; 6 at 32) the lane loads the words covering it and
funnel-shifts them by its first bit's place in the first word (`stream`).

Accepted (check_mma_spec): bf16 or f16 activations; a single projection, SwiGLU's gate and up,
or weights concatenated into one accumulator (fused q/k/v), all of one format: affine 4-bit or
8-bit (2, 3, 5, 6 at groups of whole 8-k blocks), mxfp4, mxfp8, nvfp4, or dense weights of the activation
dtype with K a multiple of 32.
docs/SCHEDULES.md, "mma" and "mma: microscaled weights".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..codegen.ast import (
    TRUE,
    ZERO_INIT,
    Assign,
    Barrier,
    Block,
    Call,
    Cast,
    Const,
    Convert,
    Decl,
    Decls,
    Expr,
    If,
    KernelDef,
    Load,
    Loop,
    Mma,
    Paren,
    PtrCast,
    PtrType,
    Var,
    Zero,
    chain,
    select,
)
from ..schedule import Schedule
from ..schedule.geometry import TILE, chunk_k
from ..spec import ProjectionSpec
from .base import LowerError, Lowering, Scope
from .poly import Poly

V, P = Var, Paren
SPLIT_ALIGN = 4  # chunks: each warp's range starts at a multiple of this where K allows
LANE = Call("thread_x") & 31  # the lane, as the partial-sum arrays index it
COMPONENTS = "xyzw"


def check_mma_spec(spec: ProjectionSpec, name: str) -> None:
    """What the tensor-core kernels can compute: bf16 / f16 activations; one weight format for
    all weights - affine 4 or 8 bits, mxfp4, mxfp8 or nvfp4, or dense of the activation dtype
    with K a multiple of 32."""
    formats = {(w.mode, w.bits, w.group_size, w.dtype if not w.quantized else "") for w in spec.weights}
    ok = spec.act_dtype in ("bf16", "f16") and len(formats) == 1
    for w in spec.weights:
        if w.affine and w.bits not in (4, 8) and w.group_size % 32:
            ok = False  # (2, 3, 5 and 6 bits: where a lane's quarter of a group is whole blocks of 8 k)
        if w.quantized and not w.affine and w.mode not in MICROSCALED:
            ok = False
        if not w.quantized and (w.dtype != spec.act_dtype or spec.k_divisor % 32):
            ok = False
    if not ok:
        raise LowerError(f"{name}: not supported by the mma schedule")


# MLX's microscaling modes -> the helper turning a word's codes into A pairs (e2m1: nibbles q
# and q+4; e4m3: bytes q and q+2, the affine integers' pairs) and the f32 decoding of a scale byte
MICROSCALED = {"mxfp4": ("e2m1", "e8m0"), "mxfp8": ("e4m3", "e8m0"), "nvfp4": ("e2m1", "e4m3")}

# What the integer helpers (codegen/cuda.py metile_q*_*) add to each q: the
# mantissa trick's base (128 for bf16, 1024 for f16); int8 as bf16 has none.
# 2, 3, 5 and 6-bit values have none: their helpers take the base back off in bf16 / f16, exactly
# (their larger scales would carry the offset's f32 rounding past the tolerance).
Q_OFFSET = {(4, "bf16"): 128, (4, "f16"): 1024, (8, "f16"): 1024}

# With q8_split: the low nibble enters as 128 + l, the high one as 2048 + 16 h
Q8_SPLIT_OFFSET = 2048 + 128

# bf16 / f16 pairs of 1.0: the A operand that turns an MMA into sums of x
ONES = {"bf16": Const(0x3F803F80, "u32", hex=8), "f16": Const(0x3C003C00, "u32", hex=8)}


@dataclass(frozen=True)
class LaneLoad:
    """One lane's load: `vtype name = cond ? *(vtype*)addr : 0`."""

    vtype: str
    name: str
    cond: Expr
    addr: Expr

    def value(self) -> Expr:
        return select(P(self.cond), Load(self.vtype, self.addr), Zero(self.vtype))

    def decl(self) -> Decl:
        return Decl(self.vtype, self.name, self.value(), const=True)


@dataclass(frozen=True)
class Derived:
    """A value computed from loads, declared among them: `vtype name = value`."""

    vtype: str
    name: str
    expr: Expr

    def value(self) -> Expr:
        return self.expr

    def decl(self) -> Decl:
        return Decl(self.vtype, self.name, self.expr, const=True)


def to_f32(dtype: str, bits: Expr) -> Expr:
    """A 16-bit scale or bias's raw bits (bf16 / f16) as f32; f32 values as they are."""
    if dtype == "bf16":
        return Call("bits_as_f32", (Cast("bits32", bits) << 16,))
    if dtype == "f16":
        return Convert("f32", "f16", Call("bits_as_f16", (bits,)))
    return bits


def half_to_f32(dtype: str, word: Expr, high: bool) -> Expr:
    """The low or high 16-bit half of a 32-bit word of scales, as f32."""
    half = P(word >> 16) if high else P(word & Const(0xFFFF, "u32", hex=4))
    if dtype == "bf16":
        return Call("bits_as_f32", (half << 16,))
    return Convert("f32", "f16", Call("bits_as_f16", (Cast("bits16", half),)))


class MMALowering(Lowering):
    def __init__(self, program, schedule: Schedule, spec: ProjectionSpec):
        super().__init__(program, schedule, spec)
        check_mma_spec(spec, program.name)
        # RMSNorm of x (spec.norm_eps): x times the norm weight in each lane's x load, the rows'
        # sums of squares beside it (codegen/cuda.py NORM_HELPERS), 1 / rms applied to the sums
        self.norm = spec.norm_eps is not None
        self.batch = schedule.batch
        self.wide = schedule.wide
        self.q8_split = schedule.q8split
        # 16-column tiles per K-range warp group; with xshare (mma_xshare.py) per warp
        self.tiles = schedule.BN // TILE // (schedule.SG if schedule.xshare else 1)
        # K ranges (the sum order) and how many each warp takes, one after the other
        self.splits = schedule.splits or schedule.SG
        self.per_warp = 1 if schedule.xshare else self.splits // schedule.SG
        self.rt = schedule.BM // 8  # row tiles of 8
        self.ck = chunk_k(spec, schedule.wide)
        self.quarter = self.ck // 4  # k per lane per chunk
        self.slices = self.quarter // 8  # 16-byte slices of x per lane per chunk
        w = spec.weights[0]
        # microscaled weights: codes whose values are exact in bf16 / f16, scaled per group in
        # f32 after the MMA (mx: e8m0 scales), or nvfp4's e4m3 scale folded into the lane's A
        # pairs (code value * scale is exact in both: at most 6 significant bits, 2**-13..2688)
        self.micro = w.quantized and not w.affine
        self.folded = w.mode == "nvfp4"
        self.words = self.quarter * w.bits // 32 if w.quantized else 0  # packed words per lane and column
        # affine 2, 3, 5 and 6 bits: the lane's words one bit stream (values may straddle words),
        # unpacked per block of 8 k as the 4-bit words are (pairs of values j and j + 4)
        self.lowbit = w.affine and w.bits not in (4, 8)
        self.units = self.quarter // 8 if self.lowbit else self.words  # A-pair units: words, or blocks of 8 k
        # a lane's quarter of a group not whole words: the words covering it loaded one by one,
        # then shifted into the stream of its values (chunks start at a word: groups of >= 32)
        self.stream = self.lowbit and self.quarter * w.bits % 32 != 0
        if self.stream:
            lane_bits = self.quarter * w.bits
            covering = [((t + 1) * lane_bits - 1) // 32 - t * lane_bits // 32 + 1 for t in range(4)]
            self.stream_words = -(-lane_bits // 32)  # words of the shifted stream
            self.words = max(covering)  # words loaded; lanes covering fewer skip the last (`wtail`)
            self.tail_lanes = sum(1 << t for t in range(4) if covering[t] == self.words)
        # the lane's words are consecutive and aligned to their count: loaded 1, 2 or 4 at a time
        self.word_width = max((n for n in (1, 2, 4) if self.words % n == 0), default=0)
        if self.stream:  # (the covering words start at any word)
            self.word_width = 1
        self.word_vector = {1: "bits32", 2: "bits32x2", 4: "bits32x4"}.get(self.word_width)
        self.sector = schedule.sector
        if self.sector:  # a slice's 8 k: 1 word (4-bit) or 2 (8-bit), loaded together
            self.word_width = w.bits // 4
            self.word_vector = {1: "bits32", 2: "bits32x2"}[self.word_width]
        # the K split: warps' chunk ranges start at multiples of SPLIT_ALIGN when K
        # holds whole multiples of it - a property of the spec alone, so every row
        # bucket splits K alike (a row's sum order must not depend on the row count)
        self.align = SPLIT_ALIGN if w.quantized and spec.k_divisor % (SPLIT_ALIGN * self.ck) == 0 else 1
        # then a batch's 16-bit scales (and biases) of one column come in one 4 or 8-byte load
        # (wide chunks load their two groups' as a 4-byte pair instead)
        self.scale_vector = (
            self.align == SPLIT_ALIGN and w.affine and w.dtype != "f32" and self.batch in (2, 4) and not self.wide
        )

    # -- the weights feeding each accumulator ---------------------------------
    def members(self, j: int) -> list[int]:
        """SwiGLU's gate or up, one projection, or a concatenation."""
        spec = self.spec
        return [j] if spec.epilogue == "swiglu" or len(spec.weights) == 1 else list(range(len(spec.weights)))

    def column_setup(self, nacc: int) -> list:
        """Per tile and half (columns g and g+8): the column, and per member weight
        its local column and whether this lane's column lies in it."""
        out: list = []
        for tile in range(self.tiles):
            for h in "ab":
                col = self.col_base() + TILE * tile + V("g")
                out.append(Decl("int", f"n{tile}{h}", col + 8 if h == "b" else col, const=True))
        seen: set[tuple[int, int, str]] = set()
        for j in range(nacc):
            members = self.members(j)
            for tile in range(self.tiles):
                for h in "ab":
                    col, base = V(f"n{tile}{h}"), Const(0)
                    for i in members:
                        if (i, tile, h) in seen:
                            continue
                        seen.add((i, tile, h))
                        local, n = V(f"n{tile}{h}_{i}"), V(f"N{i}")
                        if len(members) == 1:
                            out.append(Decl("bool", f"ok{tile}{h}_{i}", col.lt(n), const=True))
                            out.append(Decl("int", local.name, col, const=True))
                        else:
                            out.append(Decl("int", local.name, col - P(base), const=True))
                            out.append(Decl("bool", f"ok{tile}{h}_{i}", local.ge(0).and_(local.lt(n)), const=True))
                        base = base + n
        return out

    def col_base(self) -> Expr:
        """The first output column of this lane's tiles."""
        return V("pid0") * self.s.BN

    def select(self, j: int, tile: int, h: str, addr, live: Expr | None) -> tuple[Expr, Expr]:
        """(condition, address) of a load from the member weight this lane's
        column belongs to; the condition is false outside every member."""
        members = self.members(j)
        oks = [V(f"ok{tile}{h}_{i}") for i in members]
        cond = oks[0] if len(oks) == 1 else P(chain("||", oks))
        at = addr(members[-1], V(f"n{tile}{h}_{members[-1]}"))
        for i in reversed(members[:-1]):
            at = P(select(V(f"ok{tile}{h}_{i}"), addr(i, V(f"n{tile}{h}_{i}")), at))
        return (cond if live is None else live.and_(cond)), at

    # -- one chunk's loads ------------------------------------------------------
    def chunk_loads(self, b: int, ch: Expr, live: Expr | None, nacc: int) -> list:
        """Every load of chunk `ch` of a batch, zero where its condition is false."""
        return self.x_loads(b, ch, live) + self.weight_loads(b, ch, live, nacc)

    def slice_k(self, ch: Expr, sl: int) -> Expr:
        """The first k of the lane's x slice `sl` of chunk `ch` (see the sector layout)."""
        if self.sector:
            return P(ch) * self.ck + 32 * sl + V("t") * 8
        return P(ch) * self.ck + V("t") * self.quarter + 8 * sl

    def x_loads(self, b: int, ch: Expr, live: Expr | None) -> list:
        """The lane's x: per row tile, its quarter of the chunk in 16-byte slices (with a fused
        RMSNorm: times the norm weight's slices, loaded first, their squares summed per row)."""
        out: list = []
        if self.norm:
            for sl in range(self.slices):
                out.append(LaneLoad("bits32x4", f"gv{sl}_{b}", live or TRUE, V("norm") + self.slice_k(ch, sl)))
        for r in range(self.rt):
            cond = V(f"xok{r}") if live is None else live.and_(V(f"xok{r}"))
            for sl in range(self.slices):
                addr = V("x") + V(f"xrow{r}") * V("K") + self.slice_k(ch, sl)
                x = LaneLoad("bits32x4", f"xv{r}_{sl}_{b}", cond, addr)
                if self.norm:
                    norm = Call("norm_bf16", (x.value(), V(f"gv{sl}_{b}"), V(f"sq{r}")))
                    x = Derived("bits32x4", x.name, norm)
                out.append(x)
        return out

    def sq_bytes(self) -> int:
        """Shared memory of the warps' sums of squares of their rows (a fused RMSNorm)."""
        return self.s.SG * self.s.BM * 4 if self.norm else 0

    def sq_declaration(self):
        return Decl("f32", "metile_sq", None, dims=(self.s.SG, self.s.BM), shared=True)

    def norm_lines(self) -> tuple[list, list]:
        """A fused RMSNorm's statements after the K loop (each warp's sums of squares of its rows
        into shared memory) and in the finishing warp (1 / rms per row of the lane's sums, the
        warps' parts added in warp order, so a row's value depends on K's split alone)."""
        if not self.norm:
            return [], []
        s, rt = self.s, self.rt
        g, t, sq = V("g"), V("t"), V("metile_sq")
        after: list = [self.sq_declaration()]
        for r in range(rt):
            store = Assign(sq.at(V("warp"), Const(8 * r) + g), V(f"sq{r}").at(g & 1))
            after.append(If(t.eq(P(g >> 1)), [store], braces=False))
        finish: list = []
        eps = Const(float(f"{self.spec.norm_eps:.9g}"), "f32")  # what f32 holds of it
        for r in range(rt):
            for h in range(2):
                row = 2 * t + (8 * r + h)
                total = chain("+", [sq.at(w, row) for w in range(s.SG)])
                inv = Call("rsqrt", (P(total) / Cast("f32", V("K")) + eps,))
                finish.append(Decl("f32", f"inv{r}_{h}", inv, const=True))
        return after, finish

    def sector_word(self, v0: int, bits: int) -> int:
        """With the sector layout: the first of the lane's words v0.. among its chunk's words at
        t = 0 (slice v0 / width of the 4 lanes' 32 k; the lane's own 8 k are t * 8 on)."""
        return v0 // self.word_width * bits

    def weight_loads(self, b: int, ch: Expr, live: Expr | None, nacc: int) -> list:
        """The lane's weights (and scales, biases) of chunk `ch`, from global memory."""
        spec, ck, quarter = self.spec, self.ck, self.quarter
        kq = P(ch) * ck + V("t") * quarter
        out: list = []
        w = spec.weights[0]
        for j in range(nacc):
            for tile in range(self.tiles):
                for h in "ab":
                    if not w.quantized:

                        def dense(i, local):
                            return V(f"w{i}") + local * V("K") + kq

                        out.append(LaneLoad("bits32x4", f"w{j}_{tile}{h}_{b}", *self.select(j, tile, h, dense, live)))
                        continue
                    vec = self.word_vector
                    for v0 in range(0, self.words, self.word_width):

                        def packed(i, local, v0=v0):
                            words_row = P(V("K") / (32 // w.bits)) if 32 % w.bits == 0 else P(V("K") * w.bits / 32)
                            if self.sector:
                                at = P(ch) * (ck * w.bits // 32) + self.sector_word(v0, w.bits) + V("t") * (w.bits // 4)
                                return V(f"w{i}") + local * words_row + at
                            if 32 % w.bits:  # (3, 5, 6 bits: the lane's first bit is a word's)
                                return V(f"w{i}") + local * words_row + P(kq) * w.bits / 32 + v0
                            return V(f"w{i}") + local * words_row + P(kq) / (32 // w.bits) + v0

                        name = f"w{j}_{tile}{h}v{v0}_{b}"
                        cond, addr = self.select(j, tile, h, packed, live)
                        if self.stream and v0 == self.words - 1 and self.tail_lanes != 15:
                            cond = cond.and_(V("wtail"))  # past the lane's bits (the next group's, or K's end)
                        out.append(LaneLoad(vec, name, cond, addr))
                    if self.micro:
                        out.append(self.micro_scale_load(j, tile, h, b, ch, live))
                        continue
                    # scales and biases as raw bits, converted where they are used; with
                    # scale_vector, chunk 0 of a batch loads the whole batch's
                    if self.scale_vector and b:
                        continue
                    typ = "f32" if w.dtype == "f32" else "bits16"
                    if self.scale_vector:
                        typ = {2: "bits32", 4: "bits32x2"}[self.batch]
                    if self.wide:
                        typ = "bits32"
                    group = 2 * P(ch) if self.wide else P(ch)
                    for name, letter in (("scales", "s"), ("biases", "z")):

                        def param(i, local, name=name, typ=typ, group=group):
                            at = local * P(V("K") / w.group_size) + group
                            if typ == "f32":
                                return V(f"{name}{i}") + at
                            halves = PtrCast(PtrType("bits16", const_elem=True), V(f"{name}{i}"))
                            if typ == "bits16":
                                return halves + at
                            return PtrCast(PtrType(typ, const_elem=True), halves + at)

                        out.append(LaneLoad(typ, f"{letter}{j}_{tile}{h}_{b}", *self.select(j, tile, h, param, live)))
        return out

    def low_value(self, words: str, n: int) -> Expr:
        """Value n of the lane's bit stream of 2, 3, 5 or 6-bit values (its words `words`0, 1, ...):
        from one word, or the two it straddles."""
        bits = self.spec.weights[0].bits
        wi, sh = divmod(n * bits, 32)
        mask = Const((1 << bits) - 1, "u32", hex=2)
        lo = V(f"{words}{wi}")
        if sh + bits <= 32:
            return P((P(lo >> sh) if sh else lo) & mask)
        return P(P(P(lo >> sh) | P(V(f"{words}{wi + 1}") << (32 - sh))) & mask)

    def stream_lines(self) -> list:
        """The lane's constants of `stream`: its first bit's place in its first word, and whether
        it covers the last of the words loaded (`tail_lanes`: a bit per t)."""
        if not self.stream:
            return []
        lane_bits = self.quarter * self.spec.weights[0].bits
        return [
            Decl("bits32", "wsh", Cast("bits32", P(V("t") * lane_bits)) & 31, const=True),
            Decl("bool", "wtail", P(P(Const(self.tail_lanes) >> V("t")) & 1).ne(0), const=True),
        ]

    def stream_decls(self, words: str, loaded: str) -> list:
        """The lane's bit stream from its loaded words `loaded`0.. (its first value at bit wsh of
        the first): word i funnel-shifted with word i + 1 (zero past the last loaded)."""
        out: list = []
        for i in range(self.stream_words):
            hi: Expr = V(f"{loaded}{i + 1}") if i + 1 < self.words else Const(0, "u32")
            out.append(Decl("bits32", f"{words}{i}", Call("funnel_r", (V(f"{loaded}{i}"), hi, V("wsh"))), const=True))
        return out

    def low_pair(self, words: str, n: int) -> Expr:
        """The A pair of values n and n + 4, exact bf16x2 / f16x2 (no offset)."""
        return Call(f"qpair_{self.spec.act_dtype}", (self.low_value(words, n), self.low_value(words, n + 4)))

    def micro_scale_load(self, j: int, tile: int, h: str, b: int, ch: Expr, live: Expr | None) -> LaneLoad:
        """A microscaled column's uint8 scale of chunk `ch`: its group's (nvfp4: the group of the
        chunk's two that the lane's quarter lies in, t / 2)."""
        w = self.spec.weights[0]
        group = P(ch) * 2 + P(V("t") >> 1) if self.folded else P(ch)

        def scale(i, local):
            return V(f"scales{i}") + local * P(V("K") / w.group_size) + group

        return LaneLoad("u8", f"s{j}_{tile}{h}_{b}", *self.select(j, tile, h, scale, live))

    # -- one chunk's math -------------------------------------------------------
    def chunk_math(self, b: int, nacc: int) -> Block:
        """The MMAs and the affine scaling of chunk b of a batch from its loaded values."""
        spec, rt = self.spec, self.rt
        act = spec.act_dtype
        w = spec.weights[0]
        if self.micro:
            return self.micro_math(b, nacc)
        out: list = []
        if not w.quantized:
            for j in range(nacc):
                for tile in range(self.tiles):
                    wa, wb, c = V(f"w{j}_{tile}a_{b}"), V(f"w{j}_{tile}b_{b}"), V(f"c{j}_{tile}")
                    out.append(Decl("f32", c.name, ZERO_INIT, dims=(rt, 4)))
                    # 8 consecutive k per lane: slots (2t, 2t+1) and (2t+8, 2t+9) take pairs 0,1 then 2,3
                    for p0, p1 in (("x", "y"), ("z", "w")):
                        for r in range(rt):
                            xv = V(f"xv{r}_0_{b}")
                            a = (wa.dot(p0), wb.dot(p0), wa.dot(p1), wb.dot(p1))
                            out.append(Mma(act, c.at(r), a, (xv.dot(p0), xv.dot(p1))))
                    for r in range(rt):
                        for e in range(4):
                            out.append(Assign(V(f"part{j}").at(tile, r, e), c.at(r, e), op="+="))
            return Block(out)
        # sums of x over the group, rows 2t and 2t+1 of each tile: an MMA with A = ones
        # (the k order does not matter for a sum, so the x words go in as loaded)
        # wide: rows 0-7 of A are ones on group A's lanes (t < 2), rows 8-15 on group B's,
        # so C rows g hold group A's sums and rows g+8 group B's
        ones = (V("oA"), V("oB"), V("oA"), V("oB")) if self.wide else (ONES[act],) * 4
        for r in range(rt):
            cx = V(f"cx{r}")
            out.append(Decl("f32", cx.name, ZERO_INIT, dims=(4,)))
            for sl in range(self.slices):
                xv = V(f"xv{r}_{sl}_{b}")
                out.append(Mma(act, cx, ones, (xv.dot("x"), xv.dot("y"))))
                out.append(Mma(act, cx, ones, (xv.dot("z"), xv.dot("w"))))
        groups = ("A", "B") if self.wide else ("",)
        # B registers, shared by every tile and weight: per word (block of 8 k) and pair slot
        k_per_word = 32 // w.bits
        pairs = 2 if w.bits == 8 else 4
        for r in range(rt):
            for i in range(self.units):
                # which 16-byte x slice, and where in it
                sl, off = (i, 0) if self.lowbit else divmod(i * k_per_word, 8)
                for p in range(0, pairs, 2):
                    b0, b1 = self.x_pairs(V(f"xv{r}_{sl}_{b}"), off, 4 if self.lowbit else w.bits, p)
                    xb = f"xb{r}_{i}_{p}"
                    out.append(Decls("bits32", [(f"{xb}_0", b0), (f"{xb}_1", b1)], const=True))
                    for grp in groups if self.wide else ():  # x on this group's lanes only
                        m = V(f"m{grp}")
                        items = [(f"{xb}{grp}_0", V(f"{xb}_0") & m), (f"{xb}{grp}_1", V(f"{xb}_1") & m)]
                        out.append(Decls("bits32", items, const=True))

        offset = Q8_SPLIT_OFFSET if self.q8_split else Q_OFFSET.get((w.bits, act), 0)
        unpack = ["q8lo_bf16", "q8hi_bf16"] if self.q8_split else [f"q{w.bits}_{act}"]

        def conv(grp: str, x: Expr) -> Expr:
            if self.wide:  # the pair's groups: low half, high half
                return half_to_f32(w.dtype, x, grp == "B")
            if self.scale_vector:  # chunk b's 16-bit half of the batch's vector
                part = x if self.batch == 2 else x.dot(COMPONENTS[b // 2])
                return half_to_f32(w.dtype, part, b % 2 == 1)
            return to_f32(w.dtype, x)

        for j in range(nacc):
            for tile in range(self.tiles):
                c = f"c{j}_{tile}"
                for grp in groups:
                    out.append(Decl("f32", f"{c}{grp}", ZERO_INIT, dims=(rt, 4)))
                for h in "ab":
                    for i in range(self.words):
                        v0 = i - i % self.word_width
                        word = V(f"w{j}_{tile}{h}v{v0}_{b}")
                        if self.word_width != 1:
                            word = word.dot(COMPONENTS[i - v0])
                        out.append(Decl("bits32", f"w{h}{j}_{tile}_{i}", word, const=True))
                    if self.stream:
                        out += self.stream_decls(f"u{h}{j}_{tile}_", f"w{h}{j}_{tile}_")
                # per word: int4 -> 8 k (2 MMAs of 4 slots per row); int8 -> 4 k (1 MMA, or 2 split
                # by nibbles, both against the same x)
                for i in range(self.units):
                    for p in range(0, pairs, 2):
                        for fn in unpack:
                            # A regs: (row g, slots 2t..), (row g+8, slots 2t..), (row g, slots 2t+8..), (row g+8, ...)
                            if self.lowbit:
                                src = "u" if self.stream else "w"  # (the shifted stream, or the words)
                                a = tuple(
                                    self.low_pair(f"{src}{h}{j}_{tile}_", 8 * i + q) for q in (p, p + 1) for h in "ab"
                                )
                            else:
                                a = tuple(
                                    Call(fn, (V(f"w{h}{j}_{tile}_{i}"), Const(q))) for q in (p, p + 1) for h in "ab"
                                )
                            for r in range(rt):
                                for grp in groups:
                                    xb = f"xb{r}_{i}_{p}{grp}"
                                    out.append(Mma(act, V(f"{c}{grp}").at(r), a, (V(f"{xb}_0"), V(f"{xb}_1"))))
                for grp in groups:
                    for h in "ab":
                        at = 0 if self.scale_vector else b
                        sc = f"sc{j}_{tile}{h}{grp}"
                        out.append(Decl("f32", sc, conv(grp, V(f"s{j}_{tile}{h}_{at}")), const=True))
                        bias = conv(grp, V(f"z{j}_{tile}{h}_{at}"))
                        if offset:  # the A operand held offset + q: take offset * s off the bias
                            bias = Call("fma", (Const(-float(offset), "f32"), V(sc), bias))
                        out.append(Decl("f32", f"bi{j}_{tile}{h}{grp}", bias, const=True))
                    for r in range(rt):
                        for e in range(4):
                            h = f"{j}_{tile}{'a' if e < 2 else 'b'}{grp}"
                            acc = V(f"part{j}").at(tile, r, e)
                            # wide: C rows g / g+8 of the ones-MMA hold group A / B sums
                            xs = V(f"cx{r}").at((e & 1) + (2 if grp == "B" else 0))
                            inner = Call("fma", (V(f"bi{h}"), xs, acc))
                            out.append(Assign(acc, Call("fma", (V(f"sc{h}"), V(f"{c}{grp}").at(r, e), inner))))
        return Block(out)

    def x_registers(self, b: int, bits: int) -> list:
        """B registers of chunk b, shared by every tile and weight: per word and pair slot."""
        out: list = []
        k_per_word, pairs = 32 // bits, 4 if bits == 4 else 2
        for r in range(self.rt):
            for i in range(self.words):
                sl, off = divmod(i * k_per_word, 8)  # which 16-byte x slice, and where in it
                for p in range(0, pairs, 2):
                    b0, b1 = self.x_pairs(V(f"xv{r}_{sl}_{b}"), off, bits, p)
                    out.append(Decls("bits32", [(f"xb{r}_{i}_{p}_0", b0), (f"xb{r}_{i}_{p}_1", b1)], const=True))
        return out

    def micro_math(self, b: int, nacc: int) -> Block:
        """Chunk b of microscaled weights: the codes decoded into exact bf16 / f16 A pairs, one
        MMA per 16 k and row tile; then mx: acc += scale * C per column (its e8m0 scale in f32),
        nvfp4: acc += C (each A pair already times its group's e4m3 scale)."""
        spec, rt, act = self.spec, self.rt, self.spec.act_dtype
        w = spec.weights[0]
        code, scale = MICROSCALED[w.mode]
        pairs = 4 if w.bits == 4 else 2
        out: list = self.x_registers(b, w.bits)
        for j in range(nacc):
            for tile in range(self.tiles):
                c = V(f"c{j}_{tile}")
                out.append(Decl("f32", c.name, ZERO_INIT, dims=(rt, 4)))
                for h in "ab":
                    s = V(f"s{j}_{tile}{h}_{b}")
                    if self.folded:  # the scale as a bf16x2 / f16x2 pair, exact
                        pair = Call(f"pair_{act}", (Call(f"{scale}_f32", (s,)),))
                        out.append(Decl("bits32", f"sp{j}_{tile}{h}", pair, const=True))
                    else:
                        out.append(Decl("f32", f"sc{j}_{tile}{h}", Call(f"{scale}_f32", (s,)), const=True))
                    for i in range(self.words):
                        v0 = i - i % self.word_width
                        word = V(f"w{j}_{tile}{h}v{v0}_{b}")
                        if self.word_width != 1:
                            word = word.dot(COMPONENTS[i - v0])
                        for q in range(pairs):
                            frag: Expr = Call(f"{code}_{act}", (word, Const(q)))
                            if self.folded:
                                frag = Call(f"mul_{act}x2", (frag, V(f"sp{j}_{tile}{h}")))
                            out.append(Decl("bits32", f"a{h}{j}_{tile}_{i}_{q}", frag, const=True))
                for i in range(self.words):
                    for p in range(0, pairs, 2):
                        # A regs: (row g, slots 2t..), (row g+8, slots 2t..), (row g, slots 2t+8..), (row g+8, ...)
                        a = tuple(V(f"a{h}{j}_{tile}_{i}_{q}") for q in (p, p + 1) for h in "ab")
                        for r in range(rt):
                            out.append(Mma(act, c.at(r), a, (V(f"xb{r}_{i}_{p}_0"), V(f"xb{r}_{i}_{p}_1"))))
                for r in range(rt):
                    for e in range(4):
                        acc = V(f"part{j}").at(tile, r, e)
                        if self.folded:
                            out.append(Assign(acc, c.at(r, e), op="+="))
                        else:
                            sc = V(f"sc{j}_{tile}{'a' if e < 2 else 'b'}")
                            out.append(Assign(acc, Call("fma", (sc, c.at(r, e), acc))))
        return Block(out)

    def x_pairs(self, v: Var, off: int, bits: int, p: int) -> tuple[Expr, Expr]:
        """B registers for pair slots p, p+1 of a word whose k start at `off`
        inside x slice `v`: the x values at the same k the A pairs hold."""
        # a pair holds the values `gap` apart in the word (nibbles q, q+4; bytes q, q+2):
        # x[off + q] and x[off + q + gap], both low or both high halves of their u32
        gap = 4 if bits == 4 else 2

        def pair(q: int) -> Expr:
            lo, hi = COMPONENTS[(off + q) // 2], COMPONENTS[(off + q + gap) // 2]
            sel = Const(0x5410 if q % 2 == 0 else 0x7632, hex=4)
            return Call("byte_perm", (v.dot(lo), v.dot(hi), sel))

        return pair(p), pair(p + 1)

    # -- rows of x holding an Inf or a NaN ---------------------------------------------
    def exact_rows(self, value: Callable[[int, int, int, int], Expr]) -> list:
        """Affine weights: the factored sums s * sum(q x) + b * sum(x) give inf - inf (or inf * 0
        where q = 0) in a row whose x holds an Inf, where the dequantized weights' sum is +-Inf.
        Such a row's outputs are never finite (its group sums of x are not, times any bias), so
        each output not finite is recomputed from the weights dequantized one by one (codegen/cuda.py
        EXACT_ROW_HELPERS), before the epilogue; finite outputs keep their bits. `value(j, tile,
        r, e)`: the lane's sum of element e of row tile r of tile `tile` of accumulator j."""
        w = self.spec.weights[0]
        if not w.affine or self.norm:  # (a fused RMSNorm's 1 / rms of such a row is 0: NaN, as float64's)
            return []
        self.use_helper("cuda_exact_rows")
        out: list = []
        for j in range(self.nacc):
            members = self.members(j)
            for tile in range(self.tiles):
                for r in range(self.rt):
                    for e in range(4):
                        v = value(j, tile, r, e)
                        # row and column from the block and lane (not the loop's registers)
                        row = P(V("pid1") * self.s.BM + V("t") * 2 + (8 * r + (e & 1)))
                        col = self.col_base() + (TILE * tile + 8 * (e >> 1)) + V("g")
                        fixes: list = []
                        base: Expr = Const(0)
                        for i in members:
                            local = P(col - P(base)) if len(members) > 1 else col
                            args = (Const(w.bits), V("x"), V(f"w{i}"), V(f"scales{i}"), V(f"biases{i}"))
                            dot = Call("affine_dot", (*args, row, local, V("K"), Const(w.group_size)))
                            inside = local.ge(0).and_(local.lt(V(f"N{i}"))) if len(members) > 1 else col.lt(V(f"N{i}"))
                            fixes.append(If(inside, [Assign(v, dot)], braces=False))
                            base = base + V(f"N{i}")
                        out.append(If(Call("nonfinite", (v,)).and_(row.lt(V("M"))), fixes))
        return out

    # -- the K loop ---------------------------------------------------------------
    def k_loop(self, nacc: int) -> list:
        """Each iteration: a batch's loads, then its math. With scale_vector the
        warps' chunk ranges are whole batches, so no batch is partly past the end."""
        batch, body = self.batch, []
        for b in range(batch):
            ch = V("ch0") + b
            live = None if b == 0 or self.scale_vector else ch.lt(V("c_end"))
            body += [ld.decl() for ld in self.chunk_loads(b, ch, live, nacc)]
        for b in range(batch):
            body.append(self.chunk_math(b, nacc))
        ch0 = V("ch0")
        return [Loop("ch0", V("c_begin"), ch0.lt(V("c_end")), Const(batch), body, unroll=1)]

    def k_split(self) -> list:
        """This warp's chunks [c_begin, c_end): contiguous ranges of equal length (a multiple of
        `align`), the last ones shorter or empty."""
        v, p, a = self.splits, self.per_warp, self.align  # per_warp: chunks of one K range
        per_warp, warp = V("per_warp"), V("warp")
        return [
            Decl("int", "chunks", V("K") / self.ck, const=True),
            Decl("int", "per_warp", P(V("chunks") + (v * a - 1)) / (v * a) * a, const=True),
            Decl("int", "c_begin", warp * p * per_warp if p > 1 else warp * per_warp, const=True),
            Decl(
                "int",
                "c_end",
                Call("min_i32", (V("chunks"), V("c_begin") + (p * per_warp if p > 1 else per_warp))),
                const=True,
            ),
        ]

    def partials(self, nacc: int) -> list[tuple[Expr, tuple]]:
        """(a lane's running sum, its index in a [acc][tile][row tile][element][lane] array)
        for every partial sum the lane keeps."""
        return [
            (V(f"part{j}").at(tile, r, e), (Const(j), Const(tile), Const(r), Const(e), LANE))
            for j in range(nacc)
            for tile in range(self.tiles)
            for r in range(self.rt)
            for e in range(4)
        ]

    def store_partials(self, nacc: int) -> list:
        """The warp's partial sums into `red` (one K range per warp here; see the staged ring)."""
        if self.per_warp != 1:
            raise LowerError(f"{self.p.name}: several K ranges per warp need the staged ring")
        return [Assign(V("red").at(V("warp"), *at), run) for run, at in self.partials(nacc)]

    def reduction_buffer(self, body: list, nacc: int) -> None:
        """`red[range][acc][tile][row tile][element][lane]`: the K ranges' partial sums."""
        body.append(Decl("f32", "red", None, dims=(self.splits, nacc, self.tiles, self.rt, 4, 32), shared=True))

    # -- the kernel -------------------------------------------------------------
    def begin(self, body: list, root: Scope) -> tuple[int, list]:
        """The prologue into `body`; (accumulators, the first statements of the kernel: the warp,
        the lane's g and t, and the K split)."""
        spec = self.spec
        nacc = self.nacc = len(self.prologue(body, root))
        if nacc != (2 if spec.epilogue == "swiglu" else 1):
            raise LowerError(f"{self.p.name}: unexpected accumulators for the mma schedule")
        self.use_helper("cuda_mma")
        if self.micro:
            self.use_helper("cuda_microscaling")
        if self.lowbit:
            self.use_helper("cuda_lowbit")
        if self.q8_split:
            self.use_helper("cuda_q8split")
        tx = Call("thread_x")
        stmts = [
            Decl("int", "warp", tx >> 5, const=True),
            Decl("int", "g", P(tx & 31) >> 2, const=True),
            Decl("int", "t", tx & 3, const=True),
            *self.stream_lines(),
            *self.k_split(),
        ]
        return nacc, stmts

    def lower(self) -> KernelDef:
        s, spec = self.s, self.spec
        body: list = []
        root = Scope(body)
        nacc, stmts = self.begin(body, root)
        rt, tiles = self.rt, self.tiles
        for r in range(rt):
            stmts.append(Decl("int", f"xrow{r}", V("pid1") * s.BM + 8 * r + V("g"), const=True))
            stmts.append(Decl("bool", f"xok{r}", V(f"xrow{r}").lt(V("M")), const=True))
        stmts += self.column_setup(nacc)
        if self.wide:  # group A on lanes t < 2, group B on t >= 2
            one, mask = ONES[spec.act_dtype], select(V("t").lt(2), Const(0xFFFFFFFF, "u32", hex=8), Const(0, "u32"))
            stmts.append(Decls("bits32", [("mA", mask), ("mB", ~V("mA"))], const=True))
            stmts.append(Decls("bits32", [("oA", one & V("mA")), ("oB", one & V("mB"))], const=True))
        for j in range(nacc):
            stmts.append(Decl("f32", f"part{j}", ZERO_INIT, dims=(tiles, rt, 4)))
        if self.norm:
            if spec.act_dtype != "bf16" or self.per_warp != 1:
                raise LowerError(f"{self.p.name}: a fused RMSNorm needs bf16 activations and a warp per K range")
            self.use_helper("cuda_norm")
            stmts += [Decl("f32", f"sq{r}", ZERO_INIT, dims=(4,)) for r in range(rt)]
        norm_after, norm_finish = self.norm_lines()

        stmts += self.k_loop(nacc)
        body += stmts

        # the K ranges' partial sums, added in range order; warp 0 finishes
        self.reduction_buffer(body, nacc)
        body += self.store_partials(nacc) + norm_after
        body.append(Barrier())
        finish = If(V("warp").eq(0))
        fscope = Scope(finish.body, root, fence=True)
        sums: list = []
        for j in range(nacc):
            fin = V(f"fin{j}")
            sums.append(Decl("f32", fin.name, None, dims=(tiles, rt, 4)))
            for tile in range(tiles):
                for r in range(rt):
                    for e in range(4):
                        at = (Const(j), Const(tile), Const(r), Const(e), LANE)
                        total = chain("+", [V("red").at(w, *at) for w in range(self.splits)])
                        sums.append(Assign(fin.at(tile, r, e), total))
        if self.norm:  # the sums of the normalised rows: times 1 / rms of their row
            sums += norm_finish
            sums += [
                Assign(V(f"fin{j}").at(tile, r, e), V(f"inv{r}_{e & 1}"), op="*=")
                for j in range(nacc)
                for tile in range(tiles)
                for r in range(rt)
                for e in range(4)
            ]
        finish.body += sums + self.exact_rows(lambda j, tile, r, e: V(f"fin{j}").at(tile, r, e))
        for tile in range(tiles):
            for r in range(rt):
                for e in range(4):
                    row = Poly.sym("t") * 2 + (8 * r + (e & 1))
                    col = Poly.sym("g") + (TILE * tile + 8 * (e >> 1))
                    self.render_stores(
                        finish.body, fscope, row, col, lambda j, tile=tile, r=r, e=e: V(f"fin{j}").at(tile, r, e)
                    )
        body.append(finish)
        return self.kernel(body)
