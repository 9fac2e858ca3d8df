"""Properties of every Schedule `choose` makes over the grid of tests/schedule/decisions.py (the
default settings), whatever the tuned values:

- row invariance: the fields of a row's sum order are the same in every row bucket of a spec and
  shape, so a row's bits do not depend on how many rows share the call;
- the SIMT k split is the same on every target;
- the staged rings fit the shared memory the target gives a block (the SMEM setting's too);
- the rows of a staged ring are read without shared-memory bank conflicts.
"""

from __future__ import annotations

import re

import pytest

from mlx_metile import settings
from mlx_metile.backends.cuda_device import build_target
from mlx_metile.lower.mma import SPLIT_ALIGN
from mlx_metile.pipeline import compile_projection
from mlx_metile.schedule.cuda_layouts import TILES
from mlx_metile.schedule.cuda_mma import MmaRules
from mlx_metile.schedule.geometry import TILE, chunk_bytes, lane_load_bytes, slot_bytes
from mlx_metile.spec import ProjectionSpec, WeightFormat
from mlx_metile.targets import cuda_target
from mlx_metile.targets.cuda import STATIC_SHARED_BYTES
from tests.schedule import decisions

# Schedule fields of a tensor-core row's sum order (schedule.py, "Row invariance"): the K split
# (interleaved or not, wide chunks or not), the k order within a chunk (sector) and the rounding of
# 8-bit values (q8split); with the K split's ranges and their alignment (alignment below)
MMA_SUM_ORDER = ("kind", "VK", "wide", "q8split", "sector", "interleave")


def k_ranges(s) -> int:
    """The K ranges whose partial sums a row adds (one per warp where `splits` is 0)."""
    return s.splits or s.SG


def alignment(spec, s) -> int:
    """Chunks each K range's length is a multiple of: whole stages on the staged ring, else
    SPLIT_ALIGN where K holds that many quantization groups (lower/mma.py's K split)."""
    if s.staged:
        return s.groups
    quantized = spec.weights[0].quantized
    return SPLIT_ALIGN if quantized and spec.k_divisor % (SPLIT_ALIGN * s.BK) == 0 else 1


def sum_order(spec, s) -> tuple:
    if s.kind != "mma":
        return (s.kind, s.VK)
    return (*(getattr(s, f) for f in MMA_SUM_ORDER), k_ranges(s), alignment(spec, s))


def ring_sums_are_direct(spec) -> bool:
    """Microscaled and affine 2, 3, 5 and 6-bit weights: their ring's stages are SPLIT_ALIGN groups,
    the direct loads' K ranges and sums (tests/cudaemu/test_staged_microscaled.py,
    test_staged_affine_widths.py), so a bucket may take either (the tables' direct_loads)."""
    return all(w.quantized and not (w.affine and w.bits in (4, 8)) for w in spec.weights)


def test_sum_order_is_the_same_in_every_row_bucket():
    """Including where bucket_layout gives a single product TILES in some buckets only, and
    where the 32-row SwiGLU shares x (both move loads, not sums)."""
    checked = switched = shared = 0
    for case, chosen in decisions.table().items():
        buckets = [s for rows, s in zip(decisions.ROWS, chosen) if rows <= 32]
        orders = {sum_order(case.spec, s) for s in buckets}
        assert len(orders) == 1, (case.key, orders)
        # staged or direct loads one per spec and shape, except where the ring's sums are the direct loads'
        assert len({s.staged for s in buckets}) == 1 or ring_sums_are_direct(case.spec), case.key
        checked += buckets[0].kind == "mma"
        switched += len({s.layout for s in buckets}) > 1
        shared += any(s.xshare for s in buckets)
    assert checked > 1000 and switched > 50 and shared > 5, (checked, switched, shared)


def test_simt_k_split_is_the_same_on_every_target_and_past_32_rows():
    """VK (consecutive k per lane) orders the SIMT sums: MSL's and CUDA's kernels of a format agree,
    and the tiled schedule past 32 rows keeps it."""
    vk: dict[tuple, set] = {}
    for case, chosen in decisions.table().items():
        spec = case.spec
        family = (spec.act_dtype, spec.weights, spec.epilogue, spec.has_residual)
        for s in chosen:
            if s.kind != "mma":
                vk.setdefault(family, set()).add(s.VK)
    assert len(vk) > 50 and all(len(v) == 1 for v in vk.values()), {f: v for f, v in vk.items() if len(v) > 1}


def ring_bytes(case, s) -> int:
    """Bytes of a K-split block's staged rings: its warps' stages of weight rows, scales, biases."""
    return s.SG * s.stages * slot_bytes(case.spec, s.BN // TILE, s.groups, s.row_pad)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90"])
def test_staged_rings_fit_a_block_s_shared_memory(arch):
    target = cuda_target(arch)
    table = decisions.table() if arch in decisions.TARGETS else decisions.decide(targets={arch: target})
    staged = [(c, s) for c, ss in table.items() if c.target == arch for s in ss if s.staged and not s.xshare]
    assert len(staged) > 500
    for case, s in staged:
        assert s.stages >= 2 and (s.smem_block, s.smem_sm) == (target.smem_block, target.smem_sm), case.key
        assert ring_bytes(case, s) <= target.smem_block, (case.key, s)


# -- bank conflicts ---------------------------------------------------------------------------
# A warp's shared load of ring rows: lane = 4 g + t reads row g (8 rows at once: a fragment's
# columns) at its byte offset within the row; 4-byte banks, 32 of them. Loads of 8 and 16 bytes
# run as 2 and 4 phases of 16 and 8 lanes; a phase without conflicts is one 128-byte wavefront.


def lane_offsets(spec, s) -> list[list[int]]:
    """Per load of one stage: lane t's byte offset within a row (t = 0..3). A chunk's k are the
    lanes' in quarters (lane t's k at t * ck / 4), or with the sector layout in slices of 8 k
    (lane t's at t * 8 + 32 slice); a lane reads its bytes lane_bytes at a time (2, 3, 5 and 6 bits:
    the words covering its bits, from the word holding its first)."""
    w = spec.weights[0]
    cb = chunk_bytes(spec)
    width = lane_width(spec, s)
    loads = []
    for b in range(s.groups):
        if s.sector:
            for sl in range(cb // (4 * width)):
                loads.append([b * cb + sl * 4 * width + t * width for t in range(4)])
        elif w.affine and w.bits not in (4, 8):  # 2, 3, 5, 6 bits: the words covering lane t's bits
            lane_bits = cb * 8 // 4
            first = [t * lane_bits // 32 for t in range(4)]
            covering = max(((t + 1) * lane_bits - 1) // 32 - first[t] + 1 for t in range(4))
            for v in range(0, covering * 4, width):
                loads.append([b * cb + 4 * first[t] + v for t in range(4)])
        else:
            quarter = cb // 4 if w.quantized else 16
            for v in range(0, quarter, width):
                loads.append([b * cb + t * quarter + v for t in range(4)])
    return loads


def lane_width(spec, s) -> int:
    return lane_load_bytes(spec, s.sector, s.wide)


def wavefronts(offsets: list[int], width: int, stride: int, mask: int, mult: int) -> int:
    phases = {4: 1, 8: 2, 16: 4}[width]
    total = 0
    for phase in range(phases):
        words: dict[int, set[int]] = {}
        for lane in range(32 // phases * phase, 32 // phases * (phase + 1)):
            g, t = divmod(lane, 4)
            at = offsets[t]
            piece = (at // 16) ^ ((g & mask) * mult)  # the swizzle: piece p of row g at p ^ ((g & mask) * mult)
            start = g * stride + piece * 16 + at % 16
            for word in range(start // 4, (start + width) // 4):
                words.setdefault(word % 32, set()).add(word)
        total += max(len(v) for v in words.values())
    return total


def conflicted(table, arch: str = "sm_90") -> list[str]:
    seen, bad = set(), []
    for case, chosen in table.items():
        for s in chosen:
            if case.target != arch or not s.staged or (case.spec, s) in seen:
                continue
            seen.add((case.spec, s))
            width = lane_width(case.spec, s)
            row = s.groups * chunk_bytes(case.spec)
            stride = row + s.row_pad
            phases = {4: 1, 8: 2, 16: 4}[width]
            w = case.spec.weights[0]
            if w.affine and w.bits not in (4, 8) and not s.swizzle_mask:
                # 2, 3, 5, 6 bits: the fewest any 16-byte-aligned padding gives (the lanes' words of 96-byte
                # rows - 3 bits at group 64, 6 at 32 - span 24 bytes: 2 wavefronts at best)
                phases = min(
                    max(wavefronts(o, width, row + pad, 0, 0) for o in lane_offsets(case.spec, s))
                    for pad in range(0, 128, 16)
                )
            for offsets in lane_offsets(case.spec, s):
                got = wavefronts(offsets, width, stride, s.swizzle_mask, s.swizzle_mult)
                if got != phases:
                    bad.append(f"{case.key}: {width}-byte loads at {offsets} take {got} wavefronts, not {phases}")
                    break
    assert seen, "no staged schedules"
    return bad


def test_ring_rows_are_read_without_bank_conflicts():
    """Row padding and swizzles (row_pad, swizzle_mask/mult): the 8 rows a warp's shared load
    serves at once fall on disjoint banks, so each load takes the fewest wavefronts."""
    bad = conflicted(decisions.table())
    assert not bad, "\n".join(bad[:20])


def lowbit(line: str) -> bool:
    """Whether a line of `conflicted` is of affine 2, 3, 5 or 6-bit weights (their 4-byte loads of
    rows of 16 * odd bytes are conflict-free unpadded, so BANKPAD=0's 16 bytes conflict too)."""
    return re.search(r"_q[2356]g\d", line) is not None


def test_bankpad_settings(env):
    """MLX_METILE_CUDA_MMA_BANKPAD=1: padding by 4 lanes' load width everywhere, no swizzle, still
    conflict-free; =0: 16 bytes after every row (unswizzled), whatever the load width."""
    cases = [c for c in decisions.cases() if c.target == "sm_90" and c.shape.K in (4096, 3072)]
    target = decisions.TARGETS["sm_90"]
    for value in ("1", "0"):
        env.set("MLX_METILE_CUDA_MMA_BANKPAD", value)
        table = {c: [decisions.choose(c.spec, r, target, c.shape) for r in (1, 16, 32)] for c in cases}
        staged = [s for ss in table.values() for s in ss if s.staged]
        assert staged and all(s.swizzle_mult == 0 for s in staged)
        if value == "1":
            assert not conflicted(table)
        else:  # (what the padding is for: 8- and 16-byte loads of rows 16 bytes apart conflict)
            assert {s.row_pad for s in staged} == {16}
            widths = {line.split(": ")[1].split(" ")[0] for line in conflicted(table) if not lowbit(line)}
            assert widths == {"8-byte", "16-byte"}, widths


@pytest.mark.parametrize("arch", ["sm_86", "sm_80"])
def test_ring_budgets_are_capped_at_what_the_architecture_gives_a_block(env, arch):
    """The ring budgets (measured on sm_90) and the SMEM setting's are capped at the architecture's
    per-block shared memory, so that every kernel launches there."""
    limit = cuda_target(arch).smem_block
    env.set("MLX_METILE_CUDA_ARCH", arch)
    env.set("MLX_METILE_CUDA_MMA_SMEM", "200")
    dense = ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256)
    q8 = ProjectionSpec("bf16", (WeightFormat("bf16", 8, 128),) * 2, "swiglu", k_multiple=256)
    cfg, target = settings.current(), build_target()
    assert target.smem_block == limit and MmaRules(dense, cfg, target).ring_budget(4) == min(200 * 1024, limit)
    for spec in (dense, q8):
        for bucket in (1, 16, 32):
            art = compile_projection(spec, MmaRules(spec, cfg, target).schedule(bucket, TILES), "cuda")
            assert STATIC_SHARED_BYTES < art.dynamic_shared <= limit, (spec.name(), bucket, art.dynamic_shared)
