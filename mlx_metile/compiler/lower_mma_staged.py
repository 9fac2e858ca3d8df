"""The `mma` schedule with staged weights (default for 4/8-bit weights on CUDA).

Same math as lower_mma (exact integer MMAs per group, the affine scaling in
f32 per group, the same lane <-> k mapping), but the weights, scales and biases
reach the lanes through shared memory:

    global --cp.async--> a ring of S stages per warp --shared loads--> lanes

A stage is G groups of the warp's K range for the block's 16 columns of each
accumulator. The copies read each column's stage as one contiguous run
(64-256 bytes, 16 bytes a lane), so a warp-wide copy touches 4-8 cache lines;
the lanes' direct loads of lower_mma touch 16 lines per 256 bytes. An H200
probe of the two access patterns alone (bench/cuda_probe/int4_loads.cu,
2026-11-29) read 3.4-3.6 TB/s with whole-column runs against 2.2-2.3 TB/s with
the lanes' pattern. In flight, the copies hold shared memory instead of
registers: S - 1 stages per warp while it computes one.

Rows of the ring are padded by 16 bytes, so that by a bank model every lane's
shared load takes the fewest wavefronts its width allows, for every format (the
8 rows of a load spread over all banks). Nsight Compute counted 2.9 wavefronts
per shared load request of the int4 kernel on the H200, which includes the 2 an
8-byte load needs; the rest is not analysed.
The reduction buffer of the warps' partial sums reuses the ring after the loop.
The K split (whole stages per warp) depends on the spec alone, so rows stay
invariant across row buckets as in lower_mma.
"""

from __future__ import annotations

import os

from ..codegen.ast import Raw
from ..spec import ProjectionSpec
from .lower import LowerError
from .lower_mma import (
    SMEM_LIMIT,
    TILE,
    Load,
    MMALowering,
    chunk_k,
    dense_mode,
    mma_override,
    mma_setting,
    wide,
)

PAD = 16  # bytes after each ring row: the rows of a shared load on distinct banks
MAX_STAGES = 4
DENSE_STAGE_K = 64  # k of a dense column per stage by default: 2 chunks of 32, 128 bytes
DENSE_WARPS = 8


def chunk_bytes(spec: ProjectionSpec) -> int:
    """Bytes of one column per chunk (chunk_k of a quantized weight, or of a 2-byte dense one)."""
    w = spec.weights[0]
    return chunk_k(spec) * (w.bits if w.quantized else 16) // 8


def scale_bytes_of(spec: ProjectionSpec) -> int:
    """Bytes of one column's scales (and again of its biases) per chunk; dense: none."""
    w = spec.weights[0]
    return 0 if not w.quantized else 4 if w.dtype == "f32" else 2


def stage_groups(spec: ProjectionSpec) -> int:
    """Groups per stage (MLX_METILE_CUDA_MMA_GROUPS: 2, 4 or 8). By default
    128 bytes of each column (the H200 A/B runs: 4-bit group 64 read 2.2 TB/s
    with 4 groups against 1.76 with 2), at least 2 groups so that a column's
    scales of a stage are one copy of 4-16 bytes, and fewer while K would not
    hold whole stages."""
    value = mma_override("groups")
    if value is not None:
        return value
    groups = max(2, min(8, 128 // chunk_bytes(spec)))
    if spec.weights[0].dtype == "f32":
        groups = min(groups, 4)  # f32 scales: at most 16 bytes a column
    while groups > 2 and spec.k_divisor % (groups * chunk_k(spec)):
        groups //= 2
    return groups


def ring_rows(spec: ProjectionSpec) -> int:
    return TILE * (2 if spec.epilogue == "swiglu" else 1)


def slot_bytes(spec: ProjectionSpec) -> int:
    """One stage of one warp: the weight rows (padded), then scales, then biases."""
    groups = stage_groups(spec)
    return ring_rows(spec) * (groups * chunk_bytes(spec) + PAD + 2 * groups * scale_bytes_of(spec))


def ring_stages(spec: ProjectionSpec, warps: int) -> int:
    """MLX_METILE_CUDA_MMA_STAGES (2..4), else MAX_STAGES; fewer while the
    block's rings exceed static shared memory."""
    stages = mma_override("stages") or MAX_STAGES
    while stages > 1 and warps * stages * slot_bytes(spec) > SMEM_LIMIT:
        stages -= 1
    return stages


def mma_warps(spec: ProjectionSpec) -> int:
    """Warps per block splitting K (a property of the spec: part of every row's sum
    order): MLX_METILE_CUDA_MMA_WARPS, else 8 for dense weights on the staged ring
    where 8 rings of 2 stages fit shared memory, else lower_mma's 4. H200, kernel
    alone (bench/results/h200-ab-2026-11-29-session5.json): 8 warps beat 4 by 2-30%
    on bf16 4096->4096, 4096->14336, 14336->4096 and 8960->1536 at 1-16 rows, lost
    7-10% on 1536->8960 (K too short for 8 warps' rings, won at 32 rows); for 4-bit
    weights 8 warps measured slower on every shape tried."""
    value = mma_override("warps")
    if value is not None:
        return value
    dense_staged = not spec.weights[0].quantized and dense_mode() == "staged"
    if dense_staged and DENSE_WARPS * 2 * slot_bytes(spec) <= SMEM_LIMIT:
        return DENSE_WARPS
    return mma_setting("warps")


def staged(spec: ProjectionSpec, schedule) -> bool:
    """Quantized weights, one 16-column tile per block, K a whole number of
    stages, a column's stage at most 512 bytes (one warp-wide copy) with its
    scales in one copy of at most 16 bytes, two or more stages fitting shared
    memory; MLX_METILE_CUDA_MMA_STAGED=0 turns it off (the direct loads of lower_mma)."""
    w = spec.weights[0]
    if os.environ.get("MLX_METILE_CUDA_MMA_STAGED", "1") == "0" or wide(spec):
        return False
    if not w.quantized and dense_mode() != "staged":
        return False  # dense weights: the direct loads with MLX_METILE_CUDA_MMA_DENSE=1
    groups = stage_groups(spec)
    return (
        mma_setting("tiles", schedule.BM) == 1
        and spec.k_divisor % (groups * chunk_k(spec)) == 0
        and groups * chunk_bytes(spec) <= 512
        and groups * scale_bytes_of(spec) <= 16
        and ring_stages(spec, schedule.SG) >= 2
    )


class StagedMMALowering(MMALowering):
    def __init__(self, program, schedule, divisors, vector_buffers, spec: ProjectionSpec):
        super().__init__(program, schedule, divisors, vector_buffers, spec)
        if self.tiles != 1:
            raise LowerError(f"{program.name}: the staged mma schedule takes one tile per block")
        w = spec.weights[0]
        self.groups = stage_groups(spec)
        self.align = self.batch = self.groups  # whole stages per warp; a stage is one batch
        # a column's 16-bit scales of a stage: one word
        self.scale_vector = w.quantized and w.dtype != "f32"
        self.group_bytes = chunk_bytes(spec)  # one chunk of a column: a group, or 32 dense k
        self.row_bytes = self.groups * self.group_bytes
        self.stride = self.row_bytes + PAD
        self.scale_bytes = self.groups * scale_bytes_of(spec)
        self.nrows = ring_rows(spec)
        self.scales_at = self.nrows * self.stride
        self.biases_at = self.scales_at + self.nrows * self.scale_bytes
        self.slot = slot_bytes(spec)
        self.stages = ring_stages(spec, schedule.SG)
        self.pieces = self.nrows * self.row_bytes // 16 // 32  # 16-byte copies per lane per stage

    # -- shared -> lanes ---------------------------------------------------------
    def weight_loads(self, b: int, ch: str, live: str | None, nacc: int) -> list[Load]:
        """Chunk b of the stage in `slot`: the lane's words of columns g and g+8
        (at the same k as its x quarter), and the stage's scales and biases."""
        words = self.words
        out = []
        for j in range(nacc):
            for h in "ab":
                row = f"{TILE * j + (8 if h == 'b' else 0)} + g"
                if not self.spec.weights[0].quantized:  # 8 consecutive k: the lane's quarter of 32
                    at = f"slot + ({row}) * {self.stride} + {b * self.group_bytes} + t * 16"
                    out.append(Load("uint4", f"w{j}_0{h}_{b}", "true", at))
                    continue
                for v0 in range(0, words, self.word_width):
                    at = f"slot + ({row}) * {self.stride} + {b * self.group_bytes} + t * {4 * words} + {4 * v0}"
                    out.append(Load(self.word_vector, f"w{j}_0{h}v{v0}_{b}", "true", at))
                if self.scale_vector and b:
                    continue
                typ = {2: "unsigned", 4: "uint2", 8: "uint4"}[self.groups] if self.scale_vector else "float"
                extra = "" if self.scale_vector else f" + {4 * b}"
                for letter, base in (("s", self.scales_at), ("z", self.biases_at)):
                    at = f"slot + {base} + ({row}) * {self.scale_bytes}{extra}"
                    out.append(Load(typ, f"{letter}{j}_0{h}_{b}", "true", at))
        return out

    # -- global -> shared --------------------------------------------------------
    def source(self, j: int, col: str, addr) -> list[str]:
        """C statements setting `src` and `ok` for column `col` of accumulator j:
        the member weight holding it, and whether any does."""
        members = self.members(j)
        lines = ["const char* src = nullptr;", "bool ok = false;"]
        base = "0"
        for n, i in enumerate(members):
            local = f"({col} - ({base}))"
            cond = f"{local} >= 0 && {local} < N{i}" if len(members) > 1 else f"{col} < N{i}"
            lines.append(f"{'else ' if n else ''}if ({cond}) {{ src = {addr(i, local)}; ok = true; }}")
            base = f"{base} + N{i}"
        lines.append(f"if (!ok) src = {addr(members[0], '0')};  // a valid address; nothing is read")
        return lines

    def copy_setup(self, nacc: int) -> list[str]:
        """Per lane, before the loop: its copy pieces' sources (at stage 0 of K)
        and destinations within a slot."""
        w = self.spec.weights[0]
        per_row = self.row_bytes // 16  # 16-byte pieces of a ring row
        rows_per_copy = 32 // per_row
        row_bytes = f"(size_t)K * {w.bits} / 8" if w.quantized else "(size_t)K * 2"
        lines: list[str] = []  # `lane` comes from the prologue
        for i in range(self.pieces):
            first = i * rows_per_copy  # the piece's rows lie in one accumulator's 16
            j = first // TILE
            col = f"(pid0 * {TILE} + {first % TILE} + lane / {per_row})"

            def weight(m, local):
                return f"reinterpret_cast<const char*>(w{m}) + (size_t){local} * {row_bytes} + (lane % {per_row}) * 16"

            lines.append("{")
            lines += ["  " + ln for ln in self.source(j, col, weight)]
            lines.append(f"  cw{i} = src; cwok{i} = ok;")
            lines.append("}")
            lines.append(f"const int cwd{i} = ({first} + lane / {per_row}) * {self.stride} + (lane % {per_row}) * 16;")
        declared = [f"const char* cw{i}; bool cwok{i};" for i in range(self.pieces)]
        if not w.quantized:
            return declared + lines
        # scales and biases: lane r < rows copies ring row r's
        size = scale_bytes_of(self.spec)
        lines.append("const char* cs = nullptr; const char* cz = nullptr; bool csok = false;")
        for j in range(nacc):
            col = f"(pid0 * {TILE} + lane - {TILE * j})"

            def param(name):
                def at(m, local):
                    return f"reinterpret_cast<const char*>({name}{m}) + (size_t){local} * (K / {w.group_size}) * {size}"

                return at

            lines.append(f"if (lane >= {TILE * j} && lane < {TILE * (j + 1)}) {{")
            for name, var in (("scales", "cs"), ("biases", "cz")):
                lines.append("  {")
                lines += ["    " + ln for ln in self.source(j, col, param(name))]
                lines.append(f"    {var} = src; csok = ok;")
                lines.append("  }")
            lines.append("}")
        return declared + lines

    def copy_stage(self, stage: str, slot: str) -> list[str]:
        """Statements issuing the copies of stage `stage` into ring slot `slot`."""
        w = self.spec.weights[0]
        chunk0 = f"(c_begin + ({stage}) * {self.groups})"
        lines = [f"unsigned char* const dst = ring + ({slot}) * {self.slot};"]
        lines.append(f"const size_t wo = (size_t){chunk0} * {self.group_bytes};")
        for i in range(self.pieces):
            lines.append(f"metile_cp16(dst + cwd{i}, cw{i} + wo, cwok{i});")
        if not w.quantized:
            return lines
        lines.append(f"if (lane < {self.nrows}) {{")
        lines.append(f"  const size_t so = (size_t){chunk0} * {scale_bytes_of(self.spec)};")
        for var, base in (("cs", self.scales_at), ("cz", self.biases_at)):
            dst = f"dst + {base} + lane * {self.scale_bytes}"
            if self.scale_bytes == 16:
                lines.append(f"  metile_cp16({dst}, {var} + so, csok);")
            else:
                lines.append(f"  metile_cp_small<{self.scale_bytes}>({dst}, {var} + so, csok);")
        lines.append("}")
        return lines

    # -- the K loop ----------------------------------------------------------------
    def k_loop(self, nacc: int, mma: str) -> list[str]:
        """Prologue: stages 0..S-2 in flight. Each iteration: x loads of stage st,
        wait for stage st, issue stage st+S-1 into the slot freed by st-1, then
        the shared loads and the math of stage st."""
        self.use_helper("cuda_cp_async")
        s, stages, groups = self.s, self.stages, self.groups
        ring_bytes = max(s.SG * stages * self.slot, self.red_bytes(nacc))
        lines = [
            f"__shared__ __align__(16) unsigned char metile_ring[{ring_bytes}];",
            f"unsigned char* const ring = metile_ring + warp * {stages * self.slot};",
            f"const int nst = max(c_end - c_begin, 0) / {groups};",
        ]
        lines += self.copy_setup(nacc)
        for st in range(stages - 1):
            lines.append(f"if ({st} < nst) {{")
            lines += ["  " + ln for ln in self.copy_stage(str(st), str(st))]
            lines.append("}")
            lines.append("metile_cp_commit();")
        body = []
        for b in range(groups):
            for ld in self.x_loads(b, f"ch0 + {b}", None):
                body.append(f"const {ld.typ} {ld.name} = {ld.value()};")
        body.append(f"metile_cp_wait<{stages - 2}>();")
        body.append("__syncwarp();")
        body.append(f"if (st + {stages - 1} < nst) {{")
        body += ["  " + ln for ln in self.copy_stage(f"st + {stages - 1}", "wr")]
        body.append("}")
        body.append("metile_cp_commit();")
        body.append(f"const unsigned char* const slot = ring + rd * {self.slot};")
        for b in range(groups):
            for ld in self.weight_loads(b, f"ch0 + {b}", None, nacc):
                body.append(f"const {ld.typ} {ld.name} = *reinterpret_cast<const {ld.typ}*>({ld.addr});")
        for b in range(groups):
            body += self.chunk_math(b, nacc, mma)
        body.append(f"rd = rd + 1 == {stages} ? 0 : rd + 1;")
        body.append(f"wr = wr + 1 == {stages} ? 0 : wr + 1;")
        return (
            lines
            + [f"int rd = 0, wr = {stages - 1};", "#pragma unroll 1", "for (int st = 0; st < nst; ++st) {"]
            + [f"  const int ch0 = c_begin + st * {groups};"]
            + ["  " + ln for ln in body]
            + ["}", "metile_cp_wait<0>();", "__syncthreads();  // the ring becomes the reduction buffer"]
        )

    def lower(self):
        kernel = super().lower()
        kernel.min_groups = mma_setting("minblocks", self.s.BM)
        return kernel

    def red_bytes(self, nacc: int) -> int:
        return self.s.SG * nacc * self.tiles * self.rt * 4 * 32 * 4

    def reduction_buffer(self, body: list, nacc: int) -> None:
        """The ring, reused: every copy has landed and every warp left the loop."""
        dims = f"[{nacc}][{self.tiles}][{self.rt}][4][32]"
        body.append(Raw([f"float (*const red){dims} = reinterpret_cast<float (*){dims}>(metile_ring);"]))
