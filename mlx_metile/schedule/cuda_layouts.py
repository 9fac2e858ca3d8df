"""Column layouts of a CUDA tensor-core product: how its output columns and K map onto blocks.

One layout per weight shape (the same for all its row buckets, but where `bucket_layout` gives
some single products TILES in some buckets, which keeps the sums). The thresholds divide the
grid by the target's `layout_sms`. Why each threshold: docs/SCHEDULES.md, "CUDA column layouts".
"""

from __future__ import annotations

from ..settings import Settings
from ..spec import WeightFormat
from .geometry import TILE

# TILES: several tiles per block where the rings fit; ONE_TILE: narrow or shallow products;
# SPREAD: narrow outputs over a long K, K split over twice the warps; DEEP: 8-bit weights of
# outputs that give an SM at most 2 blocks, K in 8 ranges; ONE_WAVE: ONE_TILE for grids of 4-5
# blocks per SM; ONE_TILE_WIDE: ONE_TILE for grids of 2-4 blocks per SM.
TILES, ONE_TILE, SPREAD, DEEP, ONE_WAVE, ONE_TILE_WIDE = LAYOUTS = (0, 1, 2, 3, 4, 5)
LAYOUT_NAMES = ("TILES", "ONE_TILE", "SPREAD", "DEEP", "ONE_WAVE", "ONE_TILE_WIDE")

SHORT_K = 4096  # several tiles per block only over at least this K ...
SPREAD_K = 8192
QUANTIZED_SHORT_K = 2048  # single 4/8-bit products over [2048, 4096) with wide grids take TILES
WAVE_BLOCKS = 5  # ONE_WAVE's blocks per SM
TILES_FROM_ROWS = 8  # bucket_layout's rules measured from 8 rows
DENSE_TILES_FROM_ROWS = 16  # dense weights: from 16


def narrow_columns(sms: int) -> int:
    """... and at least this many columns (2 tiles' blocks fill 2 per SM)."""
    return 2 * TILE * 2 * sms


def spread_columns(sms: int) -> int:
    return sms * TILE


def deep_columns(sms: int) -> int:
    return 2 * sms * TILE


def column_layout(columns: int, k: int, quantized_single: bool, sms: int, cfg: Settings) -> int:
    """The layout of a product of `columns` output columns over `k`; `quantized_single`: one
    weight of 4/8 bits, no SwiGLU. MLX_METILE_CUDA_MMA_LAYOUT forces one for every product."""
    forced = cfg.knob("layout")
    if forced is not None:
        return forced
    if columns <= spread_columns(sms) and k >= SPREAD_K:
        return SPREAD
    if columns <= deep_columns(sms) and k >= SHORT_K and (k >= SPREAD_K or columns <= spread_columns(sms)):
        return DEEP
    blocks = -(-columns // TILE)
    if quantized_single and QUANTIZED_SHORT_K <= k < SHORT_K and blocks > WAVE_BLOCKS * sms:
        return TILES
    if columns < narrow_columns(sms) or k < SHORT_K:
        if 4 * sms < blocks <= WAVE_BLOCKS * sms:
            return ONE_WAVE
        return ONE_TILE_WIDE if 2 * sms < blocks <= 4 * sms else ONE_TILE
    return TILES


def bucket_layout(layout: int, k: int, rows_bucket: int, weight: WeightFormat, cfg: Settings) -> int:
    """The layout of one row bucket's kernel of a single product (one weight, no SwiGLU):
    column_layout's, or TILES where measured faster. Not where MLX_METILE_CUDA_MMA_LAYOUT forces one."""
    if cfg.knob("layout") is not None:
        return layout
    bits, group = weight.bits, weight.group_size
    if layout == ONE_TILE_WIDE and QUANTIZED_SHORT_K <= k < SHORT_K:
        if bits and (group == 64 or (bits == 8 and group == 128 and rows_bucket >= TILES_FROM_ROWS)):
            return TILES
        if not bits and weight.dtype in ("bf16", "f16") and rows_bucket >= DENSE_TILES_FROM_ROWS:
            return TILES
    if layout == ONE_WAVE and bits == 8 and group == 64 and rows_bucket >= TILES_FROM_ROWS:
        return TILES
    return layout
