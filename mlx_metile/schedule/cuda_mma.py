"""The rules of the CUDA tensor-core schedules (sm_80+, 1..32 rows, `mma.sync m16n8k16`).

`MmaRules(spec, settings, target)` answers every question the tensor-core kernels ask - which
specs they take, how K is split, the staged ring's groups, padding, swizzle and stages, tiles,
warps and blocks per SM - and `schedule()` gathers the answers into a `Schedule`. Settings
(`MLX_METILE_CUDA_MMA_*`) override single answers, exactly where the rule says. The measurements
behind each default are in docs/SCHEDULES.md, one section per rule; the lowerings in
`mlx_metile/lower/` build whatever Schedule they are given, checking only its legality.

Row invariance: the K split (the K ranges and their alignment, `wide`, `interleave`), the k order
within a chunk (`sector`) and the rounding of 8-bit values (`q8split`) are properties of the spec
and layout, the same for every row bucket by default; tiles, batch, stages and the staged or
direct loads move loads only. Three settings can break that (MLX_METILE_CUDA_MMA_WARPS=8 or 16,
_GROUPS=8 give some specs other K ranges in some row buckets; tests/schedule/test_knobs.py).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

from ..settings import Settings
from ..spec import ProjectionSpec
from ..targets.cuda import STATIC_SHARED_BYTES, CudaTarget
from .buckets import MAX_ROWS_PER_PROGRAM, row_bucket
from .cuda_layouts import DEEP, LAYOUTS, ONE_TILE, ONE_TILE_WIDE, ONE_WAVE, SPREAD, TILES, WAVE_BLOCKS
from .geometry import TILE, chunk_bytes, chunk_k, copy_bytes, copy_run, lane_load_bytes, scale_bytes_of, slot_bytes
from .schedule import Schedule
from .tables import CudaTables, cuda_tables

MAX_PARTIALS = 8  # accumulator tiles (x 4 floats) one lane may hold: tiles x row tiles x weights
SECTOR_SLICES = 4  # chunks of at least this many 16-byte x slices a lane take the sector layout
PAD = 16  # bytes after each ring row, where no other padding is chosen
MAX_STAGES = 4
DENSE_STAGE_K = 64  # k of a dense column per stage by default: 2 chunks of 32, 128 bytes
DENSE_WARPS = 8
SPREAD_WARPS = 8
SPREAD_SMEM = 96  # KB: 16 dense warps' rings of 2 stages, in dynamic shared memory
WIDE_RING_ROWS = 32  # at 32 rows, 2 tiles whose 2-stage rings exceed the budget may take ...
WIDE_RING_KB = 76  # ... this many KB
DEEP_ROWS = 8  # the largest row bucket whose DEEP blocks have a warp per K range
ONE_WAVE_DENSE_WARPS = 2
XSHARE_MIN_ROWS = 16  # row buckets that may share x
XSHARE_STAGES = 2
XSHARE_WARPS = 4
XSHARE_ROWS = 32
GATE_UP_16_BLOCKS = 3
MMA_AFFINE_BITS = (4, 8)  # affine widths every kernel unpacks (2, 3, 5, 6: the tensor cores', lane_blocks)
# microscaled modes the tensor-core kernels take (lower/mma.py; the staged ring and shared x too)
MMA_MICROSCALED = ("mxfp4", "mxfp8", "nvfp4")
# groups per stage of microscaled weights and of affine 2, 3, 5 and 6 bits: the direct loads' K
# alignment (lower/mma.py SPLIT_ALIGN), so that both kernels split K into the same ranges and give
# the same bits
MICRO_GROUPS = 4
# Stage tables by layout (ONE_TILE_WIDE's one-tile kernels are ONE_TILE's)
STAGE_TABLE_OF = {ONE_TILE: "one_tile", ONE_TILE_WIDE: "one_tile", DEEP: "deep", ONE_WAVE: "one_wave"}


def lane_blocks(w) -> bool:
    """Whether a lane's quarter of a group of 2, 3, 5 or 6-bit values is whole blocks of 8 k (the
    direct loads unpack those: every MLX group, 32, 64 and 128). Where the quarter is not whole
    32-bit words (2 bits at group 32; 3 at 32 and 64; 5 at 32 and 64; 6 at 32) the lane reads
    the words covering it and shifts them into a stream starting at its first value."""
    return w.group_size % 32 == 0


class MmaRules:
    def __init__(self, spec: ProjectionSpec, cfg: Settings, target: CudaTarget, tables: CudaTables | None = None):
        self.spec, self.cfg, self.target = spec, cfg, target
        self.tables = tables or cuda_tables()
        self.w = spec.weights[0]

    def knob(self, name: str) -> int | None:
        return self.cfg.knob(name)

    def setting(self, name: str, rows_bucket: int = 8) -> int:
        """A knob's value, else the tuned table's for the row bucket."""
        value = self.knob(name)
        return self.tables.mma_default(name, rows_bucket) if value is None else value

    # -- which specs ------------------------------------------------------------------
    @property
    def dense_mode(self) -> str:
        return self.cfg.cuda_mma_dense

    def dense_mma(self) -> bool:
        """Dense weights: the staged ring where K holds whole stages (64 k), else split-K; =1 the
        direct loads, =0 never."""
        if self.dense_mode == "staged":
            return self.spec.k_divisor % DENSE_STAGE_K == 0
        return self.dense_mode == "1"

    def supported(self) -> bool:
        spec = self.spec
        if spec.act_dtype not in ("bf16", "f16"):
            return False
        if len(spec.weights) != 1 and spec.epilogue != "swiglu" and not self.cfg.cuda_mma_fused:
            return False  # several weights concatenated into one accumulator (fused q/k/v)
        formats = {(w.mode, w.bits, w.group_size, w.dtype if not w.quantized else "") for w in spec.weights}
        if len(formats) != 1:
            return False
        for w in spec.weights:
            if w.affine and w.bits not in MMA_AFFINE_BITS and not lane_blocks(w):
                return False  # (2, 3, 5 and 6 bits where a lane's quarter of a group is not whole 8-k blocks)
            if w.quantized and not w.affine and w.mode not in MMA_MICROSCALED:
                return False
            if not w.quantized and (w.dtype != spec.act_dtype or spec.k_divisor % 32 or not self.dense_mma()):
                return False
        return True

    # -- the chunk: what one MMA step of a lane covers ---------------------------------
    @cached_property
    def wide(self) -> bool:
        """A chunk of two groups, each lane loading half a group (=1 only; part of the sum order)."""
        w, spec = self.w, self.spec
        return (
            self.setting("wide") == 1
            and w.affine
            and w.bits in MMA_AFFINE_BITS
            and w.dtype != "f32"
            and spec.k_divisor % (2 * w.group_size) == 0
            and (w.group_size // 2) * w.bits // 32 <= 16
        )

    @cached_property
    def ck(self) -> int:
        return chunk_k(self.spec, self.wide)

    @cached_property
    def sector(self) -> bool:
        """Lane t's k of a chunk at t * 8 + 32 s: chunks of SECTOR_SLICES x slices or more."""
        slices = self.ck // 32
        if not self.w.quantized or self.wide or slices < 2 or self.w.bits not in MMA_AFFINE_BITS:
            return False
        value = self.knob("xsector")
        return slices >= SECTOR_SLICES if value is None else value == 1

    @cached_property
    def q8split(self) -> bool:
        w = self.w
        return self.knob("q8split") != 0 and w.affine and w.bits == 8 and self.spec.act_dtype == "bf16"

    @property
    def interleave(self) -> bool:
        return self.knob("interleave") == 1

    # -- the staged ring ----------------------------------------------------------------
    @cached_property
    def groups(self) -> int:
        """Groups per stage: 128 bytes of each column, at least 2, fewer while K would not hold whole stages."""
        value = self.knob("groups")
        if value is not None:
            return value
        if self.micro or self.lowbit:
            return MICRO_GROUPS
        groups = max(2, min(8, 128 // chunk_bytes(self.spec, self.wide)))
        if self.w.dtype == "f32":
            groups = min(groups, 4)  # f32 scales: at most 16 bytes a column
        while groups > 2 and self.spec.k_divisor % (groups * self.ck):
            groups //= 2
        return groups

    @property
    def micro(self) -> bool:
        """Microscaled weights (uint8 scales, no biases)."""
        return self.w.quantized and not self.w.affine

    @property
    def lowbit(self) -> bool:
        """Affine 2, 3, 5 or 6 bits (the lanes' bit streams, lower/mma.py low_value)."""
        return self.w.affine and self.w.bits not in MMA_AFFINE_BITS

    @cached_property
    def stageable(self) -> bool:
        """K a whole number of stages, a column's stage at most 512 bytes with its scales in one
        copy of at most 16 bytes; affine 2, 3, 5 and 6 bits where a lane's quarter of a group is
        whole 8-k blocks and a column's stage whole runs of 2 or more copies (copy_run), unless
        MLX_METILE_CUDA_MMA_STAGED_LOWBIT=0; not `wide`, not with the staged ring turned off."""
        if not self.cfg.cuda_mma_staged or self.wide:
            return False
        if self.lowbit and not self.cfg.cuda_mma_staged_lowbit:
            return False  # (MLX_METILE_CUDA_MMA_STAGED_LOWBIT=0: their direct loads)
        if self.lowbit and not (lane_blocks(self.w) and self.row_bytes % self.copy_bytes == 0 and self.run > 1):
            return False
        if not self.w.quantized and self.dense_mode != "staged":
            return False
        g = self.groups
        return (
            self.spec.k_divisor % (g * self.ck) == 0
            and g * chunk_bytes(self.spec, self.wide) <= 512
            and g * scale_bytes_of(self.spec) <= 16
        )

    @cached_property
    def row_bytes(self) -> int:
        return self.groups * chunk_bytes(self.spec, self.wide)

    @cached_property
    def copy_bytes(self) -> int:
        return copy_bytes(self.spec, self.row_bytes)

    @cached_property
    def run(self) -> int:
        """Copies of a column's stage side by side in one copy's lanes (copy_run)."""
        return copy_run(self.row_bytes, self.copy_bytes)

    @cached_property
    def lane_bytes(self) -> int:
        return lane_load_bytes(self.spec, self.sector, self.wide)

    def width_swizzle(self) -> tuple[int, int]:
        """(mask, multiplier) of the swizzle by load width; (0, 0) none."""
        w, setting = self.lane_bytes, self.knob("swizzle")
        default = setting is None and self.knob("bankpad") is None and self.w.quantized and w == 16
        if not (setting == 2 or default) or self.row_bytes < 128:
            return (0, 0)
        return (32 // w - 1, w // 4)

    @cached_property
    def swizzle(self) -> tuple[int, int]:
        if self.copy_bytes != 16 or self.run != self.row_bytes // 16:
            return (0, 0)  # (rows of 8-byte copies, or of 3 or 5 runs: padded, not swizzled)
        if self.knob("swizzle") == 1:
            return min(self.row_bytes // 16, 8) - 1, 1
        return self.width_swizzle()

    @cached_property
    def row_pad(self) -> int:
        if self.swizzle[1]:
            return 0
        setting = self.knob("bankpad")
        if setting == 0:
            return PAD
        w = self.lane_bytes
        if self.lowbit and w == 4:  # (rows of an odd number of 16 bytes lie 16 bytes apart in banks as they are)
            return 0 if self.row_bytes // 16 % 2 else PAD
        if setting == 1 or w == 8 or not self.w.quantized:
            return 4 * w % 128 or PAD
        return PAD

    def slot_bytes(self, tiles: int = 1) -> int:
        return slot_bytes(self.spec, tiles, self.groups, self.row_pad)

    def capped(self, ring_bytes: int) -> int:
        return min(ring_bytes, self.target.smem_block)

    def ring_budget(self, warps: int) -> int:
        kb = self.knob("smem") or (SPREAD_SMEM if warps > DENSE_WARPS else STATIC_SHARED_BYTES // 1024)
        return self.capped(kb * 1024)

    def ring_stages(self, warps: int, tiles: int = 1, rows_bucket: int = 0, ring: tuple[int, int] = (0, 0)) -> int:
        stages = self.knob("stages") or ring[1] or MAX_STAGES
        budget = ring[0] * 1024 or self.ring_budget(warps)
        wide_ring = tiles == 2 and rows_bucket >= WIDE_RING_ROWS and self.w.quantized
        if (
            wide_ring
            and self.knob("smem") is None
            and budget < warps * 2 * self.slot_bytes(tiles) <= WIDE_RING_KB * 1024
        ):
            budget = WIDE_RING_KB * 1024
        budget = self.capped(budget)
        while stages > 1 and warps * stages * self.slot_bytes(tiles) > budget:
            stages -= 1
        return stages

    def table_stages(self, table: dict, rows_bucket: int) -> tuple[int, int]:
        by_rows = table.get((self.w.bits, self.w.group_size))
        if not by_rows or rows_bucket > MAX_ROWS_PER_PROGRAM:
            return (0, 0)
        stages = by_rows[0 if rows_bucket <= 8 else 1 if rows_bucket <= 16 else 2]
        return (0, stages) if stages else (0, 0)

    def ring_rule(self, layout: int, rows_bucket: int) -> tuple[int, int]:
        """(KB, stages) of the staged rings where a measured rule applies, else (0, 0)."""
        if self.knob("smem") is not None or self.knob("stages") is not None or not self.stageable:
            return (0, 0)
        if self.micro or self.lowbit:  # (the tables were measured on affine 4/8-bit and dense weights)
            return (0, 0)
        spec, w, rings, stage_tables = self.spec, self.w, self.tables.rings, self.tables.stage_tables
        q8g128 = w.quantized and w.bits == 8 and w.group_size == 128
        if q8g128 and spec.epilogue == "swiglu" and layout == TILES:
            return rings["q8g128_swiglu"]
        if len(spec.weights) != 1:  # single products were measured; and q/k/v
            concat = w.quantized and spec.accumulators == 1 and layout == ONE_TILE_WIDE
            return self.table_stages(stage_tables["concat"], rows_bucket) if concat else (0, 0)
        if w.quantized:
            table = stage_tables[STAGE_TABLE_OF[layout]] if layout in STAGE_TABLE_OF else {}
            stages = self.table_stages(table, rows_bucket)
            if stages != (0, 0):
                return stages
            single_q4 = w.bits == 4 and w.group_size in (64, 128)
            one_tile = layout in (ONE_TILE, ONE_TILE_WIDE, DEEP)
            return rings["q4_one_tile"] if single_q4 and one_tile and rows_bucket <= 8 else (0, 0)
        if layout == TILES and rows_bucket >= 16:
            return rings["dense_wide"]
        if layout in (ONE_TILE, DEEP) and rows_bucket <= 4:
            return rings["dense_deep"]
        return (0, 0)

    def staged_max_tiles(self, warps: int, layout: int, rows_bucket: int) -> int:
        if not self.stageable:
            return 4 if self.knob("tiles") is not None else 1
        if layout != TILES:
            return 1
        tiles, ring = 4, self.ring_rule(layout, rows_bucket)
        while tiles > 1 and self.ring_stages(warps, tiles, rows_bucket, ring) < 2:
            tiles //= 2
        return tiles

    # -- warps, K ranges, blocks --------------------------------------------------------
    def mma_warps(self, layout: int = TILES) -> int:
        """K ranges per block (part of every row's sum order)."""
        value = self.knob("warps")
        if value is not None:
            return value
        spec, w = self.spec, self.w
        dense_staged = not w.quantized and self.dense_mode == "staged"
        two_byte = w.dtype in ("bf16", "f16")
        if dense_staged and two_byte and layout == ONE_WAVE and len(spec.weights) == 1 and self.stageable:
            return ONE_WAVE_DENSE_WARPS
        warps = self.setting("warps")
        if dense_staged and DENSE_WARPS * 2 * self.slot_bytes() <= self.ring_budget(DENSE_WARPS):
            warps = DENSE_WARPS
        wider = 2 * warps if dense_staged else SPREAD_WARPS
        # (microscaled, affine 2, 3, 5, 6 bits: the direct loads' K ranges, whichever loads the ring takes)
        spread = not (self.micro or self.lowbit) and (layout == SPREAD or (layout == DEEP and w.bits == 8))
        if spread and self.stageable and wider * 2 * self.slot_bytes() <= self.ring_budget(wider):
            return wider
        return warps

    def block_warps(self, layout: int, rows_bucket: int, ranges: int) -> int:
        """Warps per block for `ranges` K ranges: one each, but in DEEP above DEEP_ROWS rows two each."""
        if layout == DEEP and rows_bucket > DEEP_ROWS and self.knob("warps") is None:
            usual = self.mma_warps()
            if ranges == 2 * usual:
                return usual
        return ranges

    def wave_blocks(self, layout: int, rows_bucket: int) -> int:
        w = self.w
        if layout != ONE_WAVE or rows_bucket > 8 or not w.quantized or len(self.spec.weights) != 1:
            return 0
        return 0 if self.knob("minblocks") is not None else WAVE_BLOCKS

    def xshare_warps(self, layout: int, rows_bucket: int) -> int:
        value = self.knob("xshare")
        layouts: tuple[int, ...] = (TILES,)
        if value is None:
            w = self.w
            measured = w.quantized and w.bits == 4 and w.group_size in (64, 128)
            default = rows_bucket == XSHARE_ROWS and self.spec.epilogue == "swiglu" and measured
            value = XSHARE_WARPS if default and not self.interleave else 0
            layouts = (TILES, ONE_TILE_WIDE)
        if not value or rows_bucket < XSHARE_MIN_ROWS or layout not in layouts or not self.stageable:
            return 0
        if self.spec.norm_eps is not None:  # the fused RMSNorm is the K-split kernel's
            return 0
        return value

    def xshare_tiles(self, bm: int, accumulators: int) -> int:
        tiles = self.knob("tiles") or 1
        while tiles > 1 and tiles * (bm // 8) * accumulators > MAX_PARTIALS:
            tiles //= 2
        return tiles

    def shape(self, bm: int, accumulators: int, warps: int, max_tiles: int, splits: int) -> tuple[int, int]:
        """(warps, column tiles) per block: tiles then warps halved while the K ranges' partial sums
        would overflow static shared memory, or the partial sums a lane's registers."""
        warps = warps or self.setting("warps")
        tiles, rt = min(self.setting("tiles", bm), max_tiles), bm // 8
        several = splits > warps

        def partial_bytes() -> int:
            return (splits if several else warps) * accumulators * tiles * rt * 4 * 32 * 4

        while tiles > 1 and (partial_bytes() > STATIC_SHARED_BYTES or tiles * rt * accumulators > MAX_PARTIALS):
            tiles //= 2
        while warps > 1 and not several and partial_bytes() > STATIC_SHARED_BYTES:
            warps //= 2
        return warps, tiles

    def gate_up_16(self, bm: int) -> bool:
        """The 16-row SwiGLU gate/up of 4-bit group-64 weights: strided copies, 3 blocks per SM."""
        w = self.w
        untuned = self.knob("strided") is None and self.knob("minblocks") is None
        return untuned and bm == 16 and self.spec.epilogue == "swiglu" and w.quantized and w.bits == 4 and self.ck == 64

    def strided(self, bm: int) -> bool:
        """Copies from one pointer per accumulator: where wanted, every accumulator reads one
        weight, and a lane's rows share their swizzle."""
        one_each = self.spec.epilogue == "swiglu" or len(self.spec.weights) == 1
        wanted = self.setting("strided", bm) == 1 or self.gate_up_16(bm)
        rows_per_copy = 32 // self.run
        mask = self.swizzle[0]
        same_swizzle = not mask or rows_per_copy % (mask + 1) == 0
        return wanted and one_each and same_swizzle

    # -- the schedule -----------------------------------------------------------------------
    def direct_loads(self, rows_bucket: int, layout: int) -> bool:
        """Whether this TILES product keeps the direct loads at `rows_bucket` where it could stage:
        the tables' direct_loads, where the kernel-alone A/B measured them faster (docs/SCHEDULES.md).
        A setting that steers the ring (STAGED, STAGES, SMEM, GROUPS) turns the table off."""
        if layout != TILES or not self.stageable or any(self.knob(k) is not None for k in ("stages", "smem", "groups")):
            return False
        kind = "swiglu" if self.spec.epilogue == "swiglu" else "single" if len(self.spec.weights) == 1 else ""
        return rows_bucket in self.tables.direct_loads.get((self.w.short(), kind), ())

    def schedule(self, rows_bucket: int, layout: int) -> Schedule:
        if layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {LAYOUTS} (schedule.cuda_layouts), got {layout!r}")
        if self.direct_loads(rows_bucket, layout):  # (exactly the schedule with the ring turned off)
            return MmaRules(self.spec, replace(self.cfg, cuda_mma_staged=False), self.target, self.tables).schedule(
                rows_bucket, layout
            )
        spec = self.spec
        ranges = self.mma_warps(layout)
        warps = self.block_warps(layout, rows_bucket, ranges)
        max_tiles = self.staged_max_tiles(warps, layout, rows_bucket)
        xshare = self.xshare_warps(layout, rows_bucket)
        bm = max(8, row_bucket(rows_bucket))
        accumulators = spec.accumulators
        if xshare:
            sg, nc = xshare, TILE * self.xshare_tiles(bm, accumulators)
            splits, ring = ranges or warps, (0, 0)
        else:
            splits = ranges if warps and ranges > warps else 0
            sg, tiles = self.shape(bm, accumulators, warps, max_tiles, splits)
            nc, ring = TILE * tiles // sg, self.ring_rule(layout, rows_bucket)
        tiles = sg * nc // TILE // (sg if xshare else 1)
        staged = not xshare and self.stageable and self.ring_stages(sg, sg * nc // TILE, bm, ring) >= 2
        common = dict(
            kind="mma",
            BM=bm,
            NC=nc,
            SG=sg,
            VK=self.ck // 32,
            U=1,
            C=1,
            layout=layout,
            splits=splits,
            xshare=xshare,
            wide=self.wide,
            q8split=self.q8split,
            sector=self.sector,
            interleave=self.interleave,
            smem_block=self.target.smem_block,
            smem_sm=self.target.smem_sm,
        )
        if not (staged or xshare):  # the lanes' direct loads
            return Schedule(**common, batch=self.setting("batch", bm))
        swizzle = self.swizzle
        ring_fields = dict(
            groups=self.groups,
            batch=self.groups,
            strided=self.strided(bm),
            swizzle_mask=swizzle[0],
            swizzle_mult=swizzle[1],
            row_pad=self.row_pad,
            late=self.knob("late") or 0,
        )
        if xshare:
            blocks = self.wave_blocks(layout, rows_bucket) or self.setting("minblocks", bm)
            stages = self.knob("stages") or XSHARE_STAGES
            return Schedule(**common, **ring_fields, staged=True, stages=stages, blocks=blocks)
        stages = self.ring_stages(sg, tiles, bm, ring)
        if self.gate_up_16(bm):
            blocks = GATE_UP_16_BLOCKS
        else:
            blocks = self.wave_blocks(layout, rows_bucket) or self.setting("minblocks", bm)
        usual = self.mma_warps()
        if sg > usual and blocks:  # more warps (SPREAD, DEEP): as many warps per SM, not blocks
            blocks = max(1, blocks * usual // sg)
        return Schedule(**common, **ring_fields, staged=True, stages=stages, blocks=blocks)
