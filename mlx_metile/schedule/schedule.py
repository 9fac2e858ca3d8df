"""`Schedule`: how a projection tile program maps onto threads - one value holding every knob.

A Schedule is chosen by `choose` (hand rules per target, tuned tables, settings' overrides);
the lowerings read it and decide nothing themselves. It is frozen and hashable: with the spec
and the target it keys the compile cache, and a tuner can enumerate, compare and store it.

Kinds:
- `simd_splitk` (1..32 rows): each threadgroup owns BN = SG*NC output columns and BM rows; each
  SIMD group owns NC columns; its 32 lanes split K, lane l taking VK consecutive k per step
  (k = 32*VK*kb + VK*l + v), every lane keeping BM x NC f32 accumulators, so each weight element
  it loads serves all BM rows. A `simd_sum` per accumulator ends the K loop.
- `tiled` (more than 32 rows): a GEMM-shaped threadgroup of SG*32 threads owning a BM x BN tile,
  TM x TN outputs a thread, S k positions staged per barrier; its sums keep `simd_splitk`'s order.
- `mma` (CUDA sm_80+, 1..32 rows): tensor-core split-K (mma.sync m16n8k16), its weights loaded
  directly by the lanes, through a staged shared-memory ring (`staged`), or with x shared by the
  block's warps (`xshare`). docs/SCHEDULES.md says what each field does and why its defaults.
- `nax_direct`, `nax_staged` (Metal with neural accelerators, only when asked: docs/NAX.md):
  MetalPerformancePrimitives' matmul2d (16, 32, 16) per SIMD group, x as the left operand, the
  weights as the right one - loaded from device memory into the fragments' slots (`nax_direct`)
  or dequantized into threadgroup memory first (`nax_staged`, rows padded by `row_pad` bytes).
  SG SIMD groups of NC (a multiple of 32) columns each, BM rows (16, 32; 64 above 32 rows); the
  four column groups of a fragment's lanes each take VK consecutive k, so a K step is 4 VK.

Row invariance: a row's sum order depends only on what is fixed per spec and layout (VK, the K
ranges and their alignment, `wide`, `q8split`, `sector`, `interleave`), never on BM or the fields
that only move loads (NC, batch, stages, the staged or direct loads, ...), so a row's bits do not
depend on how many rows share the call. (`splits` counts K ranges only where a warp takes more
than one; the ranges themselves are what stays.)
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

SIMD_WIDTH = 32
NAX_KINDS = ("nax_direct", "nax_staged")
NAX_COLUMN_GROUPS = 4  # lanes of a matmul2d fragment hold 4 column groups of 4 consecutive k each


@dataclass(frozen=True)
class Schedule:
    kind: str  # "simd_splitk" | "tiled" | "mma" | "nax_direct" | "nax_staged"
    BM: int  # rows per program instance (registers)
    NC: int  # output columns per SIMD group
    SG: int  # SIMD groups (warps) per threadgroup
    VK: int  # consecutive k per lane per step (mma: k per chunk / 32)
    U: int  # of those, how many are unrolled together (16 bytes of the widest-packed weight)
    C: int  # of those, how many share one row loop (16 bytes of x)
    TM: int = 0  # tiled: rows per thread
    TN: int = 0  # tiled: columns per thread
    S: int = 0  # tiled: k positions staged per barrier
    # -- mma ---------------------------------------------------------------------------------
    layout: int = 0  # the CUDA column layout it was chosen in (schedule.cuda_layouts: TILES ... ONE_TILE_WIDE)
    splits: int = 0  # K ranges (the sum order), a multiple of SG; 0 for SG (one per warp)
    blocks: int = 0  # blocks per SM to ask for (caps registers; the lowering caps it to what the rings fit); 0 none
    xshare: int = 0  # warps that each own NC columns over all of K, sharing x (the shared-x kernel); 0: K-split
    staged: bool = False  # weights through a shared-memory ring of `stages` stages (else the lanes' direct loads)
    stages: int = 0  # stages of the staged rings (of x and weights in the shared-x kernel)
    groups: int = 0  # staged: chunks (quantization groups, 32 dense k) per stage
    batch: int = 1  # chunks whose loads are issued together (staged: a stage's groups)
    wide: bool = False  # a chunk is a pair of groups, each lane loading half a group (direct loads)
    q8split: bool = False  # 8-bit weights with bf16 activations enter the MMA nibble by nibble
    sector: bool = False  # lane t's k of a chunk at t*8 + 32 s (whole 32-byte sectors of x per load)
    strided: bool = False  # staged copies addressed from one pointer per accumulator
    interleave: bool = False  # warps take interleaved stages of K (w, w + W, ...) instead of ranges
    swizzle_mask: int = 0  # staged ring: piece p of row r stored at p ^ ((r & mask) * mult)
    swizzle_mult: int = 0
    row_pad: int = 0  # staged ring (CUDA), staged weights (NAX): bytes after each row
    late: int = 0  # staged: 1 each chunk's shared loads just before its math; 2 half of x late; 3 x a chunk ahead
    smem_block: int = 0  # bytes of shared (threadgroup) memory a block of the target may take
    smem_sm: int = 0  # bytes of shared memory of one SM of the target

    @property
    def BN(self) -> int:
        return self.SG * self.NC

    @property
    def nax(self) -> bool:
        return self.kind in NAX_KINDS

    @property
    def BK(self) -> int:
        """k per step of the K loop: VK for each lane of a SIMD group, or for each of the four
        column groups of a NAX fragment."""
        return (NAX_COLUMN_GROUPS if self.nax else SIMD_WIDTH) * self.VK

    @property
    def threads(self) -> int:
        return SIMD_WIDTH * self.SG

    def meta(self) -> dict[str, int]:
        return {"BM": self.BM, "BN": self.BN, "BK": self.BK}

    def grid(self, rows: int, cols: int) -> tuple[int, int, int]:
        return (-(-cols // self.BN), -(-rows // self.BM), 1)

    def with_fields(self, **changes) -> Schedule:
        """A copy with `changes` (a tuner's variant of a chosen schedule)."""
        return replace(self, **changes)

    def knobs(self) -> dict[str, object]:
        """Every field and its value (what a tuner stores)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def describe(self) -> str:
        if self.nax:
            how = "from device memory into the fragments"
            if self.kind == "nax_staged":
                how = f"dequantized into threadgroup memory (rows padded by {self.row_pad} bytes), then into the fragments"
            return (
                f"schedule {self.kind}: matmul2d (16, 32, 16) per SIMD group, BM={self.BM} rows x "
                f"{self.NC} columns per SIMD group, {self.SG} SIMD groups; weights {how}; VK={self.VK} k per "
                f"column group (BK={self.BK}), U={self.U} k at a time, f32 accumulation"
            )
        if self.kind == "mma" and self.xshare:
            return (
                f"schedule mma, x shared: {self.BN} columns x {self.BM} rows per block of {self.SG} warps, "
                f"{self.NC} columns each over all of K in chunks of {self.BK} k ({self.splits} K ranges folded in "
                "order), mma.sync m16n8k16 with f32 accumulation"
            )
        if self.kind == "mma":
            ranges = f" ({self.splits} K ranges, {self.splits // self.SG} per warp)" if self.splits > self.SG else ""
            return (
                f"schedule mma: {self.BN} columns x {self.BM} rows per block of {self.SG} warps splitting K{ranges} in "
                f"chunks of {self.BK} k, mma.sync m16n8k16 with f32 accumulation"
            )
        if self.kind == "tiled":
            return (
                f"schedule tiled: BM={self.BM} x BN={self.BN} per threadgroup of {self.threads} threads, "
                f"TM={self.TM} x TN={self.TN} per thread, partial sums in the order of VK={self.VK} k per lane "
                f"(BK={self.BK}), S={self.S} k staged per barrier"
            )
        return (
            f"schedule {self.kind}: BM={self.BM} rows, SG={self.SG} simdgroups x NC={self.NC} columns, "
            f"VK={self.VK} k per lane, U={self.U} unrolled in chunks of C={self.C} (BK={self.BK})"
        )
